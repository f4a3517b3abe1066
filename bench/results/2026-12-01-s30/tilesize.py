# s30: the share of useful (row, offset) products against the tile's height (map order): a tile computes
# every offset any of its rows has. `python3 tilesize.py 1024`.
import os, sys, numpy as np
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..'))  # bench/
import shells
R = int(sys.argv[1])
c, mask = shells.neighbour_masks(R)
bits_all = ((mask[:, None] >> np.arange(27)) & 1).astype(bool)
for TR in (64, 128, 256):
    T = len(mask) // TR
    b = bits_all[:T * TR].reshape(T, TR, 27)
    print(TR, 'rows a tile: share %.4f' % (int(b.sum()) / (int(b.any(1).sum()) * TR)))
