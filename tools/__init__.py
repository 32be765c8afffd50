"""kernelpro.tools: the plugin API for micro-profiling tools, the roofline classifier
and the built-in tools. Not built yet: see the open issue "Micro-profiling tools"."""

__all__: list[str] = []
