"""Peer measurement: torch scaled_dot_product_attention over an fp16 cache, on the shapes of
bench/decode_attention.cu, timed the same way (a 512 MB read before every call evicts L2 and hides
the launch; CUDA events around the call; median). With --ours PATH (the JSON decode_attention wrote)
it prints the side-by-side table last and writes it under $OUT.

Bandwidth columns: fp16 SDPA moves 2·B·Hkv·L·D·2 bytes; ours B·Hkv·L·(D·(bk+bv)/8 + 8) bytes
(codes + one f32 scale per vector, K and V). The 4-bit floor is our bytes over the measured read bandwidth.
Rows measured with decode_attention --floor also get the stream floor of their own bytes (a kernel that
only reads the call's four cache arrays, timed the same way) beside the time a 3x over SDPA allows.
"""
import argparse, json, os, sys
from flushed_timing import flushed_median_ms
import torch
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--ours", default="")
ap.add_argument("--out", default=os.environ.get("OUT", "/tmp"))
args = ap.parse_args()
dev = torch.device("cuda")

bench = flushed_median_ms


ours = json.load(open(args.ours)) if args.ours else None
shapes = []
for D in (128, 256):
    for B in (1, 8, 32):
        for L in (4096, 32768, 131072):
            shapes.append((B, 32, 8, D, L))
shapes += [(32, 32, 8, 128, 8192), (1, 16, 8, 256, 32768)]
if ours:
    shapes = sorted({(r["B"], r["Hq"], r["Hkv"], r["D"], r["L"]) for r in ours["rows"]}, key=lambda s: (s[3], s[0], s[4], s[1]))

sdpa = {}
for (B, Hq, Hkv, D, L) in shapes:
    q = torch.randn(B, Hq, 1, D, dtype=torch.float16, device=dev)
    k = torch.randn(B, Hkv, L, D, dtype=torch.float16, device=dev)
    v = torch.randn(B, Hkv, L, D, dtype=torch.float16, device=dev)
    big = 2 * B * Hkv * L * D * 2
    ms = bench(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True), reps=15 if big > 2e9 else 40)
    sdpa[(B, Hq, Hkv, D, L)] = ms
    print(f"SDPA fp16 B={B:2d} Hq={Hq} Hkv={Hkv} D={D} L={L:6d}: {ms:.4f} ms  {big / ms / 1e9:.2f} TB/s", flush=True)
    del q, k, v
    torch.cuda.empty_cache()

res = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
       "sdpa": [dict(B=s[0], Hq=s[1], Hkv=s[2], D=s[3], L=s[4], ms=m) for s, m in sdpa.items()]}
json.dump(res, open(os.path.join(args.out, "sdpa.json"), "w"), indent=1)
if not ours:
    sys.exit(0)

read = ours["read_TBps"]
lines = [f"{ours['device']}; torch {torch.__version__}; streamed read {read:.2f} TB/s",
         "| B | Hq | Hkv | D | L | loop | ours 4-bit (ms) | ours TB/s | of 4-bit floor | SDPA fp16 (ms) | SDPA TB/s | speedup | best slices (ms) |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
main = lambda r: r["kbits"] == 4 and r["vbits"] == 4 and r["math"] == "f16"
for r in ours["rows"]:
    if not (main(r) and r["splits"] == 0):
        continue
    key = (r["B"], r["Hq"], r["Hkv"], r["D"], r["L"])
    s = sdpa[key]
    bw = r["bytes"] / r["ms"] / 1e9
    sdpa_bw = 2 * r["B"] * r["Hkv"] * r["L"] * r["D"] * 2 / s / 1e9
    sweep = [x for x in ours["rows"] if main(x) and x["splits"] > 0 and (x["B"], x["Hq"], x["Hkv"], x["D"], x["L"]) == key
             and x.get("loop", "auto") == r.get("loop", "auto")]
    best = min(sweep, key=lambda x: x["ms"]) if sweep else None
    best_s = f"{best['splits']} ({best['ms']:.4f})" if best else "-"
    lines.append(f"| {r['B']} | {r['Hq']} | {r['Hkv']} | {r['D']} | {r['L']} | {r.get('loop', 'auto')} | {r['ms']:.4f} | {bw:.2f} | "
                 f"{100 * bw / read:.0f}% | {s:.4f} | {sdpa_bw:.2f} | {s / r['ms']:.2f}x | {best_s} |")
floors = [r for r in ours["rows"] if main(r) and r["splits"] == 0 and r.get("floor_ms", 0) > 0]
if floors:
    lines += ["", "stream floor: a kernel that only reads the call's bytes, timed the same way (decode_attention --floor)",
              "| B | D | L | MB | ours (ms) | stream floor (ms) | ours / floor | 3x SDPA needs (ms) | that / floor |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in floors:
        key = (r["B"], r["Hq"], r["Hkv"], r["D"], r["L"])
        need = sdpa[key] / 3
        lines.append(f"| {r['B']} | {r['D']} | {r['L']} | {r['bytes'] / 1e6:.1f} | {r['ms']:.4f} | {r['floor_ms']:.4f} | "
                     f"{r['ms'] / r['floor_ms']:.3f} | {need:.4f} | {need / r['floor_ms']:.3f} |")
lines.append("")
lines.append("slice sweep (ours, K4/V4 f16): B D L: splits=ms ...")
keys = sorted({(x["B"], x["Hq"], x["Hkv"], x["D"], x["L"]) for x in ours["rows"]}, key=lambda s: (s[3], s[0], s[4], s[1]))
for key in keys:
    sweep = [x for x in ours["rows"] if main(x) and x["splits"] > 0 and (x["B"], x["Hq"], x["Hkv"], x["D"], x["L"]) == key]
    if sweep:
        lines.append(f"  {key[0]:2d} {key[3]} {key[4]:6d}: " + " ".join(f"{x['splits']}={x['ms']:.4f}" for x in sweep))
lines.append("variants (ours): B Hq Hkv D L K/V math splits -> ms (speedup vs SDPA fp16)")
for r in ours["rows"]:
    if main(r):
        continue
    key = (r["B"], r["Hq"], r["Hkv"], r["D"], r["L"])
    lines.append(f"  {r['B']:2d} {r['Hq']} {r['Hkv']} {r['D']} {r['L']:6d} K{r['kbits']}/V{r['vbits']} {r['math']} "
                 f"splits={r['splits'] or 'auto'}: {r['ms']:.4f} ms ({sdpa[key] / r['ms']:.2f}x)")
text = "\n".join(lines)
open(os.path.join(args.out, "table.md"), "w").write(text + "\n")
print(text)
