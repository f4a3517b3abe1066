"""frugal's submanifold conv side by side with spconv 2.3 on the same inputs (issue 5's peer).

For each row (R, Ci[, Co]): the sphere shell of an R^3 grid (the anchors' construction, as in
spconv_torch.py), random fp16/bf16 features, a 3x3x3 SubMConv3d without bias. spconv's weight
[Co, 3, 3, 3, Ci] is given to frugal through frugal.torch.weight_from_spconv, so both compute the
same function; the script reports
  * time (CUDA events, median of `--rep` after warm-up): spconv conv with its pairs cached
    (indice_key reuse), spconv map + conv, frugal conv unchecked (spconv checks nothing either; the
    checked default beside it), frugal map + conv;
  * useful TFLOP/s (2 * pairs * Ci * Co over the conv time, pairs = the map's non-sentinel entries);
  * peak memory above the inputs: torch's max_memory_allocated for spconv; for frugal the map and
    output (torch allocations) plus what frugal's own pool holds after the call (device free memory
    before and after; frugal keeps its workspace in that pool);
  * max |frugal - spconv| over all outputs, and each one's max error against an fp64 reference on
    `--samples` sampled rows.
Usage: python3 spconv_peer.py [--rows 256:64,1024:256,20:1024:4096] [--dtype f16|bf16] [--back-to-back N] [--paired SECONDS] [--gap]
Needs spconv (cu126 wheels) and frugal's Python module on PYTHONPATH. Writes spconv_peer.json to $OUT.
"""
import argparse, json, os, sys
import torch

from conv_peers import load_spconv, reference_conv as reference, shell_coords

p = argparse.ArgumentParser()
p.add_argument("--rows", default="256:64,512:64,512:128,1024:64,1024:128,1024:256,"
               "20:1024,43:512,92:256,196:128,426:64,20:1024:4096,43:512:2048,92:256:1024,196:128:512")
p.add_argument("--dtype", default="f16", choices=["f16", "bf16"])
p.add_argument("--rep", type=int, default=10)
p.add_argument("--samples", type=int, default=2048)
p.add_argument("--gap", action="store_true",
               help="also time frugal unchecked, through the low-level binding (no torch.library dispatch), and "
                    "both libraries on the C++ bench's data (uniform 10-bit values): where the torch op's time "
                    "differs from bench/spconv's")
p.add_argument("--paired", type=float, default=0, metavar="SECONDS",
               help="also alternate bursts of --back-to-back calls (10 if unset) of each library for SECONDS a row "
                    "and report the median and quartiles of the per-pair ratio spconv / frugal: adjacent bursts "
                    "share the GPU's clock and power state, so the ratio holds under drift")
p.add_argument("--back-to-back", type=int, default=0, metavar="N",
               help="also time N calls back to back between one pair of events (per call, median), the libraries "
                    "alternating: the GPU's time without the host's gap before each single timed call")
args = p.parse_args()

spc, why = load_spconv()
if spc is None:
    sys.exit(f"spconv_peer.py needs spconv: {why}")
import frugal.torch as ft

dev = torch.device("cuda")
dt = torch.float16 if args.dtype == "f16" else torch.bfloat16
OUT = os.environ.get("OUT", "/tmp")


def burst_ms(f, calls=1):
    """Per-call ms of `calls` calls issued back to back between two events (then a wait for the GPU)."""
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(calls):
        f()
    e.record(); torch.cuda.synchronize()
    return s.elapsed_time(e) / calls


