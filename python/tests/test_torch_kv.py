"""The per-sequence KV cache's torch custom ops (frugal::cache_append, frugal::decode_attention): the
same numbers as the plain API, opcheck, and a decode step under torch.compile(fullgraph=True)."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
import frugal  # noqa: E402
import frugal.torch as ft  # noqa: E402
from frugal import kv  # noqa: E402

devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() and frugal.cuda_available() else [])


def caches(device, batch=2, heads=2, dim=64, capacity=64, sliding=False, window=0, sinks=0, scale_format="f32"):
    k = kv.Cache(batch=batch, num_kv_heads=heads, head_dim=dim, capacity=capacity, sliding=sliding, sign_seed=11,
                 window=window, sinks=sinks, scale_format=scale_format, device=device)
    v = kv.Cache(batch=batch, num_kv_heads=heads, head_dim=dim, capacity=capacity, sliding=sliding, bits=8,
                 scale_rule=kv.ScaleRule.least_squares, window=window, sinks=sinks, scale_format=scale_format,
                 device=device)
    return k, v


def test_caches_made_after_import_have_their_tensors_over_the_cache_memory():
    k, _ = caches("cpu")
    t = k._torch
    assert t is not None and t.positions.dtype == torch.int64 and t.positions.device.type == "cpu"
    assert t.packed.data_ptr() == torch.from_dlpack(k._impl._storage[0]).data_ptr()
    k.append(np.zeros((2, 3, 2, 64), np.float32))
    assert t.positions.tolist() == [3, 3]  # the cache's own position memory
    t.positions.zero_()
    assert k.write_pos(0) == 0


@pytest.mark.parametrize("device", devices)
@pytest.mark.parametrize("scale_format", ["f32", "f16"])
def test_custom_ops_give_the_plain_apis_bytes_and_numbers(device, scale_format, rng):
    k1, v1 = caches(device, scale_format=scale_format)
    k2, v2 = caches(device, scale_format=scale_format)
    x = torch.from_numpy(rng.standard_normal((2, 9, 2, 64)).astype(np.float32)).to(device)
    y = torch.from_numpy(rng.standard_normal((2, 9, 2, 64)).astype(np.float32)).to(device)
    ft.cache_append(k1, x)
    ft.cache_append(v1, y)
    k2.append(x)
    v2.append(y)
    ft.cache_append(k1, x[1, :2], seq=1)
    ft.cache_append(v1, y[1, :2], seq=1)
    k2.append(x[1, :2], seq=1)
    v2.append(y[1, :2], seq=1)
    assert [k1.write_pos(0), k1.write_pos(1)] == [9, 11] == [v1.write_pos(0), v1.write_pos(1)]
    assert torch.equal(ft.cache_tensors(k1).packed, ft.cache_tensors(k2).packed)
    assert torch.equal(ft.cache_tensors(v1).scales, ft.cache_tensors(v2).scales)
    assert ft.cache_tensors(k1).scales.dtype == (torch.float16 if scale_format == "f16" else torch.float32)
    q = torch.randn(2, 8, 64, device=device)
    assert torch.equal(ft.decode_attention(q, k1, v1), kv.decode_attention(q, k2, v2))
    got = ft.decode_attention(q, k1, v1, lengths=torch.tensor([4, 11]), softmax_scale=0.3)
    assert torch.equal(got, kv.decode_attention(q, k2, v2, lengths=[4, 11], softmax_scale=0.3))


def oracle(q, k, v, lengths, scale):
    """Double-precision softmax attention of q [B, Hq, D] over the dequantized caches' first tokens."""
    out = np.zeros(q.shape)
    g = q.shape[1] // k.config["num_kv_heads"]
    for b, n in enumerate(lengths):
        kd, vd = k.dequantize(b, 0, n, like=q), v.dequantize(b, 0, n, like=q)  # [n, Hkv, D]
        for h in range(q.shape[1]):
            s = kd[:, h // g].astype(np.float64) @ q[b, h].astype(np.float64) * scale
            p = np.exp(s - s.max())
            out[b, h] = p / p.sum() @ vd[:, h // g]
    return out


def test_decode_attention_op_matches_a_double_precision_oracle(rng):
    k, v = caches("cpu")
    ft.cache_append(k, torch.from_numpy(rng.standard_normal((2, 20, 2, 64)).astype(np.float32)))
    ft.cache_append(v, torch.from_numpy(rng.standard_normal((2, 20, 2, 64)).astype(np.float32)))
    q = torch.from_numpy(rng.standard_normal((2, 8, 64)).astype(np.float32))
    out = ft.decode_attention(q, k, v, lengths=[20, 7])
    ref = oracle(q.numpy(), k, v, [20, 7], 1 / 8)
    assert np.linalg.norm(out.numpy() - ref) / np.linalg.norm(ref) < 1e-5


@pytest.mark.parametrize("device", devices)
@pytest.mark.parametrize("scale_format", ["f32", "f16"])
def test_custom_ops_pass_opcheck(device, scale_format):
    k, v = caches(device, capacity=256, scale_format=scale_format)
    ft.cache_append(v, torch.randn(2, 5, 2, 64, device=device))
    t, u = ft.cache_tensors(k), ft.cache_tensors(v)
    x = torch.randn(2, 3, 2, 64, device=device)
    # The storage as fresh tensors: opcheck runs the op several times and compares what it mutates.
    args = (x, t.packed.clone(), t.scales.clone(), t.signs.clone(), t.centroids, t.boundaries, t.exact.clone(),
            t.positions.clone(), False, "l2_norm", 0, 0, -1)
    torch.library.opcheck(ft.cache_append_op, args)
    ft.cache_append(k, torch.randn(2, 5, 2, 64, device=device))
    q = torch.randn(2, 4, 64, device=device)
    storage = (t.packed, t.scales, t.signs, t.centroids, t.boundaries, t.exact, t.positions, u.packed, u.scales,
               u.signs, u.centroids, u.boundaries, u.exact, u.positions, False)
    torch.library.opcheck(ft.decode_attention_op, (q,) + storage)
    torch.library.opcheck(ft.decode_attention_op, (q,) + storage + (0, 0, torch.tensor([2, 5]), 0.5, "f32", 0))


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "counting"])
@pytest.mark.parametrize("sliding", [False, True])
def test_a_compiled_decode_step_has_no_graph_break_and_matches_eager(backend, sliding, rng, counting_backend):
    torch._dynamo.reset()
    counting = counting_backend
    k1, v1 = caches("cpu", capacity=16, sliding=sliding)
    k2, v2 = caches("cpu", capacity=16, sliding=sliding)

    def step(q, xk, xv, k, v):
        ft.cache_append(k, xk)
        ft.cache_append(v, xv)
        return ft.decode_attention(q, k, v)

    compiled = torch.compile(step, backend=counting if backend == "counting" else backend, fullgraph=True)
    steps = 20 if sliding else 12  # a ring wraps
    for i in range(steps):
        q = torch.from_numpy(rng.standard_normal((2, 4, 64)).astype(np.float32))
        xk = torch.from_numpy(rng.standard_normal((2, 1, 2, 64)).astype(np.float32))
        xv = torch.from_numpy(rng.standard_normal((2, 1, 2, 64)).astype(np.float32))
        got = compiled(q, xk, xv, k1, v1)
        want = step(q, xk, xv, k2, v2)
        assert torch.equal(got, want), i
    assert k1.write_pos(1) == v1.write_pos(0) == steps
    assert torch.equal(ft.cache_tensors(k1).packed, ft.cache_tensors(k2).packed)
    if backend == "counting":
        assert counting.graphs == 1  # the positions are a tensor: a new step is no new graph


