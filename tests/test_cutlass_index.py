"""The CUTLASS/CuTe code index over the real nvidia-cutlass wheel (a test extra), and its CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("bm25s")
from typer.testing import CliRunner  # noqa: E402

from kernelpro.cli import app  # noqa: E402
from kernelpro.cutlass_index import (CutlassMissing, Index, include_dirs, load_index, locate,  # noqa: E402
                                     nvcc_flags)
from kernelpro.cutlass_index import index as index_module  # noqa: E402
from kernelpro.cutlass_index import source as source_module  # noqa: E402
from kernelpro.cutlass_index.chunks import chunk_source, terms  # noqa: E402
from kernelpro.cutlass_index.index import by_file, generations  # noqa: E402

SNIPPET = r'''// A header in the style of CuTe.
namespace cute {
namespace detail {

/// The doc comment belongs to the struct below.
template <class T, int N>
struct TiledThing : Base<T> {
  int f() { return N; }   // braces in a comment: { { {
  char const* s = "}}}";
};

template <class Engine, class Layout,
          __CUTE_REQUIRES(is_layout<Layout>::value)>
CUTE_HOST_DEVICE constexpr
auto
make_tiled_thing(Engine const& e, Layout const& l)
{
  if (true) { return e; }
  return e;
}

using SmemLayoutSm90 = decltype(make_layout(Shape<_64, _64>{}));

} // end namespace detail
} // end namespace cute

#define CUTE_THING_MACRO(x) (x)
'''


def test_declarations_are_chunked_with_their_heads_and_comments():
    chunks = chunk_source("include/cute/thing.hpp", SNIPPET)
    found = [(c.kind, c.symbol, c.line, c.end) for c in chunks]
    assert found == [("struct", "TiledThing", 5, 10), ("function", "make_tiled_thing", 12, 20),
                     ("alias", "SmemLayoutSm90", 22, 22), ("macro", "CUTE_THING_MACRO", 27, 27)]
    assert chunks[0].text.startswith("/// The doc comment") and chunks[0].text.endswith("};")


CONTINUED = r'''#if (defined(ARCH_A_ENABLED) || defined(ARCH_B_ENABLED) ||\
     defined(ARCH_C_ENABLED))
#define THING_ENABLED 1
#endif
#define LONG_MACRO(x) \
  do { f(x); } while (0)

namespace cutlass {
struct ClusterBarrier {
  static void arrive(uint64_t* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" :: "r"(bar));
  }
};
}
'''


def test_directives_continued_by_a_backslash_are_not_code():
    """A multi-line `#if` no longer swallows the declarations after it (cutlass/arch/barrier.h lost
    ClusterBarrier and every declaration after its first `#if` ending in a backslash); a continued `#define`
    keeps its lines."""
    chunks = chunk_source("include/cutlass/arch/barrier.h", CONTINUED)
    assert [(c.kind, c.symbol) for c in chunks] == [("macro", "THING_ENABLED"), ("macro", "LONG_MACRO"),
                                                    ("struct", "ClusterBarrier")]
    assert chunks[1].text.endswith("while (0)") and (chunks[1].line, chunks[1].end) == (5, 6)
    assert index_module.instructions(chunks[2].text) == ["mbarrier.arrive.shared::cta.b64"]


def test_inline_assembly_gives_its_instructions():
    text = r'''asm volatile("{\n"
      ".reg .pred P1;\n"
      "@P1 bra DONE;\n"
      "ldmatrix.sync.aligned.x4.m8n8.shared.b16 {%0, %1, %2, %3}, [%4];\n"
      "cp.async.cg.shared.global [%0], [%1], 16;\n"
      "}\n" : "=r"(a) : "r"(b));'''
    assert index_module.instructions(text) == ["ldmatrix.sync.aligned.x4.m8n8.shared.b16",
                                               "cp.async.cg.shared.global"]
    assert index_module.instructions("int asmx = 0; // no assembly") == []


def test_paths_name_words_shortened_run_together_or_by_generation():
    named = frozenset(terms("include cute arch mma_sm90_desc hpp sm90_gemm_tma_warpspecialized_pingpong"))
    assert index_module._named_words(["descriptor", "warp", "specialized", "ping", "pong", "hopper", "gemm", "des"],
                                     named) == {"descriptor", "warp", "specialized", "ping", "pong", "hopper", "gemm"}
    assert index_module._named_words(["ampere", "copy"], named) == set()


def test_identifiers_split_into_search_terms():
    assert terms("SM90_TMA_LOAD") == ["sm90_tma_load", "sm90", "tma", "load", "sm", "90"]
    assert {"tiled", "mma", "tiledmma"} <= set(terms("TiledMMA"))
    assert {"make", "tiled", "copy"} <= set(terms("make_tiled_copy"))
    assert "wgmma" in terms("wgmma.mma_async")


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Index, Path]:
    home = tmp_path_factory.mktemp("home")
    source = locate()
    import os
    old = os.environ.get("KERNELPRO_HOME")
    os.environ["KERNELPRO_HOME"] = str(home)
    try:
        return Index.build(source, index_module.index_dir(source)), home
    finally:
        if old is None:
            os.environ.pop("KERNELPRO_HOME", None)
        else:
            os.environ["KERNELPRO_HOME"] = old


def test_the_wheel_is_indexed_and_symbols_rank_first(built):
    index, _ = built
    assert index.meta["chunks"] > 5000 and index.meta["files"] > 500
    top = index.search("make_tiled_copy", 5)[0]
    assert (top.symbol, top.kind, top.path) == ("make_tiled_copy", "function", "include/cute/atom/copy_atom.hpp")
    hits = index.search("SM90 TMA load multicast", 10)
    assert any(h.symbol.startswith("SM90_TMA_LOAD_MULTICAST") for h in hits[:5])
    assert any("sm90" in h.path and "tma" in h.path for h in hits)
    gemm = index.search("CollectiveBuilder", 20)
    assert gemm[0].symbol == "CollectiveBuilder" and any("sm90" in h.path for h in gemm)
    assert index.search("zzzzqqq") == [] and index.search("  ") == []


def test_two_hits_per_file_and_the_devices_generation_first(built):
    """The query that returned ten dispatch-policy tags (mostly Sm100/Sm120) now gives at most two per
    file, and for sm90 the Hopper collectives, kernels and examples: other generations are demoted, not
    hidden."""
    from collections import Counter
    index, _ = built
    query = "warp specialized TMA WGMMA pipeline"
    for arch in (None, "sm90"):
        hits = index.search(query, 10, arch=arch)
        assert len(hits) == 10 and max(Counter(h.path for h in hits).values()) <= 2
    hopper = index.search(query, 10, arch="sm90")
    assert generations(hopper[0].path + " " + hopper[0].symbol) == {"90"}  # sm90_..., or a hopper example
    assert any(h.path.startswith("include/cutlass/gemm/kernel/sm90_gemm_tma_warpspecialized") for h in hopper)
    assert not any(g in (h.path + h.symbol).lower() for h in hopper[:5] for g in ("sm100", "sm120"))
    blackwell = index.search("KernelTmaWarpSpecializedSm100", 3, arch="sm90")
    assert blackwell[0].symbol == "KernelTmaWarpSpecializedSm100"  # named in full: still found first


def test_an_example_counts_as_one_file_for_the_cap(built):
    """An example's .cu and its helper headers are one answer: at most two hits from one example folder."""
    from collections import Counter
    from kernelpro.cutlass_index.index import _unit
    assert _unit("examples/54_hopper_fp8_warp_specialized_gemm/hopper_fp8_commandline.hpp") == \
        "examples/54_hopper_fp8_warp_specialized_gemm/"
    assert _unit("include/cute/swizzle.hpp") == "include/cute/swizzle.hpp"
    index, _ = built
    hits = index.search("FP8 GEMM with warp specialization", 20, arch="sm90")
    assert hits and max(Counter(_unit(h.path) for h in hits).values()) <= 2


