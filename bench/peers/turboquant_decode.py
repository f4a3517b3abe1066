"""Issue 43's decode peer: vLLM's TurboQuant decode (its Triton kernels, imported at run time from the
folder bench/peers/prepare_vllm.sh fills from vLLM's published source; the few vLLM modules they import
are stubbed here) against frugal's paged decode (PagedPlan planned once, run timed) and torch SDPA over
fp16 K/V, on the same K/V in the same shuffled pages, timed in turn call by call (peer, frugal, SDPA,
peer, ...; L2 flushed before every call; CUDA events; the median of --reps).

Presets: vLLM's turboquant_k8v4 (FP8 keys, 4-bit uniform values) beside frugal K8V4, and vLLM's
turboquant_4bit_nc (4-bit Lloyd-Max keys after a Hadamard rotation, norm correction, 4-bit uniform
values) beside frugal K4V4. Each output is checked against an f64 attention over that library's own
dequantized cache (vLLM's slots decoded here from its documented layout, frugal's by
PagedCache.dequantize): a broken call shows as a large `err`; `q-err` is the error against the exact
attention over the fp16 K/V (what the quantization costs). Random normal K/V: the timing does not
depend on the values; the q-err columns are not a quality result.

  python3 bench/peers/turboquant_decode.py [--vllm .gpu/peers/vllm] [--budget 300] [--shapes B:L:D,...]
  python3 bench/peers/turboquant_decode.py --device cpu --shapes 2:40:64   (Triton's interpreter; a dry run)
"""
import argparse
import json
import math
import os
import sys
import time
import traceback
import types

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# vLLM's presets and the frugal widths each is compared with by default (name: vLLM cache dtype,
# frugal K bits, V bits); --presets k8v4=K8V3 picks other widths.
PRESETS = {"k8v4": ("turboquant_k8v4", 8, 4), "4bit": ("turboquant_4bit_nc", 4, 4)}
# Issue 43's decode shapes: D=128 first (the issue's), then 64 and 256.
DEFAULT_SHAPES = [(b, l, d) for d in (128, 64, 256) for l in (4096, 32768, 131072) for b in (1, 8, 32)]


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vllm", default=os.path.join(ROOT, ".gpu", "peers", "vllm"),
                    help="the folder prepare_vllm.sh filled (holds vllm/ and COMMIT)")
    ap.add_argument("--budget", type=float, default=300,
                    help="seconds; no shape starts that the last row says would end past it")
    ap.add_argument("--shapes", default=None, help="B:L:D,... (default: B 1,8,32 x L 4K,32K,128K x D 128, 64, 256)")
    ap.add_argument("--presets", default="k8v4,4bit",
                    help=f"of {', '.join(PRESETS)}, each with =KxVy for frugal widths other than its default")
    ap.add_argument("--hq", type=int, default=32)
    ap.add_argument("--hkv", type=int, default=8)
    ap.add_argument("--page", type=int, default=16)
    ap.add_argument("--reps", type=int, default=20, help="timed calls of each library (median)")
    ap.add_argument("--warm", type=int, default=3)
    ap.add_argument("--vllm-splits", type=int, default=32,
                    help="vLLM's NUM_KV_SPLITS (its default, attention_config.tq_max_kv_splits_for_cuda_graph)")
    ap.add_argument("--check-seqs", type=int, default=2,
                    help="sequences checked against the f64 oracles (evenly spaced, the first and the last among them)")
    ap.add_argument("--tol", type=float, default=2e-2,
                    help="err (max |out - oracle| / max |oracle|) past which a call is marked FAIL")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                    help="cpu: a dry run at tiny shapes (Triton's interpreter, frugal's CPU path)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp"))
    return ap.parse_args()


args = parse_args()
if args.device == "cpu":
    os.environ.setdefault("TRITON_INTERPRET", "1")  # read when triton is imported
sys.path.insert(0, os.path.dirname(HERE))  # bench/: flushed_timing

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from conv_peers import rel_err  # noqa: E402
from flushed_timing import alternating_medians_ms  # noqa: E402

dev = torch.device(args.device)
problems = []  # (who, the exception's text): printed again at the end and written with the table


