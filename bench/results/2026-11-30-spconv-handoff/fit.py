import numpy as np, sys
def shell(res):
    r = 0.45 * res
    g = np.arange(res, dtype=np.float32)
    out = []
    for x0 in range(0, res, 64):
        x = g[x0:x0+64].reshape(-1,1,1)
        d = np.sqrt((x - res/2)**2 + (g.reshape(1,-1,1) - res/2)**2 + (g.reshape(1,1,-1) - res/2)**2)
        c = np.argwhere(np.abs(d - r) < 0.87)
        c[:,0] += x0
        out.append(c)
    return np.concatenate(out).astype(np.int64)
CAP = 648
for R in map(int, sys.argv[1:]):
    c = shell(R); n = len(c)
    key = (c[:,0]*4096 + c[:,1])*4096 + c[:,2]
    assert np.all(np.diff(key) > 0)
    nbr = np.full((27, n), -1, np.int64)
    k = 0
    for dx in (-1,0,1):
        for dy in (-1,0,1):
            for dz in (-1,0,1):
                q = ((c[:,0]+dx)*4096 + (c[:,1]+dy))*4096 + (c[:,2]+dz)
                i = np.searchsorted(key, q); i = np.minimum(i, n-1)
                nbr[k] = np.where(key[i] == q, i, -1); k += 1
    tiles = (n + 127)//128
    fits = 0; acts = []
    for t in range(tiles):
        s = nbr[:, t*128:(t+1)*128]
        tot = 0
        for q in range(3):
            v = s[9*q:9*q+9]; v = v[v >= 0]
            if v.size: tot += (v.max() - v.min() + 8)//8*8
        fits += tot <= CAP
    print(R, n, tiles, "fit", fits, "handed off", tiles - fits, "%.1f%%" % (100*(tiles-fits)/tiles), "per SM", round((tiles-fits)/132, 2))
