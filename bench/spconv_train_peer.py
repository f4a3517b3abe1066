"""One SubMConv3d layer side by side with its peers on the same rows: frugal, FlexGEMM (TRELLIS.2's
backend: SubMConv3dFunction with its default algorithm, masked implicit GEMM split-K) and spconv 2.3
(fp16). Default mode: the training step (forward + backward). --forward: the forward conv and the map
build, in several row orders.

Training step, for each row R:Ci[:Co] and dtype: frugal's sphere shell of an R^3 grid, random features,
a 3x3x3 SubMConv3d with bias, the same weights in every library, one fixed random grad_out; each
library's map built once (its build timed: `map`; spconv's is its first conv call, map + conv), then
  * time per step (the grads of feats and parameters cleared, forward, backward): CUDA events, L2
    flushed before each step, median of --rounds x --reps, the libraries alternating round by round;
  * useful TFLOP/s: forward, dgrad and wgrad, 6 * pairs * Ci * Co, over the step's time;
  * peak memory of the step above what is allocated before it (inputs, weights, map): torch's
    max_memory_allocated; frugal's own pool beside it (device memory taken outside torch's allocator
    over its first step, module loading included);
  * each library's output (sampled rows) and gradients (grad_feats, grad_weight, grad_bias) against
    fp64 (the plain way, conv_peers.reference_grads) where N * (Ci + Co) <= --ref-max, else the
    gradients against frugal's;
  * bitwise determinism: two steps, identical bits (required of frugal, reported for the others).
--forward, for each voxel set (FlexGEMM's own sphere_coords shells, frugal's), row, row order (as
generated, lexicographic, Morton, a random permutation) and dtype: map build and conv timed apart,
alternating (frugal's default call on a KernelMap as users get it; FlexGEMM's neighbour cache reused;
spconv's pairs reused through indice_key), each one's map + conv, the error against fp64 on sampled
rows, and whether frugal's output is the same bits in every order up to the permutation.

Each finished row is appended to --out as a JSON line at once (a run cut short keeps its rows); the
markdown table comes last, or alone from such files: --summary FILE [FILE ...]. --budget S: no row is
started that the last row's duration says would end past S seconds.
Usage: python3 spconv_train_peer.py [--forward] [--rows 1024:64,512:128] [--dtypes f16,bf16] [--budget 240]
Needs frugal's Python module; FlexGEMM (bench/peers/build_flexgemm.sh) and spconv are optional.
"""
import argparse
import json
import os
import sys
import time

import torch

import conv_peers as cp
from flushed_timing import alternating_medians_ms, flushed_median_ms

# in the order they run (a budget cuts the tail): issue 41's main shells, the C -> 8C convs and the
# TRELLIS.2 decoder levels (shells of the levels' sizes, as in spconv_peer.py), then the rest of the grid
TRAIN_ROWS = ("1024:64,512:128,256:256,196:128:1024,92:256:2048,426:64,196:128,92:256,43:512,20:1024,"
              "512:64,256:64,256:128,1024:128,512:256,1024:256")
