#!/bin/bash
# Session 11: the bench programs after the shared event timer (bench/event_timing.h), main's library
cd "$(dirname "$0")"; H=$(pwd)
PYTHONPATH=$H python3 -c "
import torch, shells
c = shells.sphere_shell(512, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1).cpu()
c.numpy().astype('int32').tofile('/tmp/coords_512.bin')
"
./wgmma_ceiling 20000 > $OUT/ceiling.txt 2>&1; echo "wgmma_ceiling rc=$?" >> $OUT/info.txt
./mma_ceiling > $OUT/mma_ceiling.txt 2>&1; echo "mma_ceiling rc=$?" >> $OUT/info.txt
./spconv --coords /tmp/coords_512.bin --channels 64 --out /tmp/o --mma-only 1 --samples 4 --reps 10 --only none > $OUT/spconv.txt 2>&1; echo "spconv rc=$? $(grep -o '"conv_ms": [0-9.]*' $OUT/spconv.txt)" >> $OUT/info.txt
cat $OUT/info.txt; head -12 $OUT/ceiling.txt; cat $OUT/mma_ceiling.txt
