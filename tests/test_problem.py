"""Loading problems and suites: clear errors naming the file and the cause."""

from __future__ import annotations

import pytest

from conftest import DATA
from kernelpro.harness import EvalOptions, Evaluator, ProblemError, load_problem, load_suite

GOOD = (DATA / "problems" / "linear_relu_residual.py").read_text()


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_missing_file(tmp_path):
    with pytest.raises(ProblemError, match="no such file") as error:
        load_problem(tmp_path / "nope.py")
    assert "nope.py" in str(error.value)


def test_syntax_error_names_the_line(tmp_path):
    path = write(tmp_path, "bad.py", "class Model(:\n    pass\n")
    with pytest.raises(ProblemError, match=r"bad.py: syntax error at line 1"):
        load_problem(path)


@pytest.mark.parametrize("drop, missing", [("class Model", "Model"), ("def get_inputs", "get_inputs"),
                                           ("def get_init_inputs", "get_init_inputs")])
def test_missing_names(tmp_path, drop, missing):
    path = write(tmp_path, "p.py", GOOD.replace(drop, drop.replace(missing, missing + "_renamed")))
    with pytest.raises(ProblemError, match=f"missing {missing}"):
        load_problem(path)


@pytest.mark.parametrize("body, cause", [
    ("def get_inputs():\n    raise RuntimeError('no data')\n", "get_inputs\\(\\) raised RuntimeError: no data"),
    # any values are accepted, as KernelBench accepts them; a Model that cannot take them fails
    ("def get_inputs():\n    return ['a string']\n", "the reference Model failed: "),
    ("def get_inputs():\n    return 3\n", "returned int, not a list"),
    ("def get_inputs():\n    return [1, 2]\n", "the reference Model failed: TypeError"),
])
def test_get_inputs_failures_found_in_the_worker(tmp_path, body, cause):
    source = GOOD.split("def get_inputs():")[0] + body + "\n\ndef get_init_inputs():\n    return [width]\n"
    problem = load_problem(write(tmp_path, "p.py", source))
    with Evaluator("cpu", spares=0) as evaluator:
        with pytest.raises(ProblemError, match=cause) as error:
            evaluator.evaluate(problem, (DATA / "candidates" / "good.py").read_text(),
                               EvalOptions(timing_trials=2))
    assert "p.py" in str(error.value)


def test_module_constants_are_loaded(tmp_path):
    problem = load_problem(DATA / "problems" / "linear_relu_residual.py")
    assert "batch = 16" in problem.source and problem.name == "linear_relu_residual"


def test_suite_laid_out_like_kernelbench(tmp_path):
    for level, name in [(1, "3_Relu.py"), (1, "12_Linear.py"), (2, "1_Fused.py"), (3, "5_Block.py")]:
        folder = tmp_path / f"level{level}"
        folder.mkdir(exist_ok=True)
        (folder / name).write_text(GOOD)
    problems = load_suite(tmp_path)
    assert [(p.level, p.problem_id, p.name) for p in problems] == [
        (1, 3, "Relu"), (1, 12, "Linear"), (2, 1, "Fused"), (3, 5, "Block")]
    assert [p.key for p in load_suite(tmp_path, levels=[2])] == ["level2/1_Fused"]


def test_flat_suite_and_empty_suite(tmp_path):
    (tmp_path / "a.py").write_text(GOOD)
    assert [p.name for p in load_suite(tmp_path)] == ["a"]
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ProblemError, match="no problem files"):
        load_suite(empty)