FORWARD_ROWS = "1024:64,512:128,256:256,128:512,64:1024,512:128:1024,256:256:2048"
DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}
LIBS = ("frugal", "flexgemm", "spconv")
LABEL = {"frugal": "frugal", "flexgemm": "FlexGEMM", "spconv": "spconv"}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--forward", action="store_true", help="forward conv and map build in several row orders")
    p.add_argument("--map-only", action="store_true", help="--forward's map builds alone (no conv, so no FlexGEMM "
                   "compiles)")
    p.add_argument("--rows", help=f"R:Ci[:Co],... (training default {TRAIN_ROWS}; --forward {FORWARD_ROWS})")
    p.add_argument("--sets", default="flexgemm,frugal", help="--forward's voxel sets: flexgemm (its sphere_coords), frugal")
    p.add_argument("--orders", default=",".join(cp.ORDERS), help="--forward's row orders")
    p.add_argument("--dtypes", default="f16,bf16")
    p.add_argument("--libs", default=",".join(LIBS))
    p.add_argument("--spconv-bf16", action="store_true", help="also run spconv in bf16 (the comparison is fp16)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--samples", type=int, default=2048, help="output rows checked against fp64")
    p.add_argument("--ref-max", type=float, default=1.3e9, help="largest N * (Ci + Co) given the fp64 gradient reference")
    p.add_argument("--budget", type=float, default=0, help="seconds; 0: no limit")
    p.add_argument("--device", default="cuda", help="cuda; cpu runs frugal alone (a smoke test of the script)")
    p.add_argument("--out", help="JSON lines (default $OUT/spconv_train_peer.jsonl or spconv_forward_peer.jsonl)")
    p.add_argument("--precompile", metavar="I/P", help="compile FlexGEMM's Triton kernels for these rows, share I of P "
                   "(P processes at once), and exit")
    p.add_argument("--summary", nargs="+", metavar="FILE", help="print the tables of these JSON-lines files and exit")
    p.add_argument("--short", action="store_true", help="--summary's short tables (the main figures only)")
    a = p.parse_args(argv)
    a.rows = a.rows or (FORWARD_ROWS if a.forward else TRAIN_ROWS)
    a.row_list = []
    for spec in a.rows.split(","):
        parts = spec.split(":")
        if len(parts) not in (2, 3) or not all(v.isdigit() and int(v) > 0 for v in parts):
            p.error(f"--rows: {spec!r} is not R:Ci[:Co] (positive integers)")
        a.row_list.append(tuple(int(v) for v in parts))
    if a.precompile and (len(a.precompile.split("/")) != 2 or not all(v.isdigit() for v in a.precompile.split("/"))
                         or int(a.precompile.split("/")[0]) >= int(a.precompile.split("/")[1])):
        p.error(f"--precompile: {a.precompile!r} is not I/P with 0 <= I < P")
    a.dtype_list = a.dtypes.split(",")
    a.lib_list = a.libs.split(",")
    a.order_list = a.orders.split(",")
    a.set_list = a.sets.split(",")
    for name, vals, allowed in (("--dtypes", a.dtype_list, DTYPES), ("--libs", a.lib_list, LIBS),
                                ("--orders", a.order_list, cp.ORDERS), ("--sets", a.set_list, ("flexgemm", "frugal"))):
        bad = [v for v in vals if v not in allowed]
        if bad:
            p.error(f"{name}: {bad}, expected some of {list(allowed)}")
    return a


def ft():
    import frugal.torch as module
    return module


def sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


class Peers:
    """The libraries this run has, and why each missing one is missing."""

    def __init__(self, args, dev):
        self.why = {}
        self.spc = None
        want = set(args.lib_list)
        try:  # frugal is needed even where it is not timed: the oracle reads its map
            ft()
        except Exception as e:  # noqa: BLE001
            sys.exit(f"frugal's Python module does not import: {type(e).__name__}: {e}")
        for name, load in (("flexgemm", cp.load_flexgemm), ("spconv", cp.load_spconv)):
            if name not in want:
                continue
            if dev.type != "cuda":
                self.why[name] = "needs CUDA"
                continue
            mod, why = load()
            if mod is None:
                self.why[name] = why
            elif name == "spconv":
                self.spc = mod
        self.have = [n for n in args.lib_list if n not in self.why]
        for name, why in self.why.items():
            print(f"{LABEL[name]} not run: {why}", flush=True)

    def layer(self, name, coords, w5, bias, res_, train):
        if name == "frugal":
            return cp.FrugalLayer(coords, w5, bias)
        if name == "flexgemm":
            return cp.FlexGemmLayer(coords, w5, bias, res_)
        return cp.SpconvLayer(self.spc, coords, w5, bias, res_, train)


