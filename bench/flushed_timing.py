"""CUDA-event timing the torch peer scripts share: a 512 MB read before every call evicts L2 (and
hides the launch), events around the call, the median of `reps` after `warm` untimed calls.
Without a GPU (smoke tests of the scripts on a CPU) the calls are timed by the host's clock."""
import time

import torch

_flush = None


def flushed_times_ms(fn, warm=3, reps=40):
    """The sorted per-call times (ms) of `reps` calls of fn, each after the L2 flush."""
    global _flush
    if not torch.cuda.is_available():
        for _ in range(warm):
            fn()
        ts = []
        for _ in range(reps):
            t = time.perf_counter()
            fn()
            ts.append((time.perf_counter() - t) * 1e3)
        return sorted(ts)
    if _flush is None:
        _flush = torch.ones(512 * 1024 * 1024 // 4, dtype=torch.int32, device="cuda")
    for _ in range(warm):
        _flush.sum()
        fn()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for s, e in ev:
        _flush.sum()
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return sorted(s.elapsed_time(e) for s, e in ev)


def flushed_median_ms(fn, warm=3, reps=40):
    ts = flushed_times_ms(fn, warm, reps)
    return ts[len(ts) // 2]


def alternating_medians_ms(fns, rounds=3, reps=5, warm=1):
    """{name: median ms} of the callables in fns (name -> fn), timed in `rounds` rounds of `reps` calls
    of each in turn, so that drift of the GPU's clock between libraries meets all of them alike."""
    times = {name: [] for name in fns}
    for r in range(rounds):
        for name, fn in fns.items():
            times[name] += flushed_times_ms(fn, warm if r == 0 else 0, reps)
    return {name: sorted(ts)[len(ts) // 2] for name, ts in times.items()}
