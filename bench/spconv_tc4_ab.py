"""Prints the 128- vs 256-row tile A/B of the wgmma kernel from spconv_torch.py's spconv.json
(results file bench/results/2026-11-29-spconv-tc4.md). Usage: python3 spconv_tc4_ab.py $OUT/spconv.json"""
import json, sys

rows = json.load(open(sys.argv[1]))["rows"]
keys = ["wgmma_r128", "wgmma_unsorted", "wgmma128", "wgmma64", "wgmma256", "wgmma_r256", "wgmma_r256p1",
        "wgmma_r256_sorted", "wgmma_r256_unsorted", "wgmma128_r256", "wgmma128_r256p1", "conv", "bf16_default"]
print("   R    C   Co        N | " + " ".join(f"{k.replace('wgmma', 'w'):>12}" for k in keys) + " | r256 vs def")
for r in rows:
    o = r.get("ours")
    if not o:
        print(r["R"], r["C"], r["Co"], "failed")
        continue
    cells = " ".join(f"{o.get(k + '_ms', float('nan')):12.3f}" for k in keys)
    print(f"{r['R']:4d} {r['C']:4d} {r['Co']:4d} {r['N']:8d} | {cells} | {o.get('wgmma_r256_vs_default_rel', o.get('wgmma_tile_rows_vs_default_rel', float('nan'))):.1e}")
