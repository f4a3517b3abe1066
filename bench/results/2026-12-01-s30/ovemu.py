# An emulation of exp-ov's barrier protocol (the C = 64 copy-warp halo kernel with a unit's epilogue after
# the next unit's first HEAD groups): mbarriers with phase counts and parity waits, the prologue (tile states,
# ready / state-free), the copy warp (free -> halo, bytes landing late), the weight warp (empty -> full,
# bytes landing late; state-free after a tile), two consumer warpgroups as written in exp-ov (head issues,
# the previous unit's epilogue with its two barriers across the warpgroups, the head's retirement, steps,
# wgmma groups that complete after random delays), random scheduling; OVD (direct stores: no staging, no
# barriers, the buffer and state freed at the unit's end) too. Counts deadlocks and checks that
# every step's wait passed on its own fill. `python3 ovemu.py [trials]`.
import random, sys
S, STATES = 4, 3

class Bar:
    def __init__(self, count): self.count, self.pending, self.phase, self.tx = count, count, 0, 0
    def arrive(self, n=1):
        self.pending -= n
        assert self.pending >= 0, 'more arrivals than the phase expects'
        self.settle()
    def settle(self):
        if self.pending == 0 and self.tx == 0: self.phase += 1; self.pending = self.count
    def passes(self, parity): return (self.phase & 1) != parity

def run(units, head, rng, direct=False):
    T = len(units)
    ready = [Bar(1) for _ in range(STATES)]; sfree = [Bar(3) for _ in range(STATES)]
    halo = [Bar(1) for _ in range(2)]; free = [Bar(2) for _ in range(2)]
    full = [Bar(1) for _ in range(S)]; empty = [Bar(2) for _ in range(S)]
    act = {}  # state -> steps of its tile, or -1 (end)
    landing = []  # async byte arrivals: barriers with tx pending
    bad = []
    nb = {'gen': 0, 'count': 0}  # the consumers' named barrier
    def prologue():
        for j in range(T + 1):
            s, par = j % STATES, (j // STATES) & 1
            if j >= STATES: yield lambda s=s, par=par: sfree[s].passes(par ^ 1)
            act[s] = units[j] if j < T else -1
            ready[s].arrive()
    def copy():
        for u in range(T + 1):
            s, par = u % STATES, (u // STATES) & 1
            yield lambda s=s, par=par: ready[s].passes(par)
            if act[s] < 0: return
            b = u & 1
            if u >= 2: yield lambda b=b, q=((u >> 1) - 1) & 1: free[b].passes(q)
            halo[b].tx += 1; halo[b].arrive(); landing.append(halo[b])
    def weight():
        g = 0
        for u in range(T + 1):
            s, par = u % STATES, (u // STATES) & 1
            yield lambda s=s, par=par: ready[s].passes(par)
            if act[s] < 0: return
            for _ in range(act[s]):
                st, ph = g % S, (g // S) & 1
                if g >= S: yield lambda st=st, ph=ph: empty[st].passes(ph ^ 1)
                full[st].tx += 1; full[st].arrive(); landing.append(full[st])
                g += 1
            sfree[s].arrive()
    def consumer(w):
        g = 0  # steps issued (the ring's position)
        groups = []  # pending wgmma groups: completion flags
        def issue():
            nonlocal g
            st, ph = g % S, (g // S) & 1
            yield lambda st=st, ph=ph: full[st].passes(ph)
            if full[st].phase != g // S + 1: bad.append(('stale', w, g))
            groups.append([False]); pend.append(groups[-1]); g += 1
        def wait_le(n):
            yield lambda n=n: len([x for x in groups if not x[0]]) <= n
        def release(back):
            empty[(g - back) % S].arrive()
        prev = None
        for u in range(T + 1):
            s, par, b = u % STATES, (u // STATES) & 1, u & 1
            yield lambda s=s, par=par: ready[s].passes(par)
            steps = act[s]
            if steps < 0:
                if prev is not None: yield from epilogue(prev)
                return
            yield lambda b=b, q=(u >> 1) & 1: halo[b].passes(q)
            for i in range(min(head, steps)): yield from issue()
            if prev is not None: yield from epilogue(prev)
            if steps >= head:
                for j in range(head - 1):
                    yield from wait_le(head - 1 - j); release(head - j)
            elif steps > 1:
                yield from wait_le(0)
                for j in range(steps, 1, -1): release(j)
            for k in range(head, steps):
                yield from issue(); yield from wait_le(1); release(2)
            yield from wait_le(0)
            if steps > 0: release(1)
            if direct: free[b].arrive(); sfree[s].arrive()  # OVD: nothing staged, freed at once
            prev = (b, s)
    def epilogue(prev):
        b, s = prev
        if direct: return  # OVD: stores from registers only
        yield from barrier_of()
        yield from barrier_of()
        free[b].arrive(); sfree[s].arrive()
    def barrier_of():
        gen = nb['gen']; nb['count'] += 1
        if nb['count'] == 2: nb['count'] = 0; nb['gen'] += 1
        yield lambda gen=gen: nb['gen'] > gen
    pend = []
    actors = {'P': prologue(), 'C': copy(), 'W': weight(), 'C0': consumer(0), 'C1': consumer(1)}
    cond = {k: (lambda: True) for k in actors}
    while actors:
        r = rng.random()
        if landing and r < 0.25:
            x = landing.pop(rng.randrange(len(landing))) if rng.random() < 0.3 else landing.pop(0)
            x.tx -= 1; x.settle(); continue
        if pend and r < 0.5:
            x = pend.pop(0); x[0] = True; continue  # groups complete in issue order
        ok = [k for k in actors if cond[k]()]
        if not ok:
            if landing or pend:
                if landing: x = landing.pop(0); x.tx -= 1; x.settle()
                else: x = pend.pop(0); x[0] = True
                continue
            return 'deadlock', bad
        k = rng.choice(ok)
        try: cond[k] = next(actors[k])
        except StopIteration: del actors[k]
    return 'ok', bad

if __name__ == '__main__':
    trials = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    for direct in (False, True):
        for head in (1, 2, 3):
            rng = random.Random(head)
            dead = stale = 0
            for _ in range(trials):
                units = [rng.choice([0, 1, 2, 3, 4, 5, rng.randint(6, 27), rng.randint(20, 27)]) for _ in range(rng.randint(1, 9))]
                res, bad = run(units, head, rng, direct)
                dead += res == 'deadlock'; stale += bool(bad)
            print(f'{"OVD" if direct else "OV"} HEAD={head}: {trials} trials, {dead} deadlocks, {stale} with a step that passed on another fill')
