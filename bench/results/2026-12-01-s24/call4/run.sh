#!/bin/bash
# Session 24 call 4: clocks and power while the halo conv runs (main 9364c91, M) and while torch's bf16
# 8192³ matmul runs (the issue's peak, timed as ../shared/anchors/torch_baselines.py does), sampled by
# nvidia-smi every 20 ms.
cd "$(dirname "$0")"; H=$(pwd)
tar -xJf bundle.tar.xz -C /tmp; X=/tmp/cvar
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader > $OUT/info.txt
PYTHONPATH=$H/../../.. python3 -c "
import torch, shells
c = shells.sphere_shell(1024, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1).cpu()
c.numpy().astype('int32').tofile('/tmp/coords_1024.bin')
"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv,noheader -lms 20 > $OUT/smi.csv &
SMI=$!
mark() { echo "$(date +%H:%M:%S.%N | cut -c1-12) $*" >> $OUT/marks.txt; }
sleep 1
for C in 128 64; do
  for reps in 3 10 60; do
    mark "conv C=$C reps=$reps start"
    timeout 120 $X/M/spconv --coords /tmp/coords_1024.bin --channels $C --co $C --out /tmp/o --mma-only 1 --samples 16 --reps $reps --only none > /tmp/b.json 2>/dev/null
    mark "conv C=$C reps=$reps end $(grep -o '"conv_ms": [0-9.]*' /tmp/b.json | head -1)"
    echo "C=$C reps=$reps $(grep -o '"conv_ms": [0-9.]*' /tmp/b.json | head -1)" >> $OUT/table.txt
    sleep 2
  done
done
mark "matmul start"
python3 - >> $OUT/table.txt <<'PY'
import torch, time, subprocess
dev = torch.device("cuda")
m = torch.randn(8192, 8192, dtype=torch.bfloat16, device=dev)
n = torch.randn(8192, 8192, dtype=torch.bfloat16, device=dev)
def bench(fn, warm=3, rep=20):
    for _ in range(warm): fn()
    torch.cuda.synchronize(); ts = []
    for _ in range(rep):
        s = torch.cuda.Event(enable_timing=True); e = torch.cuda.Event(enable_timing=True)
        s.record(); fn(); e.record(); torch.cuda.synchronize(); ts.append(s.elapsed_time(e))
    ts.sort(); return ts[len(ts) // 2]
for rep in (20, 20, 200):
    ms = bench(lambda: m @ n, rep=rep)
    print(f"matmul bf16 8192^3 rep={rep}: {ms:.4f} ms {2 * 8192**3 / ms / 1e9:.1f} TFLOP/s", flush=True)
    time.sleep(2)
PY
mark "matmul end"
sleep 1; kill $SMI
python3 - $OUT <<'PY' >> $OUT/table.txt
import sys, datetime
out = sys.argv[1]
rows = []
for l in open(out + "/smi.csv"):
    p = [x.strip() for x in l.split(",")]
    try:
        t = datetime.datetime.strptime(p[0], "%Y/%m/%d %H:%M:%S.%f"); rows.append((t.time(), int(p[1].split()[0]), float(p[2].split()[0]), p[4]))
    except Exception: pass
marks = [l.split(None, 1) for l in open(out + "/marks.txt")]
def at(s): return datetime.datetime.strptime(s[:12], "%H:%M:%S.%f").time()
for i in range(0, len(marks) - 1, 2):
    a, b = at(marks[i][0]), at(marks[i + 1][0])
    sel = [r for r in rows if a <= r[0] <= b]
    if not sel: continue
    cl = sorted(r[1] for r in sel); pw = sorted(r[2] for r in sel)
    busy = [r for r in sel if r[2] > 250] or sel
    bc = sorted(r[1] for r in busy); bp = sorted(r[2] for r in busy)
    reasons = sorted({r[3] for r in busy})
    print(f"{marks[i][1].strip():28s} samples {len(sel):4d} (>250 W: {len(busy):4d}) | SM MHz median {bc[len(bc)//2]} min {bc[0]} | W median {bp[len(bp)//2]:.0f} max {bp[-1]:.0f} | reasons {reasons}")
PY
cat $OUT/info.txt; cat $OUT/table.txt
