#!/bin/bash
# Session 19 check call 3: at Ci > 64 every call decides on the device; the host only picks the launches
# (probe, halo kernel; and the rules' kernel only where the host says the rows do not suit). Tests, sanitizers, cost.
cd "$(dirname "$0")"; H=$(pwd); R0=$(cd ../../../.. && pwd); T0=$(date +%s)
tar -xJf bundle.tar.xz -C /tmp; X=/tmp/cvar
timeout 120 $X/N/test_sparse_conv > $OUT/test.txt 2>&1; echo "test_sparse_conv rc=$? $(grep -E "^\[  (PASSED|FAILED)" $OUT/test.txt | tr "\n" " ") t=$(( $(date +%s) - T0 ))s" > $OUT/info.txt
grep -E "^\[  FAILED  \] [A-Z]|Failure" -A4 $OUT/test.txt | head -20 >> $OUT/info.txt
timeout 110 compute-sanitizer --tool memcheck $X/N/test_sparse_conv --gtest_filter="SpconvCudaWgmma.PipelinedHalo*:SpconvCudaWgmma.DefaultOnALargeGrid" > /tmp/mc.log 2>&1; echo "memcheck rc=$? $(grep 'ERROR SUMMARY' /tmp/mc.log | tail -1) t=$(( $(date +%s) - T0 ))s" >> $OUT/info.txt
timeout 40 compute-sanitizer --tool synccheck $X/N/test_sparse_conv --gtest_filter="SpconvCudaWgmma.PipelinedHalo*" > /tmp/sc.log 2>&1; echo "synccheck rc=$? $(grep 'ERROR SUMMARY' /tmp/sc.log | tail -1) t=$(( $(date +%s) - T0 ))s" >> $OUT/info.txt
PYTHONPATH=$R0/bench python3 -c "
import torch, shells
for R in (196, 512, 1024):
    c = shells.sphere_shell(R, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1).cpu()
    c.numpy().astype('int32').tofile('/tmp/coords_%d.bin' % R)
torch.manual_seed(0)
c = shells.sphere_shell(512, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1)
c[torch.randperm(c.shape[0], device=c.device)].cpu().numpy().astype('int32').tofile('/tmp/coords_512s.bin')
"
run() { # variant R C
  timeout 60 $X/$1/spconv --coords /tmp/coords_$2.bin --channels $3 --out /tmp/o --mma-only 1 --samples 4 --reps 10 --only none > /tmp/b.json 2>/tmp/b.err || echo "$1 R=$2 C=$3 rc=$?" >> $OUT/table.txt
  echo "$1 R=$2 C=$3 $(grep -o '"conv_ms": [0-9.]*' /tmp/b.json | tail -1) $(md5sum /tmp/o.out | cut -c1-12)" >> $OUT/table.txt
}
for round in 1 2; do for R in 196 512 1024 512s; do for v in N M; do run $v $R 128; done; done; done
run N 512 64; run M 512 64
cat $OUT/info.txt $OUT/table.txt
