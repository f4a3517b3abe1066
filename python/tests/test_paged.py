"""The paged KV cache and the attention family over it from Python: the pools against the per-sequence
cache's bytes, ragged batches (prefill, chunked prefill, speculative, decode, empty rows) against a plain
float64 attention over the dequantized cache, plan/update, hostile input, and the torch custom ops
(frugal::paged_append, frugal::paged_attention): opcheck and a decode step under
torch.compile(fullgraph=True). CUDA cases skip without a GPU."""
from typing import NamedTuple

import numpy as np
import pytest

import frugal
from frugal import kv

try:
    import torch

    import frugal.torch as ft
except ImportError:
    torch = ft = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")
have_cuda = torch is not None and torch.cuda.is_available() and frugal.cuda_available()
needs_cuda = pytest.mark.skipif(not have_cuda, reason="no CUDA GPU (or frugal built without CUDA)")
torch_devices = ["cpu"] + (["cuda"] if have_cuda else [])

# One batch of every kind of row: a prefill (n = L), a chunked prefill after a cached prefix, a
# speculative step, decode rows (one the last slot of a page, one the first of a new page), a
# sequence of one token, cached sequences without queries, and an empty sequence.
MIXED_LENS = [50, 100, 77, 33, 32, 17, 9, 0, 1]
MIXED_NS = [50, 37, 5, 1, 1, 2, 0, 0, 1]


def to_np(a):
    if torch is not None and isinstance(a, torch.Tensor):  # numpy has no bfloat16: torch widens first
        return a.detach().cpu().float().numpy() if a.dtype == torch.bfloat16 else a.detach().cpu().numpy()
    return np.asarray(a)


class Pool(NamedTuple):
    cache: kv.PagedCache
    table: kv.PageTable  # the final table (lengths including the new tokens)
    qo: np.ndarray  # qo_indptr: the new tokens of each sequence are its queries' rows
    pages: list  # each sequence's pages in token order (room for a few more tokens)
    spare: list  # pages no sequence holds
    k_raw: list  # [L_b, Hkv, D] float32 as appended
    v_raw: list


def append_range(cache, pages, k_raw, v_raw, start, stop, page_size, to=np.asarray):
    """Appends tokens [start[b], stop[b]) of every sequence in one call, with the table of lengths `stop`."""
    new_indptr = np.cumsum([0] + [e - s for s, e in zip(start, stop)]).astype(np.int32)
    k = np.concatenate([k_raw[b][s:e] for b, (s, e) in enumerate(zip(start, stop))])
    v = np.concatenate([v_raw[b][s:e] for b, (s, e) in enumerate(zip(start, stop))])
    cache.append(to(k), to(v), new_indptr, kv.PageTable.from_pages(pages, stop, page_size))


