"""The offline coder's graph-level moves: what each does, its technique, and where it applies.

A candidate is the reference plus an ordered set of moves. Graph moves rewrite the
torch.fx graph of `forward` (they need a traceable problem); module moves change how
the module runs (they need no graph).
"""

from __future__ import annotations

from dataclasses import dataclass

from kernelpro.harness.records import HALF_PRECISIONS


@dataclass(frozen=True)
class Move:
    name: str
    technique: str  # from the design's vocabulary
    graph: bool  # needs the traced graph
    summary: str
    cuda_only: bool = False
    needs_conv: bool = False
    needs_matmul: bool = False
    fp32_only: bool = False
    kernels: bool = False  # generates Triton kernels (needs triton where candidates run)
    half_only: bool = False  # runs at bf16/fp16 only
    cutlass: bool = False  # builds CUTLASS/CuTe kernels for Hopper (needs the nvidia-cutlass wheel and sm_90)
    eval_only: bool = False  # exact only when the model runs in eval mode (running statistics)
    variant: str = ""  # the setting it changes and nothing else: the reference measured under it (harness/variants.py)
    # at fp32, the variant whose arithmetic it copies: offered only where eager matched itself under that variant
    fp32_matches: str = ""
    # at fp32, the fewest multiples of a problem's roofline floor its kernels have taken where measured: not offered
    # where eager itself already runs within that many (it cannot win there)
    fp32_floor_multiple: float = 0.0
    # sums in another order than eager, or sums other values (weights scaled or reduced first, products in another
    # association): where the reference sits near its tolerance and such a candidate failed on rounding, the rest are
    # predicted to fail too (offline.predictions.after_rounding_failures)
    reorders_sums: bool = False


