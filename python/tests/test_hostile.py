"""Hostile but realistic use of the Python layer: every refusal is frugal's own error naming the
argument, read-only inputs are accepted wherever frugal only reads, and a refused call changes
nothing."""
import gc
import weakref

import numpy as np
import pytest

import frugal
from frugal import kv, spconv


def small_cache(**kw):
    args = dict(num_kv_heads=2, head_dim=16, capacity=8)
    args.update(kw)
    return kv.Cache(**args)


def tokens(rng, t=3, h=2, d=16):
    return rng.standard_normal((t, h, d)).astype(np.float32)


class Foreign:
    """An array of a framework frugal does not know: only the DLPack protocol, over numpy."""

    def __init__(self, a):
        self.a = a

    def __dlpack__(self, **kw):
        return self.a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


def read_only_forms(a, tmp_path):
    """a as numpy's three read-only kinds: flagged, memory-mapped .npy, broadcast (stride 0)."""
    flagged = a.copy()
    flagged.setflags(write=False)
    np.save(tmp_path / "a.npy", a)
    mapped = np.load(tmp_path / "a.npy", mmap_mode="r")
    broadcast = np.broadcast_to(a[:1], a.shape)
    return {"setflags": flagged, "mmap": mapped, "broadcast_to": broadcast}


# ---- sequence indices ---------------------------------------------------------------------------


@pytest.mark.parametrize("call", ["write_pos", "first_held", "dequantize", "append"])
def test_a_sequence_past_the_batch_is_frugals_out_of_range(rng, call):
    c = small_cache(batch=2)
    c.append(rng.standard_normal((2, 1, 2, 16)).astype(np.float32))
    with pytest.raises(frugal.Error, match=r"sequence 5 does not exist; the cache holds 2") as e:
        if call == "append":
            c.append(tokens(rng), seq=5)
        elif call == "dequantize":
            c.dequantize(seq=5)
        else:
            getattr(c, call)(5)
    assert "_M_range_check" not in str(e.value)


def test_negative_sequence_is_refused(rng):
    c = small_cache()
    with pytest.raises(frugal.Error, match=r"\[kv::first_held\] sequence -1 does not exist"):
        c.first_held(-1)


# ---- read-only inputs ---------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["setflags", "mmap", "broadcast_to"])
def test_append_and_attention_accept_read_only_arrays(rng, tmp_path, form):
    x = tokens(rng, t=4)
    ro = read_only_forms(x, tmp_path)[form]
    want = x if form != "broadcast_to" else np.broadcast_to(x[:1], x.shape)
    k, v, ref = small_cache(), small_cache(), small_cache()
    k.append(ro)
    v.append(ro)
    ref.append(np.ascontiguousarray(want))
    np.testing.assert_array_equal(k.dequantize(), ref.dequantize())
    q = read_only_forms(rng.standard_normal((4, 4, 16)).astype(np.float32), tmp_path)[form][:1]
    out = kv.decode_attention(np.ascontiguousarray(q) if form == "broadcast_to" else q, k, v)
    assert out.shape == (1, 4, 16) and np.isfinite(out).all()


@pytest.mark.parametrize("form", ["setflags", "mmap"])
def test_hadamard_reads_a_read_only_array(rng, tmp_path, form):
    x = rng.standard_normal((3, 16)).astype(np.float32)
    np.testing.assert_allclose(kv.hadamard_transform(read_only_forms(x, tmp_path)[form]), kv.hadamard_transform(x))


def test_a_broadcast_reaches_frugals_own_contiguity_check(rng, tmp_path):
    x = read_only_forms(rng.standard_normal((3, 16)).astype(np.float32), tmp_path)["broadcast_to"]
    with pytest.raises(frugal.Error, match=r"\[kv::hadamard_transform\] x must be contiguous"):
        kv.hadamard_transform(x)


def test_an_output_must_be_writable(rng):
    x = rng.standard_normal((3, 16)).astype(np.float32)
    out = np.empty_like(x)
    out.setflags(write=False)
    with pytest.raises(TypeError):  # nanobind refuses a read-only out= before frugal runs
        kv.hadamard_transform(x, out)


def test_spconv_accepts_read_only_arrays(rng, tmp_path):
    coords = np.array([[0, 0, 0, 0], [0, 0, 0, 1], [0, 1, 0, 0]], dtype=np.int32)
    ro = read_only_forms(coords, tmp_path)["setflags"]
    nbr = spconv.build_kernel_map(ro)
    feats = read_only_forms(rng.standard_normal((3, 4)).astype(np.float32), tmp_path)["mmap"]
    weight = read_only_forms(rng.standard_normal((27, 4, 2)).astype(np.float32), tmp_path)["setflags"]
    nbr_ro = np.asarray(nbr).copy()
    nbr_ro.setflags(write=False)
    assert spconv.submanifold_conv(feats, nbr_ro, weight).shape == (3, 2)


# ---- a refused call changes nothing -------------------------------------------------------------


def test_a_refused_append_keeps_the_result_framework_and_frees_the_array(rng):
    c = small_cache()
    c.append(tokens(rng))
    bad = Foreign(tokens(rng, h=3))  # 3 heads: refused
    alive = weakref.ref(bad)
    with pytest.raises(frugal.Error, match=r"\[kv::append\] x must have shape"):
        c.append(bad)
    del bad
    gc.collect()
    assert alive() is None  # the cache kept no reference to the refused array
    assert isinstance(c.dequantize(), np.ndarray)  # still numpy, as for the last accepted append
    assert c.write_pos() == 3


