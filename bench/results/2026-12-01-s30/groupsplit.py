# s30: the per-warpgroup skip with rows moved only in groups of 8 (keeping each ldmatrix group's rows
# together): the best of 28 keys (group mask; offset j's bit, then the mask) per tile. `python3 groupsplit.py 512`.
import os, sys, numpy as np
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..'))  # bench/
import shells
R = int(sys.argv[1])
c, mask = shells.neighbour_masks(R)
T = len(c) // 128
m = mask[:T * 128].reshape(T, 128)
bits = ((m[..., None] >> np.arange(27)) & 1).astype(np.int64)
used = int(bits.sum())
print('tile', used / (int(bits.any(axis=1).sum()) * 128))
for G in (8, 16):
    ng = 128 // G
    gb = bits.reshape(T, ng, G, 27).any(axis=2)
    gm = (gb * (1 << np.arange(27))).sum(-1)
    best = None
    for kj in [gm] + [(((gm >> j) & 1) << 27) | gm for j in range(27)]:
        idx = np.argsort(kj, axis=1, kind='stable')
        s = np.take_along_axis(gb, idx[..., None], axis=1).reshape(T, 2, ng // 2, 27)
        cj = s.any(axis=2).sum(axis=(1, 2))
        best = cj if best is None else np.minimum(best, cj)
    print('groups of', G, 'best-of-keys share', used / (int(best.sum()) * 64))