def test_errors_inside_the_ops_are_frugals_and_a_refused_append_changes_nothing():
    k, v = caches("cpu", capacity=4)
    ft.cache_append(k, torch.randn(2, 3, 2, 64))
    before = ft.cache_tensors(k).packed.clone()
    with pytest.raises(frugal.Error, match=r"\[kv::append\] sequence 0: writing 2 tokens at write_pos 3 passes"):
        ft.cache_append(k, torch.randn(2, 2, 2, 64))
    assert k.write_pos(0) == 3 and torch.equal(ft.cache_tensors(k).packed, before)
    with pytest.raises(frugal.Error, match=r"\[attention::decode_attention\] sequence 0: the K cache holds 3"):
        ft.decode_attention(torch.randn(2, 4, 64), k, v)
    ft.cache_append(v, torch.randn(2, 3, 2, 64))
    with pytest.raises(frugal.Error, match=r"\[attention::decode_attention\] lengths\[1\] = 9 passes"):
        ft.decode_attention(torch.randn(2, 4, 64), k, v, lengths=[1, 9])
    ring, _ = caches("cpu", sliding=True)
    with pytest.raises(frugal.Error, match=r"\[attention::decode_attention\].*ring"):
        ft.decode_attention(torch.randn(2, 4, 64), ring, v)


