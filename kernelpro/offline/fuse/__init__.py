"""Stage 2, fusion: the traced graph partitioned into groups (`partition`), each one generated kernel,
and what a group is (`groups`)."""