def meta(args, peers):
    info = dict(mode="forward" if args.forward else "train", argv=sys.argv[1:], torch=torch.__version__,
                gpu=torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
                spconv=cp.version_of("spconv-cu126"), cumm=cp.version_of("cumm-cu126"),
                flexgemm_commit=os.environ.get("FLEXGEMM_COMMIT", "?"), missing=peers.why)
    try:
        import triton
        info["triton"] = triton.__version__
    except ImportError:
        pass
    return {"meta": info}


def layer_weights(ci, co, dt, dev, bias):
    w5 = (torch.randn(co, 3, 3, 3, ci, device=dev) / (27 * ci) ** 0.5).to(dt)  # spconv's / FlexGEMM's layout
    b = (torch.randn(co, device=dev) * 0.1).to(dt) if bias else None
    return w5, b


def frugal_pool_mb(fn):
    """Device memory taken outside torch's allocator while fn runs (frugal's pool and its module), MB."""
    if not torch.cuda.is_available():
        fn()
        return 0.0
    sync()
    free0, res0 = torch.cuda.mem_get_info()[0], torch.cuda.memory_reserved()
    fn()
    sync()
    return max(0, (free0 - torch.cuda.mem_get_info()[0]) - (torch.cuda.memory_reserved() - res0)) / 1e6


def step_peak_mb(layer, feats, grad_out):
    if not torch.cuda.is_available():
        return None
    for t in [feats] + layer.params():
        t.grad = None
    sync()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    layer.step(feats, grad_out)
    sync()
    return (torch.cuda.max_memory_allocated() - base) / 1e6


def snapshot(layer, feats, grad_out):
    out = layer.step(feats, grad_out).detach().clone()
    return [out] + [None if g is None else g.detach().clone() for g in layer.grads(feats)]


def train_row(args, peers, dev, res_, ci, co, dname):
    dt = DTYPES[dname]
    torch.manual_seed(res_ * 7919 + ci * 31 + co)
    coords = cp.shell_coords(res_, dev)
    n = coords.shape[0]
    w5, bias = layer_weights(ci, co, dt, dev, True)
    feats = (torch.randn(n, ci, device=dev) * 0.5).to(dt).requires_grad_()
    grad_out = (torch.randn(n, co, device=dev) * 0.5).to(dt)
    row = dict(R=res_, ci=ci, co=co, N=n, dtype=dname)
    layers = {}
    for name in peers.have:
        if name == "spconv" and dt != torch.float16 and not args.spconv_bf16:
            continue
        try:
            t = time.time()
            layer = peers.layer(name, coords, w5, bias, res_, train=True)
            layer.build_map(feats.detach(), train=True)
            if name == "frugal":
                row["frugal_pool_mb"] = frugal_pool_mb(lambda: layer.step(feats, grad_out))
            else:
                layer.step(feats, grad_out)
            sync()
            row[f"{name}_first_s"] = time.time() - t  # map, first step (FlexGEMM: its autotuning, Triton's compiles)
            row[f"{name}_map_ms"] = flushed_median_ms(lambda: layer.build_map(feats.detach(), train=True), 1, 5)
            layers[name] = layer
        except Exception as e:  # noqa: BLE001 (a peer that fails on a row is reported, the others go on)
            row[f"{name}_error"] = f"{type(e).__name__}: {str(e).strip()[-300:]}"
            torch.cuda.empty_cache() if torch.cuda.is_available() else None
    if not layers:
        return row
    ms = alternating_medians_ms({k: (lambda l=l: l.step(feats, grad_out)) for k, l in layers.items()},
                                args.rounds, args.reps)
    fr = layers.get("frugal")
    nbr = fr.km.nbr if fr else ft().build_kernel_map(coords).nbr  # the oracle's map
    row["pairs"], flop = cp.conv_flop(nbr, ci, co)
    row["step_gflop"] = 3 * flop / 1e9
    for name, layer in layers.items():
        row[f"{name}_ms"] = ms[name]
        row[f"{name}_tflops"] = 3 * flop / ms[name] / 1e9
        row[f"{name}_peak_mb"] = step_peak_mb(layer, feats, grad_out)
    # gradients: each library's against fp64 (or frugal's), then a second step for the bits
    got = {name: snapshot(layer, feats, grad_out) for name, layer in layers.items()}
    for name, layer in layers.items():
        again = snapshot(layer, feats, grad_out)
        row[f"{name}_bitwise"] = all((a is None and b is None) or torch.equal(a, b) for a, b in zip(got[name], again))
        del again
    w = ft().weight_from_spconv(w5)  # frugal's layout, the oracle's
    g = torch.Generator(device="cpu").manual_seed(1)
    rows = torch.randint(0, n, (min(args.samples, n),), generator=g).to(dev)
    out_ref = cp.reference_conv(feats.detach(), nbr, w, rows) + bias.double()
    with torch.no_grad():
        if n * (ci + co) <= args.ref_max:
            ref, row["grad_ref"] = cp.reference_grads(feats.detach(), nbr, w, grad_out), "fp64"
        elif "frugal" in got:
            ref, row["grad_ref"] = got["frugal"][1:], "frugal"
        else:
            ref = None
        for name, vals in got.items():
            row[f"{name}_err_out"] = cp.rel_err(vals[0][rows], out_ref)
            if ref is None or (name == "frugal" and row["grad_ref"] == "frugal"):
                continue
            for key, a, b in zip(("gf", "gw", "gb"), vals[1:], ref):
                if a is not None:
                    row[f"{name}_err_{key}"] = cp.rel_err(a, b)
    if fr:
        row["frugal_kernel"] = fr.ft.choose_conv(feats.detach(), fr.km, fr.conv.weight.detach())
    return row


