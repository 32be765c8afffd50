"""The Anthropic coder: the real `anthropic` SDK against a fake Messages API on loopback (tests/fake_anthropic.py).

No live API calls: ANTHROPIC_BASE_URL points the SDK at the fake server.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from fake_anthropic import FakeAnthropic, error, message, text, tool_use
from kernelpro.anthropic_coder import AnthropicCoder
from kernelpro.coder import CoderFailed, CoderRequest, CoderUnavailable

ROOT = Path(__file__).resolve().parent.parent
PROBLEM = (ROOT / "examples" / "gelu_bias_scale.py").read_text()
GOOD = PROBLEM + "\n\nclass ModelNew(Model):\n    pass\n"
KEY = "sk-ant-test-0123456789"


def request(**overrides) -> CoderRequest:
    fields = dict(problem_path="p.py", problem_source=PROBLEM, parent_source=PROBLEM, parent_state={},
                  parent_verdict="reference", parent_ms=1.0, parent_speedup=1.0, kind="new_strategy",
                  guidance="memory-bound elementwise chain: fuse it", techniques=(("fuse_elementwise", 0.9),))
    return CoderRequest(**{**fields, **overrides})


def submit(code: str = GOOD, techniques=("fuse_elementwise",), call_id="toolu_1") -> dict:
    return message([tool_use("submit_candidate", {"code": code, "plan": "fuse the chain", "techniques":
                                                  list(techniques)}, call_id)], "tool_use")


@pytest.fixture
def api(monkeypatch):
    def start(script, **options):
        fake = FakeAnthropic(script)
        fake.__enter__()
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
        started.append(fake)
        return fake, AnthropicCoder(max_retries=options.pop("max_retries", 2), use_cutlass=False, **options)
    started: list[FakeAnthropic] = []
    yield start
    for fake in started:
        fake.__exit__()


def test_a_submitted_candidate_becomes_a_proposal_with_cached_prefix_and_usage(api):
    fake, coder = api([submit()], model="claude-sonnet-4-6")
    proposal = coder.propose(request())
    assert proposal.source == GOOD and proposal.techniques == ("fuse_elementwise",)
    assert proposal.rationale == "fuse the chain" and proposal.move == "llm:fuse_elementwise"
    body = fake.requests[0]
    assert body["system"][-1]["cache_control"] == {"type": "ephemeral"} and "class Model" in body["system"][-1]["text"]
    assert {t["name"] for t in body["tools"]} == {"submit_candidate"}
    assert "memory-bound elementwise chain" in body["messages"][0]["content"]
    assert coder.usage.requests == 1 and coder.usage.input_tokens == 100 and coder.usage.output_tokens == 50
    assert coder.usage.cost_usd == pytest.approx((100 * 3 + 50 * 15) / 1e6)
    assert proposal.state["usage"]["requests"] == 1 and proposal.state["usage"]["output_tokens"] == 50
    auth = fake.headers[0].get("x-api-key", "") + fake.headers[0].get("authorization", "")
    assert KEY not in json.dumps(fake.requests) and KEY in auth  # the key travels in the auth header only


def test_a_fenced_python_block_is_accepted_from_a_model_without_tools(api):
    fake, coder = api([message([text(f"Here it is:\n```python\n{GOOD}```\n")])], model="claude-unpriced-9")
    assert coder.propose(request()).source.strip() == GOOD.strip()
    assert coder.usage.cost_usd is None and fake.requests[0]["model"] == "claude-unpriced-9"  # no guessed price


def test_429_with_retry_after_and_500_are_retried(api):
    fake, coder = api([error(429, "rate_limit_error", {"retry-after-ms": "300"}), error(500, "api_error"),
                       submit()])
    began = time.monotonic()
    assert coder.propose(request()).source == GOOD
    assert len(fake.requests) == 3 and time.monotonic() - began >= 0.3


def test_retries_running_out_fail_the_expansion(api):
    fake, coder = api([error(500, "api_error")] * 3, max_retries=2)
    with pytest.raises(CoderFailed, match="InternalServerError"):
        coder.propose(request())
    assert len(fake.requests) == 3


def test_an_invalid_submission_gets_one_repair_turn(api):
    fake, coder = api([submit("def broken(:\n"), submit(call_id="toolu_2")])
    assert coder.propose(request()).source == GOOD
    repair = fake.requests[1]["messages"][-1]["content"][0]
    assert repair["type"] == "tool_result" and repair["is_error"] and "code" in repair["content"]
    fake, coder = api([submit("x = 1\n"), submit("y = 2\n", call_id="toolu_2")])
    with pytest.raises(CoderFailed, match="no class ModelNew"):
        coder.propose(request())


def test_malformed_tool_input_is_repaired(api):
    fake, coder = api([message([tool_use("submit_candidate", {"code": 42, "plan": []})], "tool_use"), submit()])
    assert coder.propose(request()).source == GOOD
    assert fake.requests[1]["messages"][-1]["content"][0]["is_error"]


def test_max_tokens_and_refusal_fail_the_expansion(api):
    fake, coder = api([message([text("```python\nclass Mod")], "max_tokens")])
    with pytest.raises(CoderFailed, match="max_tokens"):
        coder.propose(request())
    fake, coder = api([message([], "refusal")])
    with pytest.raises(CoderFailed, match="declined"):
        coder.propose(request())


class FakeIndex:
    """The code index's two calls, over a fixed declaration."""

    def search(self, query, k, arch=None):
        from kernelpro.cutlass_index import Hit
        return [Hit("include/cute/atom/copy_atom.hpp", 484, 517, "function", "make_tiled_copy", 9.0,
                    "auto make_tiled_copy(...)")]

    def show(self, path, line, context):
        return line or 1, ["auto", "make_tiled_copy(Copy_Atom<Args...> const& copy_atom,"]


