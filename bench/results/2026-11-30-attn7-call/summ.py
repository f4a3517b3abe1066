"""attn7: the loops side by side on the D=128 K4/V4 rows (median over the bench runs), SDPA fp16 peer."""
import json, sys, statistics
out = sys.argv[1]
runs = [json.load(open(f"{out}/ours.json"))["rows"]]
try:
    runs += json.load(open(f"{out}/runs.json"))
except Exception as e:
    print("(runs.json:", e, ")")
sdpa = {(r["B"], r["Hq"], r["Hkv"], r["D"], r["L"]): r["ms"] for r in json.load(open(f"{out}/sdpa.json"))["sdpa"]}
ms = {}
for rows in runs:
    for r in rows:
        if r["kbits"] == 4 and r["vbits"] == 4 and r["math"] == "f16" and r["splits"] == 0:
            ms.setdefault((r["B"], r["Hq"], r["Hkv"], r["D"], r["L"], r["loop"]), []).append(r["ms"])
med = {k: statistics.median(v) for k, v in ms.items()}
n = {k: len(v) for k, v in ms.items()}
shapes = sorted({k[:5] for k in med}, key=lambda s: (s[3], s[0] * s[2] * s[4], s[0]))
print(f"median of {max(n.values())} bench runs (ms); work = B*Hkv*tiles*L; bulk vs reg = (reg - bulk) / reg")
print("| B | D | L | work | registers | wide | bulk | auto | SDPA fp16 | bulk vs reg | auto speedup vs SDPA | spread reg / bulk |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for s in shapes:
    B, Hq, Hkv, D, L = s
    g = lambda l: med.get(s + (l,))
    reg, wide, bulk, auto = g("registers"), g("wide"), g("bulk"), g("auto")
    sp = lambda l: (lambda v: f"{(max(v) - min(v)) / min(v) * 100:.1f}%" if v else "-")(ms.get(s + (l,)))
    f = lambda x: f"{x:.4f}" if x else "-"
    work = B * Hkv * ((Hq // Hkv + 7) // 8) * L
    rel = f"{(reg - bulk) / reg * 100:+.1f}%" if reg and bulk else "-"
    spd = f"{sdpa[s] / auto:.2f}x" if auto and s in sdpa else "-"
    print(f"| {B} | {D} | {L} | 2^{work.bit_length() - 1} | {f(reg)} | {f(wide)} | {f(bulk)} | {f(auto)} | {f(sdpa.get(s))} | {rel} | {spd} | {sp('registers')} / {sp('bulk')} |")
