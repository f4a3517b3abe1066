# Run from its folder: python3 fit_thirds.py R (the tiles of the R shell that do not fit one halo buffer, and how many fit as two units)
import numpy as np, sys
exec(open('../../2026-12-01-spconv-bounds/fit2.py').read().split("T=(n+127)//128")[0])
T=(n+127)//128
CAP=632
r3=np.zeros((T,3),dtype=np.int64)
for t in range(T):
    for g in range(3):
        v=nbr[9*g:9*g+9, t*128:(t+1)*128].ravel(); v=v[v>=0]
        if len(v): r3[t,g]=(v.max()-v.min()+8)//8*8
tot=r3.sum(1); bad=tot>CAP
print(R,'tiles',T,'not fitting %.4f'%bad.mean())
one=(r3<=CAP).all(1)
print(' of those, every third alone fits: %.4f'%(one[bad].mean()))
# two units: best split of the 3 thirds into {a,b},{c} contiguous in offset order: {0,1}{2} or {0}{1,2}
two=((r3[:,0]+r3[:,1]<=CAP)&(r3[:,2]<=CAP))|((r3[:,0]<=CAP)&(r3[:,1]+r3[:,2]<=CAP))
print(' of those, two units fit: %.4f; three needed: %.4f; none: %.4f'%(two[bad].mean(), (one&~two)[bad].mean(), (~one)[bad].mean()))
print(' max third', r3.max(), 'p99 third', np.percentile(r3,99))