def test_wrap_refuses_storage_that_is_not_the_configs():
    k, _ = caches("cpu")
    t = ft.cache_tensors(k)
    from frugal._torch_kv import _wrap_cache as wrap
    with pytest.raises(frugal.Error, match=r"\[kv::Cache::wrap\] scales must have shape \[2, 2, 64\], got \[2, 2, 63\]"):
        wrap(t.packed, t.scales[:, :, :63].contiguous(), t.signs, t.centroids, t.boundaries, t.exact, t.positions,
             False, "l2_norm")
    with pytest.raises(frugal.Error, match=r"\[kv::Cache::wrap\] write_positions\[1\] = 65 passes"):
        wrap(t.packed, t.scales, t.signs, t.centroids, t.boundaries, t.exact, torch.tensor([0, 65]), False, "l2_norm")
    with pytest.raises(frugal.Error, match=r"\[kv::Cache::wrap\] positions must be i64"):
        wrap(t.packed, t.scales, t.signs, t.centroids, t.boundaries, t.exact, torch.tensor([0, 1], dtype=torch.int32),
             False, "l2_norm")
    with pytest.raises(frugal.Error, match=r"\[kv::Cache::wrap\] signs must have shape \[64\]"):
        wrap(t.packed, t.scales, t.signs[:32].contiguous(), t.centroids, t.boundaries, t.exact, t.positions, False,
             "l2_norm")


def test_an_older_cache_gets_its_tensors_on_first_use():
    k, _ = caches("cpu")
    k._torch = None  # as a cache made before frugal.torch was imported
    ft.cache_append(k, torch.randn(2, 1, 2, 64))
    assert k._torch is not None and k.write_pos(0) == 1


def test_inductor_compiles_the_step_and_matches_eager(rng):
    torch._dynamo.reset()
    k1, v1 = caches("cpu", capacity=8)
    k2, v2 = caches("cpu", capacity=8)

    def step(q, xk, xv, k, v):
        ft.cache_append(k, xk * 2)
        ft.cache_append(v, xv)
        return ft.decode_attention(q, k, v) + 1

    compiled = torch.compile(step, fullgraph=True)
    for i in range(3):
        q = torch.from_numpy(rng.standard_normal((2, 4, 64)).astype(np.float32))
        xk = torch.from_numpy(rng.standard_normal((2, 1, 2, 64)).astype(np.float32))
        xv = torch.from_numpy(rng.standard_normal((2, 1, 2, 64)).astype(np.float32))
        assert torch.allclose(compiled(q, xk, xv, k1, v1), step(q, xk, xv, k2, v2), rtol=1e-6, atol=1e-6), i
    assert k1.write_pos(0) == 3 and torch.equal(ft.cache_tensors(k1).packed, ft.cache_tensors(k2).packed)


# ---- exact rows (window, sinks) -----------------------------------------------------------------

def test_cache_tensors_hold_the_exact_rows_over_the_cache_memory():
    k, _ = caches("cpu", window=4, sinks=2)
    t = ft.cache_tensors(k)
    assert (t.window, t.sinks) == (4, 2) and t.exact.shape == (2, 2, 6, 64) and t.exact.dtype == torch.float16
    assert t.exact.data_ptr() == torch.from_dlpack(k._impl._storage[6]).data_ptr()
    plain, _ = caches("cpu")
    u = ft.cache_tensors(plain)
    assert (u.window, u.sinks) == (0, 0) and u.exact.shape == (2, 2, 0, 64)  # no rows, but a tensor