def forward_row(args, peers, dev, coords, set_name, res_, ci, co, dname, order):
    dt = DTYPES[dname]
    torch.manual_seed(res_ * 7919 + ci * 31 + co)
    n = coords.shape[0]
    w5, _ = layer_weights(ci, co, dt, dev, False)
    feats0 = (torch.randn(n, ci, device=dev) * 0.5).to(dt)
    perm = cp.row_order(coords, order, res_)
    c, f = coords[perm].contiguous(), feats0[perm].contiguous()
    row = dict(set=set_name, R=res_, ci=ci, co=co, N=n, dtype=dname, order=order)
    layers = {}
    for name in peers.have:
        if name == "spconv" and dt != torch.float16 and not args.spconv_bf16:
            continue
        try:
            t = time.time()
            layer = peers.layer(name, c, w5, None, res_, train=False)
            layer.build_map(f, train=False)
            if not args.map_only:
                layer.forward(f)
            sync()
            row[f"{name}_first_s"] = time.time() - t
            layers[name] = layer
        except Exception as e:  # noqa: BLE001
            row[f"{name}_error"] = f"{type(e).__name__}: {str(e).strip()[-300:]}"
    if not layers:
        return row, None
    # the map alone (spconv builds its pairs inside a conv: its map + conv stands there)
    maps = {k: (lambda l=l: l.build_map(f, train=False)) for k, l in layers.items() if k != "spconv"}
    for k, v in alternating_medians_ms(maps, max(1, args.rounds - 1), args.reps).items():
        row[f"{k}_map_ms"] = v
    if args.map_only:
        return row, None
    convs = {k: (lambda l=l: l.forward(f)) for k, l in layers.items()}
    for k, v in alternating_medians_ms(convs, args.rounds, args.reps).items():
        row[f"{k}_ms"] = v
    both = {k: (lambda l=l: l.map_and_forward(f)) for k, l in layers.items()}
    for k, v in alternating_medians_ms(both, 1, args.reps).items():
        row[f"{k}_map_conv_ms"] = v
    fr = layers.get("frugal")
    nbr = fr.km.nbr if fr else ft().build_kernel_map(c).nbr
    row["pairs"], flop = cp.conv_flop(nbr, ci, co)
    w = ft().weight_from_spconv(w5)
    g = torch.Generator(device="cpu").manual_seed(1)
    rows = torch.randint(0, n, (min(args.samples, n),), generator=g).to(dev)
    ref = cp.reference_conv(f, nbr, w, rows)
    canon = None
    for k, l in layers.items():
        row[f"{k}_tflops"] = flop / row[f"{k}_ms"] / 1e9
        out = l.forward(f)
        row[f"{k}_err"] = cp.rel_err(out[rows], ref)
        if k == "frugal":
            canon = torch.empty_like(out)
            canon[perm] = out  # back in the order as generated
            row["frugal_kernel"] = fr.ft.choose_conv(f, fr.km, fr.conv.weight.detach())
    return row, canon