def make_pool(seed, lens=MIXED_LENS, ns=MIXED_NS, *, hkv=2, d=64, page_size=16, k_bits=4, v_bits=4, spare=6,
              extra_pages=1, make_cache=None, to=np.asarray):
    """A pool of sequences of lens[b] tokens whose last ns[b] are the new ones (appended in a second call,
    after the cached prefixes), on pages drawn from a shuffled pool; seeded so twins can be made."""
    rng = np.random.default_rng(seed)
    owned = [-(-n // page_size) + extra_pages for n in lens]
    num_pages = sum(owned) + spare
    perm = [int(p) for p in rng.permutation(num_pages)]
    pages = [perm[sum(owned[:b]):sum(owned[:b + 1])] for b in range(len(lens))]
    config = dict(num_kv_heads=hkv, head_dim=d, num_pages=num_pages, page_size=page_size, k_bits=k_bits,
                  v_bits=v_bits, k_sign_seed=3, v_sign_seed=4)
    cache = make_cache(**config) if make_cache else kv.PagedCache(**config)
    k_raw = [rng.standard_normal((n, hkv, d)).astype(np.float32) for n in lens]
    v_raw = [rng.standard_normal((n, hkv, d)).astype(np.float32) for n in lens]
    prefix = [n - m for n, m in zip(lens, ns)]
    append_range(cache, pages, k_raw, v_raw, [0] * len(lens), prefix, page_size, to)
    append_range(cache, pages, k_raw, v_raw, prefix, list(lens), page_size, to)
    qo = np.cumsum([0] + list(ns)).astype(np.int32)
    return Pool(cache, kv.PageTable.from_pages(pages, lens, page_size), qo, pages, perm[sum(owned):], k_raw, v_raw)


def oracle(q, cache, table, qo, *, scale=None, causal=True, window=-1):
    """Plain float64 softmax attention over the dequantized cache: query j of sequence b (n_b of them,
    L_b cached) sits at p = L_b - n_b + j and sees t <= p (all L_b when not causal), t >= p - window
    when window >= 0. Returns (out, lse); a row that sees nothing gets zeros and -inf."""
    q = to_np(q).astype(np.float64)
    total, hq, d = q.shape
    scale = 1 / np.sqrt(d) if scale is None else scale
    group = hq // cache.config["num_kv_heads"]
    out, lse = np.zeros(q.shape), np.full((total, hq), -np.inf)
    for b in range(len(qo) - 1):
        n = qo[b + 1] - qo[b]
        if n == 0:
            continue
        kd, vd = (to_np(a).astype(np.float64) for a in cache.dequantize(table, b))
        length = kd.shape[0]
        for j in range(n):
            r, p = qo[b] + j, length - n + j
            lo, hi = (max(0, p - window) if window >= 0 else 0), (p + 1 if causal else length)
            if lo >= hi:
                continue
            for h in range(hq):
                s = kd[lo:hi, h // group] @ q[r, h] * scale
                e = np.exp(s - s.max())
                lse[r, h] = s.max() + np.log(e.sum())
                out[r, h] = e / e.sum() @ vd[lo:hi, h // group]
    return out, lse


def rel_error(got, ref):
    return np.linalg.norm(to_np(got).astype(np.float64) - ref) / np.linalg.norm(ref)


def lse_error(got, ref):
    """The worst |got - ref| / (1 + |ref|); rows that see nothing must be -inf in both."""
    got = to_np(got).astype(np.float64)
    with np.errstate(invalid="ignore"):
        e = np.where(got == ref, 0.0, np.abs(got - ref) / (1 + np.abs(ref)))
    return np.inf if np.isnan(e).any() else e.max()


def queries(seed, total, hq, d):
    return np.random.default_rng(seed + 1).standard_normal((total, hq, d)).astype(np.float32)


# ---- the pools ----------------------------------------------------------------------------------


@pytest.mark.parametrize("k_bits,v_bits", [(4, 4), (8, 3), (2, 4)])
def test_a_vector_gets_the_per_sequence_caches_bytes_and_scale(rng, k_bits, v_bits):
    seed = int(rng.integers(2**32))
    s = make_pool(seed, [40], [13], k_bits=k_bits, v_bits=v_bits, d=64)
    for side, bits, sign_seed, raw in (("k", k_bits, 3, s.k_raw), ("v", v_bits, 4, s.v_raw)):
        ref = kv.Cache(num_kv_heads=2, head_dim=64, capacity=40, bits=bits, sign_seed=sign_seed)
        ref.append(raw[0])
        slots = [s.pages[0][t // 16] * 16 + t % 16 for t in range(40)]
        packed, scales = (np.asarray(getattr(s.cache, f"{side}_{what}")) for what in ("packed", "scales"))
        assert np.array_equal(packed[:, slots], np.asarray(ref.packed)[0]), side
        assert np.array_equal(scales[:, slots], np.asarray(ref.scales)[0]), side


def test_dequantize_gives_back_the_tokens_within_the_codebooks_error(rng):
    s = make_pool(int(rng.integers(2**32)), [70, 5], [70, 5], d=128, k_bits=8, v_bits=4)
    k, v = s.cache.dequantize(s.table, 0)
    assert isinstance(k, np.ndarray) and k.shape == (70, 2, 128) and k.dtype == np.float32
    assert rel_error(k, s.k_raw[0]) < 0.02 and rel_error(v, s.v_raw[0]) < 0.12
    k, v = s.cache.dequantize(s.table, 1, 2, 4, dtype="f16")
    assert k.shape == (2, 2, 128) and k.dtype == np.float16 and rel_error(v, s.v_raw[1][2:4]) < 0.12


def test_views_share_the_pools_and_are_read_only_in_numpy(rng):
    s = make_pool(int(rng.integers(2**32)), [20], [20])
    k_packed = s.cache.k_packed
    assert k_packed.shape == (2, s.cache.slots, 32) and not k_packed.flags.writeable
    assert s.cache.v_scales.shape == (2, s.cache.slots)
    w = s.cache.writable_views()
    w[1][:] = 0  # what you write is what the cache holds
    assert not np.asarray(s.cache.k_scales).any()
    assert kv.PAGED_FORMAT_VERSION == 1


# ---- attention against the oracle ---------------------------------------------------------------


@pytest.mark.parametrize("k_bits,v_bits", [(4, 4), (8, 4), (2, 3), (3, 8)])
@pytest.mark.parametrize("page_size,group", [(16, 1), (64, 4), (32, 8)])
def test_a_ragged_batch_matches_a_float64_oracle(rng, k_bits, v_bits, page_size, group):
    seed = int(rng.integers(2**32))
    s = make_pool(seed, page_size=page_size, k_bits=k_bits, v_bits=v_bits, hkv=2)
    q = queries(seed, int(s.qo[-1]), 2 * group, 64)
    out, lse = kv.paged_attention(q, s.cache, s.qo, s.table, return_lse=True)
    assert isinstance(out, np.ndarray) and out.shape == q.shape and out.dtype == np.float32
    ref, ref_lse = oracle(q, s.cache, s.table, s.qo)
    assert rel_error(out, ref) <= 1e-5
    assert lse_error(lse, ref_lse) <= 1e-5


@pytest.mark.parametrize("causal,window", [(True, 20), (True, 0), (False, -1), (False, 20)])
def test_windows_and_non_causal_rows_match_the_oracle(rng, causal, window):
    seed = int(rng.integers(2**32))
    s = make_pool(seed, k_bits=4, v_bits=8)
    q = queries(seed, int(s.qo[-1]), 8, 64)
    out, lse = kv.paged_attention(q, s.cache, s.qo, s.table, return_lse=True, causal=causal, window_left=window,
                                  softmax_scale=0.2)
    ref, ref_lse = oracle(q, s.cache, s.table, s.qo, scale=0.2, causal=causal, window=window)
    assert rel_error(out, ref) <= 1e-5 and lse_error(lse, ref_lse) <= 1e-5


def test_a_shared_prefix_is_read_by_both_sequences(rng):
    seed = int(rng.integers(2**32))
    s = make_pool(seed, [40, 8], [40, 8])
    # Sequence 1 reads sequence 0's first two pages, then its own: 32 shared tokens and 8 of its own.
    table = kv.PageTable.from_pages([s.pages[0], s.pages[0][:2] + s.pages[1]], [40, 40], 16)
    qo = np.array([0, 1, 2], np.int32)
    q = queries(seed, 2, 4, 64)
    out = kv.paged_attention(q, s.cache, qo, table)
    assert rel_error(out, oracle(q, s.cache, table, qo)[0]) <= 1e-5


def test_out_and_lse_arrays_are_written_in_place(rng):
    seed = int(rng.integers(2**32))
    s = make_pool(seed)
    q = queries(seed, int(s.qo[-1]), 4, 64)
    out, lse = np.full(q.shape, np.nan, np.float32), np.full(q.shape[:2], np.nan, np.float32)
    got = kv.paged_attention(q, s.cache, s.qo, s.table, out=out, lse=lse)
    assert got[0] is out and got[1] is lse
    ref, ref_lse = oracle(q, s.cache, s.table, s.qo)
    assert rel_error(out, ref) <= 1e-5 and lse_error(lse, ref_lse) <= 1e-5


def test_a_plan_runs_decode_steps_after_updates_and_says_what_serves_it(rng):
    seed = int(rng.integers(2**32))
    lens, ns = [30, 15, 47], [1, 1, 1]
    s = make_pool(seed, lens, ns, extra_pages=1)
    plan = kv.PagedPlan(s.cache, 4, "f32", s.qo, s.table, max_kv_len=64)
    assert plan.choice.rows == kv.PagedVariant.cpu and plan.choice.tiles == kv.PagedVariant.cpu
    assert (plan.batch, plan.total_q) == (3, 3) and plan.workspace_bytes == 0
    step_rng = np.random.default_rng(seed + 2)
    out = np.empty((3, 4, 64), np.float32)
    for step in range(3):  # sequence 1 crosses into a new page on the first step
        if step:
            lens = [n + 1 for n in lens]
            table = kv.PageTable.from_pages(s.pages, lens, 16)
            x = step_rng.standard_normal((2, 3, 2, 64)).astype(np.float32)
            s.cache.append(x[0], x[1], s.qo, table)
            plan.update(s.qo, table)
        else:
            table = s.table
        q = queries(seed + step, 3, 4, 64)
        assert plan.run(q, s.cache, out=out) is out
        assert rel_error(out, oracle(q, s.cache, table, s.qo)[0]) <= 1e-5
        assert np.array_equal(out, kv.paged_attention(q, s.cache, s.qo, table))
    with pytest.raises(frugal.Error, match=r"\[attention::PagedPlan::update\] the batch has 4 sequences; the plan "
                                           r"was made for at most 3"):
        plan.update(np.array([0, 1, 2, 3, 4], np.int32), kv.PageTable.from_pages(s.pages + [s.spare], lens + [1], 16))
    with pytest.raises(frugal.Error, match=r"more than the plan's max_kv_len 64"):
        plan.update(s.qo, kv.PageTable.from_pages([s.pages[0] + s.spare[:3], s.pages[1], s.pages[2]],
                                                  [65] + lens[1:], 16))


# ---- hostile input: frugal's errors, and a refused call writes nothing ----------------------------


def pools_bytes(cache):
    return [np.asarray(a).copy() for a in cache.writable_views()]


def test_a_block_table_entry_outside_the_pool_is_refused_and_nothing_is_written(rng):
    s = make_pool(int(rng.integers(2**32)), [20, 5], [1, 1])
    n = s.cache.config["num_pages"]
    before = pools_bytes(s.cache)
    x = np.ones((2, 2, 64), np.float32)
    for bad in (n, -1):
        table = kv.PageTable([0, 2, 3], [s.pages[0][0], s.pages[0][1], bad], [4, 5])
        with pytest.raises(frugal.Error, match=rf"\[kv::PagedCache::append\] indices\[2\] = {bad} \(a page of "
                                               rf"sequence 1\) is outside the pool of {n} pages"):
            s.cache.append(x, x, [0, 1, 2], table)
        with pytest.raises(frugal.Error, match=rf"indices\[2\] = {bad} .* outside the pool of {n} pages"):
            kv.paged_attention(np.zeros((2, 4, 64), np.float32), s.cache, [0, 1, 2], table)
    assert all(np.array_equal(a, b) for a, b in zip(before, pools_bytes(s.cache)))


def test_non_monotonic_indptrs_are_refused(rng):
    s = make_pool(int(rng.integers(2**32)), [20, 5], [1, 1])
    x = np.ones((2, 2, 64), np.float32)
    p = s.pages
    bad = kv.PageTable([0, 2, 1], [p[0][0], p[0][1]], [4, 5])
    with pytest.raises(frugal.Error, match=r"\[kv::PagedCache::append\] indptr must be non-decreasing, got "
                                           r"indptr\[1\] = 2 > indptr\[2\] = 1"):
        s.cache.append(x, x, [0, 1, 2], bad)
    with pytest.raises(frugal.Error, match=r"new_indptr must be non-decreasing, got new_indptr\[1\] = 2 > "
                                           r"new_indptr\[2\] = 1"):
        s.cache.append(x[:1], x[:1], [0, 2, 1], s.table)
    q = np.zeros((2, 4, 64), np.float32)
    with pytest.raises(frugal.Error, match=r"\[attention::PagedPlan\] qo_indptr must be non-decreasing, got "
                                           r"qo_indptr\[1\] = 2 > qo_indptr\[2\] = 1"):
        kv.paged_attention(q[:1], s.cache, [0, 2, 1], s.table)
    with pytest.raises(frugal.Error, match=r"indptr must be non-decreasing"):
        kv.PagedPlan(s.cache, 4, "f32", [0, 1, 2], bad)


def test_shapes_counts_and_tables_that_do_not_fit_are_refused(rng):
    s = make_pool(int(rng.integers(2**32)), [20, 5], [2, 1])
    q = np.zeros((3, 4, 64), np.float32)
    with pytest.raises(frugal.Error, match=r"query counts past a sequence's cached length: sequence 1 has 6 query "
                                           r"tokens but 5 cached tokens"):
        kv.paged_attention(np.zeros((8, 4, 64), np.float32), s.cache, [0, 2, 8], s.table)
    with pytest.raises(frugal.Error, match=r"\[attention::PagedPlan\] the query heads Hq must be a positive "
                                           r"multiple of the K/V heads Hkv = 2, got Hq = 3"):
        kv.paged_attention(np.zeros((3, 3, 64), np.float32), s.cache, s.qo, s.table)
    with pytest.raises(frugal.Error, match=r"\[attention::PagedPlan::run\] q must have shape \[3, 4, 64\]"):
        kv.paged_attention(np.zeros((3, 4, 32), np.float32), s.cache, s.qo, s.table)
    with pytest.raises(frugal.Error, match=r"page .* is written by sequence 0 and also referenced by sequence 1"):
        shared = kv.PageTable.from_pages([s.pages[0], s.pages[0][1:]], [20, 5], 16)  # 1 reads 0's last page
        s.cache.append(np.ones((1, 2, 64), np.float32), np.ones((1, 2, 64), np.float32), [0, 1, 1], shared)
    with pytest.raises(frugal.Error, match=r"\[kv::PagedCache::append\] indptr must be i32, got i64"):
        s.cache.append(q[:1, :2], q[:1, :2], [0, 1, 1], kv.PageTable(np.array([0, 2, 3]), *s.table[1:]))
    with pytest.raises(frugal.Error, match=r"\[kv::PagedCache::append\] new_indptr\[1\] must be in"):
        s.cache.append(q[:1, :2], q[:1, :2], [0, 2**40, 1], s.table)
    with pytest.raises(frugal.Error, match=r"\[kv::PagedCache::dequantize\] sequence 2 does not exist; the page "
                                           r"table holds 2"):
        s.cache.dequantize(s.table, 2)
    with pytest.raises(frugal.Error, match=r"token range \[0, 6\) passes the 5 tokens of sequence 1"):
        s.cache.dequantize(s.table, 1, 0, 6)
    with pytest.raises(frugal.Error, match=r"\[attention::paged_attention\] rows must be one of cpu, rows_f32"):
        kv.paged_attention(q, s.cache, s.qo, s.table, rows="fast")
    with pytest.raises(frugal.Error, match=r"\[attention::PagedOptions\] math must be 'auto', 'f32' or 'f16'"):
        kv.paged_attention(q, s.cache, s.qo, s.table, math="f64")


@pytest.mark.parametrize("kwargs,match", [
    (dict(page_size=20), r"page_size must be 16, 32 or 64 tokens, got 20"),
    (dict(num_pages=0), r"num_pages must be at least 1, got 0"),
    (dict(k_bits=5), r"k_bits must be 2, 3, 4 or 8, got 5"),
    (dict(head_dim=96), r"head_dim must be a power of two"),
])
def test_bad_configs_raise_with_the_ops_message(kwargs, match):
    args = dict(num_kv_heads=2, head_dim=64, num_pages=4)
    args.update(kwargs)
    with pytest.raises(frugal.Error, match=r"\[kv::PagedCache\] " + match):
        kv.PagedCache(**args)


def test_wrap_reads_the_config_off_the_arrays_and_refuses_ones_that_do_not_fit(rng):
    s = make_pool(int(rng.integers(2**32)), [20], [20], k_bits=8, v_bits=3)
    st = s.cache._impl._storage
    arrays = [np.from_dlpack(a) for a in (st[0], st[1], st[2], st[3], st[6], st[7], st[8], st[9])]
    signs = dict(k_signs=np.from_dlpack(st[4]), v_signs=np.from_dlpack(st[5]))
    w = kv.PagedCache.wrap(*arrays, **signs, page_size=16)
    assert {k: w.config[k] for k in ("num_kv_heads", "head_dim", "num_pages", "k_bits", "v_bits")} == \
        {k: s.cache.config[k] for k in ("num_kv_heads", "head_dim", "num_pages", "k_bits", "v_bits")}
    assert all(np.array_equal(a, b) for a, b in zip(w.dequantize(s.table, 0), s.cache.dequantize(s.table, 0)))
    bad = list(arrays)
    bad[1] = arrays[1][:, :-1].copy()
    with pytest.raises(frugal.Error, match=r"\[kv::PagedCache::wrap\] k_scales must have shape \[2, \d+\], got"):
        kv.PagedCache.wrap(*bad, **signs, page_size=16)
    with pytest.raises(frugal.Error, match=r"\[kv::PagedCache::wrap\] k_packed holds \d+ slots, which are not "
                                           r"whole pages of page_size 64"):
        kv.PagedCache.wrap(*arrays, **signs, page_size=64 if s.cache.slots % 64 else 48)
    with pytest.raises(frugal.Error, match=r"\[kv::PagedCache::wrap\] v_signs must have shape \[64\]"):
        kv.PagedCache.wrap(*arrays, k_signs=signs["k_signs"], v_signs=signs["v_signs"][:32].copy(), page_size=16)


# ---- torch: the custom ops ----------------------------------------------------------------------


def torch_pool(seed, device, **kw):
    """make_pool's pool with torch tensors in and, on `device`, its cache."""
    return make_pool(seed, make_cache=lambda **c: kv.PagedCache(**c, device=device),
                     to=lambda a: torch.from_numpy(a).to(device), **kw)


def torch_tables(s, device="cpu"):
    return torch.from_numpy(s.qo), kv.PageTable(*(torch.from_numpy(a) for a in s.table))


@needs_torch
@pytest.mark.parametrize("device", torch_devices)
def test_the_custom_ops_give_the_plain_apis_bytes_and_numbers(rng, device):
    seed = int(rng.integers(2**32))
    plain = torch_pool(seed, device)
    ops = kv.PagedCache(**plain.cache.config, device=device)
    # Fill the second pool through frugal::paged_append, with the same two appends.
    prefix = [n - m for n, m in zip(MIXED_LENS, MIXED_NS)]
    for start, stop in (([0] * len(prefix), prefix), (prefix, MIXED_LENS)):
        k = torch.cat([torch.from_numpy(plain.k_raw[b][s:e]) for b, (s, e) in enumerate(zip(start, stop))])
        v = torch.cat([torch.from_numpy(plain.v_raw[b][s:e]) for b, (s, e) in enumerate(zip(start, stop))])
        new = torch.tensor(np.cumsum([0] + [e - s for s, e in zip(start, stop)]), dtype=torch.int32)
        table = kv.PageTable(*(torch.from_numpy(a) for a in kv.PageTable.from_pages(plain.pages, stop, 16)))
        ft.paged_append(ops, k.to(device), v.to(device), new, table)
    a, b = ft.paged_cache_tensors(plain.cache), ft.paged_cache_tensors(ops)
    assert all(torch.equal(x, y) for x, y in zip(a.storage()[:4], b.storage()[:4]))
    qo, table = torch_tables(plain)
    q = torch.from_numpy(queries(seed, int(plain.qo[-1]), 8, 64)).to(device)
    out, lse = ft.paged_attention(q, ops, qo, table, return_lse=True)
    want, want_lse = kv.paged_attention(q, plain.cache, qo, table, return_lse=True)
    assert torch.equal(out, want) and torch.equal(lse, want_lse)
    assert torch.equal(ft.paged_attention(q, b, qo, table, causal=False, window_left=7),
                       kv.paged_attention(q, plain.cache, qo, table, causal=False, window_left=7))


@needs_torch
def test_a_pool_torch_owns_is_wrapped_without_a_copy(rng):
    seed = int(rng.integers(2**32))
    own = make_pool(seed, make_cache=lambda **c: ft.paged_cache(**c), to=torch.from_numpy)
    ref = make_pool(seed)
    t = ft.paged_cache_tensors(own.cache)
    assert t.k_packed.data_ptr() == torch.from_dlpack(own.cache._impl._storage[0]).data_ptr()
    assert isinstance(own.cache.k_packed, torch.Tensor)
    for x, y in zip(t.storage()[:4], ref.cache.writable_views()):
        assert np.array_equal(x.numpy(), np.asarray(y))
    q = queries(seed, int(ref.qo[-1]), 4, 64)
    assert np.array_equal(kv.paged_attention(torch.from_numpy(q), own.cache, own.qo, own.table).numpy(),
                          kv.paged_attention(q, ref.cache, ref.qo, ref.table))


@needs_torch
@pytest.mark.parametrize("device", torch_devices)
def test_the_paged_ops_pass_opcheck(rng, device):
    seed = int(rng.integers(2**32))
    s = torch_pool(seed, device, lens=[20, 33, 5], ns=[20, 3, 1])
    t = ft.paged_cache_tensors(s.cache)
    qo, table = torch_tables(s)
    # A decode step's append into fresh copies of the pools: opcheck runs the op several times and
    # compares what it mutates.
    lens = [21, 34, 6]
    step = kv.PageTable(*(torch.from_numpy(a) for a in kv.PageTable.from_pages(s.pages, lens, 16)))
    x = torch.randn(3, 2, 64, device=device)
    pools = tuple(a.clone() for a in t.storage()[:4])
    torch.library.opcheck(ft.paged_append_op, (x, x * 2, torch.tensor([0, 1, 2, 3], dtype=torch.int32), *step)
                          + pools + t.storage()[4:] + (16, "l2_norm"))
    q = torch.randn(int(s.qo[-1]), 4, 64, device=device)
    base = (q, qo, *table) + t.storage() + (16,)
    torch.library.opcheck(ft.paged_attention_op, base)
    torch.library.opcheck(ft.paged_attention_op, base + (0.3, False, 9, "f32", 0, True))


def decode_step(q, k, v, new_indptr, qo, table, cache):
    ft.paged_append(cache, k, v, new_indptr, table)
    out, lse = ft.paged_attention(q, cache, qo, table, return_lse=True)
    return out * 2, lse


@needs_torch
@pytest.mark.parametrize("device", torch_devices)
@pytest.mark.parametrize("backend", ["eager", "aot_eager", "counting", "inductor"])
def test_a_compiled_paged_decode_step_has_no_graph_break_and_matches_eager(rng, device, backend, counting_backend):
    if backend == "inductor" and device == "cuda":
        pytest.importorskip("triton")  # inductor's CUDA code for the elementwise op around the custom ones
    torch._dynamo.reset()
    counting = counting_backend
    seed = int(rng.integers(2**32))
    lens = [14, 30, 3]
    a, b = torch_pool(seed, device, lens=lens, ns=[14, 1, 1]), torch_pool(seed, device, lens=lens, ns=[14, 1, 1])
    compiled = torch.compile(decode_step, backend=counting if backend == "counting" else backend, fullgraph=True)
    qo = new_indptr = torch.tensor([0, 1, 2, 3], dtype=torch.int32)
    steps = np.random.default_rng(seed + 3)
    for i in range(5):  # sequence 0 and 1 cross into a new page
        lens = [n + 1 for n in lens]
        table = kv.PageTable(*(torch.from_numpy(x) for x in kv.PageTable.from_pages(a.pages, lens, 16)))
        torch._dynamo.mark_dynamic(table.indices, 0)
        q, k, v = (torch.from_numpy(steps.standard_normal(shape).astype(np.float32)).to(device)
                   for shape in ((3, 4, 64), (3, 2, 64), (3, 2, 64)))  # 4 query heads over 2 K/V heads
        got = compiled(q, k, v, new_indptr, qo, table, a.cache)
        want = decode_step(q, k, v, new_indptr, qo, table, b.cache)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), i
    assert all(torch.equal(x, y) for x, y in zip(ft.paged_cache_tensors(a.cache).storage()[:4],
                                                 ft.paged_cache_tensors(b.cache).storage()[:4]))
    ref = oracle(q, b.cache, table, np.array([0, 1, 2, 3]))[0]
    assert rel_error(want[0] / 2, ref) <= 1e-5
    if backend == "counting":
        assert counting.graphs == 1  # the tables are tensors (indices marked dynamic): a new step is no new graph


@needs_torch
def test_errors_inside_the_ops_are_frugals_and_a_refused_append_writes_nothing(rng):
    s = torch_pool(int(rng.integers(2**32)), "cpu", lens=[20, 5], ns=[1, 1])
    t = ft.paged_cache_tensors(s.cache)
    before = [a.clone() for a in t.storage()[:4]]
    x = torch.ones(2, 2, 64)
    n = s.cache.config["num_pages"]
    bad = kv.PageTable(torch.tensor([0, 2, 3], dtype=torch.int32),
                       torch.tensor([s.pages[0][0], s.pages[0][1], n], dtype=torch.int32),
                       torch.tensor([4, 5], dtype=torch.int32))
    with pytest.raises(frugal.Error, match=rf"\[kv::PagedCache::append\] indices\[2\] = {n}"):
        ft.paged_append(s.cache, x, x, [0, 1, 2], bad)
    assert all(torch.equal(a, b) for a, b in zip(before, t.storage()[:4]))
    with pytest.raises(frugal.Error, match=r"indptr must be non-decreasing"):
        ft.paged_attention(torch.ones(2, 4, 64), s.cache, [0, 1, 2],
                           kv.PageTable(torch.tensor([0, 2, 1], dtype=torch.int32), *bad[1:]))
    with pytest.raises(frugal.Error, match=r"qo_indptr must be i32, got i64"):
        ft.paged_attention(torch.ones(2, 4, 64), s.cache, torch.tensor([0, 1, 2]), torch_tables(s)[1])


# ---- CUDA: every kernel that can serve, against the oracle (the lead runs these on the GPU) ---------


FORCED = [("rows_f32", "rows_f32", 1e-5), ("rows_f16", "rows_f16", 2e-3), ("rows_f16", "tiles_f16", 2e-3),
          ("rows_f32", "tiles_f16", 2e-3)]


@needs_cuda
@pytest.mark.parametrize("k_bits,v_bits", [(4, 4), (8, 4), (2, 3)])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_cuda_kernels_match_the_oracle_and_the_cpu(rng, k_bits, v_bits, dtype):
    seed = int(rng.integers(2**32))
    cpu = make_pool(seed, d=128, k_bits=k_bits, v_bits=v_bits)
    gpu = torch_pool(seed, "cuda", d=128, k_bits=k_bits, v_bits=v_bits)
    for x, y in zip(cpu.cache.writable_views(), gpu.cache.writable_views()):
        assert np.array_equal(np.asarray(x), y.cpu().numpy())  # the device's pools hold the CPU's bytes
    q = torch.from_numpy(queries(seed, int(cpu.qo[-1]), 8, 128)).to(getattr(torch, dtype))
    ref, ref_lse = oracle(q.float(), cpu.cache, cpu.table, cpu.qo, window=40)
    on_cpu = kv.paged_attention(q.float().numpy(), cpu.cache, cpu.qo, cpu.table, window_left=40)
    for rows, tiles, bound in FORCED:
        if "f16" in rows + tiles and not (k_bits in (4, 8) and v_bits in (4, 8)):
            continue  # the tensor-core kernels serve 4- and 8-bit pools
        plan = kv.PagedPlan(gpu.cache, 8, {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}[dtype], cpu.qo,
                            cpu.table, window_left=40, rows=rows, tiles=tiles)
        assert (plan.choice.rows.name, plan.choice.tiles.name) == (rows, tiles)
        out, lse = plan.run(q.cuda(), gpu.cache, return_lse=True)
        what = f"{rows}/{tiles} q {dtype}"
        assert out.dtype == q.dtype and torch.isfinite(out).all(), what
        # The oracle reads the queries as rounded to q's dtype; out is stored in q's dtype, so its bound
        # is at least that dtype's rounding (half an ulp relative: 2^-11 for f16, 2^-8 for bf16). The
        # LSE is f32 and keeps the kernel's own bound.
        out_bound = max(bound, {"float32": 0.0, "float16": 2.0**-11, "bfloat16": 2.0**-8}[dtype])
        assert rel_error(out, ref) <= out_bound, what
        assert rel_error(out, on_cpu.astype(np.float64)) <= out_bound, what + " vs the CPU"
        assert lse_error(lse, ref_lse) <= bound, what + " LSE"


@needs_cuda
def test_a_cuda_graph_of_a_plans_run_replays_decode_steps_after_updates(rng):
    seed = int(rng.integers(2**32))
    lens = [30, 15, 47]
    s = torch_pool(seed, "cuda", lens=lens, ns=[1, 1, 1], d=128)
    plan = kv.PagedPlan(s.cache, 8, "f16", s.qo, s.table, max_kv_len=64)
    q = torch.zeros(3, 8, 128, dtype=torch.float16, device="cuda")
    out = torch.empty_like(q)
    lse = torch.empty(3, 8, dtype=torch.float32, device="cuda")
    plan.run(q, s.cache, out=out, lse=lse)  # warm up outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        plan.run(q, s.cache, out=out, lse=lse)
    steps = np.random.default_rng(seed + 4)
    for step in range(4):  # sequence 1 crosses into a new page
        lens = [n + 1 for n in lens]
        table = kv.PageTable.from_pages(s.pages, lens, 16)
        x = torch.from_numpy(steps.standard_normal((2, 3, 2, 128)).astype(np.float32)).cuda()
        s.cache.append(x[0], x[1], s.qo, table)
        plan.update(s.qo, table)
        q.copy_(torch.from_numpy(queries(seed + step, 3, 8, 128)).half())
        graph.replay()
        fresh = kv.PagedPlan(s.cache, 8, "f16", s.qo, table, max_kv_len=64)  # the same splits as the plan's
        want, want_lse = fresh.run(q, s.cache, return_lse=True)
        torch.cuda.synchronize()
        assert torch.equal(out, want) and torch.equal(lse, want_lse), step
        ref, ref_lse = oracle(q.float(), s.cache, table, s.qo)
        assert rel_error(out, ref) <= 2e-3 and lse_error(lse, ref_lse) <= 2e-3, step
