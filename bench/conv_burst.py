"""The sparse conv and torch's bf16 8192³ matmul in bursts of back-to-back calls, each after 3 s of
rest, alternating: every call's time against how long its burst has run, so that the two are
compared at the same point of the board's power limit (at C = 128 the conv reaches the H200's 700 W
cap within ~40 ms; bench/results/2026-12-01-s24.md, -s25.md).

    python3 bench/conv_burst.py --spconv BIN [--res 1024] [--channels 128] [--trials 3] [--calls 100]
                                [--matmul-calls 500] [--out DIR]

BIN is a build of bench/spconv (its --burst N). Prints a table a trial (the median call in each
window of the burst; the conv's useful rate over the matmul's) and writes burst_T.json under --out.
"""
import argparse, datetime, json, os, re, subprocess, sys, time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shells  # noqa: E402

WINDOWS = [(0, 30), (30, 100), (100, 300), (300, float("inf"))]  # ms into the burst


def window_medians(times):
    """The median call of each window, a call counted in the window where it starts."""
    out = []
    for a, b in WINDOWS:
        start, sel = 0.0, []
        for t in times:
            if a <= start < b:
                sel.append(t)
            start += t
        sel.sort()
        out.append(sel[len(sel) // 2] if sel else float("nan"))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--spconv", required=True)
    ap.add_argument("--res", type=int, default=1024)
    ap.add_argument("--channels", type=int, default=128)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--calls", type=int, default=100)
    ap.add_argument("--matmul-calls", type=int, default=500)
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp"))
    args = ap.parse_args()

    coords = shells.coords_path(args.res)
    if not os.path.exists(coords):
        shells.write_coords(args.res, coords)
    a = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    a @ b  # cuBLAS's first call (its set-up) outside every burst
    torch.cuda.synchronize()

    def matmul_burst(calls):
        time.sleep(3.0)
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(calls + 1)]
        ev[0].record()
        for i in range(calls):
            a @ b
            ev[i + 1].record()
        torch.cuda.synchronize()
        return [ev[i].elapsed_time(ev[i + 1]) for i in range(calls)]

    C = args.channels
    for trial in range(args.trials):
        p = subprocess.run([args.spconv, "--coords", coords, "--channels", str(C), "--co", str(C), "--out", "/tmp/o",
                            "--mma-only", "1", "--samples", "16", "--reps", "3", "--only", "none",
                            "--burst", str(args.calls)], capture_output=True, text=True, check=True)
        lines = p.stdout.splitlines()
        conv = json.loads(next(l for l in lines if l.startswith('{"burst_ms"')))["burst_ms"]
        head = next(l for l in lines if l.startswith('{"n"'))
        pairs = float(re.search(r'"pairs": ([0-9.]+)', head).group(1))
        conv_ms = float(re.search(r'"conv_ms": ([0-9.]+)', head).group(1))
        gflop = 2 * pairs * C * C / 1e9
        mm = matmul_burst(args.matmul_calls)
        json.dump({"trial": trial, "conv_burst_ms": conv, "matmul_burst_ms": mm, "conv_useful_gflop": gflop,
                   "time": datetime.datetime.now().isoformat()}, open(os.path.join(args.out, f"burst_{trial}.json"), "w"))
        print(f"trial {trial}: conv useful {gflop:.1f} GFLOP, conv_ms (the bench's median of 3 runs before the burst) {conv_ms:.4f}")
        print("| window (ms into the burst) | conv ms | conv useful TFLOP/s | matmul ms | matmul TFLOP/s | conv share |")
        print("|---|---|---|---|---|---|")
        for (lo, hi), c, m in zip(WINDOWS, window_medians(conv), window_medians(mm)):
            ct, mt = gflop / c, 2 * 8192**3 / 1e9 / m
            print(f"| {lo}–{hi if hi < float('inf') else 'end'} | {c:.4f} | {ct:.1f} | {m:.4f} | {mt:.1f} | {100 * ct / mt:.1f}% |")
        print(f"whole burst: conv {sum(conv):.1f} ms for {len(conv)} calls; matmul {sum(mm):.1f} ms for {len(mm)}", flush=True)


if __name__ == "__main__":
    main()