class Runner:
    """Rows one after another within the budget, each appended to the JSON-lines file as it ends."""

    def __init__(self, args, header):
        self.args, self.t0, self.last, self.skipped = args, time.time(), 0.0, []
        self.path = args.out
        with open(self.path, "w") as fh:
            fh.write(json.dumps(header) + "\n")

    def room(self, label):
        if self.args.budget and time.time() - self.t0 + 1.2 * self.last > self.args.budget:
            self.skipped.append(label)
            return False
        return True

    def done(self, row, t):
        self.last = time.time() - t
        row["row_s"] = self.last
        with open(self.path, "a") as fh:
            fh.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)

    def finish(self):
        if self.skipped:
            note = {"skipped": self.skipped, "budget_s": self.args.budget}
            with open(self.path, "a") as fh:
                fh.write(json.dumps(note) + "\n")
            print(f"not run within the budget of {self.args.budget:g} s: {', '.join(self.skipped)}", flush=True)


def train_items(args):
    """(R, Ci, Co, dtype) of the training rows, in the order they run."""
    for spec in args.row_list:
        for dname in args.dtype_list:
            yield spec[0], spec[1], spec[-1], dname


def forward_items(args):
    """(dtype, voxel set, R, Ci, Co) of the forward rows (each then in every order), in the order they run."""
    for dname in args.dtype_list:
        for set_name in args.set_list:
            for spec in args.row_list:
                yield dname, set_name, spec[0], spec[1], spec[-1]


def voxel_set(set_name, res_, dev):
    return cp.flexgemm_shell_coords(res_, dev) if set_name == "flexgemm" else cp.shell_coords(res_, dev)


def failed(e, **row):
    """The row of a run that raised past the per-library guards (a step that failed after its first)."""
    return dict(row, error=f"{type(e).__name__}: {str(e).strip()[-300:]}")


def run_train(args, peers, dev, runner):
    for res_, ci, co, dname in train_items(args):
        if not runner.room(f"{res_}:{ci}:{co} {dname}"):
            continue
        t = time.time()
        try:
            row = train_row(args, peers, dev, res_, ci, co, dname)
        except Exception as e:  # noqa: BLE001 (the next rows still run)
            row = failed(e, R=res_, ci=ci, co=co, dtype=dname)
        runner.done(row, t)
        torch.cuda.empty_cache() if dev.type == "cuda" else None


def run_forward(args, peers, dev, runner):
    for dname, set_name, res_, ci, co in forward_items(args):
        coords, first = None, None
        for order in args.order_list:
            if not runner.room(f"{set_name} {res_}:{ci}:{co} {order} {dname}"):
                continue
            t = time.time()
            coords = voxel_set(set_name, res_, dev) if coords is None else coords
            if coords is None:
                runner.done(dict(set=set_name, R=res_, error="FlexGEMM's tests/utils.py not found"), t)
                break
            try:
                row, canon = forward_row(args, peers, dev, coords, set_name, res_, ci, co, dname, order)
            except Exception as e:  # noqa: BLE001
                row, canon = failed(e, set=set_name, R=res_, ci=ci, co=co, dtype=dname, order=order), None
            if canon is not None:
                if first is None:
                    first = (order, canon)
                row["frugal_same_bits_as"] = first[0]
                row["frugal_same_bits"] = bool(torch.equal(canon, first[1]))
            runner.done(row, t)
            del canon
            torch.cuda.empty_cache() if dev.type == "cuda" else None


