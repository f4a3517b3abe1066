#!/bin/bash
# Session 24 call 5's burst script (session 25 call 3: NB's bench as spconv_m): the halo conv (C = 128, R = 1024) and torch's bf16
# 8192³ matmul in bursts of back-to-back calls after 3 s of rest, alternating, three times: each call's
# time against how long the burst has run, so that the two are compared at the same point of the
# board's power limit.
cd "$(dirname "$0")"; H=$(pwd)
PYTHONPATH=$H/../../.. python3 -c "
import torch, shells
c = shells.sphere_shell(1024, 'cuda'); c = torch.cat([torch.zeros_like(c[:, :1]), c], 1).cpu()
c.numpy().astype('int32').tofile('/tmp/coords_1024.bin')
"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv,noheader -lms 20 > $OUT/smi.csv &
SMI=$!
OUT=$OUT H=$H python3 - <<'PY' | tee $OUT/burst_table.txt
import json, os, subprocess, time, datetime
import torch
out, H = os.environ["OUT"], os.environ["H"]
m = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
n = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
def matmul_burst(calls):
    torch.cuda.synchronize(); time.sleep(3.0)
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(calls + 1)]
    ev[0].record()
    for i in range(calls):
        m @ n; ev[i + 1].record()
    torch.cuda.synchronize()
    return [ev[i].elapsed_time(ev[i + 1]) for i in range(calls)]
WIN = [(0, 30), (30, 100), (100, 300), (300, 1e9)]
def windows(ts):
    r, t0 = [], 0.0
    for a, b in WIN:
        sel = []
        acc = 0.0
        for t in ts:
            if a <= acc < b: sel.append(t)
            acc += t
        sel.sort(); r.append(sel[len(sel) // 2] if sel else float("nan"))
    return r
rows = []
for trial in range(3):
    p = subprocess.run([H + "/spconv_m", "--coords", "/tmp/coords_1024.bin", "--channels", "128", "--co", "128", "--out", "/tmp/o",
                        "--mma-only", "1", "--samples", "16", "--reps", "3", "--only", "none", "--burst", "100"],
                       capture_output=True, text=True)
    import re
    conv = json.loads(next(l for l in p.stdout.splitlines() if l.startswith('{"burst_ms"')))["burst_ms"]
    main = next(l for l in p.stdout.splitlines() if l.startswith('{"n"'))
    info = {k: float(re.search('"%s": ([0-9.]+)' % k, main).group(1)) for k in ("pairs", "conv_ms")}
    gflop = 2 * info["pairs"] * 128 * 128 / 1e9
    mm = matmul_burst(500)
    cw, mw = windows(conv), windows(mm)
    json.dump({"trial": trial, "conv_burst_ms": conv, "matmul_burst_ms": mm, "conv_useful_gflop": gflop,
               "time": datetime.datetime.now().isoformat()}, open(f"{out}/burst_{trial}.json", "w"))
    print(f"trial {trial}: conv useful {gflop:.1f} GFLOP, conv_ms (10 runs) {info['conv_ms']:.4f}")
    print("| window (ms into the burst) | conv ms | conv useful TFLOP/s | matmul ms | matmul TFLOP/s | conv share |")
    print("|---|---|---|---|---|---|")
    for (a, b), c, mmv in zip(WIN, cw, mw):
        ct, mt = gflop / c, 2 * 8192**3 / 1e9 / mmv
        print(f"| {a}–{b if b < 1e9 else 'end'} | {c:.4f} | {ct:.1f} | {mmv:.4f} | {mt:.1f} | {100 * ct / mt:.1f}% |")
    print(f"whole burst: conv {sum(conv):.1f} ms for {len(conv)} calls (median {sorted(conv)[len(conv)//2]:.4f}); matmul {sum(mm):.1f} ms for {len(mm)} (median {sorted(mm)[len(mm)//2]:.4f})", flush=True)
PY
kill $SMI