def median(xs):
    return sorted(xs)[len(xs) // 2]


def timed(fn, rep, warm=2):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    return median([burst_ms(fn) for _ in range(rep)])


def timed_pair(fa, fb, rep, warm=2, calls=1):
    """Medians of fa and fb timed alternately (a, b, a, b, ...): drift of the GPU's clock between the two
    libraries' runs hits both alike (unlocked clocks moved spconv's own times by up to 23% between calls).
    calls > 1: each sample is that many calls issued back to back between the two events, per call."""
    for _ in range(warm):
        fa(), fb()
    torch.cuda.synchronize()
    ta, tb = [], []
    for _ in range(rep):
        ta.append(burst_ms(fa, calls))
        tb.append(burst_ms(fb, calls))
    return median(ta), median(tb)


def paired_ratios(fa, fb, seconds, calls):
    """Per-call times of alternating bursts (a, b, a, b, ...) for `seconds`; the ratios a_i / b_i of each pair."""
    import time
    fa(), fb()
    torch.cuda.synchronize()
    ratios, end = [], time.time() + seconds
    while time.time() < end:
        ratios.append(burst_ms(fa, calls) / burst_ms(fb, calls))
    ratios.sort()
    q = lambda x: ratios[min(len(ratios) - 1, int(x * len(ratios)))]
    return dict(pairs=len(ratios), median=q(0.5), q1=q(0.25), q3=q(0.75))


results = []
for spec in args.rows.split(","):
    parts = [int(v) for v in spec.split(":")]
    R, ci = parts[0], parts[1]
    co = parts[2] if len(parts) > 2 else ci
    torch.manual_seed(R * 7919 + ci)
    coords = shell_coords(R, dev)
    N = coords.shape[0]
    feats = (torch.randn(N, ci, device=dev) * 0.5).to(dt)

    conv = spc.SubMConv3d(ci, co, 3, bias=False, indice_key="subm").to(dev).to(dt).eval()
    with torch.no_grad():
        conv.weight.copy_((torch.randn(conv.weight.shape, device=dev) / (27 * ci) ** 0.5).to(dt))
    w = ft.weight_from_spconv(conv.weight.detach())  # [27, Ci, Co]

    row = dict(R=R, ci=ci, co=co, N=N, dtype=args.dtype)
    with torch.no_grad():
        # spconv: the first call builds and caches the pairs under indice_key; reuse them for the conv time.
        x = spc.SparseConvTensor(feats, coords, [R, R, R], 1)
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        try:
            y = conv(x)
            torch.cuda.synchronize()
        except RuntimeError as e:  # spconv 2.3 refuses N * C * sizeof(dtype) >= 2^31 bytes
            row["spconv_error"] = str(e).strip().splitlines()[-1][-200:]
            print(json.dumps(row), flush=True)
            results.append(row)
            continue
        row["spconv_peak_mb"] = (torch.cuda.max_memory_allocated() - base) / 1e6
        xr = y.replace_feature(feats)  # carries the cached pairs
        row["spconv_map_conv_ms"] = timed(lambda: conv(spc.SparseConvTensor(feats, coords, [R, R, R], 1)),
                                          max(3, args.rep // 2))
        ys = conv(xr).features

        free0, res0 = torch.cuda.mem_get_info()[0], torch.cuda.memory_reserved()
        base = torch.cuda.memory_allocated()
        km = ft.build_kernel_map(coords)  # the KernelMap: the map and its statistics (the kernel choice reads them)
        nbr = km.nbr
        out = ft.submanifold_conv(feats, km, w)
        torch.cuda.synchronize()
        # device memory taken outside torch's allocator = frugal's pool (its workspace) + its module
        pool = max(0, (free0 - torch.cuda.mem_get_info()[0]) - (torch.cuda.memory_reserved() - res0))
        row["frugal_torch_alloc_mb"] = (torch.cuda.memory_allocated() - base) / 1e6  # map + output
        row["frugal_pool_mb"] = pool / 1e6
        # The comparison times frugal unchecked: spconv's conv does no check of its pairs either. The
        # checked call (the default) adds a readback and a wait for the stream (0.09-0.31 ms in session
        # 4's call 1, cause not isolated): reported beside it.
        row["spconv_ms"], row["frugal_ms"] = timed_pair(lambda: conv(xr), lambda: ft.submanifold_conv(feats, km, w, None, False),
                                                        args.rep)
        row["frugal_checked_ms"] = timed(lambda: ft.submanifold_conv(feats, km, w), args.rep)
        if args.paired > 0:
            row["paired_spconv_over_frugal"] = paired_ratios(lambda: conv(xr), lambda: ft.submanifold_conv(feats, km, w, None, False),
                                                             args.paired, max(1, args.back_to_back or 10))
        if args.back_to_back > 1:
            row["spconv_b2b_ms"], row["frugal_b2b_ms"] = timed_pair(
                lambda: conv(xr), lambda: ft.submanifold_conv(feats, km, w, None, False), args.rep, calls=args.back_to_back)
        row["frugal_map_conv_ms"] = timed(lambda: ft.submanifold_conv(feats, ft.build_kernel_map(coords), w),
                                          max(3, args.rep // 2))
        pairs = int((nbr != N).sum())
        row["pairs"] = pairs
        flop = 2.0 * pairs * ci * co
        row["useful_gflop"] = flop / 1e9
        row["frugal_tflops"] = flop / row["frugal_ms"] / 1e9
        row["spconv_tflops"] = flop / row["spconv_ms"] / 1e9
        row["speedup"] = row["spconv_ms"] / row["frugal_ms"]
        if args.gap:
            from frugal import _frugal
            from frugal.torch import _dl, _stream
            stats = km.stats.tolist()
            low = lambda f, wt, o: _frugal.spconv.submanifold_conv(_dl(f), _dl(nbr), _dl(wt), None, out=_dl(o), checked=False,
                                                                   stream=_stream(f), stats=stats)
            o = torch.empty((N, co), dtype=dt, device=dev)
            row["frugal_lowlevel_ms"] = timed(lambda: low(feats, w, o), args.rep)
            # the C++ bench's values: v / 2^11 (features) and v / 2^16 (weights), v uniform in [-512, 511]
            f10 = (torch.randint(-512, 512, feats.shape, device=dev).float() / 2048).to(dt)
            w10 = (torch.randint(-512, 512, w.shape, device=dev).float() / 65536).to(dt)
            row["frugal_lowent_ms"] = timed(lambda: low(f10, w10, o), args.rep)
            with torch.no_grad():
                conv.weight.copy_(w10.reshape(3, 3, 3, ci, co).permute(4, 0, 1, 2, 3))
                xr10 = y.replace_feature(f10)
                row["spconv_lowent_ms"] = timed(lambda: conv(xr10), args.rep)
                conv.weight.copy_(w.reshape(3, 3, 3, ci, co).permute(4, 0, 1, 2, 3))
            del f10, w10, o
        out2 = ft.submanifold_conv(feats, km, w)
        row["frugal_bitwise_repeat"] = bool(torch.equal(out, out2))
        row["max_abs_frugal_vs_spconv"] = float((out.float() - ys.float()).abs().max())
        row["max_abs_spconv"] = float(ys.float().abs().max())
        g = torch.Generator(device="cpu").manual_seed(1)
        rows = torch.randint(0, N, (min(args.samples, N),), generator=g).to(dev)
        ref = reference(feats, nbr, w, rows)
        scale = float(ref.abs().max()) or 1.0
        row["err_frugal"] = float((out[rows].double() - ref).abs().max()) / scale
        row["err_spconv"] = float((ys[rows].double() - ref).abs().max()) / scale
    results.append(row)
    print(json.dumps(row), flush=True)
    del x, y, xr, ys, out, out2, nbr, km, feats, conv
    torch.cuda.empty_cache()

with open(os.path.join(OUT, f"spconv_peer_{args.dtype}.json"), "w") as f:
    json.dump(dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__,
                   spconv=getattr(sys.modules.get("spconv"), "__version__", "?"), rows=results), f, indent=1)

print(f"\n{'R':>5} {'Ci>Co':>10} {'N':>9} | {'spconv ms':>9} {'frugal ms':>9} {'x':>5} {'checked':>8} | "
      f"{'TFLOP/s f/s':>13} | {'sp map+conv':>11} {'fr map+conv':>11} | {'peak MB sp / fr':>17} | "
      f"{'max|f-s|':>8} {'err f / s (fp64)':>17} {'bitwise':>7}")
for r in results:
    if "spconv_error" in r:
        print(f"{r['R']:>5} {str(r['ci']) + '>' + str(r['co']):>10} {r['N']:>9} | spconv failed: {r['spconv_error'][:90]}")
        continue
    print(f"{r['R']:>5} {str(r['ci']) + '>' + str(r['co']):>10} {r['N']:>9} | {r['spconv_ms']:>9.3f} {r['frugal_ms']:>9.3f} "
          f"{r['speedup']:>5.2f} {r['frugal_checked_ms']:>8.3f} | {r['frugal_tflops']:>6.0f}/{r['spconv_tflops']:<6.0f} | {r['spconv_map_conv_ms']:>11.3f} "
          f"{r['frugal_map_conv_ms']:>11.3f} | {r['spconv_peak_mb']:>8.0f}/{r['frugal_torch_alloc_mb'] + r['frugal_pool_mb']:<8.0f} | "
          f"{r['max_abs_frugal_vs_spconv']:>8.1e} {r['err_frugal']:>8.1e}/{r['err_spconv']:<8.1e} {str(r['frugal_bitwise_repeat']):>7}")
if args.back_to_back > 1:
    print(f"\n{args.back_to_back} calls back to back a sample (per call, median of {args.rep}, alternating)\n"
          f"{'R':>5} {'Ci>Co':>10} | {'spconv ms':>9} {'frugal ms':>9} {'x':>5} | single calls: {'spconv':>7} {'frugal':>7}")
    for r in results:
        if "frugal_b2b_ms" in r:
            print(f"{r['R']:>5} {str(r['ci']) + '>' + str(r['co']):>10} | {r['spconv_b2b_ms']:>9.3f} {r['frugal_b2b_ms']:>9.3f} "
                  f"{r['spconv_b2b_ms'] / r['frugal_b2b_ms']:>5.2f} | {r['spconv_ms']:>21.3f} {r['frugal_ms']:>7.3f}")
if args.paired > 0:
    print(f"\nPaired bursts for {args.paired:g} s a row: spconv time / frugal time of adjacent bursts (> 1: frugal faster)\n"
          f"{'R':>5} {'Ci>Co':>10} | {'pairs':>5} {'median':>7} {'quartiles':>15}")
    for r in results:
        if "paired_spconv_over_frugal" in r:
            d = r["paired_spconv_over_frugal"]
            print(f"{r['R']:>5} {str(r['ci']) + '>' + str(r['co']):>10} | {d['pairs']:>5} {d['median']:>7.3f} {d['q1']:>7.3f}–{d['q3']:<7.3f}")
if args.gap:
    print(f"\n{'R':>5} {'Ci>Co':>10} | {'unchecked':>9} {'checked':>9} {'low-level':>9} {'10-bit data':>11} | "
          f"{'spconv':>8} {'10-bit data':>11}")
    for r in results:
        if "frugal_lowlevel_ms" in r:
            print(f"{r['R']:>5} {str(r['ci']) + '>' + str(r['co']):>10} | {r['frugal_ms']:>9.3f} {r['frugal_checked_ms']:>9.3f} "
                  f"{r['frugal_lowlevel_ms']:>9.3f} {r['frugal_lowent_ms']:>11.3f} | {r['spconv_ms']:>8.3f} {r['spconv_lowent_ms']:>11.3f}")
