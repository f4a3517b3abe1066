"""Side-by-side benchmark of frugal's sparse conv against the PyTorch paths it replaces.

For each (R, C[, Co]) row (sphere shell of a R^3 grid, 3x3x3 submanifold conv, fp16, C -> Co; Co = C
unless given; the default rows are the anchors' table, TRELLIS.2's decoder levels and its C -> 8C
upsampling convs, whose N a shell of that R roughly matches):
  * generates the shell here (the anchors' construction) and writes coords to a raw .bin;
  * measures torch's kernel map (sort + searchsorted), the materialized gather + bmm and the
    per-offset gather-GEMM-scatter (time: CUDA events, median; peak: max_memory_allocated above
    the inputs), on feats/weights from the generator the C++ bench shares (exact in fp16);
  * runs the C++ bench (`spconv`) on the same coords, which writes our map and output at sampled
    rows; checks our map there against torch's and our output against an fp64 reference (and
    torch's stock output against the same reference).
Usage: python3 spconv_torch.py [--bench ./spconv] [--rows 256:64,512:64,20:1024:4096,...]
Prints a table last and writes spconv.json to $OUT (or /tmp).
"""
import argparse, json, math, os, subprocess, sys, time
import torch

from shells import sphere_shell

p = argparse.ArgumentParser()
p.add_argument("--bench", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "spconv"))
p.add_argument("--rows", default="256:64,512:64,512:128,1024:64,1024:128,1024:256,"
               "20:1024,43:512,92:256,196:128,426:64,20:1024:4096,43:512:2048,92:256:1024,196:128:512")
p.add_argument("--samples", type=int, default=2048)
p.add_argument("--mma-only", action="store_true", help="ours: only the mma/wgmma variants (no WMMA/SIMT)")
p.add_argument("--stock-limit-gb", type=float, default=80.0,
               help="skip the materialized path when its gather + bmm output exceed this (cite the anchor)")
args = p.parse_args()

dev = torch.device("cuda")
OUT = os.environ.get("OUT", "/tmp")
TMP = "/tmp/frugal_spconv_bench"
os.makedirs(TMP, exist_ok=True)
OFFS = torch.tensor([(i, j, l) for i in (-1, 0, 1) for j in (-1, 0, 1) for l in (-1, 0, 1)], device=dev)
# The anchors' figures (H200, 2026-11-29) for rows skipped here: (R, C, Co) -> (stock ms, stock peak GB)
ANCHOR_STOCK = {(1024, 256, 256): (244.4, 128.4), (1024, 128, 128): (158.4, 64.2), (1024, 64, 64): (100.1, 32.1)}


