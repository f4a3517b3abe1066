"""Why frugal's conv is slower back to back than in single calls (R = 1024 shell, C = 64): torch op vs
the low-level binding into a preallocated output, single vs back-to-back, clocks sampled meanwhile."""
import subprocess, time, torch, sys
import spconv.pytorch as spc
import frugal.torch as ft
from frugal import _frugal
from frugal.torch import _dl, _stream
from shells import sphere_shell
dev = torch.device("cuda"); dt = torch.float16
R, C = int(sys.argv[1]), int(sys.argv[2])
torch.manual_seed(0)
xyz = sphere_shell(R, dev); N = xyz.shape[0]
coords = torch.cat([torch.zeros(N, 1, dtype=torch.int32, device=dev), xyz], 1).contiguous()
feats = (torch.randn(N, C, device=dev) * 0.5).to(dt)
conv = spc.SubMConv3d(C, C, 3, bias=False, indice_key="subm").to(dev).to(dt).eval()
w = ft.weight_from_spconv(conv.weight.detach()).contiguous()
nbr = ft.build_kernel_map(coords)
out = torch.empty((N, C), dtype=dt, device=dev)
with torch.no_grad():
    y = conv(spc.SparseConvTensor(feats, coords, [R, R, R], 1)); xr = y.replace_feature(feats)
op = lambda: ft.submanifold_conv(feats, nbr, w, None, False)
low = lambda: _frugal.spconv.submanifold_conv(_dl(feats), _dl(nbr), _dl(w), None, out=_dl(out), checked=False, stream=_stream(feats))
sp = lambda: conv(xr)
def t(f, calls, rep=7, gap_ms=0):
    f(); torch.cuda.synchronize(); ts = []
    for _ in range(rep):
        if gap_ms: time.sleep(gap_ms / 1e3)
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(calls): f()
        e.record(); torch.cuda.synchronize(); ts.append(s.elapsed_time(e) / calls)
    return sorted(ts)[len(ts) // 2]
smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu", "--format=csv,noheader", "-lms", "50"], stdout=open("/tmp/smi.csv", "w"))
time.sleep(0.5)
rows = []
with torch.no_grad():
    for name, f in (("frugal op", op), ("frugal low-level", low), ("spconv", sp)):
        for calls in (1, 10, 50):
            t0 = time.time(); ms = t(f, calls); rows.append((name, calls, ms, t0, time.time()))
    for name, f in (("frugal low-level, 20 ms idle before each sample", low), ("spconv, 20 ms idle before each sample", sp)):
        t0 = time.time(); ms = t(f, 1, gap_ms=20); rows.append((name, 1, ms, t0, time.time()))
    # host time of one call (no GPU wait)
    torch.cuda.synchronize(); h0 = time.perf_counter(); low(); h1 = time.perf_counter(); torch.cuda.synchronize()
    torch.cuda.synchronize(); g0 = time.perf_counter(); op(); g1 = time.perf_counter(); torch.cuda.synchronize()
smi.terminate(); time.sleep(0.2)
import csv, datetime
samples = []
for l in open("/tmp/smi.csv"):
    p = [x.strip() for x in l.split(",")]
    try:
        ts = datetime.datetime.strptime(p[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
        samples.append((ts, float(p[1].split()[0]), float(p[2].split()[0]), p[3]))
    except Exception:
        pass
print(f"R={R} C={C} N={N}; host time of one call: low-level {1e3*(h1-h0):.3f} ms, torch op {1e3*(g1-g0):.3f} ms")
print(f"{'what':<50} {'calls':>5} {'ms/call':>8} | SM MHz (min/median)  W (median)")
for name, calls, ms, a, b in rows:
    s = [x for x in samples if a - 0.05 <= x[0] <= b + 0.05]
    clk = sorted(x[1] for x in s); pw = sorted(x[2] for x in s)
    extra = f"{clk[0]:.0f}/{clk[len(clk)//2]:.0f}  {pw[len(pw)//2]:.0f}" if s else "-"
    print(f"{name:<50} {calls:>5} {ms:>8.3f} | {extra}")