def test_a_query_naming_an_instruction_finds_the_declaration_that_issues_it(built):
    """"ldmatrix" and "cp.async" name PTX instructions: the wrappers whose inline assembly issues them rank in the
    top five although their files name an older generation (sm75, sm80) and other files' paths name the
    query's other words (arch/memory.h, shared_load_iterator.h); without the boost they fell out of it."""
    index, _ = built
    ldmatrix = [h.path for h in index.search("ldmatrix shared memory to registers", 5, arch="sm90")]
    assert "include/cute/arch/copy_sm75.hpp" in ldmatrix
    cp_async = index.search("cp.async global to shared memory copy", 5, arch="sm90")
    assert "include/cute/arch/copy_sm80.hpp" in [h.path for h in cp_async]
    saved = index_module.INSTRUCTION_BOOST
    try:
        index_module.INSTRUCTION_BOOST = 0.0
        assert "include/cute/arch/copy_sm75.hpp" not in [
            h.path for h in index.search("ldmatrix shared memory to registers", 5, arch="sm90")]
    finally:
        index_module.INSTRUCTION_BOOST = saved


def test_the_instruction_the_query_names_most_closely_wins(tmp_path, monkeypatch):
    """Of two wrappers of `cp.async`, the one whose instruction has fewer parts the query does not name
    (cp.async.ca.shared.global: 4 of 5 named) outranks the bulk tensor copy (4 of 11), though BM25 alone
    ranks the bulk copy first (its name repeats the query's words); the instructions survive a reload."""
    text = r'''namespace cute {
/// Bulk tensor copy from global to shared memory, cp async global shared copy.
struct SM90_BULK_COPY_G2S {
  static void copy(void const* g, void* s) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1];" :: "l"(g), "r"(s));
  }
};
struct SM80_CP_ASYNC_CACHEALWAYS {
  static void copy(void const* g, void* s) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 16;" :: "r"(s), "l"(g));
  }
};
struct Unrelated { int global_shared_copy_count; };
}
'''
    monkeypatch.setenv("KERNELPRO_HOME", str(tmp_path))
    monkeypatch.setattr(index_module, "read_chunks", lambda source: chunk_source("include/cute/arch/copy.hpp", text))
    source = source_module.CutlassSource(locate().root, "synthetic")
    folder = index_module.index_dir(source)
    built_here = Index.build(source, folder)
    query = "cp.async global to shared memory copy"
    monkeypatch.setattr(index_module, "INSTRUCTION_BOOST", 0.0)
    assert built_here.search(query, 3, per_file=3)[0].symbol == "SM90_BULK_COPY_G2S"
    monkeypatch.setattr(index_module, "INSTRUCTION_BOOST", 2.0)
    for index in (built_here, Index.load(folder, source)):
        assert [h.symbol for h in index.search(query, 3, per_file=3)][:2] == ["SM80_CP_ASYNC_CACHEALWAYS",
                                                                              "SM90_BULK_COPY_G2S"]


