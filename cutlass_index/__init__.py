"""kernelpro.cutlass_index: a searchable index over the CUTLASS/CuTe sources of the
nvidia-cutlass wheel. Not built yet: see the open issue "The LLM coder"."""

__all__: list[str] = []
