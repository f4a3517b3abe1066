"""The KV-cache binding against a plain numpy oracle of the format (CPU)."""
import numpy as np
import pytest

import frugal
from frugal import kv


def hadamard_matrix(d):
    h = np.array([[1.0]])
    while h.shape[0] < d:
        h = np.block([[h, h], [h, -h]])
    return h


def oracle_quantize(x, bits):
    """Plain numpy: rotate, normalize, count boundaries strictly below, pack LSB-first."""
    centroids, boundaries, _ = kv.lloyd_max_codebook(bits)
    b = np.asarray(boundaries, dtype=np.float64)
    d = x.shape[-1]
    y = x.astype(np.float64) @ hadamard_matrix(d) / np.sqrt(d)
    n = np.linalg.norm(y, axis=-1, keepdims=True)
    u = np.where(n > 1e-10, y / np.maximum(n, 1e-300) * np.sqrt(d), 0.0)
    idx = np.searchsorted(b, u, side="left")  # number of boundaries strictly below u
    margin = np.min(np.abs(u[..., None] - b), axis=-1)
    bitpos = np.arange(d) * bits
    packed = np.zeros(x.shape[:-1] + (d * bits // 8,), dtype=np.uint16)
    for i in range(d):
        byte, shift = bitpos[i] // 8, bitpos[i] % 8
        packed[..., byte] |= (idx[..., i] << shift).astype(np.uint16) & 0xFF
        if shift + bits > 8:
            packed[..., byte + 1] |= (idx[..., i] >> (8 - shift)).astype(np.uint16)
    return packed.astype(np.uint8), n[..., 0], margin


def test_codebook_matches_published_digits():
    c, b, mse = kv.lloyd_max_codebook(4)
    assert np.allclose(c[8:], [0.1283950, 0.3880483, 0.6567591, 0.9423405, 1.2562312, 1.6180464, 2.0690172,
                               2.7325896], atol=5e-7)
    assert abs(mse - 0.009501) < 5e-7


def test_hadamard_transform_matches_explicit_matrix(rng):
    x = rng.standard_normal((5, 128)).astype(np.float32)
    y = kv.hadamard_transform(x)
    assert isinstance(y, np.ndarray)
    ref = x.astype(np.float64) @ hadamard_matrix(128) / np.sqrt(128)
    assert np.linalg.norm(y - ref) / np.linalg.norm(ref) < 1e-6
    kv.hadamard_transform(x, out=x)  # in place
    assert np.array_equal(x, y)


@pytest.mark.parametrize("bits", [2, 3, 4, 8])
def test_cache_packs_like_the_numpy_oracle(rng, bits):
    h, d, t = 4, 64, 9
    x = rng.standard_normal((t, h, d)).astype(np.float32)
    c = kv.Cache(num_kv_heads=h, head_dim=d, capacity=16, bits=bits)
    c.append(x)
    packed_ref, scale_ref, margin = oracle_quantize(x, bits)  # [t, h, ...]
    packed = np.asarray(c.packed)[0].transpose(1, 0, 2)[:t]  # [capacity, h, bytes] -> first t tokens
    scales = np.asarray(c.scales)[0].T[:t]
    clear = np.all(margin > 1e-6, axis=-1)  # vectors with no coordinate within 1e-6 of a boundary
    assert clear.mean() > 0.5
    assert np.array_equal(packed[clear], packed_ref[clear])
    assert np.allclose(scales, scale_ref, rtol=1e-6)


def test_dequantize_round_trip_error_is_the_codebook_mse(rng):
    h, d, t = 8, 128, 256
    x = rng.standard_normal((t, h, d)).astype(np.float32)
    c = kv.Cache(num_kv_heads=h, head_dim=d, capacity=t)
    c.append(x)
    y = c.dequantize()
    assert y.shape == (t, h, d) and y.dtype == np.float32
    mse = np.mean((y - x) ** 2 / np.mean(x**2, axis=-1, keepdims=True))
    assert abs(mse - 0.009501) / 0.009501 < 0.05


def test_views_share_the_cache_storage(rng):
    c = kv.Cache(num_kv_heads=1, head_dim=16, capacity=4)
    p1 = np.asarray(c.packed)
    c.append(rng.standard_normal((1, 1, 16)).astype(np.float32))
    assert p1.any()  # the earlier view sees the write: no copy was made
    del c
    assert p1.shape == (1, 1, 4, 8)  # still valid: the view keeps the cache alive


def test_ring_wraps_and_keeps_the_last_tokens(rng):
    c = kv.Cache(num_kv_heads=2, head_dim=32, capacity=4, sliding=True)
    x = rng.standard_normal((10, 2, 32)).astype(np.float32)
    for i in range(0, 10, 3):
        c.append(x[i:i + 3])
    assert c.write_pos() == 10 and c.first_held() == 6
    y = c.dequantize(0, 6, 10)
    assert np.linalg.norm(y - x[6:]) / np.linalg.norm(x[6:]) < 0.15
    with pytest.raises(frugal.Error, match=r"\[kv::dequantize\].*overwritten"):
        c.dequantize(0, 5, 10)


@pytest.mark.parametrize("kwargs,match", [
    (dict(num_kv_heads=2, head_dim=96, capacity=8), "head_dim must be a power of two"),
    (dict(num_kv_heads=2, head_dim=64, capacity=8, bits=5), "bits must be 2, 3, 4 or 8, got 5"),
    (dict(num_kv_heads=0, head_dim=64, capacity=8), "num_kv_heads"),
    (dict(num_kv_heads=2, head_dim=64, capacity=0), "capacity"),
])
def test_bad_configs_raise_with_the_ops_message(kwargs, match):
    with pytest.raises(frugal.Error, match=match):
        kv.Cache(**kwargs)


def test_bad_appends_raise(rng):
    c = kv.Cache(num_kv_heads=2, head_dim=16, capacity=4)
    with pytest.raises(frugal.Error, match=r"\[kv::append\] x must have shape \[\*, 2, 16\]"):
        c.append(np.zeros((3, 2, 8), np.float32))
    with pytest.raises(frugal.Error, match="passes the global cache's capacity 4"):
        c.append(rng.standard_normal((5, 2, 16)).astype(np.float32))
    with pytest.raises(frugal.Error, match="must have dtype"):
        c.append(np.zeros((1, 2, 16), np.int32))


def attention_oracle(q, k, v, scale):
    """Plain double-precision softmax attention with GQA: q [B, Hq, D], k/v [B, T, Hkv, D]."""
    b, hq, d = q.shape
    g = hq // k.shape[2]
    out = np.zeros((b, hq, d))
    for i in range(b):
        for h in range(hq):
            s = k[i, :, h // g, :].astype(np.float64) @ q[i, h].astype(np.float64) * scale
            p = np.exp(s - s.max())
            out[i, h] = (p / p.sum()) @ v[i, :, h // g, :].astype(np.float64)
    return out


@pytest.mark.parametrize("sliding", [False, True])
def test_decode_attention_matches_the_oracle_over_the_dequantized_cache(rng, sliding):
    b, hkv, hq, d, t, cap = 2, 2, 8, 64, 40, (16 if sliding else 48)
    k = kv.Cache(batch=b, num_kv_heads=hkv, head_dim=d, capacity=cap, sliding=sliding, sign_seed=3)
    v = kv.Cache(batch=b, num_kv_heads=hkv, head_dim=d, capacity=cap, sliding=sliding, bits=8)
    x_k = rng.standard_normal((b, t, hkv, d)).astype(np.float32)
    x_v = rng.standard_normal((b, t, hkv, d)).astype(np.float32)
    for i in range(0, t, 8):  # several appends: the ring wraps when sliding
        k.append(x_k[:, i:i + 8])
        v.append(x_v[:, i:i + 8])
    q = rng.standard_normal((b, hq, d)).astype(np.float32)
    out = kv.decode_attention(q, k, v)
    assert isinstance(out, np.ndarray) and out.shape == (b, hq, d)
    first = k.first_held()
    kd = np.stack([k.dequantize(i, first, t) for i in range(b)])
    vd = np.stack([v.dequantize(i, first, t) for i in range(b)])
    ref = attention_oracle(q, kd, vd, 1 / np.sqrt(d))
    assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 1e-5


def test_decode_attention_refuses_mismatched_heads(rng):
    k = kv.Cache(num_kv_heads=2, head_dim=16, capacity=4)
    v = kv.Cache(num_kv_heads=2, head_dim=16, capacity=4)
    x = rng.standard_normal((2, 2, 16)).astype(np.float32)
    k.append(x)
    v.append(x)
    with pytest.raises(frugal.Error, match=r"\[attention::decode_attention\]"):
        kv.decode_attention(rng.standard_normal((1, 3, 16)).astype(np.float32), k, v)


# ---- exact rows (window, sinks) -----------------------------------------------------------------

def f16(x):
    return x.astype(np.float16).astype(np.float32)


def fill(c, x, t):
    """Tokens [0, t) of x [b, t + 3, h, d] into every sequence of c, 5 at a time, and 3 more into sequence 1."""
    for i in range(0, t, 5):
        c.append(x[:, i:min(i + 5, t)])
    c.append(x[1, t:], seq=1)


def fill_pair(rng, b, h, d, cap, t, sliding, bits=4, sign_seed=5, **exact):
    """A cache with exact rows and the same cache without, given the same random tokens by `fill`,
    and those tokens [b, t + 3, h, d]."""
    x = rng.standard_normal((b, t + 3, h, d)).astype(np.float32)
    kw = dict(batch=b, num_kv_heads=h, head_dim=d, capacity=cap, sliding=sliding, bits=bits, sign_seed=sign_seed)
    plain, rows = kv.Cache(**kw), kv.Cache(**kw, **exact)
    fill(plain, x, t)
    fill(rows, x, t)
    return plain, rows, x


@pytest.mark.parametrize("sliding", [False, True])
def test_exact_rows_leave_the_codes_byte_identical(rng, sliding):
    plain, rows, _ = fill_pair(rng, 2, 2, 32, 16, 13 if not sliding else 30, sliding, window=4, sinks=2)
    assert np.array_equal(np.asarray(rows.packed), np.asarray(plain.packed))
    assert np.asarray(rows.scales).tobytes() == np.asarray(plain.scales).tobytes()
    assert rows.config["window"] == 4 and rows.config["sinks"] == 2 and plain.exact is None


@pytest.mark.parametrize("sliding", [False, True])
def test_dequantize_reads_the_f16_values_of_window_and_sink_tokens(rng, sliding):
    win, sinks, t = 5, 3, (13 if not sliding else 30)
    plain, rows, x = fill_pair(rng, 2, 2, 32, 16, t, sliding, window=win, sinks=sinks)
    exact = np.asarray(rows.exact)
    assert exact.shape == (2, 2, sinks + win, 32) and exact.dtype == np.float16
    for b in range(2):
        w, first = rows.write_pos(b), rows.first_held(b)
        for tok in list(range(sinks)) + list(range(first, w)):
            held = tok < sinks or tok >= w - win
            assert rows.is_exact(b, tok) == held, (b, tok)
            got = rows.dequantize(b, tok, tok + 1)[0]
            want = f16(x[b, tok]) if held else plain.dequantize(b, tok, tok + 1)[0]
            assert np.array_equal(got, want), (b, tok)
            if held:  # and the row the header says holds it
                row = tok if tok < sinks else sinks + tok % win
                assert np.array_equal(exact[b, :, row], x[b, tok].astype(np.float16)), (b, tok)


def exact_rows_oracle(q, k, v, lengths, scale):
    """Double precision softmax attention of q [B, Hq, D] over the tokens each sequence attends, as
    dequantize gives them: the sinks and the held tokens [first, L) (explicit lengths L, or write_pos)."""
    out = np.zeros(q.shape)
    g = q.shape[1] // k.config["num_kv_heads"]
    sinks, cap = k.config["sinks"], k.config["capacity"]
    for b in range(q.shape[0]):
        n = lengths[b] if lengths else k.write_pos(b)
        first = max(sinks, n - cap) if k.config["sliding"] else 0
        parts = [(0, min(sinks, n)), (first, n)] if first > 0 else [(0, n)]
        kd = np.concatenate([k.dequantize(b, lo, hi) for lo, hi in parts]).astype(np.float64)
        vd = np.concatenate([v.dequantize(b, lo, hi) for lo, hi in parts]).astype(np.float64)
        for h in range(q.shape[1]):
            s = kd[:, h // g] @ q[b, h].astype(np.float64) * scale
            p = np.exp(s - s.max())
            out[b, h] = p / p.sum() @ vd[:, h // g]
    return out


@pytest.mark.parametrize("sliding,t,lengths", [(False, 37, None), (False, 37, [20, 39]), (True, 37, None),
                                               (True, 61, None), (True, 61, [61, 64])])
def test_decode_attention_with_exact_rows_matches_the_oracle(rng, sliding, t, lengths):
    """A ring of 16 written with 37 or 61 tokens has wrapped past its sinks: it attends them besides
    the 16 tokens it holds, the newest 6 of which are f16 rows."""
    b, hkv, hq, d, cap = 2, 2, 6, 32, (16 if sliding else 48)
    exact = dict(window=6, sinks=3)
    plain_k, k, _ = fill_pair(rng, b, hkv, d, cap, t, sliding, **exact)
    plain_v, v, _ = fill_pair(rng, b, hkv, d, cap, t, sliding, bits=8, sign_seed=None, **exact)
    assert not sliding or k.first_held(0) > exact["sinks"]
    q = rng.standard_normal((b, hq, d)).astype(np.float32)
    out = kv.decode_attention(q, k, v, lengths=lengths, softmax_scale=0.3)
    ref = exact_rows_oracle(q, k, v, lengths, 0.3)
    assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 1e-5
    without = kv.decode_attention(q, plain_k, plain_v, lengths=lengths, softmax_scale=0.3)
    assert np.linalg.norm(without - ref) / np.linalg.norm(ref) > 1e-3  # the rows changed the result


@pytest.mark.parametrize("field,value", [("window", 9), ("window", -1), ("sinks", 9), ("sinks", -2)])
def test_bad_window_or_sinks_raise_naming_the_field(field, value):
    message = rf"\[kv::Cache\] {field} must be in \[0, capacity = 8\] tokens, got {value}"
    with pytest.raises(frugal.Error, match=message):
        kv.Cache(num_kv_heads=2, head_dim=16, capacity=8, **{field: value})


def test_is_exact_refuses_a_token_not_written(rng):
    c = kv.Cache(num_kv_heads=1, head_dim=16, capacity=8, window=2)
    c.append(rng.standard_normal((3, 1, 16)).astype(np.float32))
    assert [c.is_exact(0, t) for t in range(3)] == [False, True, True]
    with pytest.raises(frugal.Error, match=r"\[kv::is_exact\] token 3 has not been written"):
        c.is_exact(0, 3)


def test_wrap_over_another_caches_storage_shares_its_exact_rows(rng):
    c = kv.Cache(batch=2, num_kv_heads=2, head_dim=16, capacity=8, window=3, sinks=1)
    packed, scales, signs, centroids, boundaries, positions, exact = c._impl._storage
    assert signs is None
    w = frugal._frugal.Cache._wrap(packed, scales, None, centroids, boundaries, positions, False,
                                   kv.ScaleRule.l2_norm, exact=exact, window=3, sinks=1)
    x = rng.standard_normal((2, 5, 2, 16)).astype(np.float32)
    w.append(x)
    assert w.config["window"] == 3 and w.config["sinks"] == 1
    assert np.array_equal(np.asarray(c.exact)[:, :, 0], x[:, 0].astype(np.float16))
    c.append(x)  # c's own positions are still 0: it writes the same tokens again
    assert np.array_equal(np.asarray(w.dequantize(1)), np.asarray(c.dequantize(1)))


def test_wrap_refuses_exact_rows_that_do_not_fit(rng):
    c = kv.Cache(num_kv_heads=2, head_dim=16, capacity=8, window=3, sinks=1)
    packed, scales, _, centroids, boundaries, positions, exact = c._impl._storage
    wrap = lambda e, **kw: frugal._frugal.Cache._wrap(packed, scales, None, centroids, boundaries, positions, False,
                                                      kv.ScaleRule.l2_norm, exact=e, **kw)
    with pytest.raises(frugal.Error, match=r"\[kv::Cache::wrap\] exact must have shape \[1, 2, 5, 16\]"):
        wrap(exact, window=4, sinks=1)
    with pytest.raises(frugal.Error, match=r"\[kv::Cache::wrap\] exact rows were given but the config has no"):
        wrap(exact)
    with pytest.raises(frugal.Error, match=r"\[kv::Cache::wrap\] exact"):
        wrap(None, window=3, sinks=1)
    size = 2 * 4 * 16 * 2
    buf = np.zeros(size + 32, np.uint8)
    at = (2 - buf.ctypes.data) % 16  # 2 bytes past a 16-byte boundary
    shifted = buf[at:at + size].view(np.float16).reshape(1, 2, 4, 16)
    with pytest.raises(frugal.Error, match=r"\[kv::Cache::wrap\] exact must start on a 16-byte boundary"):
        wrap(shifted, window=3, sinks=1)


# ---- f16 scales ---------------------------------------------------------------------------------

@pytest.mark.parametrize("rule", [kv.ScaleRule.l2_norm, kv.ScaleRule.least_squares])
def test_f16_scales_are_the_f16_rounding_of_the_f32_ones_over_the_same_codes(rng, rule):
    kw = dict(batch=2, num_kv_heads=2, head_dim=32, capacity=16, sliding=True, bits=3, scale_rule=rule, sign_seed=4)
    full, half = kv.Cache(**kw), kv.Cache(**kw, scale_format="f16")
    x = (rng.standard_normal((2, 30, 2, 32)) * 50).astype(np.float32)
    x[0, 29, 1] = 20000.0  # a norm past f16's range: NaN in the f16 format
    for i in range(0, 30, 7):
        full.append(x[:, i:i + 7])
        half.append(x[:, i:i + 7])
    assert half.config["scale_format"] == kv.ScaleFormat.f16
    assert np.asarray(half.scales).dtype == np.float16
    assert np.array_equal(np.asarray(half.packed), np.asarray(full.packed))
    s32, s16 = np.asarray(full.scales), np.asarray(half.scales)
    with np.errstate(over="ignore"):
        want = s32.astype(np.float16)
    want[np.isinf(want)] = np.nan
    assert np.array_equal(s16, want, equal_nan=True) and np.isnan(s16[0, 1, 29 % 16])
    # dequantize: the f32 format's reconstruction scaled by h/s, vector by vector
    first = full.first_held()
    ratio = (s16.astype(np.float64) / s32)[1][:, [t % 16 for t in range(first, 30)]].T  # [t, h]
    ref = np.asarray(full.dequantize(1, first, 30)) * ratio[:, :, None]
    assert np.abs(np.asarray(half.dequantize(1, first, 30)) - ref).max() <= 1e-5 * np.abs(ref).max()


def test_decode_attention_over_f16_scales_matches_the_oracle(rng):
    b, hkv, hq, d, t = 2, 2, 6, 64, 40
    k = kv.Cache(batch=b, num_kv_heads=hkv, head_dim=d, capacity=t, scale_format="f16", window=8, sinks=2)
    v = kv.Cache(batch=b, num_kv_heads=hkv, head_dim=d, capacity=t, bits=8, window=8, sinks=2)  # V's f32 scales
    k.append(rng.standard_normal((b, t, hkv, d)).astype(np.float32))
    v.append(rng.standard_normal((b, t, hkv, d)).astype(np.float32))
    q = rng.standard_normal((b, hq, d)).astype(np.float32)
    kd = np.stack([k.dequantize(i) for i in range(b)])
    vd = np.stack([v.dequantize(i) for i in range(b)])
    ref = attention_oracle(q, kd, vd, 1 / np.sqrt(d))
    out = kv.decode_attention(q, k, v)
    assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 1e-5


def test_wrap_takes_the_scale_format_from_the_scales_dtype(rng):
    c = kv.Cache(num_kv_heads=2, head_dim=16, capacity=8, scale_format="f16")
    packed, scales, _, centroids, boundaries, positions, _ = c._impl._storage
    w = frugal._frugal.Cache._wrap(packed, scales, None, centroids, boundaries, positions, False, kv.ScaleRule.l2_norm)
    assert w.config["scale_format"] == kv.ScaleFormat.f16
    x = rng.standard_normal((3, 2, 16)).astype(np.float32)
    w.append(x)
    assert np.asarray(c.scales)[0, :, :3].tobytes() == np.asarray(w.scales)[0, :, :3].tobytes()
    with pytest.raises(frugal.Error, match=r"\[kv::Cache::wrap\] scales must have dtype"):
        frugal._frugal.Cache._wrap(packed, np.zeros((1, 2, 8), np.int32), None, centroids, boundaries, positions,
                                   False, kv.ScaleRule.l2_norm)
    with pytest.raises(frugal.Error, match=r"\[kv::Cache\] scale_format must be 'f32' or 'f16', got 'bf16'"):
        kv.Cache(num_kv_heads=2, head_dim=16, capacity=8, scale_format="bf16")
