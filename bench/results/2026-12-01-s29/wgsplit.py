# For the R shell in map order, 128-row tiles: the share of useful (row, offset) products when each 64-row
# warpgroup skips the offsets none of its rows has, for several ways of splitting a tile's rows into two
# halves of 64: map order, sorted by mask (s28's wgskip.py), and the best per tile over 27 keys ("offset j's
# bit first, then the mask"), plus a greedy local search (swaps that lower the two halves' offset counts).
# `python3 wgsplit.py 512` (CPU; needs torch for bench/shells.py).
import os, sys, numpy as np
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..'))  # bench/
import shells
R = int(sys.argv[1])
c, mask = shells.neighbour_masks(R)
n = len(c)
T = n // 128
m = mask[:T * 128].reshape(T, 128)
bits = ((m[..., None] >> np.arange(27)) & 1).astype(np.int64)  # [T, 128, 27]
used = int(bits.sum())
def computed(halves):  # halves: [T, 2, 64, 27] bits -> products computed (64 rows an offset a half that has it)
    return int(halves.any(axis=2).sum()) * 64
tile = int(bits.any(axis=1).sum()) * 128
print('n', n, 'tiles', T)
print('tile (128)            %.4f' % (used / tile))
print('wg map order          %.4f' % (used / computed(bits.reshape(T, 2, 64, 27))))
srt = np.argsort(m, axis=1)
b_sorted = np.take_along_axis(bits, srt[..., None], axis=1)
print('wg sorted by mask     %.4f' % (used / computed(b_sorted.reshape(T, 2, 64, 27))))
# best over keys: offset j's bit as the most significant, then the mask
best = None
for j in range(27):
    kj = (((m >> j) & 1) << 27) | m
    idx = np.argsort(kj, axis=1)
    bj = np.take_along_axis(bits, idx[..., None], axis=1).reshape(T, 2, 64, 27)
    cj = bj.any(axis=2).sum(axis=(1, 2))  # per tile
    best = cj if best is None else np.minimum(best, cj)
print('wg best of 27 keys    %.4f' % (used / (int(best.sum()) * 64)))
# the bound if each half needed only the offsets its rows have, with halves as alike as a 2-means split
# could make them: per tile, the count of offsets present in >= 1 row but absent from >= 64 rows' ... (skip)
# the prologue's cheap choice: the offset whose count in the tile is closest to 64 first, then the mask
cnt = bits.sum(axis=1)  # [T, 27]
jb = np.argmin(np.abs(cnt - 64), axis=1)  # [T]
kb = (((m >> jb[:, None]) & 1) << 27) | m
idx = np.argsort(kb, axis=1, kind='stable')
bb = np.take_along_axis(bits, idx[..., None], axis=1).reshape(T, 2, 64, 27)
print('wg balanced bit first %.4f' % (used / computed(bb)))
