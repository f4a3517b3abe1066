#!/bin/bash
# Session 13 call 2: racecheck of the hand-off kernel with line info; the kernels' times (nsys)
cd "$(dirname "$0")"; H=$(pwd)
tar -xJf bundle.tar.xz -C /tmp; X=/tmp/cvar
timeout 150 compute-sanitizer --tool racecheck --show-backtrace no $X/NL/test_sparse_conv --gtest_filter="SpconvCudaWgmma.HaloKernel*" > $OUT/rc.log 2>&1; echo "racecheck rc=$? $(grep 'RACECHECK SUMMARY' $OUT/rc.log | tail -1)"
grep -A4 "Race reported" $OUT/rc.log | head -60
which nsys cuobjdump
cuobjdump -sass $X/NL/test_sparse_conv | awk '/Function : /{f = /halo_pipe/ && /6__half/} f' > $OUT/sass.txt 2>&1; wc -l $OUT/sass.txt
PYTHONPATH=$H python3 -c "
import torch, shells
c = shells.sphere_shell(1024, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1).cpu()
c.numpy().astype('int32').tofile('/tmp/coords_1024.bin')
"
timeout 120 nsys profile -o /tmp/p --force-overwrite true $X/NL/spconv --coords /tmp/coords_1024.bin --channels 64 --out /tmp/o --mma-only 1 --samples 4 --reps 10 --only none > /dev/null 2>&1; echo "nsys rc=$?"
nsys stats --report cuda_gpu_kern_sum --format csv /tmp/p.nsys-rep > $OUT/kern.csv 2>&1; cut -c1-220 $OUT/kern.csv | head -20
