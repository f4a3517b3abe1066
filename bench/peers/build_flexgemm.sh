#!/bin/bash
# Builds FlexGEMM (JeffreyXiang/FlexGEMM, TRELLIS.2's sparse-conv backend) from its source tree, in a
# copy, in place: its one CUDA extension (flex_gemm.kernels.cuda: the hash map and neighbour-map
# kernels) for sm_90 only; its convs are Triton kernels, compiled at their first call.
#   bench/peers/build_flexgemm.sh [SRC (.gpu/peers/FlexGEMM)] [DEST (/tmp/flexgemm)]
# Then PYTHONPATH=DEST (and FLEXGEMM_DIR=DEST for its tests' sphere_coords). Needs torch, ninja, nvcc.
set -eu
src=${1:-.gpu/peers/FlexGEMM} dest=${2:-/tmp/flexgemm}
[ -f "$src/setup.py" ] || { echo "build_flexgemm: no setup.py in $src" >&2; exit 2; }
rm -rf "$dest" && mkdir -p "$dest" && cp -a "$src/." "$dest/"
cd "$dest"
# setup.py also merges its autotune cache into ~/.flex_gemm (A100 and MI300X entries; none for this GPU)
TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0} MAX_JOBS=${MAX_JOBS:-16} BUILD_TARGET=cuda \
  python3 setup.py -q build_ext --inplace
so=$(find flex_gemm/kernels -maxdepth 1 -name 'cuda*.so' | head -1)
[ -n "$so" ] || { echo "build_flexgemm: no flex_gemm/kernels/cuda*.so after the build" >&2; exit 1; }
echo "build_flexgemm: $dest/$so"
