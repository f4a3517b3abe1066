import numpy as np, sys
def shell(R):
    r=0.45*R; g=np.arange(R,dtype=np.float32); out=[]
    for x0 in range(0,R,32):
        x=g[x0:x0+32].reshape(-1,1,1)
        d=np.sqrt((x-R/2)**2+(g.reshape(1,-1,1)-R/2)**2+(g.reshape(1,1,-1)-R/2)**2)
        c=np.argwhere(np.abs(d-r)<0.87); c[:,0]+=x0; out.append(c)
    return np.concatenate(out).astype(np.int64)
R=int(sys.argv[1]); c=shell(R); n=len(c)
key=lambda a:(a[:,0]*(R+2)+a[:,1])*(R+2)+a[:,2]
k0=key(c+1)  # already sorted (raster)
nbr=np.full((27,n),-1,dtype=np.int64); i=0
for dx in (-1,0,1):
  for dy in (-1,0,1):
    for dz in (-1,0,1):
      q=key(c+1+np.array([dx,dy,dz])); p=np.minimum(np.searchsorted(k0,q),n-1)
      nbr[i]=np.where(k0[p]==q,p,-1); i+=1
T=(n+127)//128
res={'cur':[], 'split2':[], 'distinct':[]}
for t in range(T):
    tot=0; tot2=0; dist=0
    for g in range(3):
        v=nbr[9*g:9*g+9, t*128:(t+1)*128].ravel(); v=np.unique(v[v>=0])
        if len(v)==0: continue
        tot+= (v[-1]-v[0]+8)//8*8
        dist+=len(v)
        if len(v)>1:
            gaps=np.diff(v); j=np.argmax(gaps)
            a=(v[j]-v[0]+8)//8*8 + (v[-1]-v[j+1]+8)//8*8
            tot2+=min(a,(v[-1]-v[0]+8)//8*8)
        else: tot2+=8
    res['cur'].append(tot); res['split2'].append(tot2); res['distinct'].append(dist)
for k,v in res.items():
    v=np.array(v)
    print(R,k,'mean %.0f'%v.mean(),'p90 %d'%np.percentile(v,90),'>632 %.3f'%(v>632).mean(),'>568 %.3f'%(v>568).mean())
