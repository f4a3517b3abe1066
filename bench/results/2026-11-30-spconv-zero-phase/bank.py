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
CAP, ZERO = 648, 8
R = int(sys.argv[1])
c = shell(R); n = len(c)
key = (c[:,0]*4096 + c[:,1])*4096 + c[:,2]
nbr = np.full((27, n), -1, np.int64)
k = 0
for dx in (-1,0,1):
    for dy in (-1,0,1):
        for dz in (-1,0,1):
            q = ((c[:,0]+dx)*4096 + (c[:,1]+dy))*4096 + (c[:,2]+dz)
            i = np.searchsorted(key, q); i = np.minimum(i, n-1)
            nbr[k] = np.where(key[i] == q, i, -1); k += 1
tiles = n // 128
nb = nbr[:, :tiles*128].reshape(27, tiles, 128).transpose(1, 0, 2)  # [t, k, r]
# ranges per third
slot = np.zeros_like(nb)
fit = np.ones(tiles, bool)
end = np.full(tiles, ZERO)
for q in range(3):
    v = nb[:, 9*q:9*q+9]
    ok = v >= 0
    lo = np.where(ok, v, 1<<60).min(axis=(1,2)); hi = np.where(ok, v, -1).max(axis=(1,2))
    sz = np.where(hi >= lo, (hi - lo + 8)//8*8, 0)
    base = end.copy(); end = end + sz
    slot[:, 9*q:9*q+9] = np.where(ok, v - lo[:,None,None] + base[:,None,None], -1)
fit = end <= ZERO + CAP
act = (nb >= 0).any(axis=2)  # [t,k]
print("R", R, "n", n, "tiles", tiles, "fit %.3f" % fit.mean())
def cost(sl, name):
    # sl: [t,k,r] slot (absent already mapped); groups of 8 rows
    g = sl.reshape(tiles, 27, 16, 8)
    ph = g & 7
    # distinct slots per phase: sort slots within group, unique-count per phase
    s = np.sort(g, axis=3)
    uniq = np.concatenate([np.ones(s.shape[:3]+(1,), bool), s[...,1:] != s[...,:-1]], axis=3)
    phs = s & 7
    cnt = np.zeros(s.shape[:3]+(8,), np.int16)
    for p in range(8):
        cnt[..., p] = ((phs == p) & uniq).sum(axis=3)
    w = cnt.max(axis=3)  # wavefronts per matrix
    m = np.broadcast_to(fit[:,None,None] & act[:,:,None], w.shape)
    tot = (w * m).sum(); ideal = m.sum()
    print("%-28s wavefront ratio %.3f" % (name, tot/ideal), " groups with conflict %.3f" % (((w>1)&m).sum()/ideal))
    return w
absent = slot < 0
cost(np.where(absent, 0, slot), "absent -> slot 0")
r = np.arange(128)
cost(np.where(absent, (r % 8)[None,None,:], slot), "absent -> slot r%8")
# smart: absent rows pick phases not used by real rows in group
g = np.where(absent, -1, slot).reshape(tiles, 27, 16, 8)
used = np.zeros(g.shape[:3], np.int64)
for i in range(8):
    used |= np.where(g[...,i] >= 0, 1 << (g[...,i] & 7), 0)
free = np.zeros(g.shape[:3]+(8,), bool)
sm = g.copy()
# assign absent ones: all to the first free phase (same zero slot -> broadcast)
firstfree = np.zeros(g.shape[:3], np.int64) - 1
for p in range(7, -1, -1):
    firstfree = np.where((used >> p) & 1 == 0, p, firstfree)
sm = np.where(sm < 0, np.where(firstfree[...,None] >= 0, firstfree[...,None], 0), sm)
cost(sm.reshape(tiles,27,128), "absent -> a free phase")
cost(np.where(absent, 0, r[None,None,:] + 8), "synthetic consecutive")
