"""Quality of a quantized KV cache on a real model: a plain f32 CPU forward pass of a llama-family GGUF
model whose attention reads K/V through frugal's quantize + dequantize, reporting perplexity, KL to
the f32 model, top-1 agreement, per-layer attention-output cosine and bits per element.

    python3 -m frugal.kv_eval --model SmolLM2-135M-Instruct.Q4_1.gguf --text prose.txt \
        --config k4v4 --config k4v4,kmean=128,win=64,sinks=4 --config k4v4,alloc=4.5

A configuration is a comma-separated list of options (see `CacheSpec.parse`):
  k4v4 / k=B / v=B      code bits of K and V (2, 3, 4, 8 or 16 for f16); per layer as k=8/4/4/...
  rule=ls               least-squares scale (default: the original L2-norm scale)
  signs=SEED            random signs before the rotation
  scale=f16             f16 scales (ScaleFormat.f16: 16 bits a vector instead of 32)
  kmean=N / vmean=N     subtract the per-head mean of the first N tokens (exact: see `attend`)
  kscale=qk | kscale=A  per-channel key scale s (k/s stored, q∘s used): s = √(rms_k/rms_q) or rms_k^A
  win=W / sinks=S       the most recent W tokens and the first S tokens kept in f16
  alloc=BITS            per-layer K/V bit widths from a calibration, within BITS per element
  engine=sim | lib      how each layer's causal attention is computed (default sim): `attend` simulates the
                        cache in numpy (every token quantized and dequantized, the window and sinks in f16);
                        lib runs it through frugal's caches as a serving decode loop does (`attend_library`:
                        per position, append its K and V, then decode attention for its query); calibration
                        (alloc=) always simulates
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from typing import Dict, List, Optional, Sequence

import numpy as np

F16_BITS = 16
SCALE_BITS = {"f32": 32, "f16": 16}  # one scale per quantized vector, in the cache's scale format
STAT_BITS = 32           # the per-head mean and per-channel scale are stored as f32
BIT_CHOICES = (2, 3, 4, 8)  # the code widths the cache supports
CALIB_TOKENS = 512       # calibration prefix for alloc= (a few hundred tokens)
ENGINES = ("sim", "lib")  # engine=: attention simulated in numpy, or through frugal's caches


# ---------------------------------------------------------------- the model

@dataclasses.dataclass
class Model:
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    rope_base: float
    eps: float
    embed: np.ndarray               # [vocab, hidden]
    out: np.ndarray                 # [vocab, hidden] (the embedding when tied)
    norm: np.ndarray                # [hidden]
    layers: List[Dict[str, np.ndarray]]  # attn_norm, wq, wk, wv, wo, ffn_norm, gate, up, down ([out, in])
    tokenizer: object = None


def load_gguf(path: str) -> Model:
    """Read a llama-architecture GGUF file and dequantize every tensor to f32."""
    from gguf import GGUFReader
    from gguf.quants import dequantize

    r = GGUFReader(path)
    arch = r.fields["general.architecture"].contents()
    meta = lambda key: r.fields[f"{arch}.{key}"].contents()
    w = {t.name: np.ascontiguousarray(dequantize(t.data, t.tensor_type), dtype=np.float32) for t in r.tensors}
    hidden, n_heads = meta("embedding_length"), meta("attention.head_count")
    layers = []
    for i in range(meta("block_count")):
        p = f"blk.{i}."
        layers.append({"attn_norm": w[p + "attn_norm.weight"], "wq": w[p + "attn_q.weight"],
                       "wk": w[p + "attn_k.weight"], "wv": w[p + "attn_v.weight"],
                       "wo": w[p + "attn_output.weight"], "ffn_norm": w[p + "ffn_norm.weight"],
                       "gate": w[p + "ffn_gate.weight"], "up": w[p + "ffn_up.weight"],
                       "down": w[p + "ffn_down.weight"]})
    m = Model(n_layers=len(layers), n_heads=n_heads, n_kv_heads=meta("attention.head_count_kv"),
              head_dim=hidden // n_heads, rope_base=float(meta("rope.freq_base")),
              eps=float(meta("attention.layer_norm_rms_epsilon")), embed=w["token_embd.weight"],
              out=w.get("output.weight", w["token_embd.weight"]), norm=w["output_norm.weight"], layers=layers)
    m.tokenizer = _tokenizer(r)
    return m


def _tokenizer(r):
    """The byte-level BPE of a 'gpt2'-model GGUF vocabulary (digits split one by one, as SmolLM's)."""
    if r.fields["tokenizer.ggml.model"].contents() != "gpt2":
        return None
    from tokenizers import Tokenizer, models, pre_tokenizers
    tokens = r.fields["tokenizer.ggml.tokens"].contents()
    merges = [tuple(m.split(" ", 1)) for m in r.fields["tokenizer.ggml.merges"].contents()]
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False)])
    return tok


def rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x: np.ndarray, base: float) -> np.ndarray:
    """Rotate x [T, H, D] by position: adjacent pairs (2i, 2i+1) by angle t·base^(-2i/D), the
    llama.cpp 'norm' layout (the GGUF converter permutes the Q/K weights into it)."""
    t, _, d = x.shape
    ang = np.arange(t, dtype=np.float64)[:, None] * base ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    cos, sin = np.cos(ang)[:, None, :].astype(np.float32), np.sin(ang)[:, None, :].astype(np.float32)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    y = np.empty_like(x)
    y[..., 0::2] = x0 * cos - x1 * sin
    y[..., 1::2] = x0 * sin + x1 * cos
    return y


def softmax_rows(s: np.ndarray) -> np.ndarray:
    s = s - s.max(axis=-1, keepdims=True)
    np.exp(s, out=s)
    s /= s.sum(axis=-1, keepdims=True)
    return s


def exact_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Causal GQA attention in f32: q [T, Hq, D], k/v [T, Hkv, D] -> [T, Hq, D]."""
    t, hq, d = q.shape
    g = hq // k.shape[1]
    causal = np.triu(np.ones((t, t), dtype=bool), 1)
    out = np.empty_like(q)
    for h in range(hq):
        s = (q[:, h] @ k[:, h // g].T) / np.float32(math.sqrt(d))
        s[causal] = -np.inf
        out[:, h] = softmax_rows(s) @ v[:, h // g]
    return out


def forward(m: Model, tokens: Sequence[int], attend=None, capture=None) -> np.ndarray:
    """Logits [T, vocab]. attend(layer, q, k, v) -> [T, Hq, D] replaces exact attention (q, k after
    RoPE); capture(layer, q, k, v, out_exact, out) sees both outputs of every layer."""
    x = m.embed[np.asarray(tokens)]
    t, d = len(tokens), m.head_dim
    for i, L in enumerate(m.layers):
        h = rms_norm(x, L["attn_norm"], m.eps)
        q = rope((h @ L["wq"].T).reshape(t, m.n_heads, d), m.rope_base)
        k = rope((h @ L["wk"].T).reshape(t, m.n_kv_heads, d), m.rope_base)
        v = (h @ L["wv"].T).reshape(t, m.n_kv_heads, d)
        o = attend(i, q, k, v) if attend is not None else exact_attention(q, k, v)
        if capture is not None:
            capture(i, q, k, v, exact_attention(q, k, v) if attend is not None else o, o)
        x = x + o.reshape(t, -1) @ L["wo"].T
        h = rms_norm(x, L["ffn_norm"], m.eps)
        g = h @ L["gate"].T
        x = x + ((g / (1.0 + np.exp(-g))) * (h @ L["up"].T)) @ L["down"].T
    return rms_norm(x, m.norm, m.eps) @ m.out.T


# ---------------------------------------------------------------- the cache configuration

@dataclasses.dataclass
class CacheSpec:
    name: str = "f32"
    k_bits: List[int] = None   # per layer; 16 = f16, 32 = exact f32
    v_bits: List[int] = None
    rule: str = "l2"
    signs: Optional[int] = None
    scale: str = "f32"
    kmean: int = 0
    vmean: int = 0
    kscale: Optional[str] = None
    win: int = 0
    sinks: int = 0
    alloc: Optional[float] = None
    engine: str = "sim"

    @staticmethod
    def parse(text: str, n_layers: int) -> "CacheSpec":
        spec = CacheSpec(name=text)
        widths = lambda s: [int(b) for b in s.split("/")] * (n_layers if "/" not in s else 1)
        spec.k_bits, spec.v_bits = [32] * n_layers, [32] * n_layers
        for opt in filter(None, text.split(",")):
            key, _, val = opt.partition("=")
            if key == "f32":
                continue
            if not val and key.startswith("k") and "v" in key:  # k4v4
                kb, vb = key[1:].split("v")
                spec.k_bits, spec.v_bits = widths(kb), widths(vb)
            elif key in ("k", "v"):
                setattr(spec, key + "_bits", widths(val))
            elif key in ("kmean", "vmean", "win", "sinks", "signs"):
                setattr(spec, key, int(val))
            elif key in ("rule", "kscale"):
                setattr(spec, key, val)
            elif key == "scale" and val in SCALE_BITS:
                spec.scale = val
            elif key == "alloc":
                spec.alloc = float(val)
            elif key == "engine" and val in ENGINES:
                spec.engine = val
            else:
                raise ValueError(f"[kv_eval] unknown cache option '{opt}' in '{text}'")
        for bits in spec.k_bits + spec.v_bits:
            if bits not in BIT_CHOICES + (16, 32):
                raise ValueError(f"[kv_eval] bits must be one of {BIT_CHOICES} or 16/32, got {bits} in '{text}'")
        if len(spec.k_bits) != n_layers or len(spec.v_bits) != n_layers:
            raise ValueError(f"[kv_eval] per-layer widths need {n_layers} entries in '{text}'")
        return spec


def vector_bits(bits: int, head_dim: int, scale: str = "f32") -> float:
    """Stored bits per element of one vector: its codes and its share of the scale."""
    return float(bits) if bits >= F16_BITS else bits + SCALE_BITS[scale] / head_dim


def bits_per_element(spec: CacheSpec, context: int, head_dim: int) -> float:
    """Average stored bits per K/V element at `context` tokens: codes, scales, the f16 window and
    sinks, and the per-head statistics (amortized over the context)."""
    f16_tokens = min(context, spec.win + spec.sinks)
    total = 0.0
    for bits in spec.k_bits + spec.v_bits:
        b = min(bits, F16_BITS)
        total += (f16_tokens * F16_BITS + (context - f16_tokens) * vector_bits(b, head_dim, spec.scale)) / context
    n = len(spec.k_bits)
    stats = (spec.kmean > 0) + (spec.vmean > 0) + (spec.kscale is not None)
    return total / (2 * n) + stats * STAT_BITS / context / 2


def quantize_roundtrip(x: np.ndarray, bits: int, rule: str, signs: Optional[int], scale: str = "f32") -> np.ndarray:
    """x [T, H, D] f32 through frugal's CPU cache: quantize every vector, dequantize it back."""
    if bits == 32:
        return x
    if bits == 16:
        return x.astype(np.float16).astype(np.float32)
    from . import kv
    c = kv.Cache(num_kv_heads=x.shape[1], head_dim=x.shape[2], capacity=x.shape[0], bits=bits,
                 scale_rule=kv.ScaleRule.least_squares if rule == "ls" else kv.ScaleRule.l2_norm,
                 sign_seed=signs, scale_format=scale)
    c.append(np.ascontiguousarray(x, dtype=np.float32))
    return np.asarray(c.dequantize(like=x))


