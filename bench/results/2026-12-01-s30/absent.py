# s30: of the (row group, offset) pairs a 128-row tile computes (offsets of the tile's union, map order),
# the share whose rows all lack that neighbour, for groups of 8 / 16 / 64 rows: an ldmatrix (8 rows), a
# warp's block (16 rows, its four ldmatrix.x4 a step) or a warpgroup's (64) could skip its shared-memory
# reads there and use zero fragments. `python3 absent.py 1024`.
import os, sys, numpy as np
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..'))  # bench/
import shells
R = int(sys.argv[1])
c, mask = shells.neighbour_masks(R)
T = len(c) // 128
b = ((mask[:T * 128, None] >> np.arange(27)) & 1).astype(bool).reshape(T, 128, 27)
union = b.any(1)  # [T, 27] offsets the tile computes
for G in (8, 16, 32, 64):
    g = b.reshape(T, 128 // G, G, 27).any(2)  # group has the offset
    pairs = union[:, None, :].repeat(128 // G, 1)
    print(f'groups of {G:2d}: all-absent share of computed pairs {(~g & pairs).sum() / pairs.sum():.4f}')
