"""The torch.compile baseline's caches, kept per problem: written only from the reference's own evaluation, found
by later workers (real workers, real torch.compile on the CPU)."""

from __future__ import annotations

import io
import tarfile

from conftest import candidate_source
from kernelpro.harness import EvalOptions, Evaluator, Verdict, compilecache
from kernelpro.harness.cache import BuildCache
from kernelpro.harness.problem import reference_candidate

COMPILED = EvalOptions(device="cpu", timing_trials=5, timing_budget_s=0.5, baselines=("eager", "compile"))

# The good candidate, printing at each call what Inductor's cache has answered in this worker so far: once the
# compiled baseline has run (timing interleaves it with the candidate), its cache hits show.
LOOKING = "from torch._dynamo.utils import counters\n" + candidate_source("good").replace(
    "    def forward(self, x):\n",
    "    def forward(self, x):\n        print('inductor', dict(counters['inductor']), flush=True)\n")


def printed(result) -> str:
    return result.stdout.head + result.stdout.tail


def test_the_reference_keeps_its_compiled_baseline_and_a_candidates_worker_finds_it(tmp_path, linear_problem):
    cache = BuildCache(tmp_path / "builds")
    kept = compilecache.folder(cache.root, linear_problem.source)
    with Evaluator("cpu", cache=cache, spares=1) as evaluator:
        reference = evaluator.evaluate(linear_problem, reference_candidate(linear_problem), COMPILED)
        assert reference.verdict is Verdict.CORRECT and reference.reference_compile is not None, reference.reason
        assert any((kept / "inductor").rglob("*")), "the reference's evaluation kept no Inductor cache"
        written = kept.stat().st_ino  # keeping replaces the folder whole: a new one would have another inode
        looked = evaluator.evaluate(linear_problem, LOOKING, COMPILED)
        assert looked.verdict is Verdict.CORRECT, looked.reason
        assert "'fxgraph_cache_hit': 1" in printed(looked)  # its compiled baseline came out of the kept cache
        assert kept.stat().st_ino == written  # and a worker that ran candidate code wrote nothing back


def archive(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_kept_caches_are_replaced_whole_and_stay_inside_their_folder(tmp_path):
    assert compilecache.keep(tmp_path, "problem", archive({"inductor/a": b"1", "triton/b": b"2"}))
    kept = compilecache.folder(tmp_path, "problem")
    assert (kept / "inductor" / "a").read_bytes() == b"1"
    assert compilecache.keep(tmp_path, "problem", archive({"inductor/c": b"3"}))
    assert sorted(p.name for p in kept.rglob("*") if p.is_file()) == ["c"]  # the old caches are gone, not merged
    assert not compilecache.keep(tmp_path, "problem", archive({"../../escape": b"x"}))
    assert not (tmp_path.parent / "escape").exists() and (kept / "inductor" / "c").exists()
    assert not compilecache.keep(tmp_path, "problem", b"not a tar")
    assert [p.name for p in kept.parent.iterdir()] == [kept.name]  # no staging folder left behind