def test_tool_turns_search_read_and_profile_then_submit(api):
    asked = []
    fake, coder = api([message([tool_use("search_cutlass", {"query": "tiled copy"}, "t1"),
                                tool_use("run_profiler_tool", {"name": "ncu_memory"}, "t2")], "tool_use"),
                       message([tool_use("read_cutlass", {"path": "include/cute/atom/copy_atom.hpp", "start": 484},
                                         "t3")], "tool_use"),
                       submit(call_id="t4")],
                      profiler=lambda name, req: asked.append(name) or "DRAM bytes 2x the ideal: coalesce the loads")
    coder._index = FakeIndex
    assert coder.propose(request()).source == GOOD
    assert {t["name"] for t in fake.requests[0]["tools"]} == {"submit_candidate", "search_cutlass", "read_cutlass",
                                                              "run_profiler_tool"}
    results = fake.requests[1]["messages"][-1]["content"]
    assert "make_tiled_copy" in results[0]["content"] and "coalesce" in results[1]["content"] and asked == ["ncu_memory"]
    assert "484: auto" in fake.requests[2]["messages"][-1]["content"][0]["content"]
    assert coder.usage.requests == 3


def test_tool_turns_are_capped(api):
    fake, coder = api([message([tool_use("search_cutlass", {"query": "x"}, f"t{i}")], "tool_use")
                       for i in range(3)], max_turns=3)
    with pytest.raises(CoderFailed, match="3 model turns"):
        coder.propose(request())


def test_no_key_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(CoderUnavailable, match="ANTHROPIC_API_KEY"):
        AnthropicCoder()


