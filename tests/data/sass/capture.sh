#!/usr/bin/env bash
# Regenerates the SASS captures in this folder (run from this folder).
# nvcc 13.0 (local toolkit) and cuobjdump from the nvidia-cuda-cuobjdump wheel.
set -euo pipefail
CUOBJDUMP=${CUOBJDUMP:-cuobjdump}
nvcc -arch=sm_90 -cubin -O3 -o /tmp/kernels_sm90.cubin kernels.cu
"$CUOBJDUMP" --dump-sass /tmp/kernels_sm90.cubin > kernels_sm90.sass
"$CUOBJDUMP" --dump-resource-usage /tmp/kernels_sm90.cubin > kernels_sm90.resources
