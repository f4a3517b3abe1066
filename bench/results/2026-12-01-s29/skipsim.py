import random
S=4
def run(units, fix=True):
    # units: list of (steps, use0, use1) per unit; union steps numbered globally
    seq=[]; g=0
    wg_steps=[[],[]]   # per WG: list of (global step, unit_end_flag)
    for (n,u0,u1) in units:
        for w,u in enumerate((u0,u1)):
            own=[g+i for i in range(n) if u>>i&1]
            for j,k in enumerate(own): wg_steps[w].append((k, j==len(own)-1))
        seq += list(range(g,g+n)); g+=n
    G=g
    uses={k:(bool(0),) for k in range(G)}
    own_set=[set(k for k,_ in wg_steps[w]) for w in (0,1)]
    released=[set(),set()]   # per WG: global steps whose stage it released (or proxied)
    filled=set(); wfill=0
    pos=[0,0]; held=[None,None]
    progress=True
    while progress:
        progress=False
        # weight warp
        if wfill<G:
            k=wfill
            if k<S or all((k-S) in released[w] for w in (0,1)):
                filled.add(k)
                for w in (0,1):
                    if k not in own_set[w]: released[w].add(k)
                wfill+=1; progress=True
        for w in (0,1):
            if pos[w]<len(wg_steps[w]):
                k,last=wg_steps[w][pos[w]]
                if fix and held[w] is not None and k-held[w]>=S:
                    released[w].add(held[w]); held[w]=None
                if k in filled:
                    if held[w] is not None: released[w].add(held[w])
                    held[w]=k
                    if last: released[w].add(k); held[w]=None
                    pos[w]+=1; progress=True
    return all(pos[w]==len(wg_steps[w]) for w in (0,1)) and wfill==G
random.seed(1)
for fix in (False,True):
    bad=0
    for t in range(3000):
        units=[]
        for u in range(5):
            n=random.randint(1,27)
            u0=random.getrandbits(n); u1=random.getrandbits(n)
            # every union step used by at least one WG
            for i in range(n):
                if not (u0>>i&1 or u1>>i&1):
                    if random.random()<.5: u0|=1<<i
                    else: u1|=1<<i
            units.append((n,u0,u1))
        if not run(units,fix): bad+=1
    print('fix',fix,'deadlocks',bad,'of 3000')
