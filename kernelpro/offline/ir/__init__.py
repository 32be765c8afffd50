"""What every stage of the offline coder reads: the PyTorch ops a generated kernel knows (`ops`) and the pools
it can read in place (`windows`). Nothing here imports another stage."""