def share_flexgemm_configs(part, parts):
    """Keeps this process's share of every FlexGEMM Triton autotuner's configs (every parts-th from
    part), so that parts such processes compile all of them at once; an autotuner left one config runs
    it without benchmarking. Returns how many autotuners it cut."""
    from flex_gemm.utils.autotuner import TritonPersistentCacheAutotuner
    seen = set()
    for name, mod in list(sys.modules.items()):
        if not name.startswith("flex_gemm") or mod is None:
            continue
        for tuner in vars(mod).values():
            if isinstance(tuner, TritonPersistentCacheAutotuner) and id(tuner) not in seen:
                seen.add(id(tuner))
                tuner.configs = tuner.configs[part::parts] or tuner.configs[:1]
    return len(seen)


def run_precompile(args, dev):
    """Fills Triton's disk cache with FlexGEMM's kernels for the rows the same arguments would run: its
    first calls on them, this process's share of the autotuners' configs, nothing timed or kept (its
    autotune cache is neither read nor written). The measuring run then tunes FlexGEMM itself, as
    before, without waiting for the compiles."""
    part, parts = (int(v) for v in args.precompile.split("/"))
    os.environ["FLEX_GEMM_AUTOSAVE_AUTOTUNE_CACHE"] = "0"  # read at flex_gemm's import
    os.environ["FLEX_GEMM_USE_AUTOTUNE_CACHE"] = "0"
    flex, why = cp.load_flexgemm()
    if flex is None:
        sys.exit(f"precompile: FlexGEMM does not import: {why}")
    tuners, t0 = share_flexgemm_configs(part, parts), time.time()
    if args.forward:
        items = [(s, r, ci, co, d) for d, s, r, ci, co in forward_items(args)]
    else:
        items = [("frugal", r, ci, co, d) for r, ci, co, d in train_items(args)]
    for set_name, res_, ci, co, dname in items:
        if args.budget and time.time() - t0 > args.budget:
            break
        t, label = time.time(), f"{'forward ' + set_name if args.forward else 'train'} {res_}:{ci}:{co} {dname}"
        try:
            coords = voxel_set(set_name, res_, dev)
            w5, bias = layer_weights(ci, co, DTYPES[dname], dev, not args.forward)
            layer = cp.FlexGemmLayer(coords, w5, bias, res_)
            feats = (torch.randn(coords.shape[0], ci, device=dev) * 0.5).to(DTYPES[dname])
            if args.forward:
                layer.build_map(feats, train=False)
                layer.forward(feats)
            else:
                layer.build_map(feats, train=True)
                layer.step(feats.requires_grad_(), torch.randn(coords.shape[0], co, device=dev).to(feats.dtype))
            sync()
            print(f"precompile {part}/{parts} ({tuners} tuners) {label}: {time.time() - t:.1f} s", flush=True)
        except Exception as e:  # noqa: BLE001 (a config the GPU refuses fails in the measuring run's tuning too)
            print(f"precompile {part}/{parts} {label}: {type(e).__name__}: {str(e).strip()[-200:]}", flush=True)
        torch.cuda.empty_cache()


# ---- tables ----

def _f(v, fmt="{:.3f}"):
    return "–" if v is None else fmt.format(v)


def _ratio(r, a, b):
    return _f(r[b] / r[a], "{:.2f}") if r.get(a) and r.get(b) else "–"


def _per_lib(r, key, fmt, libs=LIBS):
    return " / ".join(_f(r.get(f"{n}_{key}"), fmt) for n in libs)