def key_channel_scale(q: np.ndarray, k: np.ndarray, how: str, n_kv: int) -> np.ndarray:
    """Per KV head and channel scale s [Hkv, D] (geometric mean 1): the key is stored as k/s and the
    query used as q∘s. 'qk': s = √(rms_k / rms_q) minimizes ‖q∘s‖·‖k/s‖, the size of the score
    error of an isotropic quantizer; a number A: s = rms_k^A."""
    t, hq, d = q.shape
    rk = np.sqrt(np.mean(k.astype(np.float64) ** 2, axis=0)) + 1e-6  # [Hkv, D]
    if how == "qk":
        rq = np.sqrt(np.mean(q.reshape(t, n_kv, hq // n_kv, d).astype(np.float64) ** 2, axis=(0, 2))) + 1e-6
        s = np.sqrt(rk / rq)
    else:
        s = rk ** float(how)
    return (s / np.exp(np.mean(np.log(s), axis=-1, keepdims=True))).astype(np.float32)


def transform(spec: CacheSpec, layer: int, q: np.ndarray, k: np.ndarray, v: np.ndarray):
    """The exact transforms of the configured cache: (q', k', v', μ_v) with softmax(q'·k') equal to
    softmax(q·k) and softmax(q·k)·v = softmax(q'·k')·v' + μ_v. A per-head key mean shifts every score
    of a query by the same q·μ; a per-channel key scale cancels in (q∘s)·(k/s); the value mean comes
    back whole because each query's weights sum to one."""
    g = q.shape[1] // k.shape[1]
    mu_v = np.zeros((1, v.shape[1], v.shape[2]), dtype=np.float32)
    if spec.kmean and spec.k_bits[layer] < 32:
        k = k - k[: spec.kmean].mean(axis=0, keepdims=True)
    if spec.kscale and spec.k_bits[layer] < 32:
        n = spec.kmean or CALIB_TOKENS
        s = key_channel_scale(q[:n], k[:n], spec.kscale, k.shape[1])
        k, q = k / s, q * np.repeat(s, g, axis=0)
    if spec.vmean and spec.v_bits[layer] < 32:
        mu_v = v[: spec.vmean].mean(axis=0, keepdims=True)
        v = v - mu_v
    return q, k, v, np.repeat(mu_v, g, axis=1)


def attend(spec: CacheSpec, layer: int, q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Causal attention as the configured cache computes it: `transform`, then every stored vector
    through frugal's quantizer except the f16 window and sinks (which hold the same transformed
    vectors). Every token is quantized independently, so quantizing all of them at once equals
    quantizing each as it slides out of the window."""
    t, hq, d = q.shape
    g = hq // k.shape[1]
    kb, vb = spec.k_bits[layer], spec.v_bits[layer]
    q, k, v, mu_v = transform(spec, layer, q, k, v)
    kq, vq = (quantize_roundtrip(x, b, spec.rule, spec.signs, spec.scale) for x, b in ((k, kb), (v, vb)))
    pos = np.arange(t)
    causal = pos[None, :] > pos[:, None]
    full = None  # tokens held in f16: the last `win` before each query and the first `sinks`
    if spec.win or spec.sinks:
        full = (pos[:, None] - pos[None, :] < spec.win) | (pos[None, :] < spec.sinks)
        kf, vf = (quantize_roundtrip(x, 32 if b == 32 else F16_BITS, "", None) for x, b in ((k, kb), (v, vb)))
    out = np.empty_like(q)
    scale = np.float32(1.0 / math.sqrt(d))
    for h in range(hq):
        j = h // g
        s = (q[:, h] @ kq[:, j].T) * scale
        if full is not None:
            s = np.where(full, (q[:, h] @ kf[:, j].T) * scale, s)
        s[causal] = -np.inf
        p = softmax_rows(s)
        if full is None:
            out[:, h] = p @ vq[:, j]
        else:
            out[:, h] = np.where(full, p, 0) @ vf[:, j] + np.where(full, 0, p) @ vq[:, j]
    return out + mu_v


def attend_library(spec: CacheSpec, layer: int, q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Causal attention through frugal's caches, as a serving decode loop computes it: `transform`, then
    K and V caches of the layer's bits, rule, signs, window and sinks (batch 1, capacity T); for each
    position p, append token p's K and V and run decode attention for query p (all query heads). The
    result is `attend`'s up to the f32 rounding of the codes' rotated-domain arithmetic (~1e-6 per layer;
    through the layers the quantizer amplifies it, a code next to a boundary flipping, so the two engines'
    perplexities differ by about as much as a 1e-6 relative change of the input moves either). A layer whose
    K or V is f16 or f32 (16, 32) has no such cache and goes through `attend`."""
    kb, vb = spec.k_bits[layer], spec.v_bits[layer]
    if kb not in BIT_CHOICES or vb not in BIT_CHOICES:
        return attend(spec, layer, q, k, v)
    from . import _frugal
    q, k, v, mu_v = transform(spec, layer, q, k, v)
    t, hq, d = q.shape
    rule = _frugal.ScaleRule.least_squares if spec.rule == "ls" else _frugal.ScaleRule.l2_norm
    kc, vc = (_frugal.Cache(num_kv_heads=k.shape[1], head_dim=d, capacity=t, bits=b, scale_rule=rule,
                            sign_seed=spec.signs, scale_format=getattr(_frugal.ScaleFormat, spec.scale),
                            window=min(spec.win, t), sinks=min(spec.sinks, t))
              for b in (kb, vb))
    # One [1, H, D] view per position, made up front: the loop is only the three calls.
    rows = lambda a: list(np.ascontiguousarray(a, dtype=np.float32)[:, None])
    out = np.empty((t, hq, d), dtype=np.float32)
    append_k, append_v, decode = kc.append, vc.append, _frugal.decode_attention
    for qp, kp, vp, op in zip(rows(q), rows(k), rows(v), out[:, None]):
        append_k(kp)
        append_v(vp)
        decode(qp, kc, vc, out=op)
    return out + mu_v


# ---------------------------------------------------------------- calibration

def calibrate_bits(m: Model, tokens: Sequence[int], spec: CacheSpec, budget: float, context: int) -> CacheSpec:
    """Per-layer K and V widths within `budget` bits per element at `context` tokens: each layer's
    attention-output error with only its K (or only its V) at each width, measured on the reference
    activations of the calibration tokens, then greedy upgrades by error saved per bit."""
    n = m.n_layers
    errs = {}  # (layer, 'k'|'v', bits) -> relative squared error of the attention output

    def capture(i, q, k, v, exact, _):
        for which in "kv":
            for b in BIT_CHOICES:
                trial = dataclasses.replace(spec, k_bits=[32] * n, v_bits=[32] * n, win=spec.win, sinks=spec.sinks)
                getattr(trial, which + "_bits")[i] = b
                o = attend(trial, i, q, k, v)
                errs[(i, which, b)] = float(np.sum((o - exact) ** 2) / np.sum(exact ** 2))

    forward(m, tokens, capture=capture)
    width = {(i, w): BIT_CHOICES[0] for i in range(n) for w in "kv"}
    current = lambda: dataclasses.replace(spec, k_bits=[width[(i, "k")] for i in range(n)],
                                          v_bits=[width[(i, "v")] for i in range(n)], alloc=None)
    while True:
        best, best_gain = None, 0.0
        for (i, w), b in width.items():
            up = [c for c in BIT_CHOICES if c > b]
            for c in up:
                width[(i, w)] = c
                fits = bits_per_element(current(), context, m.head_dim) <= budget + 1e-9
                width[(i, w)] = b
                gain = (errs[(i, w, b)] - errs[(i, w, c)]) / (c - b)
                if fits and gain > best_gain:
                    best, best_gain = ((i, w), c), gain
        if best is None:
            return current()
        width[best[0]] = best[1]


# ---------------------------------------------------------------- metrics

def log_softmax(z: np.ndarray) -> np.ndarray:
    z = z.astype(np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def evaluate(m: Model, tokens: Sequence[int], spec: CacheSpec, ref_logp: np.ndarray) -> dict:
    """Perplexity, KL(f32 ‖ config), top-1 agreement and per-layer attention-output cosine (the
    cache's output against exact attention on the same inputs, per token over all heads)."""
    cos = [[] for _ in range(m.n_layers)]

    def capture(i, q, k, v, exact, out):
        a, b = exact.reshape(len(tokens), -1), out.reshape(len(tokens), -1)
        cos[i] = float(np.mean(np.sum(a * b, -1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))))

    engine = attend_library if spec.engine == "lib" else attend
    logp = log_softmax(forward(m, tokens, attend=lambda *a: engine(spec, *a), capture=capture))
    nxt = np.asarray(tokens[1:])
    nll = -logp[np.arange(len(nxt)), nxt].mean()
    p_ref = np.exp(ref_logp)
    kl = float(np.mean(np.sum(p_ref * (ref_logp - logp), axis=-1)))
    top1 = float(np.mean(np.argmax(logp, -1) == np.argmax(ref_logp, -1)))
    return {"ppl": float(np.exp(nll)), "kl": kl, "top1": top1, "cos": cos}


def perplexity(logp: np.ndarray, tokens: Sequence[int]) -> float:
    nxt = np.asarray(tokens[1:])
    return float(np.exp(-logp[np.arange(len(nxt)), nxt].mean()))


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m frugal.kv_eval", description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="a llama-family GGUF file")
    ap.add_argument("--text", required=True, help="a UTF-8 text file to evaluate on")
    ap.add_argument("--tokens", type=int, default=2048, help="tokens of the text to use (default 2048)")
    ap.add_argument("--config", action="append", default=[], help="a cache configuration (repeatable)")
    ap.add_argument("--context", type=int, nargs="+", default=[4096, 32768],
                    help="contexts at which to report bits per element (default 4096 32768)")
    ap.add_argument("--budget-context", type=int, default=4096, help="context at which alloc= budgets hold")
    a = ap.parse_args(argv)
    m = load_gguf(a.model)
    with open(a.text, encoding="utf-8") as f:
        tokens = m.tokenizer.encode(f.read()).ids[: a.tokens]
    ref = log_softmax(forward(m, tokens))
    ppl0 = perplexity(ref, tokens)
    print(f"model {a.model}: {m.n_layers} layers, {m.n_heads}/{m.n_kv_heads} heads, head_dim {m.head_dim}")
    print(f"text {a.text}: {len(tokens)} tokens; f32 perplexity {ppl0:.4f}")
    ctx = " | ".join(f"bits@{c // 1024}K" for c in a.context)
    print(f"| config | {ctx} | ppl | Δppl | KL | top-1 | cos mean | cos worst (layer) | widths |")
    print("|---|" + "---|" * (len(a.context) + 7))
    for text in a.config:
        spec = CacheSpec.parse(text, m.n_layers)
        if spec.alloc is not None:
            spec = calibrate_bits(m, tokens[:CALIB_TOKENS], spec, spec.alloc, a.budget_context)
        r = evaluate(m, tokens, spec, ref)
        bits = " | ".join(f"{bits_per_element(spec, c, m.head_dim):.3f}" for c in a.context)
        worst = int(np.argmin(r["cos"]))
        widths = "" if text.find("alloc") < 0 else "K " + "/".join(map(str, spec.k_bits)) + " V " + "/".join(map(str, spec.v_bits))
        print(f"| {text} | {bits} | {r['ppl']:.4f} | {100 * (r['ppl'] / ppl0 - 1):+.2f}% | {r['kl']:.5f} | "
              f"{100 * r['top1']:.1f}% | {np.mean(r['cos']):.5f} | {r['cos'][worst]:.5f} ({worst}) | {widths} |",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
