"""CUDA-event timing the torch peer scripts share: a 512 MB read before every call evicts L2 (and
hides the launch), events around the call, the median of `reps` after `warm` untimed calls."""
import torch

_flush = None


def flushed_median_ms(fn, warm=3, reps=40):
    global _flush
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
    ts = sorted(s.elapsed_time(e) for s, e in ev)
    return ts[len(ts) // 2]