def report(who, exc):
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    problems.append((who, text))
    print(f"!! {who}: {text}", flush=True)
    traceback.print_exc()


# ---- vLLM: the kernel files from the extracted folder, the rest of vLLM stubbed ----------------------

class _Platform:
    """What the kernel files ask of vllm.platforms.current_platform: is_rocm() at import,
    is_cuda_alike() for the FP8 flavour (e4b15 below SM 8.9)."""

    def is_rocm(self):
        return torch.version.hip is not None

    def is_cuda(self):
        return torch.cuda.is_available() and torch.version.hip is None

    def is_cuda_alike(self):
        return torch.cuda.is_available()

    def __getattr__(self, name):
        if name.startswith("is_"):  # is_xpu, is_tpu, ...: none of these here
            return lambda *a, **k: False
        raise AttributeError(f"the vllm.platforms stub has no {name!r} (a newer vLLM asks for more)")


def install_vllm_stubs(root):
    """vllm as a namespace over root/vllm (only the extracted files exist there; their parent folders
    have no __init__.py, so nothing else of vLLM is imported), with vllm.platforms and
    vllm.triton_utils as tiny stand-ins."""
    import triton
    import triton.language as tl

    if not os.path.isdir(os.path.join(root, "vllm", "v1")):
        raise FileNotFoundError(f"no vllm/v1 under {root} (bench/peers/prepare_vllm.sh fills it)")
    try:
        import packaging.version  # noqa: F401 (triton_decode_attention compares Triton's version by it)
    except ImportError:
        import re

        version = types.ModuleType("packaging.version")
        version.parse = lambda s: tuple(int(x) for x in re.findall(r"\d+", s)[:3])
        sys.modules.update({"packaging": types.ModuleType("packaging"), "packaging.version": version})
        sys.modules["packaging"].version = version
    pkg = types.ModuleType("vllm")
    pkg.__path__ = [os.path.join(root, "vllm")]
    platforms = types.ModuleType("vllm.platforms")
    platforms.current_platform = _Platform()
    triton_utils = types.ModuleType("vllm.triton_utils")
    triton_utils.triton, triton_utils.tl, triton_utils.HAS_TRITON = triton, tl, True
    sys.modules.update({"vllm": pkg, "vllm.platforms": platforms, "vllm.triton_utils": triton_utils})
    pkg.platforms, pkg.triton_utils = platforms, triton_utils


def load_vllm(root):
    import importlib

    install_vllm_stubs(root)
    mods = types.SimpleNamespace(
        decode=importlib.import_module("vllm.v1.attention.ops.triton_turboquant_decode"),
        store=importlib.import_module("vllm.v1.attention.ops.triton_turboquant_store"),
        config=importlib.import_module("vllm.model_executor.layers.quantization.turboquant.config"),
        centroids=importlib.import_module("vllm.model_executor.layers.quantization.turboquant.centroids"))
    commit = open(os.path.join(root, "COMMIT")).read().strip() if os.path.exists(os.path.join(root, "COMMIT")) else "?"
    return mods, commit


def cuda_path_note(root):
    ops = os.path.join(root, "vllm", "v1", "attention", "ops")
    files = ("cuda_turboquant_decode.py", "csrc/tq_decode_warp_per_head.cu")
    found = [f for f in files if os.path.exists(os.path.join(ops, f))]
    if not found:
        return "vLLM CUDA TurboQuant decode: none in this source (its decode is the Triton path)"
    return (f"vLLM CUDA TurboQuant decode: {', '.join(found)} present, not run (its kernels are not the Triton "
            "path's slot layout and presets; see bench/peers/README.md)")


def hadamard(d):
    """The rotation vLLM's TurboQuant backend applies (its Pi and PiT): the Sylvester Hadamard matrix of
    order d over sqrt(d), symmetric and orthonormal."""
    h = np.array([[1.0]])
    while h.shape[0] < d:
        h = np.block([[h, h], [h, -h]])
    return torch.tensor(h / math.sqrt(d), dtype=torch.float32)


