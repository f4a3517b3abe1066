#!/bin/bash
# Session 13 call 9: the hand-off code in its own kernel instance (G4) against main (M, b442def): tests, memcheck, the conv
cd "$(dirname "$0")"; H=$(pwd)
tar -xJf bundle.tar.xz -C /tmp; X=/tmp/cvar
timeout 200 $X/G4/test_sparse_conv > $OUT/test.txt 2>&1; echo "test G4 rc=$? $(grep -E "^\[  (PASSED|FAILED)" $OUT/test.txt | tr "\n" " ")" >> $OUT/info.txt
grep -E "FAILED|Failure" $OUT/test.txt | head -10 >> $OUT/info.txt
PYTHONPATH=$H python3 -c "
import torch, shells
for R in (256, 1024):
    c = shells.sphere_shell(R, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1).cpu()
    c.numpy().astype('int32').tofile('/tmp/coords_%d.bin' % R)
torch.manual_seed(0)
c = shells.sphere_shell(512, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1)
c[torch.randperm(c.shape[0], device=c.device)].cpu().numpy().astype('int32').tofile('/tmp/coords_512s.bin')
"
run() { # variant R C
  timeout 60 $X/$1/spconv --coords /tmp/coords_$2.bin --channels $3 --out /tmp/o --mma-only 1 --samples 4 --reps 10 --only none > /tmp/b.json 2>/tmp/b.err || echo "$1 R=$2 C=$3 rc=$?" >> $OUT/table.txt
  ms=$(grep -o '"conv_ms": [0-9.]*' /tmp/b.json | tail -1)
  echo "$1 R=$2 C=$3 $ms $(md5sum /tmp/o.out | cut -c1-12)" >> $OUT/table.txt
}
for round in 1 2; do for v in M G4; do run $v 512s 64; done; done
for v in M G4; do run $v 1024 64; run $v 256 64; run $v 1024 128; done
timeout 100 compute-sanitizer --tool memcheck $X/G4/test_sparse_conv --gtest_filter="SpconvCudaWgmma.HaloKernel*:SpconvCudaWgmma.PipelinedHalo*" > /tmp/mc.log 2>&1; echo "memcheck rc=$? $(grep 'ERROR SUMMARY' /tmp/mc.log | tail -1)" >> $OUT/info.txt
cat $OUT/info.txt $OUT/table.txt