@pytest.mark.parametrize("device", devices)
@pytest.mark.parametrize("sliding", [False, True])
def test_custom_ops_with_exact_rows_give_the_plain_apis_bytes_and_numbers(device, sliding, rng):
    cap = 16 if sliding else 64
    k1, v1 = caches(device, capacity=cap, sliding=sliding, window=5, sinks=3)
    k2, v2 = caches(device, capacity=cap, sliding=sliding, window=5, sinks=3)
    for i in range(5):  # 40 tokens: a ring of 16 wraps past its sinks
        x = torch.from_numpy(rng.standard_normal((2, 8, 2, 64)).astype(np.float32)).to(device)
        y = torch.from_numpy(rng.standard_normal((2, 8, 2, 64)).astype(np.float32)).to(device)
        ft.cache_append(k1, x)
        ft.cache_append(v1, y)
        k2.append(x)
        v2.append(y)
    ft.cache_append(k1, x[1, :2], seq=1)
    ft.cache_append(v1, y[1, :2], seq=1)
    k2.append(x[1, :2], seq=1)
    v2.append(y[1, :2], seq=1)
    for a, b in ((k1, k2), (v1, v2)):
        s, t = ft.cache_tensors(a), ft.cache_tensors(b)
        assert torch.equal(s.packed, t.packed) and torch.equal(s.scales, t.scales) and torch.equal(s.exact, t.exact)
    assert torch.equal(ft.cache_tensors(k1).exact[1, :, 3 + 41 % 5].cpu(), x[1, 1].half().cpu())  # the newest
    q = torch.randn(2, 8, 64, device=device)
    assert torch.equal(ft.decode_attention(q, k1, v1), kv.decode_attention(q, k2, v2))
    lengths = [40, 42] if sliding else [17, 42]
    got = ft.decode_attention(q, k1, v1, lengths=torch.tensor(lengths), softmax_scale=0.3)
    assert torch.equal(got, kv.decode_attention(q, k2, v2, lengths=lengths, softmax_scale=0.3))


