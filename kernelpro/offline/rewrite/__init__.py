"""Stage 1, graph rewrites. Every graph move is a table of rules on one engine (`rules`: a pattern, and a rewrite
made where the condition that makes it exact holds), changing the traced torch.fx graph (with shapes) in place and
counting its rewrites. `passes` holds the algebraic moves and the helpers every rule uses, `weights` the folds into
a layer's weights and bias, `library` the rewrites into library calls, `reduce` the reductions taken over a linear
layer's weights; `composites` and `batchnorm` make opaque calls into ops the kernels fuse (the compiler's prepare
and fuse stages call them)."""
