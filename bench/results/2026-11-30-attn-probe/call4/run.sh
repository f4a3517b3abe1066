#!/bin/bash
# Session 8 call 4: SM clock and power while main (0), loads-only (1), math-only (2) and the L1 prefetch (F1) run B=8 L=32K.
cd "$(dirname "$0")"; tar -xJf bundle.tar.xz -C /tmp
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader > $OUT/info.txt
for P in 0 1 2 F1; do
  nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw --format=csv,noheader,nounits -lms 50 > /tmp/smi$P.txt &
  S=$!
  for i in 1 2 3 4 5 6; do /tmp/da$P --shape 8,32,8,128,32768 > /tmp/o$P.txt 2>&1; done
  kill $S; wait $S 2>/dev/null
  ms=$(grep -E " ms" /tmp/o$P.txt | head -1 | sed -E 's/.* ([0-9.]+) ms.*/\1/')
  python3 - $P "$ms" <<'PY' >> $OUT/table.txt
import sys
P,ms=sys.argv[1],sys.argv[2]
rows=[l.split(',') for l in open('/tmp/smi%s.txt'%P) if l.strip()]
v=[(float(a),float(b),float(c)) for a,b,c in rows]
v.sort(key=lambda x:-x[2]); top=v[:max(1,len(v)//4)]
print(P, 'ms', ms, 'samples', len(v), 'top-quarter power: sm MHz %.0f mem MHz %.0f W %.0f' % tuple(sum(x[i] for x in top)/len(top) for i in range(3)), 'min sm MHz %.0f' % min(x[0] for x in v))
PY
  timeout 120 ncu --clock-control none -k regex:kernel_decode_f16 --launch-skip 3 --launch-count 1 --metrics gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__cycles_active.avg,smsp__inst_executed.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed /tmp/da$P --shape 8,32,8,128,32768 > /tmp/ncu$P.txt 2>&1
  grep -E "^ +(gpu__|sm__|smsp__|dram__)" /tmp/ncu$P.txt | sed "s/^/$P /" >> $OUT/ncu.txt
done
cat $OUT/info.txt; cat $OUT/table.txt; cat $OUT/ncu.txt