def unpack_codes(raw, d, bits):
    """Codes of `bits` bits from the little-endian bit stream raw [..., bytes] (uint8): code i at bits
    [i*bits, (i+1)*bits), as vLLM's kernels read them (two bytes at i*bits // 8, shifted)."""
    r = torch.nn.functional.pad(raw.to(torch.int64), (0, 1))
    off = torch.arange(d, device=raw.device) * bits
    word = r[..., off // 8] | (r[..., off // 8 + 1] << 8)
    return (word >> (off % 8)) & ((1 << bits) - 1)


def f16_at(slots, offset):
    return slots[..., offset:offset + 2].contiguous().view(torch.float16).squeeze(-1).double()


class VllmPeer:
    """One preset's vLLM cache [num_blocks, page, Hkv, slot] uint8 (the per-layer view its kernels take),
    filled by its store kernel, and its decode call."""

    def __init__(self, mods, preset, D, num_pages):
        self.m, self.cfg = mods, mods.config.TurboQuantConfig.from_cache_dtype(preset, D)
        cfg = self.cfg
        # As the backend sets them up (_ensure_on_device): Pi = PiT = Hadamard; Lloyd-Max centroids of
        # centroid_bits; the midpoints of the sorted centroids for the store's bucketize.
        self.PiT = hadamard(D).to(dev)
        self.centroids = mods.centroids.get_centroids(D, cfg.centroid_bits).to(dev, torch.float32)
        c = self.centroids.sort().values
        self.midpoints = (c[:-1] + c[1:]) / 2
        self.cache = torch.zeros(num_pages, args.page, args.hkv, cfg.slot_size_aligned, dtype=torch.uint8, device=dev)
        self.bytes_per_token_head = cfg.slot_size_aligned

    def append(self, k, v, slots):
        """k, v [N, Hkv, D] f16 into cache slots `slots` [N] (page * page_size + offset)."""
        cfg = self.cfg
        self.m.store.triton_turboquant_store(k, v, self.cache, slots, self.PiT, self.midpoints,
                                             mse_bits=cfg.key_mse_bits, key_packed_size=cfg.key_packed_size,
                                             value_quant_bits=cfg.value_quant_bits, key_fp8=cfg.key_fp8)

    def plan(self, q, block_table, seq_lens):
        B, Hq, D = q.shape
        cfg, S = self.cfg, args.vllm_splits
        # The decode's scratch given, as vLLM's workspace manager gives it.
        bufs = dict(mid_o_buf=torch.empty(B, Hq, S, D + 1, dtype=torch.float32, device=dev),
                    output_buf=torch.empty(B, Hq, D, dtype=q.dtype, device=dev),
                    lse_buf=torch.empty(B, Hq, dtype=torch.float32, device=dev))
        return lambda: self.m.decode.triton_turboquant_decode_attention(
            q, self.cache, block_table, seq_lens, self.PiT, self.centroids, 1 / math.sqrt(D),
            mse_bits=cfg.key_mse_bits, key_packed_size=cfg.key_packed_size, value_quant_bits=cfg.value_quant_bits,
            key_fp8=cfg.key_fp8, norm_correction=cfg.norm_correction, PiT=self.PiT, max_num_kv_splits=S, **bufs)

    def dequantize(self, pages, L):
        """(k, v) [L, Hkv, D] f64 of one sequence, decoded from the slot layout (TurboQuantConfig):
        key [kps bytes: FP8 E4M3 codes, or MSE codes then an f16 norm] | value [codes | f16 scale | f16 zero].
        MSE keys are centroids in the rotated domain (y = k / |k| @ PiT), renormalized when
        norm_correction, times the norm, rotated back by PiT^T."""
        cfg, D = self.cfg, self.cfg.head_dim
        slots = self.cache[torch.as_tensor(pages, device=dev).long()].flatten(0, 1)[:L]  # [L, Hkv, slot]
        if cfg.key_fp8:
            k = slots[..., :D].contiguous().view(torch.float8_e4m3fn).double()
        else:
            mse_bytes = math.ceil(D * cfg.key_mse_bits / 8)
            c = self.centroids.double()[unpack_codes(slots[..., :mse_bytes], D, cfg.key_mse_bits)]
            if cfg.norm_correction:
                c = c / torch.sqrt((c * c).sum(-1, keepdim=True) + 1e-16)
            k = f16_at(slots, mse_bytes)[..., None] * (c @ self.PiT.double().T)
        kps, vdb = cfg.key_packed_size, math.ceil(D * cfg.value_quant_bits / 8)
        codes = unpack_codes(slots[..., kps:kps + vdb], D, cfg.value_quant_bits).double()
        v = codes * f16_at(slots, kps + vdb)[..., None] + f16_at(slots, kps + vdb + 2)[..., None]
        return k, v


class FrugalPeer:
    """frugal's PagedCache of K bits / V bits over the same pages, filled by PagedCache.append."""

    def __init__(self, kv, k_bits, v_bits, D, num_pages):
        self.kv = kv
        self.cache = kv.PagedCache(num_kv_heads=args.hkv, head_dim=D, num_pages=num_pages, page_size=args.page,
                                   k_bits=k_bits, v_bits=v_bits, k_sign_seed=1, v_sign_seed=2, device=str(dev))
        self.bytes_per_token_head = None

    def append(self, k, v, pages):
        """k, v [L, Hkv, D] f16: one whole sequence into `pages`."""
        L = k.shape[0]
        self.cache.append(k, v, np.array([0, L], dtype=np.int32),
                          self.kv.PageTable.from_pages([pages], [L], args.page))
        if self.bytes_per_token_head is None:  # codes and the f32 scale of one K and one V vector
            kp, ks, vp, vs = self.cache.writable_views()
            self.bytes_per_token_head = kp.shape[-1] + ks.element_size() + vp.shape[-1] + vs.element_size()

    def plan(self, q, pages_per_seq, L):
        B, Hq, D = q.shape
        self.table = self.kv.PageTable.from_pages(pages_per_seq, [L] * B, args.page)
        plan = self.kv.PagedPlan(self.cache, Hq, "f16", np.arange(B + 1, dtype=np.int32), self.table,
                                 softmax_scale=1 / math.sqrt(D))
        out = torch.empty(B, Hq, D, dtype=q.dtype, device=dev)
        self.choice = plan.choice
        return lambda: plan.run(q, self.cache, out=out)

    def dequantize(self, b):
        k, v = self.cache.dequantize(self.table, b, dtype="f32")
        return k.double(), v.double()


def attention_f64(q, k, v):
    """Decode attention of q [Hq, D] over k, v [L, Hkv, D] in f64 (GQA: query head h reads KV head h // G)."""
    Hq, D = q.shape
    qg = q.double().reshape(k.shape[1], Hq // k.shape[1], D)  # [Hkv, G, D]
    s = torch.einsum("kgd,lkd->kgl", qg, k.double()) / math.sqrt(D)
    return torch.einsum("kgl,lkd->kgd", torch.softmax(s, -1), v.double()).reshape(Hq, D)


def fmt_err(e):
    if e is None:
        return "—"
    return f"{e:.1e}" + (" FAIL" if not e <= args.tol else "")


def make_shape(B, L, D):
    """The shape's fp16 K/V [B, Hkv, L, D] and query [B, Hq, D], its pages (a shuffled pool: sequence b
    owns pages[b] in token order, the same for every library), the sequences checked and their exact
    f64 attention, and the SDPA call."""
    g = torch.Generator(device=dev).manual_seed(args.seed)
    npp = -(-L // args.page)
    perm = torch.randperm(B * npp, generator=torch.Generator().manual_seed(args.seed))
    sh = types.SimpleNamespace(B=B, L=L, D=D, num_pages=B * npp)
    sh.pages = [perm[b * npp:(b + 1) * npp].numpy().astype(np.int32) for b in range(B)]
    sh.k16 = torch.randn(B, args.hkv, L, D, generator=g, device=dev, dtype=torch.float16)
    sh.v16 = torch.randn(B, args.hkv, L, D, generator=g, device=dev, dtype=torch.float16)
    sh.q = torch.randn(B, args.hq, D, generator=g, device=dev, dtype=torch.float16)
    sh.block_table = torch.tensor(np.stack(sh.pages), dtype=torch.int32, device=dev)
    sh.seq_lens = torch.full((B,), L, dtype=torch.int32, device=dev)
    sh.checked = sorted({int(b) for b in np.linspace(0, B - 1, max(1, min(args.check_seqs, B))).round()})
    sh.kv = lambda b: (sh.k16[b].transpose(0, 1), sh.v16[b].transpose(0, 1))  # [L, Hkv, D] views
    sh.exact = {b: attention_f64(sh.q[b], *sh.kv(b)) for b in sh.checked}
    q4 = sh.q[:, :, None, :]
    sh.sdpa = lambda: F.scaled_dot_product_attention(q4, sh.k16, sh.v16, enable_gqa=True)
    return sh


def build_peers(sh, vllm, fkv, vname, kb, vb, res):
    """{name: (decode call, peer)} of the libraries that filled their cache; a failure is reported."""
    built, tag = {}, f"B={sh.B} L={sh.L} D={sh.D}"
    if vllm is not None:
        try:
            p = VllmPeer(vllm, vname, sh.D, sh.num_pages)
            offsets = torch.arange(args.page, device=dev)
            for b in range(sh.B):
                slots = (sh.block_table[b].long()[:, None] * args.page + offsets).flatten()[:sh.L]
                p.append(*sh.kv(b), slots)
            built["vLLM"] = (p.plan(sh.q, sh.block_table, sh.seq_lens), p)
            res["vllm_bytes"] = p.bytes_per_token_head
        except Exception as e:  # noqa: BLE001 (a peer that fails is reported, the others run)
            report(f"vLLM {vname} {tag}", e)
    if fkv is not None:
        try:
            p = FrugalPeer(fkv, kb, vb, sh.D, sh.num_pages)
            for b in range(sh.B):
                p.append(*(x.contiguous() for x in sh.kv(b)), sh.pages[b])
            built["frugal"] = (p.plan(sh.q, sh.pages, sh.L), p)
            res["frugal_bytes"], res["frugal_choice"] = p.bytes_per_token_head, str(p.choice)
        except Exception as e:  # noqa: BLE001
            report(f"frugal K{kb}V{vb} {tag}", e)
    return built


def measure(sh, vllm, fkv, vname, kb, vb):
    """One row: each library's call checked once, then all timed in turn."""
    res = {"preset": vname, "frugal": f"K{kb}V{vb}", "B": sh.B, "L": sh.L, "D": sh.D}
    tag = f"{vname} B={sh.B} L={sh.L} D={sh.D}"
    built = build_peers(sh, vllm, fkv, vname, kb, vb, res)
    calls = {name: fn for name, (fn, _) in built.items()}
    calls["SDPA"] = sh.sdpa
    for who in list(calls):
        try:
            out = calls[who]().reshape(sh.B, args.hq, sh.D)
            if who in built:
                peer = built[who][1]
                deq = {b: peer.dequantize(sh.pages[b], sh.L) if who == "vLLM" else peer.dequantize(b) for b in sh.checked}
                res[f"err_{who}"] = max(rel_err(out[b], attention_f64(sh.q[b], *deq[b])) for b in sh.checked)
            res[f"qerr_{who}"] = max(rel_err(out[b], sh.exact[b]) for b in sh.checked)
        except Exception as e:  # noqa: BLE001
            report(f"{who} call {tag}", e)
            del calls[who]
    try:
        ms = alternating_medians_ms(calls, rounds=args.reps, reps=1, warm=args.warm)
    except Exception as e:  # noqa: BLE001
        report(f"timing {tag}", e)
        ms = {}
    for who in ("vLLM", "frugal", "SDPA"):
        res[f"{who}_ms"] = ms.get(who)
    return res


TABLE_HEAD = ["| preset vLLM / frugal | B | L | D | B/token vLLM | B/token frugal | vLLM ms | frugal ms | SDPA ms | "
              "vLLM ÷ frugal | err vLLM | err frugal | q-err vLLM | q-err frugal |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]


def table_line(r):
    def cell(x, f="{:.4f}"):
        return "—" if x is None else f.format(x)

    ratio = r["vLLM_ms"] / r["frugal_ms"] if r["vLLM_ms"] and r["frugal_ms"] else None
    sdpa_bad = "" if r.get("qerr_SDPA", 0) <= args.tol else " FAIL"
    return (f"| {r['preset']} / {r['frugal']} | {r['B']} | {r['L']} | {r['D']} | {cell(r.get('vllm_bytes'), '{}')} | "
            f"{cell(r.get('frugal_bytes'), '{}')} | {cell(r['vLLM_ms'])} | {cell(r['frugal_ms'])} | "
            f"{cell(r['SDPA_ms'])}{sdpa_bad} | {cell(ratio, '{:.2f}')} | {fmt_err(r.get('err_vLLM'))} | "
            f"{fmt_err(r.get('err_frugal'))} | {cell(r.get('qerr_vLLM'), '{:.1e}')} | "
            f"{cell(r.get('qerr_frugal'), '{:.1e}')} |")


def parse_presets():
    presets = []
    for p in filter(None, args.presets.split(",")):
        name, _, widths = p.partition("=")
        vname, kb, vb = PRESETS[name]
        if widths:
            kb, vb = (int(x) for x in widths.upper().lstrip("K").split("V"))
        presets.append((vname, kb, vb))
    return presets


def main():
    shapes = DEFAULT_SHAPES if args.shapes is None else [tuple(int(x) for x in s.split(":")) for s in args.shapes.split(",")]
    presets = parse_presets()
    os.makedirs(args.out, exist_ok=True)
    import triton

    try:
        vllm, commit = load_vllm(os.path.abspath(args.vllm))
        print(f"vLLM {commit}: Triton decode and store imported from {args.vllm}")
    except Exception as e:  # noqa: BLE001
        report("vLLM import", e)
        vllm, commit = None, "not imported"
    print(cuda_path_note(os.path.abspath(args.vllm)))
    try:
        import frugal
        import frugal.kv as fkv
        fver = frugal.__version__
    except Exception as e:  # noqa: BLE001
        report("frugal import", e)
        fkv, fver = None, "not imported"
    gpu = torch.cuda.get_device_name() if dev.type == "cuda" else "CPU (Triton interpreter)"
    head = (f"{gpu}; torch {torch.__version__}, Triton {triton.__version__}; vLLM {commit}; frugal {fver}; "
            f"Hq={args.hq} Hkv={args.hkv} page={args.page}; median of {args.reps} calls in turn, L2 flushed; "
            f"bytes per token and KV head (K + V, codes and scales)")
    lines = [head, ""] + TABLE_HEAD
    table_path = os.path.join(args.out, "turboquant_table.md")
    rows_file = open(os.path.join(args.out, "turboquant_rows.jsonl"), "w")

    def write_table():  # after every row, so that a cut run keeps its rows
        with open(table_path, "w") as f:
            f.write("\n".join(lines) + "\n")
            if problems:
                f.write("\nProblems:\n" + "".join(f"- {w}: `{t}`\n" for w, t in problems))

    print(head + "\n" + "\n".join(TABLE_HEAD), flush=True)
    write_table()
    t_start, last_s, last_size = time.time(), 0.0, 1
    for B, L, D in shapes:
        # The next shape is predicted to take the last one's time scaled up by its size (never down:
        # small rows are compile and launch time): one that would end past the budget does not start.
        predicted = last_s * max(1.0, B * L * D / last_size)
        if time.time() - t_start + predicted > args.budget:
            print(f"budget: {args.budget:.0f} s would be passed (B={B} L={L} D={D} predicted {predicted:.0f} s): "
                  "no more rows", flush=True)
            break
        t_shape = time.time()
        try:
            sh = make_shape(B, L, D)
        except Exception as e:  # noqa: BLE001 (out of memory)
            report(f"K/V of B={B} L={L} D={D}", e)
            continue
        for vname, kb, vb in presets:
            res = measure(sh, vllm, fkv, vname, kb, vb)
            lines.append(table_line(res))
            print(lines[-1], flush=True)
            rows_file.write(json.dumps(res) + "\n")
            rows_file.flush()
            write_table()
            if dev.type == "cuda":
                torch.cuda.empty_cache()
        del sh
        if dev.type == "cuda":
            torch.cuda.empty_cache()
        last_s, last_size = time.time() - t_shape, B * L * D
    print("\n" + "\n".join(lines))
    if problems:
        print("\nProblems:\n" + "".join(f"- {w}: {t}\n" for w, t in problems))
    write_table()
    print(f"wrote {table_path} ({time.time() - t_start:.0f} s)")


if __name__ == "__main__":
    main()