def train_table(rows):
    out = ["| R | Ci→Co | N | dtype | frugal ms | FlexGEMM ms | spconv ms | FlexGEMM ÷ frugal | spconv ÷ frugal "
           "| TFLOP/s fr / Fx / sp | peak MB fr / Fx / sp | map ms fr / Fx / sp | grad_feats err fr / Fx / sp "
           "| grad_weight err fr / Fx / sp | out err fr / Fx / sp | bitwise fr / Fx / sp |",
           "|" + "---|" * 16]
    for r in rows:
        if "error" in r:
            out.append(f"| {r.get('R')} | {r.get('ci')}→{r.get('co')} | | {r.get('dtype')} | {r['error'][:120]} |")
            continue
        errs = "; ".join(f"{LABEL[n]}: {r[n + '_error'][:80]}" for n in LIBS if n + "_error" in r)
        bits = " / ".join({True: "yes", False: "NO", None: "–"}[r.get(f"{n}_bitwise")] for n in LIBS)
        out.append(f"| {r['R']} | {r['ci']}→{r['co']} | {r['N']} | {r['dtype']} | {_f(r.get('frugal_ms'))} "
                   f"| {_f(r.get('flexgemm_ms'))} | {_f(r.get('spconv_ms'))} | {_ratio(r, 'frugal_ms', 'flexgemm_ms')} "
                   f"| {_ratio(r, 'frugal_ms', 'spconv_ms')} | {_per_lib(r, 'tflops', '{:.0f}')} "
                   f"| {_per_lib(r, 'peak_mb', '{:.0f}')} | {_per_lib(r, 'map_ms', '{:.2f}')} "
                   f"| {_per_lib(r, 'err_gf', '{:.1e}')} | {_per_lib(r, 'err_gw', '{:.1e}')} "
                   f"| {_per_lib(r, 'err_out', '{:.1e}')} | {bits} |" + (f" {errs}" if errs else ""))
    return out


def forward_table(rows):
    out = ["| set | R | Ci→Co | N | order | dtype | map ms fr / Fx | conv ms fr / Fx / sp | FlexGEMM ÷ frugal "
           "| spconv ÷ frugal | map+conv ms fr / Fx / sp | err fr / Fx / sp | frugal same bits |",
           "|" + "---|" * 13]
    for r in rows:
        if "error" in r:
            out.append(f"| {r.get('set')} | {r.get('R')} | {r.get('ci')}→{r.get('co')} | | {r.get('order')} "
                       f"| {r.get('dtype')} | {r['error'][:120]} |")
            continue
        errs = "; ".join(f"{LABEL[n]}: {r[n + '_error'][:80]}" for n in LIBS if n + "_error" in r)
        same = {True: "yes", False: "NO", None: "–"}[r.get("frugal_same_bits")]
        out.append(f"| {r['set']} | {r['R']} | {r['ci']}→{r['co']} | {r['N']} | {r['order']} | {r['dtype']} "
                   f"| {_per_lib(r, 'map_ms', '{:.3f}', LIBS[:2])} | {_per_lib(r, 'ms', '{:.3f}')} "
                   f"| {_ratio(r, 'frugal_ms', 'flexgemm_ms')} | {_ratio(r, 'frugal_ms', 'spconv_ms')} "
                   f"| {_per_lib(r, 'map_conv_ms', '{:.3f}')} | {_per_lib(r, 'err', '{:.1e}')} | {same} |"
                   + (f" {errs}" if errs else ""))
    return out


def train_short(rows):
    out = ["| R | Ci→Co | dtype | step ms fr / Fx / sp | FlexGEMM ÷ frugal | spconv ÷ frugal | frugal TFLOP/s "
           "| peak MB fr / Fx / sp | frugal err gf / gw | frugal bitwise |", "|" + "---|" * 10]
    for r in rows:
        if "error" in r:
            out.append(f"| {r.get('R')} | {r.get('ci')}→{r.get('co')} | {r.get('dtype')} | {r['error'][:120]} |")
            continue
        bits = {True: "yes", False: "NO", None: "–"}[r.get("frugal_bitwise")]
        out.append(f"| {r['R']} | {r['ci']}→{r['co']} | {r['dtype']} | {_per_lib(r, 'ms', '{:.3f}')} "
                   f"| {_ratio(r, 'frugal_ms', 'flexgemm_ms')} | {_ratio(r, 'frugal_ms', 'spconv_ms')} "
                   f"| {_f(r.get('frugal_tflops'), '{:.0f}')} | {_per_lib(r, 'peak_mb', '{:.0f}')} "
                   f"| {_f(r.get('frugal_err_gf'), '{:.1e}')} / {_f(r.get('frugal_err_gw'), '{:.1e}')} | {bits} |")
    return out


