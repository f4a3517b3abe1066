# An emulation of exp-wgskip's weight ring, closer to the code than skipsim.py: mbarriers with phase counts
# and parity waits (try_wait.parity P passes when the barrier's current phase parity differs from P), fills
# whose bytes land after random delays, the consumer warpgroups' steps as written (bit scan, the gap path's
# release and in-order waits, the release of a step's stage after the next step's group), the epilogue's
# barrier across the two warpgroups, random scheduling. Counts deadlocks and steps that passed their full
# wait on another fill than their own (stale weights). `python3 skipemu.py [trials]`.
import random, sys
S = 4

class Bar:
    def __init__(self, count): self.count, self.pending, self.phase, self.tx = count, count, 0, 0
    def arrive(self, n=1):
        self.pending -= n
        if self.pending < 0: raise RuntimeError('more arrivals than the phase expects')
        self.settle()
    def settle(self):
        if self.pending == 0 and self.tx == 0: self.phase += 1; self.pending = self.count
    def passes(self, parity): return (self.phase & 1) != parity

def schedule(actors, full, inflight, rng):
    """Runs the actors (generators yielding the condition they wait for) in a random order, landing the
    in-flight fills' bytes (stages, oldest first) at random: 'ok', or 'deadlock' when none can move."""
    cond = {k: (lambda: True) for k in actors}
    while actors:
        if inflight and rng.random() < 0.3:
            st = inflight.pop(0); full[st].tx -= 1; full[st].settle()
        ready = [k for k in actors if cond[k]()]
        if not ready:
            if inflight: continue
            return 'deadlock'
        k = rng.choice(ready)
        try: cond[k] = next(actors[k])
        except StopIteration: del actors[k]
    return 'ok'

def weight(units, full, empty, inflight, proxies):
    """The weight warp: each step's fill in order, once the stage's last use is released; with proxies, an
    arrival of 4 on the stage's empty barrier for each warpgroup that skips the step."""
    g = 0
    for (n, u0, u1) in units:
        for s in range(n):
            st, ph = g % S, (g // S) & 1
            if g >= S: yield lambda st=st, ph=ph: empty[st].passes(ph ^ 1)
            full[st].tx += 1; full[st].arrive(1); inflight.append(st)
            for use in (u0, u1) if proxies else ():
                if not (use >> s) & 1: empty[st].arrive(4)
            g += 1

def emulate(units, rng, gap_rule=True, inorder=True):
    full = [Bar(1) for _ in range(S)]; empty = [Bar(8) for _ in range(S)]
    inflight, stale, epi = [], [], [0, 0]
    def consumer(w):
        g0, g_last, st_prev = 0, -1, None
        for ui, (n, u0, u1) in enumerate(units):
            use = (u0, u1)[w]; rest = use; steps = bin(use).count('1')
            for s in range(steps):
                q = (rest & -rest).bit_length() - 1; rest &= rest - 1
                gs = g0 + q; released = False
                if gap_rule and gs - g_last >= S:
                    if s > 0: empty[st_prev].arrive(4); released = True
                    if inorder:
                        for u in range(g_last + 1, gs):
                            yield lambda u=u: full[u % S].passes((u // S) & 1)
                st, ph = gs % S, (gs // S) & 1
                yield lambda st=st, ph=ph: full[st].passes(ph)
                if full[st].phase != gs // S + 1: stale.append((w, gs, full[st].phase))
                g_last = gs
                if s > 0 and not released: empty[st_prev].arrive(4)
                st_prev = st
            if steps > 0: empty[st_prev].arrive(4)
            g0 += n
            epi[w] = ui + 1
            yield lambda ui=ui: min(epi) >= ui + 1  # the epilogue's barrier across the warpgroups
    return schedule({'W': weight(units, full, empty, inflight, True), 'C0': consumer(0), 'C1': consumer(1)}, full, inflight, rng), stale

def units_for(rng):
    units = []
    for _ in range(6):
        n = rng.randint(1, 27); u0 = rng.getrandbits(n); u1 = rng.getrandbits(n)
        for i in range(n):
            if not ((u0 >> i) & 1 or (u1 >> i) & 1):
                if rng.random() < .5: u0 |= 1 << i
                else: u1 |= 1 << i
        units.append((n, u0, u1))
    return units

if __name__ == '__main__':
    T = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    for kw in (dict(gap_rule=False, inorder=False), dict(gap_rule=True, inorder=False), dict(gap_rule=True, inorder=True)):
        rng = random.Random(7); dead = stale = errs = 0
        for _ in range(T):
            try:
                r, st = emulate(units_for(rng), random.Random(rng.random()), **kw)
                dead += r == 'deadlock'; stale += bool(st)
            except RuntimeError: errs += 1
        print(kw, 'trials', T, 'deadlocks', dead, 'with stale waits', stale, 'over-arrivals', errs)

# The design that works (emulated): no proxy arrivals; a warpgroup waits for the fill of each step it
# skips, in order, and releases that stage at once; before such waits that reach STAGES past its last own
# step it releases that step's stage (its group done); at the unit's end it does the same for the unit's
# trailing skipped steps, so that nothing it skips waits for the epilogue's barrier.
def emulate2(units, rng):  # (no proxies)
    full = [Bar(1) for _ in range(S)]; empty = [Bar(8) for _ in range(S)]
    inflight, stale, epi = [], [], [0, 0]
    def consumer(w):
        g0, g_last, held = 0, -1, None  # held: the stage of the last own step, not yet released
        def skipped(upto, own):  # wait for and release the steps g_last + 1 … upto − 1 (then own step upto)
            nonlocal held
            if held is not None and upto - (0 if own else 1) >= g_last + S:
                empty[held].arrive(4); held = None
            for u in range(g_last + 1, upto):
                if held is not None and u >= g_last + S: empty[held].arrive(4); held = None
                yield lambda u=u: full[u % S].passes((u // S) & 1)
                if full[u % S].phase != u // S + 1: stale.append((w, u))
                empty[u % S].arrive(4)
        for ui, (n, u0, u1) in enumerate(units):
            use = (u0, u1)[w]; rest = use; steps = bin(use).count('1')
            for s in range(steps):
                q = (rest & -rest).bit_length() - 1; rest &= rest - 1
                gs = g0 + q
                yield from skipped(gs, True)
                st, ph = gs % S, (gs // S) & 1
                yield lambda st=st, ph=ph: full[st].passes(ph)
                if full[st].phase != gs // S + 1: stale.append((w, gs, full[st].phase))
                if held is not None: empty[held].arrive(4)  # after this step's group is issued
                held = st; g_last = gs
            if held is not None: empty[held].arrive(4); held = None
            yield from skipped(g0 + n, False)
            g_last = max(g_last, g0 + n - 1)
            g0 += n
            epi[w] = ui + 1
            yield lambda ui=ui: min(epi) >= ui + 1
    return schedule({'W': weight(units, full, empty, inflight, False), 'C0': consumer(0), 'C1': consumer(1)}, full, inflight, rng), stale

if __name__ == '__main__':
    rng = random.Random(7); dead = stale = errs = 0
    for _ in range(T):
        try:
            r, st = emulate2(units_for(rng), random.Random(rng.random()))
            dead += r == 'deadlock'; stale += bool(st)
        except RuntimeError: errs += 1
    print('waits for skipped fills, no proxies: trials', T, 'deadlocks', dead, 'with stale waits', stale, 'over-arrivals', errs)
