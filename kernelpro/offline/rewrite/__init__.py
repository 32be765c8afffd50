"""Stage 1, graph rewrites: each graph move changes the traced torch.fx graph (with shapes) in place and
returns how many rewrites it made. `passes` holds the algebraic moves and the helpers every rewrite uses,
`library` the rewrites into library calls, `reduce` the reductions taken over a linear layer's weights;
`composites` and `batchnorm` make opaque calls into ops the kernels fuse."""
