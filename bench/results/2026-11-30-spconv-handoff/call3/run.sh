#!/bin/bash
# Session 13 call 3: racecheck of two placements of the buffer wait (V1: wait + prologue barrier; V2: wait at
# the tile's start); their times against N; the two kernels' durations apart (ncu)
cd "$(dirname "$0")"; H=$(pwd)
tar -xJf bundle.tar.xz -C /tmp; X=/tmp/cvar
for v in V1 V2; do
timeout 120 compute-sanitizer --tool racecheck $X/$v/test_sparse_conv --gtest_filter="SpconvCudaWgmma.HaloKernel*:SpconvCuda.EveryKernelOnATinyInput" > $OUT/rc_$v.log 2>&1; echo "racecheck $v rc=$? $(grep 'RACECHECK SUMMARY' $OUT/rc_$v.log | tail -1)" >> $OUT/info.txt
grep -m2 -A3 "Race reported" $OUT/rc_$v.log | cut -c1-300 >> $OUT/info.txt
done
PYTHONPATH=$H python3 -c "
import torch, shells
for R in (512, 1024):
    c = shells.sphere_shell(R, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1).cpu()
    c.numpy().astype('int32').tofile('/tmp/coords_%d.bin' % R)
"
run() { # variant R C
  timeout 60 $X/$1/spconv --coords /tmp/coords_$2.bin --channels $3 --out /tmp/o --mma-only 1 --samples 4 --reps 10 --only none > /tmp/b.json 2>/tmp/b.err || echo "$1 R=$2 C=$3 rc=$?" >> $OUT/table.txt
  ms=$(grep -o '"conv_ms": [0-9.]*' /tmp/b.json | tail -1)
  echo "$1 R=$2 C=$3 $ms $(md5sum /tmp/o.out | cut -c1-12)" >> $OUT/table.txt
}
for round in 1 2; do for v in N V1 V2; do run $v 1024 64; done; done
for v in N V1 V2; do run $v 512 64; done
which ncu >> $OUT/info.txt
timeout 150 ncu --metrics gpu__time_duration.sum -k regex:"halo_pipe|wgmma_ws|memset" -c 8 $X/V1/spconv --coords /tmp/coords_1024.bin --channels 64 --out /tmp/o --mma-only 1 --samples 1 --reps 2 --only none > $OUT/ncu.txt 2>&1; echo "ncu rc=$?" >> $OUT/info.txt
grep -E "kernel_conv|gpu__time_duration|memset" $OUT/ncu.txt | sed 's/(CUtensorMap_st.*//' | cut -c1-160 >> $OUT/table.txt
cat $OUT/info.txt; cat $OUT/table.txt
