#!/usr/bin/env bash
# Fills .whl/ (ignored by git) with the wheels that the GPU machine's image lacks, for
# scripts/gpu_check.sh to install there offline (the device tool carries .whl).
# The image has torch, triton, numpy, scipy, typer, rich, httpx, anyio, attrs, typing-extensions
# and nvidia-ml-py; these are the rest of what kernelpro and its GPU tests import (anthropic is
# imported only by the LLM coder, which the GPU checks do not use). Versions are pinned where a
# newer release needs a newer typing-extensions than the image may have.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .whl && mkdir -p .whl
packages=(
  pydantic==2.13.4 pydantic-core==2.46.4 annotated-types==0.7.0 typing-inspection==0.4.2
  jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==0.30.0
  nvidia-cutlass==4.2.0.0 bm25s==0.3.16
)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any -d .whl "${packages[@]}"
# Bubblewrap for the sandbox (Debian 12's, needs glibc 2.34+), with the libraries it links: the image
# may lack it; gpu_check.sh unpacks it where bwrap is missing.
mkdir -p .whl/bwrap
(cd .whl/bwrap && apt-get download bubblewrap libcap2 libselinux1 libpcre2-8-0 2>/dev/null)
ls -la .whl .whl/bwrap
du -sh .whl
