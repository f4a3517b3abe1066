# s30: why the per-warpgroup skip's row orders cost more than they save. For the R shell in map order,
# 128-row tiles, and an order of each tile's rows (map: none; sort: by neighbour mask, as exp-wgskip's WS;
# bal: stable partition by the offset whose count is nearest 64; best: the best such partition over the
# 27 offsets), prints the share of useful products when each 64-row warpgroup runs only its own offsets,
# and the ldmatrix conflict degree: for each 8-row group of a warpgroup and each of its offsets, the largest
# number of present neighbour rows sharing a swizzle phase (row index % 8, a model of the halo's slot
# phases by ranges; absent neighbours read a zero slot of a free phase), averaged (1 = conflict-free).
# `python3 phases.py 512 sort` (CPU; torch for bench/shells.py). Tiles sampled every T/3000 for the phases.
import os, sys, numpy as np
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..'))  # bench/
import shells
R = int(sys.argv[1]); mode = sys.argv[2]
c, mask = shells.neighbour_masks(R)
n = len(c); T = n // 128
key = (c[:, 0] * R + c[:, 1]) * R + c[:, 2]
nb = np.full((n, 27), -1, np.int64)  # neighbour row index per offset, -1 where absent
k = 0
for dx in (-1, 0, 1):
    for dy in (-1, 0, 1):
        for dz in (-1, 0, 1):
            q = ((c[:, 0] + dx) * R + (c[:, 1] + dy)) * R + (c[:, 2] + dz)
            i = np.minimum(np.searchsorted(key, q), n - 1)
            nb[:, k] = np.where(key[i] == q, i, -1)
            k += 1
m = mask[:T * 128].reshape(T, 128)
bits = ((m[..., None] >> np.arange(27)) & 1).astype(bool)
used = int(bits.sum())
computed = 0; wf = 0; groups = 0
for t in range(T):
    b = bits[t]
    if mode == 'map':
        order = np.arange(128)
    elif mode == 'sort':
        order = np.argsort(m[t], kind='stable')
    else:
        cnt = b.sum(0)
        cands = [int(np.argmin(np.abs(cnt - 64)))] if mode == 'bal' else range(27)
        best = None
        for j in cands:
            o = np.concatenate([np.where(~b[:, j])[0], np.where(b[:, j])[0]])
            cost = b[o[:64]].any(0).sum() + b[o[64:]].any(0).sum()
            if best is None or cost < best[0]:
                best = (cost, o)
        order = best[1]
    h = b[order]
    computed += (h[:64].any(0).sum() + h[64:].any(0).sum()) * 64
    if t % (T // 3000 + 1) == 0:
        rows = t * 128 + order
        for w in range(2):
            for kk in np.where(h[64 * w:64 * w + 64].any(0))[0]:
                for gi in range(8):
                    v = nb[rows[64 * w + 8 * gi:64 * w + 8 * gi + 8], kk]
                    v = v[v >= 0] % 8
                    wf += np.bincount(v, minlength=8).max() if len(v) else 1
                    groups += 1
print(mode, 'share %.4f' % (used / computed), 'ldmatrix wavefronts per 8-row group %.3f' % (wf / groups))