def test_generations_are_read_from_sm_numbers_and_the_examples_names():
    assert generations("include/cutlass/gemm/kernel/sm90_gemm_tma_warpspecialized.hpp") == {"90"}
    assert generations("examples/54_hopper_fp8_warp_specialized_gemm/x.cu KernelTmaWarpSpecializedSm100") == {"90", "100"}
    assert generations("examples/16_ampere_tensorop_conv2dfprop/a.cu") == {"80"}
    assert generations("include/cute/layout.hpp adaptive_thing") == set()  # 'ada' only as a word


def test_cli_search_json_and_show(built, monkeypatch):
    _, home = built
    monkeypatch.setenv("KERNELPRO_HOME", str(home))
    runner = CliRunner()
    result = runner.invoke(app, ["cutlass", "search", "local_tile", "--json", "-k", "3"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert len(rows) == 3 and {"path", "line", "symbol", "score", "snippet", "kind"} <= set(rows[0])
    assert rows[0]["symbol"] == "local_tile" and "local_tile" in rows[0]["snippet"]
    shown = runner.invoke(app, ["cutlass", "show", f"{rows[0]['path']}:{rows[0]['line'] + 3}"])
    assert shown.exit_code == 0 and shown.stdout.splitlines()[0].startswith(str(rows[0]["line"]))
    assert "local_tile(" in shown.stdout
    missing = runner.invoke(app, ["cutlass", "show", "include/../../../etc/passwd"])
    assert missing.exit_code != 0
    assert runner.invoke(app, ["cutlass", "search", "  "]).exit_code == 2
    bad = runner.invoke(app, ["cutlass", "search", "tma", "--arch", "hopper"])
    assert bad.exit_code == 2 and "not a GPU generation" in bad.output
    ranked = json.loads(runner.invoke(app, ["cutlass", "search", "tma warp specialized", "--arch", "sm90", "--json"]).stdout)
    assert generations(ranked[0]["path"] + " " + ranked[0]["symbol"]) == {"90"}  # sm90_..., or a hopper example


def test_a_new_wheel_version_rebuilds_and_a_failed_build_leaves_nothing(built, monkeypatch):
    _, home = built
    monkeypatch.setenv("KERNELPRO_HOME", str(home))
    real = locate()
    assert load_index().meta["version"] == real.version  # from the cache
    monkeypatch.setattr(index_module, "read_chunks", lambda source: chunk_source("include/x.hpp", SNIPPET))
    newer = source_module.CutlassSource(real.root, real.version + ".post1")
    monkeypatch.setattr(index_module, "locate", lambda: newer)
    rebuilt = load_index()
    assert rebuilt.meta["version"] == newer.version and rebuilt.meta["chunks"] == 4
    assert rebuilt.search("make_tiled_thing")[0].symbol == "make_tiled_thing"
    assert index_module.index_dir(real).is_dir()  # the other version's index is kept

    newest = source_module.CutlassSource(real.root, real.version + ".post2")
    monkeypatch.setattr(index_module, "locate", lambda: newest)
    import bm25s

    def killed(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(bm25s.BM25, "save", killed)
    with pytest.raises(KeyboardInterrupt):
        load_index()
    assert sorted(p.name for p in index_module.index_dir(real).parent.iterdir()) == sorted(
        [index_module.index_dir(real).name, index_module.index_dir(newer).name])


def test_missing_wheel_is_a_clear_error_naming_the_extra(monkeypatch):
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "cutlass_library" else
                        real(name, *a))
    with pytest.raises(CutlassMissing, match=r"kernelpro\[cutlass\]"):
        locate()
    result = CliRunner().invoke(app, ["cutlass", "search", "gemm"])
    assert result.exit_code != 0 and isinstance(result.exception, CutlassMissing)


def test_include_dirs_hold_cute_and_cutlass_headers():
    dirs = include_dirs()
    assert (dirs[0] / "cute" / "tensor.hpp").is_file() and (dirs[0] / "cutlass" / "cutlass.h").is_file()


def test_build_flags_follow_the_compute_capability():
    from kernelpro.harness.toolchain import arch_for, build_environment
    assert arch_for(9, 0) == "9.0a" and arch_for(8, 0) == "8.0" and arch_for(10, 0) == "10.0a"
    # every build and worker process of the harness gets the wheel's headers on CPATH, after the user's own
    cpath = build_environment("cpu", {"CPATH": "/opt/mine"})["CPATH"].split(":")
    assert cpath == ["/opt/mine"] + [str(d) for d in include_dirs()]
    assert nvcc_flags((9, 0)) == ["-std=c++17", "--expt-relaxed-constexpr", "-gencode=arch=compute_90a,code=sm_90a"]
    assert nvcc_flags((8, 9))[-1] == "-gencode=arch=compute_89,code=sm_89"


@pytest.mark.skipif(__import__("shutil").which("nvcc") is None, reason="needs nvcc")
def _hopper_sass(source: Path, folder: Path) -> str:
    """`source` compiled for sm90 with the flags and headers a CuTe candidate gets (the include paths only
    through the harness's CPATH, as a candidate that names none gets them), as cuobjdump's SASS."""
    import os
    import subprocess
    from kernelpro.harness.toolchain import build_environment
    from kernelpro.tools.api import find_binary
    cuobjdump = find_binary("cuobjdump")
    if cuobjdump is None:
        pytest.skip("no cuobjdump")
    env = dict(os.environ, **build_environment("cpu", {}))
    subprocess.run(["nvcc", *nvcc_flags((9, 0)), "-cubin", "-o", str(folder / "out.cubin"), str(source)],
                   check=True, capture_output=True, text=True, env=env)
    return subprocess.run([str(cuobjdump), "-sass", str(folder / "out.cubin")], check=True,
                          capture_output=True, text=True).stdout


def test_one_warpgroup_mma_of_the_wheels_cute_compiles_to_hgmma_with_these_flags(tmp_path):
    """CuTe's sm90 GMMA atom emits wgmma only where the flags select sm_90a (CUTE_ARCH_MMA_SM90A_ENABLED;
    plain sm_90 compiles it to a trap): the SASS must hold warpgroup MMA (HGMMA). A few seconds, against a
    minute for the full tutorial below."""
    source = tmp_path / "one_wgmma.cu"
    source.write_text(
        "#include <cute/arch/mma_sm90_gmma.hpp>\n\n"
        "__global__ void one_wgmma(unsigned long long a, unsigned long long b, unsigned* out) {\n"
        "  unsigned d0 = 0, d1 = 0;\n"
        "  using namespace cute::SM90::GMMA;\n"
        "  MMA_64x8x16_F16F16F16_SS<Major::K, Major::K>::fma(a, b, d0, d1);\n"
        "  out[threadIdx.x] = d0 + d1;\n}\n")
    assert "HGMMA.64x8x16.F16" in _hopper_sass(source, tmp_path)


@pytest.mark.slow
def test_the_wheels_hopper_wgmma_example_compiles_to_hgmma_with_these_flags(tmp_path):
    """The same on CUTLASS's own Hopper tutorial (compiled from the installed wheel, not copied)."""
    source = locate().root / "examples" / "cute" / "tutorial" / "hopper" / "wgmma_sm90.cu"
    if not source.is_file():
        pytest.skip("this wheel has no Hopper tutorial")
    assert "HGMMA." in _hopper_sass(source, tmp_path)


@pytest.mark.parametrize("name,least", [("cutlass_queries.json", 30), ("cutlass_queries_heldout.json", 20)])
def test_every_file_the_retrieval_queries_name_is_in_the_wheel(name, least):
    """benchmarks/data/cutlass_queries*.json: each relevant entry is a file or folder of the sources."""
    data = json.loads((Path(__file__).resolve().parent.parent / "benchmarks" / "data" / name).read_text())
    root = locate().root
    assert len(data["queries"]) >= least
    for item in data["queries"]:
        for entry in item["relevant"]:
            assert (root / entry).exists() or any((root / entry).parent.glob((root / entry).name + "*")), entry


def test_a_variant_the_query_does_not_ask_for_ranks_below_its_base(built, monkeypatch):
    """`..._warpspecialized_fp8.hpp` is `..._warpspecialized.hpp` plus a word the query does not name: it
    ranks below its base; a query that names the word gets the variant first."""
    index, _ = built
    monkeypatch.setattr(index_module, "VARIANT", 1.0)
    plain = [h.path for h in index.search("GMMA TMA warp specialized mainloop collective", 20, arch="sm90")]
    monkeypatch.setattr(index_module, "VARIANT", 0.5)
    ranked = [h.path for h in index.search("GMMA TMA warp specialized mainloop collective", 20, arch="sm90")]
    base = "include/cutlass/gemm/collective/sm90_mma_tma_gmma_ss_warpspecialized.hpp"
    variant = base.replace(".hpp", "_fp8.hpp")
    assert base in ranked and (variant not in ranked or ranked.index(base) < ranked.index(variant))
    assert ranked.index(base) <= plain.index(base)
    fp8 = [h.path for h in index.search("FP8 GMMA TMA warp specialized mainloop collective", 20, arch="sm90")]
    assert variant in fp8 and fp8.index(variant) < fp8.index(base)
    assert index_module._name_words("examples/67_hopper_fp8_x/67_hopper_fp8_gemm_with_blockwise.cu") == (
        "hopper", "fp8", "gemm", "with", "blockwise")


def test_a_generation_the_query_names_is_the_one_preferred(built):
    """On an H100 (sm90) a question about Ampere's tensor-core MMA gets sm80's files, not sm90's."""
    index, _ = built
    hits = index.search("Ampere tensor core mma m16n8k16", 5, arch="sm90")
    assert hits and all("90" not in generations(h.path + " " + h.symbol) for h in hits[:3])
    assert any("sm80" in h.path for h in hits)


def test_hits_are_grouped_with_their_file(built):
    index, _ = built
    hits = index.search("warp specialized TMA WGMMA pipeline", 10, arch="sm90")
    grouped = by_file(hits)
    assert [h for _, found in grouped for h in found] == sorted(hits, key=lambda h: [p for p, _ in grouped].index(h.path))
    assert len({p for p, _ in grouped}) == len(grouped) and all(len(found) <= 2 for _, found in grouped)