def bench(fn, warm=1, rep=5):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(rep):
        s = torch.cuda.Event(enable_timing=True); e = torch.cuda.Event(enable_timing=True)
        s.record(); fn(); e.record(); torch.cuda.synchronize()
        ts.append(s.elapsed_time(e))
    ts.sort()
    return ts[len(ts) // 2]


def key(c, R):
    c = c.long()
    return (c[:, 0] * R + c[:, 1]) * R + c[:, 2]


def kmap(coords, R):  # torch sort + searchsorted (the anchors' peer)
    N = coords.shape[0]
    keys = key(coords, R)
    sk, order = keys.sort()
    nbr = torch.full((27, N), N, dtype=torch.long, device=dev)
    for kk in range(27):
        c = coords.long() + OFFS[kk]
        ok = ((c >= 0) & (c < R)).all(1)
        qk = key(c.clamp(0, R - 1), R)
        pos = torch.searchsorted(sk, qk).clamp(max=N - 1)
        hit = ok & (sk[pos] == qk)
        nbr[kk] = torch.where(hit, order[pos], torch.full_like(pos, N))
    return nbr


def gen(count, salt, shift):  # shared with bench/spconv.cu (kernel_gen)
    i = torch.arange(count, dtype=torch.int64, device=dev) + salt
    h = (i * 1103515245 + 12345) & 0x7FFFFFFF
    h = (h * 1103515245 + 12345) & 0x7FFFFFFF
    v = ((h >> 16) & 1023) - 512
    return (v.double() * 2.0 ** -(10 + shift)).half()


def write_raw(t, path):
    t = t.cpu().contiguous()
    try:
        t.numpy().tofile(path)
    except Exception:  # torch without numpy
        import ctypes
        buf = (ctypes.c_char * (t.numel() * t.element_size())).from_address(t.data_ptr())
        with open(path, "wb") as f:
            f.write(bytes(buf))


def read_raw(path, dtype, shape):
    with open(path, "rb") as f:
        return torch.frombuffer(bytearray(f.read()), dtype=dtype).view(*shape).clone()


HEADER = ("   R    C   Co        N |  stock*   g-s | wmma  simt | mma64 mma128 mma256 unsort  mmadef |"
          "  wg64  wg128  wg256 unsort     ws nosplit | mma-vs-def |"
          " default(chk)  bf16 | TF/s  | useful: tile grp warp wg (unsorted grp) | err ours stock | map==")


def line(r):
    if "ours" not in r:
        return f"{r['R']:4d} {r['C']:4d} {r['Co']:4d} {r['N']:8d} | ours failed: {r.get('ours_error', '?')}"
    o = r["ours"]
    nan = float("nan")
    wm = min(o.get("wmma64_ms", nan), o.get("wmma128_ms", nan))
    wg = lambda k: o.get(k + "_ms", nan)
    st = "*" if r["stock_source"] == "anchor" else " "
    ss, su = o["share_sorted"], o["share_unsorted"]
    return (f"{r['R']:4d} {r['C']:4d} {r['Co']:4d} {r['N']:8d} | {r['stock_ms']:7.2f}{st}{r['gather_scatter_ms']:6.1f} |"
            f" {wm:6.2f} {o.get('simt_ms', nan):6.1f} | {o['mma64_ms']:6.2f} {o['mma128_ms']:6.2f} {o['mma256_ms']:6.2f} {o['mma_unsorted_ms']:6.2f} {wg('mma_default'):6.2f} |"
            f" {wg('wgmma64'):6.2f} {wg('wgmma128'):6.2f} {wg('wgmma256'):6.2f} {wg('wgmma_unsorted'):6.2f} {wg('wgmma_ws'):6.2f} {wg('wgmma_nosplit'):6.2f} |"
            f" {o.get('mma_vs_default_rel', nan):.1e} |"
            f" {o['conv_ms']:6.2f}({o['conv_checked_ms']:6.2f}) {o['bf16_default_ms']:6.2f} | {r['gflop'] / o['conv_ms']:5.0f} |"
            f" {ss['tile']:.2f} {ss['group']:.2f} {ss['warp']:.2f} {ss.get('wg', nan):.2f} ({su['group']:.2f}) |"
            f" {r['ours_err']:.1e} {r.get('stock_err', float('nan')):.1e} | {r['map_equal_at_samples'] and r['pairs_equal']}")


def dump():
    json.dump(dict(device=torch.cuda.get_device_name(0), torch=torch.__version__, rows=rows),
              open(os.path.join(OUT, "spconv.json"), "w"), indent=1)


rows = []
print(HEADER, flush=True)
for spec in args.rows.split(","):
    parts = list(map(int, spec.split(":")))
    R, C = parts[0], parts[1]
    Co = parts[2] if len(parts) > 2 else C
    torch.cuda.empty_cache()
    coords = sphere_shell(R, dev)
    N = coords.shape[0]
    cpath = os.path.join(TMP, f"coords_{R}.bin")
    write_raw(torch.cat([torch.zeros_like(coords[:, :1]), coords], 1), cpath)  # (b = 0, x, y, z)
    row = dict(R=R, C=C, Co=Co, N=N)
    row["torch_map_ms"] = bench(lambda: kmap(coords, R), warm=1, rep=5)
    nbr = kmap(coords, R)
    row["pairs_torch"] = int((nbr < N).sum())
    feats = torch.zeros(N + 1, C, dtype=torch.float16, device=dev)
    feats[:N] = gen(N * C, 0, 1).view(N, C)
    w = gen(27 * C * Co, 12345, 6).view(27, C, Co)
    S = min(args.samples, N)
    srows = torch.tensor([i * (N - 1) // (S - 1) if S > 1 else 0 for i in range(S)], device=dev)
    # fp64 reference at the sampled rows: sum over the 27 neighbors (the sentinel row is zero)
    ref = torch.einsum("ksc,kco->so", feats[nbr[:, srows]].double(), w.double())

    def stock():  # materialized gather (K, N, Ci) then bmm and sum
        return torch.bmm(feats[nbr], w).sum(0)

    def gscatter():  # per-offset gather-GEMM-scatter-add
        out = torch.zeros(N, Co, dtype=torch.float32, device=dev)
        for kk in range(27):
            m_ = nbr[kk] < N
            dst = m_.nonzero().squeeze(1)
            out.index_add_(0, dst, (feats[nbr[kk, dst]] @ w[kk]).float())
        return out

    stock_gb = 27 * N * (C + Co) * 2 / 1e9
    for name, fn in (("stock", stock), ("gather_scatter", gscatter)):
        if name == "stock" and stock_gb > args.stock_limit_gb:
            ms, gb = ANCHOR_STOCK.get((R, C, Co), (float("nan"), float("nan")))
            row[name + "_ms"], row[name + "_peak_MB"], row[name + "_source"] = ms, gb * 1e3, "anchor"
            continue
        torch.cuda.empty_cache(); torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        try:
            row[name + "_ms"] = bench(fn, warm=1, rep=5)
            row[name + "_peak_MB"] = (torch.cuda.max_memory_allocated() - base) / 1e6
            row[name + "_source"] = "measured"
            if name == "stock":
                o = fn()[srows].double()
                row["stock_err"] = float((o - ref).norm() / ref.norm())
                del o
        except torch.OutOfMemoryError:
            row[name + "_ms"] = float("nan"); row[name + "_peak_MB"] = float("inf"); row[name + "_source"] = "OOM"
        torch.cuda.empty_cache()
    # inputs as torch holds them: feats (N+1 rows), weight, map (int64 here; int32 in ours)
    row["torch_inputs_MB"] = (feats.numel() * 2 + w.numel() * 2 + nbr.numel() * 8) / 1e6
    nbr_s = nbr[:, srows].int().cpu()
    ref = ref.cpu()
    del feats, w, nbr
    torch.cuda.empty_cache()

    prefix = os.path.join(TMP, f"ours_{R}_{C}_{Co}")
    t = time.time()
    res = subprocess.run([args.bench, "--coords", cpath, "--channels", str(C), "--co", str(Co), "--out", prefix,
                          "--samples", str(S), "--reps", "20" if N * max(C, Co) < 3e8 else "10"]
                         + (["--mma-only", "1"] if args.mma_only else []),
                         capture_output=True, text=True)
    if res.returncode != 0:
        print(res.stdout, res.stderr, file=sys.stderr)
        row["ours_error"] = res.stderr.strip()[-400:]
        rows.append(row)
        print(line(row), flush=True)
        dump()
        continue
    ours = json.loads(res.stdout.strip().splitlines()[-1])
    row["ours"] = ours
    row["ours_wall_s"] = time.time() - t
    our_nbr = read_raw(prefix + ".nbr", torch.int32, (27, S))
    our_out = read_raw(prefix + ".out", torch.float16, (S, Co)).double()
    row["map_equal_at_samples"] = bool(torch.equal(our_nbr, nbr_s))
    row["pairs_equal"] = ours["pairs"] == row["pairs_torch"]
    row["ours_err"] = float((our_out - ref).norm() / ref.norm())
    row["ours_peak_MB"] = (ours["inputs_bytes"] + ours["out_bytes"] + ours["map_bytes"] + ours["conv_alloc_bytes"]) / 1e6
    row["gflop"] = 2 * ours["pairs"] * C * Co / 1e9
    rows.append(row)
    print(line(row), flush=True)
    dump()
    print(f"done R={R} C={C} Co={Co} N={N} ({time.time() - t:.1f} s for ours)", file=sys.stderr, flush=True)

dump()
print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}; fp16 unless noted, 3x3x3 submanifold, sphere shell;"
      " conv ms (unchecked unless noted)")
print(HEADER)
for r in rows:
    print(line(r))
print("* = anchor figure, not re-measured (the materialized path needs more memory than --stock-limit-gb);"
      " TF/s = useful TFLOP/s of the default kernel")
