#!/bin/bash
# Session 19: where a frugal.Error raised through the Python module segfaults on the GPU machine (every
# pytest that expects one crashed there, with a module built there by one compiler too).
R0=$(cd "$(dirname "$0")/../../../.." && pwd)
cmake -S $R0 -B /tmp/cpub -G Ninja -DFRUGAL_CUDA=OFF -DFRUGAL_TESTS=OFF -DFRUGAL_BENCH=OFF -DFRUGAL_TOOLS=OFF -DFRUGAL_PYTHON=ON -DCMAKE_BUILD_TYPE=Release > /tmp/cpub.log 2>&1 && ninja -C /tmp/cpub >> /tmp/cpub.log 2>&1; echo "cpu module rc=$?"
export PYTHONPATH=/tmp/cpub/python
T='import frugal
from frugal import kv
c = kv.Cache(num_kv_heads=1, head_dim=16, capacity=4)
try:
    c.dequantize(0, 0, 3)
except frugal.Error as e:
    print("raised:", str(e)[:80])'
echo "== without torch"; timeout 60 python3 -c "$T" 2>&1 | grep -v "^Extension" | tail -3
echo "== torch imported first"; timeout 60 python3 -c "import torch
$T" 2>&1 | grep -v "^Extension" | tail -3
echo "== numpy only"; timeout 60 python3 -c "import numpy
$T" 2>&1 | grep -v "^Extension" | tail -3
which g++ gcc gdb; g++ --version | head -1; python3 --version; python3 -c "import sys; print(sys.executable)"
ldd /tmp/cpub/python/frugal/_frugal*.so
python3 -c "import torch, os; print(torch.__version__); print(os.listdir(os.path.dirname(torch.__file__)+'/lib')[:40])"
ldconfig -p | grep -E "libstdc\+\+|libgcc_s|libgomp" 
strings $(ldd /tmp/cpub/python/frugal/_frugal*.so | grep libstdc | awk '{print $3}') | grep -E "^GLIBCXX_3\.4\.3" | tail -3
command -v gdb >/dev/null && timeout 60 gdb -batch -ex run -ex bt --args python3 -c "$T" 2>&1 | grep -E "^#|signal" | head -25