def test_a_refused_append_leaves_the_stored_tokens(rng):
    c = small_cache(capacity=4)
    x = tokens(rng)
    c.append(x)
    before = c.dequantize()
    with pytest.raises(frugal.Error, match=r"passes the global cache's capacity 4"):
        c.append(tokens(rng, t=2))
    np.testing.assert_array_equal(c.dequantize(), before)


# ---- lengths, ranges, dtypes --------------------------------------------------------------------


def test_empty_lengths_are_refused_not_every_token(rng):
    k, v = small_cache(batch=2), small_cache(batch=2)
    x = rng.standard_normal((2, 3, 2, 16)).astype(np.float32)
    k.append(x)
    v.append(x)
    q = rng.standard_normal((2, 4, 16)).astype(np.float32)
    with pytest.raises(frugal.Error, match=r"lengths must hold one entry per sequence \(2\), got 0; pass None"):
        kv.decode_attention(q, k, v, lengths=[])
    np.testing.assert_array_equal(kv.decode_attention(q, k, v, lengths=None),
                                  kv.decode_attention(q, k, v, lengths=[3, 3]))


def test_dequantize_past_write_pos_is_a_range_error_not_an_allocation(rng):
    c = small_cache()
    c.append(tokens(rng))
    with pytest.raises(frugal.Error, match=r"token range \[0, 1000000000000\) passes write_pos 3"):
        c.dequantize(0, 0, 10**12)
    with pytest.raises(frugal.Error, match=r"token range \[0, 9223372036854775807\) passes write_pos 3"):
        c.dequantize(0, 0, 2**63 - 1)


def test_bf16_into_numpy_says_which_dtypes_each_framework_takes(rng):
    c = small_cache()
    c.append(tokens(rng))
    with pytest.raises(frugal.Error, match=r"a numpy result cannot be bf16.*torch: f32, f16, bf16"):
        c.dequantize(dtype="bf16")
    got = np.from_dlpack(c.dequantize(dtype="f16"))
    assert got.dtype == np.float16


@pytest.mark.parametrize("call, name", [
    (lambda rng: small_cache(capacity=2**63), "capacity"),
    (lambda rng: small_cache(num_kv_heads=2**31), "num_kv_heads"),
    (lambda rng: small_cache(batch=-(2**31) - 1), "batch"),
    (lambda rng: small_cache(sign_seed=-1), "sign_seed"),
    (lambda rng: small_cache(sign_seed=2**64), "sign_seed"),
    (lambda rng: small_cache().write_pos(2**31), "seq"),
    (lambda rng: small_cache().dequantize(begin=2**63), "begin"),
    (lambda rng: small_cache().dequantize(end=-(2**63) - 1), "end"),
    (lambda rng: small_cache().append(tokens(rng), seq=2**40), "seq"),
    (lambda rng: small_cache().append(tokens(rng), stream=-1), "stream"),
])
def test_out_of_range_ints_name_the_argument(rng, call, name):
    with pytest.raises(frugal.Error, match=rf"\] {name} must be in \["):
        call(rng)


def test_attention_ints_name_the_argument(rng):
    k, v = small_cache(), small_cache()
    k.append(tokens(rng))
    v.append(tokens(rng))
    q = rng.standard_normal((1, 4, 16)).astype(np.float32)
    with pytest.raises(frugal.Error, match=r"num_splits must be in \["):
        kv.decode_attention(q, k, v, num_splits=2**31)
    with pytest.raises(frugal.Error, match=r"lengths\[0\] must be in \["):
        kv.decode_attention(q, k, v, lengths=[2**63])


def test_a_non_integer_names_the_argument():
    with pytest.raises(TypeError, match=r"\[kv::Cache\] head_dim must be an integer, got float 1.5"):
        small_cache(head_dim=1.5)


# ---- the cache's storage views ------------------------------------------------------------------


def test_packed_and_scales_are_read_only_views(rng):
    c = small_cache()
    c.append(tokens(rng))
    for view in (c.packed, c.scales, np.asarray(c.packed), np.asarray(c.scales)):
        assert not view.flags.writeable
        with pytest.raises(ValueError):
            view[...] = 0


def test_writable_views_share_the_storage(rng):
    c = small_cache()
    c.append(tokens(rng))
    packed, scales = c.writable_views()
    assert packed.flags.writeable and scales.flags.writeable
    scales[0, 0, 1] = np.nan  # the non-finite flag on token 1 of head 0
    got = c.dequantize()
    assert np.isnan(got[1, 0]).all() and np.isfinite(got[0]).all() and np.isfinite(got[1, 1]).all()


# ---- non-finite input (docs/errors.md) ----------------------------------------------------------


@pytest.mark.parametrize("bad", [np.nan, np.inf, 1e38])
def test_a_non_finite_or_huge_vector_dequantizes_to_nan_and_nothing_else_does(rng, bad):
    x = tokens(rng)
    x[1, 0, 3] = bad
    c = small_cache()
    c.append(x)
    assert np.isnan(np.asarray(c.scales)[0, 0, 1])
    got = c.dequantize()
    assert np.isnan(got[1, 0]).all()
    got[1, 0] = 0
    assert np.isfinite(got).all()
