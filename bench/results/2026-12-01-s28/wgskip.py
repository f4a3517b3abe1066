# For the R shell in map order: per 128-row tile, the share of useful (row, offset) products when each
# 64-row warpgroup skips the offsets none of its rows has — rows in map order, or sorted by mask within
# the tile (a tile's rows permuted among its two halves). `python3 wgskip.py 512` (CPU, ~1 min; needs torch).
import os, sys, numpy as np
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..'))  # bench/
import shells
R = int(sys.argv[1])
c, mask = shells.neighbour_masks(R)
n = len(c)
pairs = sum(int(((mask >> j) & 1).sum()) for j in range(27))
T = n // 128
m = mask[:T * 128].reshape(T, 128)
def share(m2):  # m2: [T, groups, rows]
    comp = 0
    for j in range(27):
        present = ((m2 >> j) & 1).any(axis=2)
        comp += int(present.sum()) * m2.shape[2]
    used = sum(int(((m2 >> j) & 1).sum()) for j in range(27))
    return used / comp
print('n', n, 'pairs/row', pairs / n)
print('tile (128)', share(m.reshape(T, 1, 128)))
print('wg (64) map order', share(m.reshape(T, 2, 64)))
ms = np.sort(m, axis=1)  # sorted by mask value within the tile
print('wg (64) sorted by mask in tile', share(ms.reshape(T, 2, 64)))
# sorted by popcount then mask
pc = np.zeros_like(m)
for j in range(27): pc += (m >> j) & 1
idx = np.argsort(pc * (1 << 27) + m, axis=1)
mp = np.take_along_axis(m, idx, axis=1)
print('wg (64) sorted by popcount, mask', share(mp.reshape(T, 2, 64)))
print('16-row groups sorted by mask in tile', share(ms.reshape(T, 8, 16)))
