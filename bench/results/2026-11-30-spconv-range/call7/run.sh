#!/bin/bash
# Session 9 call 7: racecheck of main's default conv kernels (warp-specialized, two blocks at C=64; 256-row tiles at C=128) on a shell of many tiles.
cd "$(dirname "$0")"; H=$(pwd)
tar -xJf bundle.tar.xz -C /tmp; B=/tmp/b
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $OUT/info.txt
PYTHONPATH=$H python3 -c "
import torch, shells
c = shells.sphere_shell(160, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1).cpu()
print('N', c.shape[0]); c.numpy().astype('int32').tofile('/tmp/coords_160.bin')
" >> $OUT/info.txt
for C in 64 128; do
  timeout 130 compute-sanitizer --tool racecheck --print-limit 5 $B/spconv --coords /tmp/coords_160.bin --channels $C --out /tmp/o --mma-only 1 --samples 4 --reps 1 --only none > $OUT/rc_$C.log 2>&1; echo "racecheck C=$C rc=$? $(grep 'RACECHECK SUMMARY' $OUT/rc_$C.log | tail -1) $(grep -o 'Race reported between [A-Za-z]* access at [^(]*' $OUT/rc_$C.log | sort | uniq -c | tr '\n' ' ')" >> $OUT/info.txt
done
cat $OUT/info.txt; grep -m3 -A2 "Race reported" $OUT/rc_64.log $OUT/rc_128.log | cut -c1-250
