"""Stage 3, code generation: each group rendered by a backend (`triton`, `cuda`, `gemm`, `conv_gemm`, `scans`,
`cute_gemm`) over the shared index arithmetic and docs of `common` (and `c_expr` for the C backends), launched
through `wrapper`, with its launch configurations ranked (`triton_configs`); `source` writes the whole candidate
file."""