def test_kernelpro_search_with_the_anthropic_coder_end_to_end_on_cpu(tmp_path, monkeypatch):
    """`kernelpro search --coder anthropic` against the fake API: every expansion submits a real faster
    candidate (reduce before multiplying), and the run keeps a correct best.py and the token accounting."""
    from typer.testing import CliRunner

    from kernelpro.cli import app
    candidate = (ROOT / "examples" / "matmul_rowsum_new.py").read_text()
    calls = []

    def answer(body):
        calls.append(body)
        if len(calls) == 2:  # one transient failure on the way: retried by the SDK
            return error(529, "overloaded_error", {"retry-after-ms": "10"})
        return submit(candidate, ("algebraic_simplify",), call_id=f"toolu_{len(calls)}")
    with FakeAnthropic(default=answer) as fake:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
        out = tmp_path / "run"
        result = CliRunner().invoke(app, ["search", str(ROOT / "examples" / "matmul_rowsum.py"), "--coder",
                                          "anthropic", "--budget", "2", "--device", "cpu", "--no-profile",
                                          "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    run = json.loads((out / "run.json").read_text())
    assert run["coder"] == "anthropic" and run["verdicts"].get("correct", 0) >= 1 and run["speedup"] > 1.0
    assert run["coder_usage"]["requests"] >= 2 and run["coder_usage"]["input_tokens"] >= 200
    assert "LLM coder" in (out / "report.md").read_text() and "tokens" in (out / "report.html").read_text()
    best = (out / "best.py").read_text()
    assert candidate.split("class ModelNew")[1] in best  # the submitted module, below best.py's measured header
    assert run["verdicts"] == {"correct": run["evaluations"]} and len(calls) >= 3
    # the cached prefix carries the device's and the problem's facts and the worked examples; the user turn
    # the parent, its time, and from the second expansion on nothing the prefix already says
    prefix = "\n".join(block["text"] for block in calls[0]["system"])
    for fact in ("Device: cpu", "inputs (get_inputs(), in order): float32 [", "outputs: float32 [",
                 "GFLOP", "eager takes", "A triton candidate", "A cuda candidate", "training mode"):
        assert fact in prefix, fact
    assert calls[0]["system"][-1]["cache_control"] == {"type": "ephemeral"}
    assert "Parent candidate" not in calls[0]["messages"][0]["content"]  # the root: the reference itself
    for path in out.rglob("*"):  # the key is nowhere in what the run leaves
        if path.is_file():
            assert KEY not in path.read_text(errors="ignore"), path


def test_token_budget_and_repeated_coder_failures_stop_the_search_cleanly(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from kernelpro.cli import app
    # a small problem and a correct candidate of it: what is tested is how the search stops
    candidate = (ROOT / "tests" / "data" / "candidates" / "good.py").read_text()
    problem = str(ROOT / "tests" / "data" / "problems" / "linear_relu_residual.py")
    with FakeAnthropic(default=lambda body: submit(candidate, ("algebraic_simplify",))) as fake:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
        result = CliRunner().invoke(app, ["search", problem, "--coder", "anthropic", "--budget", "6", "--device",
                                          "cpu", "--no-profile", "--max-tokens", "150", "--out",
                                          str(tmp_path / "tokens"), "--json"])
    assert result.exit_code == 0, result.output
    run = json.loads((tmp_path / "tokens" / "run.json").read_text())
    assert run["stopped"].startswith("token budget") and len(fake.requests) == 1 and run["evaluations"] == 1

    with FakeAnthropic(default=lambda body: message([text("I cannot help with that.")], "refusal")) as fake:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.url)
        result = CliRunner().invoke(app, ["search", problem, "--coder", "anthropic", "--budget", "6", "--device",
                                          "cpu", "--no-profile", "--out", str(tmp_path / "refused"), "--json"])
    assert result.exit_code == 0, result.output
    run = json.loads((tmp_path / "refused" / "run.json").read_text())
    assert "the coder failed 4 times in a row" in run["stopped"] and run["coder_failures"] == 4
    assert (tmp_path / "refused" / "best.py").is_file() and run["evaluations"] == 0


def test_a_planner_model_picks_the_technique_before_the_coder_writes_it(api):
    fake, coder = api([message([text('{"technique": "fuse_elementwise", "plan": "one kernel for the chain"}')]),
                       submit()], model="claude-sonnet-4-6", planner_model="claude-haiku-4-5")
    assert coder.propose(request()).source == GOOD
    planner, writer = fake.requests
    assert planner["model"] == "claude-haiku-4-5" and "tools" not in planner and planner["max_tokens"] == 512
    assert writer["model"] == "claude-sonnet-4-6"
    assert "The planner chose: fuse_elementwise: one kernel for the chain" in writer["messages"][0]["content"]
    assert coder.usage.requests == 2
    assert coder.usage.cost_usd == pytest.approx((100 * 1 + 50 * 5 + 100 * 3 + 50 * 15) / 1e6)
