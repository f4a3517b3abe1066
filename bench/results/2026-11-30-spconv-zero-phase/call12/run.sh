#!/bin/bash
# Session 14 call 12: ncu source counters of the pipelined halo kernel as it lands (F), R = 512 C = 64: where a step goes now
cd "$(dirname "$0")"; H=$(pwd)
tar -xJf bundle.tar.xz -C /tmp; X=/tmp/cvar
PYTHONPATH=$H python3 -c "
import torch, shells
c = shells.sphere_shell(512, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1).cpu()
c.numpy().astype('int32').tofile('/tmp/coords_512.bin')
"
timeout 300 ncu --kernel-name regex:halo_pipe --launch-skip 2 --launch-count 1 --section SourceCounters --section WarpStateStats --section SpeedOfLight --import-source yes -o /tmp/prof $X/F/spconv --coords /tmp/coords_512.bin --channels 64 --out /tmp/o --mma-only 1 --samples 1 --reps 3 --only none > $OUT/ncu_run.txt 2>&1; echo "ncu rc=$?" >> $OUT/info.txt
ncu -i /tmp/prof.ncu-rep --page source --csv --print-source sass > /tmp/sass.csv 2> $OUT/src_err.txt; echo "src rc=$? $(wc -l < /tmp/sass.csv)" >> $OUT/info.txt
ncu -i /tmp/prof.ncu-rep --page details --csv > $OUT/details.csv 2>&1
gzip -c /tmp/sass.csv > $OUT/sass.csv.gz
head -3 /tmp/sass.csv | cut -c1-600 >> $OUT/info.txt
cat $OUT/info.txt; tail -5 $OUT/ncu_run.txt
