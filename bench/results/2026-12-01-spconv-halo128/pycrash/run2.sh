#!/bin/bash
# Session 19, pycrash call 2: the module linked with --exclude-libs,ALL (python/CMakeLists.txt), CPU-only
# from source and the GPU module against the carried libfrugal; every Python suite.
R0=$(cd "$(dirname "$0")/../../../.." && pwd)
cmake -S $R0 -B /tmp/cpub -G Ninja -DFRUGAL_CUDA=OFF -DFRUGAL_TESTS=OFF -DFRUGAL_BENCH=OFF -DFRUGAL_TOOLS=OFF -DFRUGAL_PYTHON=ON -DCMAKE_BUILD_TYPE=Release > /tmp/cpub.log 2>&1 && ninja -C /tmp/cpub >> /tmp/cpub.log 2>&1; echo "cpu module rc=$?"
T='import frugal
from frugal import kv
c = kv.Cache(num_kv_heads=1, head_dim=16, capacity=4)
try:
    c.dequantize(0, 0, 3)
except frugal.Error as e:
    print("raised:", str(e)[:60])'
for pre in "" "import numpy" "import torch"; do echo "== [$pre]"; PYTHONPATH=/tmp/cpub/python timeout 60 python3 -c "$pre
$T" 2>&1 | grep -v "^Extension" | tail -2; done
PYTHONPATH=/tmp/cpub/python timeout 120 python3 -m pytest -q -p no:cacheprovider $R0/python/tests 2>&1 | grep -v "^Extension" | tail -2
mkdir -p /tmp/fpy && tar -xJf $R0/.gpu/fpy.tar.xz -C /tmp/fpy && cmake -S /tmp/fpy/pyproj -B /tmp/pyb -G Ninja -DCMAKE_PREFIX_PATH=/tmp/fpy/inst -DFRUGAL_SRC=$R0 -DCMAKE_BUILD_TYPE=Release > /tmp/pyb.log 2>&1 && ninja -C /tmp/pyb >> /tmp/pyb.log 2>&1; echo "gpu module rc=$?"; cp $R0/python/frugal/*.py /tmp/pyb/frugal/
PYTHONPATH=/tmp/pyb timeout 200 python3 -m pytest -q -rs -p no:cacheprovider $R0/python/tests 2>&1 | grep -v "^Extension" | tail -4
