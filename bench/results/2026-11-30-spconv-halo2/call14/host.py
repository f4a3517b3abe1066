"""Host time of one frugal conv call (no GPU wait), split: DLPack conversions, the low-level binding, the
torch op. Small TRELLIS-like shape (N ~ 1.7K, C = 1024) and the R = 512 shell at C = 64."""
import time, torch, cProfile, pstats, io
import frugal.torch as ft
from frugal import _frugal
from frugal.torch import _dl, _stream
from shells import sphere_shell
dev = torch.device("cuda"); dt = torch.float16
def per_call_us(f, n=200):
    f(); torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n): f()
    t1 = time.perf_counter(); torch.cuda.synchronize()
    return (t1 - t0) / n * 1e6
for R, C in ((20, 1024), (512, 64)):
    xyz = sphere_shell(R, dev); N = xyz.shape[0]
    coords = torch.cat([torch.zeros(N, 1, dtype=torch.int32, device=dev), xyz], 1).contiguous()
    feats = torch.randn(N, C, device=dev).to(dt); w = (torch.randn(27, C, C, device=dev) / (27 * C) ** 0.5).to(dt)
    nbr = ft.build_kernel_map(coords); out = torch.empty((N, C), dtype=dt, device=dev)
    low = lambda: _frugal.spconv.submanifold_conv(_dl(feats), _dl(nbr), _dl(w), None, out=_dl(out), checked=False, stream=_stream(feats))
    caps = (_dl(feats), _dl(nbr), _dl(w), _dl(out))
    n = 50 if R == 512 else 200
    print(f"R={R} C={C} N={N}")
    print(f"  _dl(tensor) x4 + _stream     {per_call_us(lambda: (_dl(feats), _dl(nbr), _dl(w), _dl(out), _stream(feats)), 1000):8.1f} us")
    print(f"  low-level call               {per_call_us(low, n):8.1f} us")
    print(f"  torch op (unchecked)         {per_call_us(lambda: ft.submanifold_conv(feats, nbr, w, None, False), n):8.1f} us")
    print(f"  torch op (checked)           {per_call_us(lambda: ft.submanifold_conv(feats, nbr, w), n):8.1f} us")
    pr = cProfile.Profile(); pr.enable()
    for _ in range(n): low()
    pr.disable(); torch.cuda.synchronize()
    s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(6); print(s.getvalue()[:1500])
x = torch.randn(1, 64, device=dev)
o = torch.empty_like(x)
print(f"hadamard low-level (reference)  {per_call_us(lambda: _frugal.hadamard_transform(_dl(x), _dl(o), stream=_stream(x)), 1000):8.1f} us")
