# Two commands do all the set-up on a fresh machine (see README):
#   make demo   create .venv, install kernelpro, run the main job on a shipped example
#   make test   create .venv, install kernelpro with its test extras, run the CPU test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

$(BIN)/kernelpro: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# The CPU build of torch first, so nothing pulls a multi-GB CUDA build.
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install -q "torch==2.13.0"
	$(BIN)/python -m pip install -q -e ".[test]"
	touch $@

.PHONY: install demo test gpu-check
install: $(BIN)/kernelpro

demo: $(BIN)/kernelpro
	$(BIN)/kernelpro eval examples/matmul_rowsum.py examples/matmul_rowsum_new.py

# pytest exits 5 when it collects no test; that is not a failure of the suite.
test: $(BIN)/kernelpro
	$(BIN)/python -m pytest -m "not gpu" $(PYTEST_ARGS); rc=$$?; [ $$rc -eq 5 ] && rc=0; exit $$rc

gpu-check:
	bash scripts/gpu_check.sh
