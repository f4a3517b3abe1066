import numpy as np, sys
exec(open('fit2.py').read().split("T=(n+127)//128")[0])
T=(n+127)//128
tot=[];span=[];runs=[]
for t in range(T):
    s=0; sp=0; rn=0
    for g in range(3):
        v=nbr[9*g:9*g+9, t*128:(t+1)*128].ravel(); v=v[v>=0]
        if len(v)==0: continue
        lo=v.min(); b=np.unique((v-lo)>>3)
        s+=8*len(b); sp=max(sp,b[-1]+1); rn+=1+np.count_nonzero(np.diff(b)>1)
    tot.append(s); span.append(sp); runs.append(rn)
tot=np.array(tot); span=np.array(span); runs=np.array(runs)
print(R,'boxes: mean %.0f p90 %d >632 %.4f >568 %.4f'%(tot.mean(),np.percentile(tot,90),(tot>632).mean(),(tot>568).mean()),
      'span>1024 boxes %.4f max %d'%((span>1024).mean(),span.max()), 'runs mean %.1f p99 %d max %d'%(runs.mean(),np.percentile(runs,99),runs.max()))