def forward_short(rows):
    """One line a (set, row, dtype): the conv time in each order, the ratios' worst case."""
    groups = {}
    for r in rows:
        if "error" not in r:
            groups.setdefault((r["set"], r["R"], r["ci"], r["co"], r["dtype"]), []).append(r)
    out = ["| set | R | Ci→Co | dtype | orders | frugal ms | FlexGEMM ms | min FlexGEMM ÷ frugal "
           "| min spconv ÷ frugal | map ms fr / Fx (first order) | frugal same bits |", "|" + "---|" * 11]
    for (set_name, res_, ci, co, dname), rs in groups.items():
        def ratios(b):
            v = [r[b] / r["frugal_ms"] for r in rs if r.get(b) and r.get("frugal_ms")]
            return _f(min(v), "{:.2f}") if v else "–"
        col = lambda key: " / ".join(_f(r.get(key), "{:.2f}") for r in rs)
        same = all(r.get("frugal_same_bits", True) for r in rs)
        out.append(f"| {set_name} | {res_} | {ci}→{co} | {dname} | {' / '.join(r['order'][:3] for r in rs)} "
                   f"| {col('frugal_ms')} | {col('flexgemm_ms')} | {ratios('flexgemm_ms')} | {ratios('spconv_ms')} "
                   f"| {_f(rs[0].get('frugal_map_ms'))} / {_f(rs[0].get('flexgemm_map_ms'))} | {'yes' if same else 'NO'} |")
    return out


def summary(paths, short=False):
    for path in paths:
        if not os.path.exists(path):
            print(f"\n{path}: missing")
            continue
        lines = [json.loads(x) for x in open(path) if x.strip()]
        head = next((x["meta"] for x in lines if "meta" in x), {})
        rows = [x for x in lines if "meta" not in x and "skipped" not in x]
        skipped = [s for x in lines if "skipped" in x for s in x["skipped"]]
        mode = head.get("mode", "train")
        print(f"\n### {'Forward conv and map build' if mode == 'forward' else 'Training step of one layer'} "
              f"({head.get('gpu', '?')}, torch {head.get('torch', '?')}, spconv {head.get('spconv', '?')}, "
              f"FlexGEMM {head.get('flexgemm_commit', '?')[:10]})\n")
        for name, why in head.get("missing", {}).items():
            print(f"{LABEL[name]} not run: {why}\n")
        if short:
            table = forward_short(rows) if mode == "forward" else train_short(rows)
        else:
            table = forward_table(rows) if mode == "forward" else train_table(rows)
        print("\n".join(table))
        if skipped:
            print(f"\nNot run within the budget: {', '.join(skipped)}")


def main(argv=None):
    args = parse_args(argv)
    if args.summary:
        summary(args.summary, args.short)
        return
    dev = torch.device(args.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        sys.exit("no CUDA device (--device cpu runs frugal alone)")
    if args.precompile:
        run_precompile(args, dev)
        return
    out_dir = os.environ.get("OUT", "/tmp")
    args.out = args.out or os.path.join(out_dir, "spconv_forward_peer.jsonl" if args.forward else "spconv_train_peer.jsonl")
    peers = Peers(args, dev)
    runner = Runner(args, meta(args, peers))
    (run_forward if args.forward else run_train)(args, peers, dev, runner)
    runner.finish()
    summary([args.out], args.short)


if __name__ == "__main__":
    main()
