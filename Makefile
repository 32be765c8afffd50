# Two commands do all the set-up on a fresh machine (see README):
#   make demo   create .venv, install kernelpro, search a shipped example (offline coder; CPU without a GPU)
#   make test   create .venv, install kernelpro with its test extras, run the CPU test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=
# Workers for the CPU suite; most tests wait on child processes (workers, builds, searches).
PYTEST_WORKERS ?= 4

# What the demo needs: kernelpro and its dependencies (torch, typer, rich, pydantic, ...), nothing else.
$(BIN)/kernelpro: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# The CPU build of torch first, so nothing pulls a multi-GB CUDA build.
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install -q "torch==2.13.0"
	$(BIN)/python -m pip install -q -e .
	touch $@

# The tests' extras on top (pytest, Triton, Ray, CUTLASS, MkDocs, the CUDA binary tools): make test only.
$(VENV)/.test-extras: $(BIN)/kernelpro pyproject.toml
	$(BIN)/python -m pip install -q -e ".[test]"
	touch $@

.PHONY: install demo test gpu-check chromium sandbox
install: $(BIN)/kernelpro

DEMO_OUT ?= runs/demo

demo: $(BIN)/kernelpro sandbox
	rm -rf $(DEMO_OUT)
	$(BIN)/kernelpro search examples/attention_block.py --model-mode eval --budget 8 --out $(DEMO_OUT)

# The report test looks at report.html in Debian's headless Chromium; as root, install it when missing.
chromium:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  (apt-get install -y -q chromium >/dev/null 2>&1 || (apt-get update -q >/dev/null 2>&1 && \
	   apt-get install -y -q chromium >/dev/null 2>&1)) || echo "chromium not installed: the report test will skip"; }

# Candidates run in bubblewrap's namespaces (harness/sandbox.py); as root, install it when missing. Without
# it kernelpro still runs, says loudly that candidates are not sandboxed, and the attack tests skip.
sandbox:
	@command -v bwrap >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  (apt-get install -y -q bubblewrap >/dev/null 2>&1 || (apt-get update -q >/dev/null 2>&1 && \
	   apt-get install -y -q bubblewrap >/dev/null 2>&1)) || echo "bubblewrap not installed: candidates run unsandboxed"; }

# The import contracts first (import-linter, half a second: scripts/lint_imports.py), then the CPU suite, in
# parallel, with the 20 slowest tests listed at the end. Tests marked gpu need CUDA; those
# marked slow (the real Ray backend, nvcc and load_inline builds, torch.compile baselines) run with `pytest -m slow`.
# pytest exits 5 when it collects no test; that is not a failure of the suite.
test: $(VENV)/.test-extras chromium sandbox
	$(BIN)/python scripts/lint_imports.py
	$(BIN)/python -m pytest -m "not gpu and not slow" -n $(PYTEST_WORKERS) --durations=20 $(PYTEST_ARGS); \
	  rc=$$?; [ $$rc -eq 5 ] && rc=0; exit $$rc

gpu-check:
	bash scripts/gpu_check.sh