def exact_rows_oracle(q, k, v, scale):
    """Double precision softmax attention of q [B, Hq, D] over every token each sequence attends, as
    dequantize gives them: a ring's sinks [0, sinks) and the tokens it holds [max(sinks, first), write_pos)."""
    out = np.zeros(q.shape)
    g = q.shape[1] // k.config["num_kv_heads"]
    sinks = k.config["sinks"]
    for b in range(q.shape[0]):
        n, first = k.write_pos(b), k.first_held(b)
        parts = [(0, min(sinks, n)), (max(sinks, first), n)] if first > 0 else [(0, n)]
        kd = np.concatenate([k.dequantize(b, lo, hi, like=q) for lo, hi in parts]).astype(np.float64)
        vd = np.concatenate([v.dequantize(b, lo, hi, like=q) for lo, hi in parts]).astype(np.float64)
        for h in range(q.shape[1]):
            s = kd[:, h // g] @ q[b, h].astype(np.float64) * scale
            p = np.exp(s - s.max())
            out[b, h] = p / p.sum() @ vd[:, h // g]
    return out


@pytest.mark.parametrize("sliding", [False, True])
def test_decode_attention_op_with_exact_rows_matches_a_double_precision_oracle(sliding, rng):
    k, v = caches("cpu", capacity=16 if sliding else 64, sliding=sliding, window=6, sinks=2)
    for _ in range(3):  # 30 tokens: a ring of 16 has wrapped past its sinks
        ft.cache_append(k, torch.from_numpy(rng.standard_normal((2, 10, 2, 64)).astype(np.float32)))
        ft.cache_append(v, torch.from_numpy(rng.standard_normal((2, 10, 2, 64)).astype(np.float32)))
    assert not sliding or k.first_held(0) > 2
    q = torch.from_numpy(rng.standard_normal((2, 8, 64)).astype(np.float32))
    out = ft.decode_attention(q, k, v)
    ref = exact_rows_oracle(q.numpy(), k, v, 1 / 8)
    assert np.linalg.norm(out.numpy() - ref) / np.linalg.norm(ref) < 1e-5


@pytest.mark.parametrize("device", devices)
def test_custom_ops_with_exact_rows_pass_opcheck(device):
    k, v = caches(device, capacity=256, window=4, sinks=2)
    ft.cache_append(v, torch.randn(2, 5, 2, 64, device=device))
    t, u = ft.cache_tensors(k), ft.cache_tensors(v)
    x = torch.randn(2, 3, 2, 64, device=device)
    args = (x, t.packed.clone(), t.scales.clone(), t.signs.clone(), t.centroids, t.boundaries, t.exact.clone(),
            t.positions.clone(), False, "l2_norm", 4, 2, -1)
    torch.library.opcheck(ft.cache_append_op, args)
    ft.cache_append(k, torch.randn(2, 5, 2, 64, device=device))
    q = torch.randn(2, 4, 64, device=device)
    storage = (t.packed, t.scales, t.signs, t.centroids, t.boundaries, t.exact, t.positions, u.packed, u.scales,
               u.signs, u.centroids, u.boundaries, u.exact, u.positions, False, 4, 2)
    torch.library.opcheck(ft.decode_attention_op, (q,) + storage)
    torch.library.opcheck(ft.decode_attention_op, (q,) + storage + (torch.tensor([2, 5]), 0.5, "f32", 0))


@pytest.mark.parametrize("backend", ["aot_eager", "counting"])
def test_a_compiled_decode_step_with_exact_rows_has_no_graph_break_and_matches_eager(backend, rng,
                                                                                     counting_backend):
    torch._dynamo.reset()
    counting = counting_backend
    k1, v1 = caches("cpu", capacity=16, sliding=True, window=4, sinks=2)
    k2, v2 = caches("cpu", capacity=16, sliding=True, window=4, sinks=2)

    def step(q, xk, xv, k, v):
        ft.cache_append(k, xk)
        ft.cache_append(v, xv)
        return ft.decode_attention(q, k, v)

    compiled = torch.compile(step, backend=counting if backend == "counting" else backend, fullgraph=True)
    for i in range(20):  # the ring wraps past its sinks
        q = torch.from_numpy(rng.standard_normal((2, 4, 64)).astype(np.float32))
        xk = torch.from_numpy(rng.standard_normal((2, 1, 2, 64)).astype(np.float32))
        xv = torch.from_numpy(rng.standard_normal((2, 1, 2, 64)).astype(np.float32))
        got = compiled(q, xk, xv, k1, v1)
        want = step(q, xk, xv, k2, v2)
        assert torch.equal(got, want), i
    assert torch.equal(ft.cache_tensors(k1).exact, ft.cache_tensors(k2).exact)
    assert torch.equal(ft.cache_tensors(v1).packed, ft.cache_tensors(v2).packed)
    if backend == "counting":
        assert counting.graphs == 1


def test_exact_row_errors_are_frugals():
    k, _ = caches("cpu", window=4, sinks=2)
    _, v = caches("cpu", window=4)
    ft.cache_append(k, torch.randn(2, 3, 2, 64))
    ft.cache_append(v, torch.randn(2, 3, 2, 64))
    with pytest.raises(frugal.Error, match=r"\[attention::decode_attention\] the K and V caches must keep the same "
                                           r"exact rows, got K window 4 and sinks 2, V window 4 and sinks 0"):
        ft.decode_attention(torch.randn(2, 4, 64), k, v)
    t = ft.cache_tensors(k)
    from frugal._torch_kv import _wrap_cache as wrap
    with pytest.raises(frugal.Error, match=r"\[kv::Cache::wrap\] exact must have shape \[2, 2, 6, 64\]"):
        wrap(t.packed, t.scales, t.signs, t.centroids, t.boundaries, t.exact[:, :, :5].contiguous(), t.positions,
             False, "l2_norm", 4, 2)
    with pytest.raises(frugal.Error, match=r"\[kv::Cache::wrap\] exact must have dtype"):
        wrap(t.packed, t.scales, t.signs, t.centroids, t.boundaries, t.exact.float(), t.positions, False, "l2_norm",
             4, 2)
