"""Peer measurement for bench/paged_attention.cu: torch scaled_dot_product_attention (the flash
backend where it serves) over fp16 K/V of the same shapes, timed the same way (a 512 MB read before
every call evicts L2; CUDA events; median), and the side-by-side table from paged_attention's JSON.

Decode and speculative rows attend every cached token (a 4- or 8-token causal corner changes nothing
measurable over 32K keys); prefill rows use the causal mask aligned to the end of the keys
(torch.nn.attention.bias.causal_lower_right), which is the paged op's semantics.

Usage: python paged_sdpa.py --ours paged.json [--out DIR]
"""
import argparse
import json
import os

from flushed_timing import flushed_median_ms
import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

ap = argparse.ArgumentParser()
ap.add_argument("--ours", required=True)
ap.add_argument("--out", default=os.environ.get("OUT", "/tmp"))
args = ap.parse_args()
dev = torch.device("cuda")



rows = json.load(open(args.ours))
lines = ["| kind | B | D | page | bits | L | n | frugal paged ms | per-sequence ms | floor ms | x floor | SDPA fp16 ms | SDPA / paged | choice |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
for r in rows:
    B, Hq, Hkv, D, L, n = r["B"], r["Hq"], r["Hkv"], r["D"], r["L"], r["n"]
    q = torch.randn(B, Hq, n, D, device=dev, dtype=torch.float16)
    k = torch.randn(B, Hkv, L, D, device=dev, dtype=torch.float16)
    v = torch.randn(B, Hkv, L, D, device=dev, dtype=torch.float16)
    if r["kind"] == "prefill":  # compute-bound: K/V expanded to the query heads (CausalBias takes no enable_gqa)
        mask = causal_lower_right(n, L)
        k, v = k.repeat_interleave(Hq // Hkv, 1), v.repeat_interleave(Hq // Hkv, 1)
        fn = lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    else:
        fn = lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    try:
        sdpa = flushed_median_ms(fn, reps=20)
    except RuntimeError as e:  # out of memory or no backend for the shape
        print(f"SDPA failed on {r}: {e}")
        sdpa = float("nan")
    del q, k, v
    torch.cuda.empty_cache()
    xf = r["ms"] / r["floor_ms"] if r["floor_ms"] > 0 else float("nan")
    per_seq = f"{r['per_seq_ms']:.4f}" if r["per_seq_ms"] > 0 else "—"
    floor = f"{r['floor_ms']:.4f}" if r["floor_ms"] > 0 else "—"
    lines.append(f"| {r['kind']} | {B} | {D} | {r['page']} | K{r['kbits']}V{r['vbits']} | {L} | {n} | {r['ms']:.4f} | "
                 f"{per_seq} | {floor} | {xf:.3f} | {sdpa:.4f} | {sdpa / r['ms']:.2f} | {r['choice']} |")
    print(lines[-1], flush=True)
table = "\n".join(lines)
print(table)
with open(os.path.join(args.out, "paged_table.md"), "w") as f:
    f.write(table + "\n")