MOVES: dict[str, Move] = {m.name: m for m in (
    Move("simplify_identities", "algebraic_simplify", True,
         "drop identity ops (x*1, x+0, Identity, dropout in eval, no-op reshape/contiguous/to)"),
    Move("simplify_size1_reductions", "algebraic_simplify", True,
         "drop reductions over size-1 dimensions (sum/mean/amax/amin/max there are the input)"),
    Move("simplify_double_ops", "algebraic_simplify", True, "cancel double transposes and double negations"),
    Move("combine_scalar_ops", "algebraic_simplify", True,
         "combine consecutive scalar multiplies and adds into one pass"),
    Move("fold_scalar_into_weights", "algebraic_simplify", True,
         "fold a scalar multiply into the preceding linear/conv weights and bias, precomputed at init",
         reorders_sums=True),
    Move("fold_batch_norm", "algebraic_simplify", True,
         "fold a batch norm on running statistics (eval mode) into the convolution before it: scaled weights "
         "and bias, precomputed at init", needs_conv=True, eval_only=True, reorders_sums=True),
    Move("pool_before_activation", "algebraic_simplify", True,
         "max-pool before a non-decreasing activation (relu, relu6, hardtanh, leaky_relu, clamp) instead of "
         "after it, so the activation runs on the pooled tensor"),
    Move("merge_max_pools", "algebraic_simplify", True,
         "two max pools in a row (no padding, dilation or ceil_mode; the first's windows without gaps) as the one "
         "max pool over their windows' union, (k2 - 1) x s1 + k1 wide with stride s1 x s2: one pass over the input, "
         "and the first pool's output is never written"),
    Move("bias_after_pool", "algebraic_simplify", True,
         "add a convolution's bias after the max-pool that reads it (a per-channel constant commutes with a "
         "window's maximum): the convolution runs without cuDNN's separate bias-add kernel, and the add runs "
         "on the pooled tensor, where a fused epilogue can take it", needs_conv=True),
    Move("constant_results", "algebraic_simplify", True,
         "replace results that are a known constant (a - a, softmax over a size-1 dim, and what zero "
         "keeps zero) by a fresh constant tensor, dropping the work behind them"),
    Move("diagonal_products", "algebraic_simplify", True,
         "a product with a diagonal matrix made from a vector (diag(v) @ B, A @ diag(v)) as the broadcast "
         "multiply it is: n^2 work instead of n^3, the same values", needs_matmul=True),
    Move("reduce_before_product", "algebraic_simplify", True,
         "a sum or mean over a linear layer's output features (after multiplying, dividing, adding numbers or a "
         "parameter vector) taken over its weights first: x @ W.sum(0) + b.sum(), a matrix-vector product "
         "instead of a matrix product; the reduced weights are computed once, at init", needs_matmul=True,
         reorders_sums=True),
    Move("pool_before_product", "algebraic_simplify", True,
         "an average pool over a linear layer's output features (non-overlapping windows) taken over its weight rows "
         "and bias first: a GEMM with window times fewer columns; the averaged weights are computed once, at init; "
         "an average pool after a 1x1 convolution taken before it: the products on the pooled positions",
         needs_matmul=True, reorders_sums=True),
    Move("simplify_all", "algebraic_simplify", True,
         "every algebraic rewrite (simplify_identities to pool_before_product) that applies, swept in that order "
         "until none does: one move for rewrites that open up only after others (a convolution's bias reaches "
         "its max-pool once the batch norm is folded and the pool moved before the activation)", reorders_sums=True),
    Move("fold_constants", "constant_fold", True,
         "precompute subgraphs that depend only on parameters and buffers once, at init"),
    Move("attention_to_sdpa", "library_call", True,
         "replace softmax(q @ k^T * scale) @ v, with or without a -inf mask, by scaled_dot_product_attention "
         "(a triu(1) mask as is_causal); call an nn.MultiheadAttention whose weights go unused with "
         "need_weights=False, so it runs scaled_dot_product_attention", needs_matmul=True, reorders_sums=True),
    Move("transposed_matmuls", "library_call", True,
         "call linear / reorder the product instead of materialising transposes around matmuls; contract an einsum "
         "of three or more operands pair by pair in the order of fewest products",
         needs_matmul=True, reorders_sums=True),
    Move("transposed_as_conv", "library_call", True,
         "run a transposed convolution with stride 1 and no output padding as the convolution it is (the weight "
         "flipped and its channels swapped per group, at init): cuDNN's forward algorithms instead of its data-"
         "gradient ones. At fp32 offered only where eager matched itself on operands rounded to TF32 to nearest "
         "(variant tf32_operands), so that another cuDNN algorithm changes only the order of the sums",
         needs_conv=True, fp32_matches="tf32_operands", reorders_sums=True),
    Move("batch_step_products", "reduce_launches", True,
         "batch the products a loop repeats at every step: a linear layer over cat(x[t], h) takes x's share for "
         "every step in one product (each step adds h's share with addmm), and linear layers applied to each step's "
         "output and stacked become one product over the stack", needs_matmul=True, reorders_sums=True),
    Move("fuse_reductions", "fuse_reduction", True,
         "generate Triton kernels for reductions, softmax and normalizations, with the pointwise ops around them "
         "(and a max- or average-pool before them, read in place)",
         cuda_only=True, kernels=True, reorders_sums=True),
    Move("fuse_pointwise", "fuse_elementwise", True,
         "generate one Triton kernel per chain of pointwise ops (after a matmul or conv: its epilogue; a max- or "
         "average-pool that feeds only the chain is read in place, window by window)",
         cuda_only=True, kernels=True),
    Move("triton_gemm", "fuse_epilogue", True,
         "compute a matmul/linear and the pointwise epilogue after it in one Triton GEMM (tiled, grouped tile "
         "order, float32 accumulate; the epilogue runs on the accumulator before the single store)",
         cuda_only=True, needs_matmul=True, kernels=True, reorders_sums=True),
    Move("cute_gemm", "cute_gemm", True,
         "compute a matmul/linear and its epilogue (bias, activation, any pointwise steps on the product alone) in "
         "one CUTLASS 3.x Hopper GEMM: TMA loads, WGMMA tensor cores, warp-specialized persistent kernel, "
         "clusters; the epilogue runs on the accumulator before the single TMA store",
         cuda_only=True, needs_matmul=True, half_only=True, cutlass=True, reorders_sums=True),
    Move("triton_conv", "fuse_epilogue", True,
         "compute a convolution (1-D, 2-D or 3-D; any stride, padding, dilation and groups; depthwise as its own "
         "kernel) and the pointwise epilogue after it in one Triton kernel: an implicit GEMM on tensor cores, "
         "float32 accumulate, the epilogue in registers before the single store. At fp32 its operands are rounded "
         "to TF32 to nearest, as cuDNN's TF32 convolutions may round them, and depthwise ones stay cuDNN's: offered "
         "there only where eager matched itself under that arithmetic (variant tf32_operands)",
         cuda_only=True, needs_conv=True, kernels=True, fp32_matches="tf32_operands",
         # H100, KernelBench's sizes: 6.2x the floor on level1/62 (66 TFLOP/s), 9x to 26x on five other convolutions
         fp32_floor_multiple=6.0, reorders_sums=True),
    Move("cuda_kernels", "vectorize_memory", True,
         "generate the pointwise chains, reductions and normalizations as CUDA C++ through load_inline instead of "
         "Triton: 16-byte vector loads and stores, warp-shuffle row reductions",
         cuda_only=True, fp32_only=True, reorders_sums=True),
    Move("persistent_kernels", "persistent_kernel", True,
         "launch the generated pointwise kernels as persistent grids: the fewest programs that still keep enough "
         "bytes in flight to saturate DRAM, each striding over the blocks, so the SMs left over stay idle and each "
         "program's fixed costs are paid once (a configuration for --objective energy; tune moves walk the rest)",
         cuda_only=True, kernels=True),
    Move("channels_last", "channels_last", False,
         "keep convolution weights and inputs in channels_last layout (channels_last_3d for 3-D convolutions)",
         needs_conv=True, variant="channels_last"),
    Move("cudnn_benchmark", "library_call", False, "let cuDNN benchmark its convolution algorithms",
         cuda_only=True, needs_conv=True, variant="cudnn_benchmark"),
    Move("tf32_matmul", "reduce_precision", False,
         "allow TF32 tensor cores for fp32 matmuls and convolutions (the tolerance is unchanged)",
         cuda_only=True, fp32_only=True, variant="tf32"),
    Move("cuda_graphs", "cuda_graphs", False,
         "capture the whole forward in a CUDA graph (static shapes; a fresh output each call; inputs read where they "
         "lie when a call passes those of the call before, copied in otherwise)",
         cuda_only=True),
)}

#: The moves whose candidates compute every output element with eager's own arithmetic (the same operations on the
#: same values): where the reference's output leaves the tolerance when its values move by one ulp (its
#: `sensitivity`), only these can pass, and the offline coder offers no other.
#: (bias_after_pool is not among them: a library may add a convolution's bias before it rounds the sum.)
BIT_EXACT = frozenset({"simplify_identities", "simplify_size1_reductions", "simplify_double_ops",
                       "pool_before_activation", "merge_max_pools", "cuda_graphs"})
#: The algebraic rewrites simplify_all sweeps, in their order.
SIMPLIFY = tuple(m.name for m in MOVES.values() if m.technique == "algebraic_simplify" and m.name != "simplify_all")
#: The backends that generate the fused groups; a candidate takes the moves of one of them.
BACKENDS = {"triton": ("fuse_reductions", "fuse_pointwise"), "cuda": ("cuda_kernels",)}
#: move -> the moves of the other backends
EXCLUSIVE = {move: tuple(other for name, others in BACKENDS.items() if name != backend for other in others)
             for backend, moves in BACKENDS.items() for move in moves}
#: The GEMM generators take the same epilogues: a candidate takes one of them.
GEMM_MOVES = ("triton_gemm", "cute_gemm")
EXCLUSIVE |= {move: tuple(other for other in GEMM_MOVES if other != move) for move in GEMM_MOVES}
#: persistent grids are a Triton launch of the Triton pointwise kernels
EXCLUSIVE["persistent_kernels"] = ("cuda_kernels",)
EXCLUSIVE["cuda_kernels"] = EXCLUSIVE["cuda_kernels"] + ("persistent_kernels",)
#: Applied in this order whatever order the search chose them in, so a set of moves is one candidate.
ORDER = list(MOVES)
#: The order the coder tries moves of equal promise in: simplify_all, where it is offered (it makes two
#: or more kinds of rewrite), before the single rewrites it sweeps; then ORDER.
PREFERENCE = ["simplify_all"] + [name for name in ORDER if name != "simplify_all"]
#: Walks one generated kernel down its ranked launch configurations: "tune:<kernel name>".
TUNE_PREFIX = "tune:"
TUNE_TECHNIQUE = "tune_launch_config"


def allowed(move: Move, *, device: str, precision: str, policy: str, has_conv: bool, has_matmul: bool,
            has_triton: bool = True, has_cutlass: bool = True, capability: tuple[int, int] | None = None,
            model_mode: str = "train") -> str:
    """'' when the move may apply here, else why not."""
    if policy == "strict":
        return "the strict policy wants custom kernels; graph-level moves keep PyTorch ops"
    if move.eval_only and model_mode != "eval":
        return "exact only in eval mode (running statistics); models run in training mode, as KernelBench " \
               "runs them (--model-mode eval for inference)"
    if move.cuda_only and device != "cuda":
        return "needs CUDA"
    if move.needs_conv and not has_conv:
        return "no convolution"
    if move.fp32_only and precision != "fp32":
        return f"precision is already {precision}"
    if move.name == "tf32_matmul" and not (has_conv or has_matmul):
        return "no matmul or convolution"
    if move.kernels and not has_triton:
        return "triton is not installed"
    if move.half_only and precision not in HALF_PRECISIONS:
        return f"runs at bf16 or fp16 (--precision bf16), not {precision}"
    if move.cutlass and not has_cutlass:
        return "the nvidia-cutlass wheel is not installed (pip install 'kernelpro[cutlass]')"
    if move.cutlass and capability is not None and capability != (9, 0):
        return f"needs a Hopper GPU (sm_90); this one is sm_{capability[0]}{capability[1]}"
    return ""


def single_moves(entries) -> set[str]:
    """The single moves that entries name, each one move or several joined by "+" (the search's records of a node's
    moves)."""
    return {part for entry in entries for part in entry.split("+")}


def canonical(moves: list[str]) -> list[str]:
    """The set of moves in ORDER; simplify_all subsumes the rewrites it sweeps, so a set with it and
    some of them is the set without them (one candidate, which the search then sees as a transposition)."""
    chosen = set(moves)
    if "simplify_all" in chosen:
        chosen -= set(SIMPLIFY)
    return sorted(chosen, key=ORDER.index)
