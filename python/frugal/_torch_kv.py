"""The KV cache and attention as torch custom ops (torch.library) with fake implementations, so that
torch.compile(fullgraph=True) traces a decode step without a graph break.

A cache is an object and custom ops take tensors, so each op takes the cache's storage as tensors
(frugal.torch.cache_tensors / PagedCache.tensors: zero-copy views of the cache's memory, made once)
and its few flags explicitly; inside, the op wraps those tensors in a C++ cache (kv::Cache::wrap,
kv::PagedCache::wrap: no copy) and runs the op on them. Under torch.compile's functionalization the op
may be handed copies of the storage; it reads and writes whatever it is handed, and torch writes the
result back, so eager and compiled calls agree. The write positions of a per-sequence cache live on the
host in a CPU int64 tensor over the cache's own position memory, which the append op advances (a
declared mutation like the storage's).
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import torch

from . import _frugal, kv
from ._interop import dl as _dl
from ._interop import torch_stream as _stream


class CacheTensors(NamedTuple):
    """A kv.Cache's storage as torch tensors (views of its memory) and the flags its ops need."""

    packed: torch.Tensor  # [batch, H, capacity, D*bits/8] uint8
    scales: torch.Tensor  # [batch, H, capacity] float32, or float16 (f16 scales)
    signs: Optional[torch.Tensor]  # [D] float32, or None
    centroids: torch.Tensor  # [2**bits] float32
    boundaries: torch.Tensor  # [2**bits - 1] float32
    exact: torch.Tensor  # [batch, H, sinks + window, D] float16: the exact rows (no rows without window or sinks)
    positions: torch.Tensor  # [batch] int64 on the CPU: the cache's write positions, the same memory
    sliding: bool
    scale_rule: str
    window: int
    sinks: int


def _attach(cache: kv.Cache) -> CacheTensors:
    packed, scales, signs, centroids, boundaries, positions, exact = (
        None if a is None else torch.from_dlpack(a) for a in cache._impl._storage)
    cfg = cache._impl.config
    if exact is None:  # a tensor all the same, so that the append op's mutated arguments are all tensors
        exact = torch.empty((cfg["batch"], cfg["num_kv_heads"], 0, cfg["head_dim"]), dtype=torch.float16,
                            device=packed.device)
    cache._torch = CacheTensors(packed, scales, signs, centroids, boundaries, exact, positions, bool(cfg["sliding"]),
                                cfg["scale_rule"].name, int(cfg["window"]), int(cfg["sinks"]))
    return cache._torch


kv._new_cache_hooks.append(_attach)


def cache_tensors(cache: kv.Cache) -> CacheTensors:
    """The cache's storage as torch tensors, made once per cache. Caches made after frugal.torch was
    imported have them from the start; an older one gets them on its first use here, which must then
    happen outside torch.compile (it calls into the extension)."""
    t = cache._torch
    return t if t is not None else _attach(cache)


def _wrap_cache(packed, scales, signs, centroids, boundaries, exact, positions, sliding, scale_rule, window=0,
                sinks=0):
    rows = window + sinks > 0  # without exact rows `exact` is a tensor of no rows, not storage
    return _frugal.Cache._wrap(_dl(packed), _dl(scales), None if signs is None else _dl(signs), _dl(centroids),
                               _dl(boundaries), _dl(positions), sliding, _frugal.ScaleRule.__members__[scale_rule],
                               exact=_dl(exact) if rows else None, window=window, sinks=sinks)


@torch.library.custom_op("frugal::cache_append", mutates_args=("packed", "scales", "exact", "positions"))
def cache_append_op(x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, signs: Optional[torch.Tensor],
                    centroids: torch.Tensor, boundaries: torch.Tensor, exact: torch.Tensor, positions: torch.Tensor,
                    sliding: bool, scale_rule: str, window: int = 0, sinks: int = 0, seq: int = -1) -> None:
    """Quantizes x [T, H, D] (batch 1, or sequence `seq` >= 0) or [batch, T, H, D] into the cache whose
    storage these are, at its write positions (positions: CPU int64 [batch]), and advances them by T;
    with window or sinks, the f16 values of the tokens they keep go to `exact` too. A refused append
    writes nothing (frugal.Error naming kv::append)."""
    x = x if x.stride(-1) == 1 else x.contiguous()
    c = _wrap_cache(packed, scales, signs, centroids, boundaries, exact, positions, sliding, scale_rule, window, sinks)
    c.append(_dl(x), seq=None if seq < 0 else seq, stream=_stream(x))
    positions.copy_(torch.from_dlpack(c._storage[5]))


@cache_append_op.register_fake
def _(x, packed, scales, signs, centroids, boundaries, exact, positions, sliding, scale_rule, window=0, sinks=0,
      seq=-1):
    return None


@torch.library.custom_op("frugal::decode_attention", mutates_args=())
def decode_attention_op(q: torch.Tensor, k_packed: torch.Tensor, k_scales: torch.Tensor,
                        k_signs: Optional[torch.Tensor], k_centroids: torch.Tensor, k_boundaries: torch.Tensor,
                        k_exact: torch.Tensor, k_positions: torch.Tensor, v_packed: torch.Tensor,
                        v_scales: torch.Tensor, v_signs: Optional[torch.Tensor], v_centroids: torch.Tensor,
                        v_boundaries: torch.Tensor, v_exact: torch.Tensor, v_positions: torch.Tensor, sliding: bool,
                        window: int = 0, sinks: int = 0, lengths: Optional[torch.Tensor] = None,
                        softmax_scale: Optional[float] = None, math: str = "auto",
                        num_splits: int = 0) -> torch.Tensor:
    """Decode attention (frugal.kv.decode_attention) of q [B, Hq, D] over the K and V caches whose
    storage and write positions these are -> [B, Hq, D] of q's dtype; window and sinks are both
    caches' (their exact rows are attended too). lengths: None (every held token) or a CPU int64
    tensor [B]."""
    q = q if q.stride(-1) == 1 else q.contiguous()
    k = _wrap_cache(k_packed, k_scales, k_signs, k_centroids, k_boundaries, k_exact, k_positions, sliding, "l2_norm",
                    window, sinks)
    v = _wrap_cache(v_packed, v_scales, v_signs, v_centroids, v_boundaries, v_exact, v_positions, sliding, "l2_norm",
                    window, sinks)
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    _frugal.decode_attention(_dl(q), k, v, out=_dl(out), softmax_scale=softmax_scale,
                             lengths=None if lengths is None else lengths.tolist(), math=math,
                             num_splits=num_splits, stream=_stream(q))
    return out


@decode_attention_op.register_fake
def _(q, k_packed, k_scales, k_signs, k_centroids, k_boundaries, k_exact, k_positions, v_packed, v_scales, v_signs,
      v_centroids, v_boundaries, v_exact, v_positions, sliding, window=0, sinks=0, lengths=None, softmax_scale=None,
      math="auto", num_splits=0):
    return q.new_empty(q.shape)


def cache_append(cache: kv.Cache, x: torch.Tensor, seq: Optional[int] = None) -> None:
    """cache.append(x, seq=seq) as the custom op frugal::cache_append: compiles without a graph break."""
    t = cache_tensors(cache)
    cache_append_op(x, t.packed, t.scales, t.signs, t.centroids, t.boundaries, t.exact, t.positions, t.sliding,
                    t.scale_rule, t.window, t.sinks, -1 if seq is None else seq)


def _lengths_tensor(lengths) -> Optional[torch.Tensor]:
    if lengths is None or isinstance(lengths, torch.Tensor):
        return lengths
    return torch.tensor(list(lengths), dtype=torch.int64)


def decode_attention(q: torch.Tensor, k: kv.Cache, v: kv.Cache, *, softmax_scale: Optional[float] = None,
                     lengths=None, math: str = "auto", num_splits: int = 0) -> torch.Tensor:
    """frugal.kv.decode_attention as the custom op frugal::decode_attention: q [B, Hq, D] -> [B, Hq, D].
    lengths: None, a list, or a CPU int64 tensor [B] (a tensor keeps torch.compile from specializing
    on the values)."""
    a, b = cache_tensors(k), cache_tensors(v)
    if a.sliding != b.sliding:
        raise _frugal.Error("[attention::decode_attention] the K and V caches must have the same shape, got a "
                            f"{'ring' if a.sliding else 'global'} K cache and a {'ring' if b.sliding else 'global'} V cache")
    if (a.window, a.sinks) != (b.window, b.sinks):  # the op takes one window and sinks for both
        raise _frugal.Error(f"[attention::decode_attention] the K and V caches must keep the same exact rows, got K "
                            f"window {a.window} and sinks {a.sinks}, V window {b.window} and sinks {b.sinks}")
    return decode_attention_op(q, a.packed, a.scales, a.signs, a.centroids, a.boundaries, a.exact, a.positions,
                               b.packed, b.scales, b.signs, b.centroids, b.boundaries, b.exact, b.positions, a.sliding,
                               a.window, a.sinks, _lengths_tensor(lengths), softmax_scale, math, num_splits)


# ---- the paged cache ------------------------------------------------------------------------


class PagedCacheTensors(NamedTuple):
    """A kv.PagedCache's storage as torch tensors (views of its memory, or the tensors it wraps)."""

    k_packed: torch.Tensor  # [Hkv, slots, D*k_bits/8] uint8
    k_scales: torch.Tensor  # [Hkv, slots] float32
    v_packed: torch.Tensor  # [Hkv, slots, D*v_bits/8] uint8
    v_scales: torch.Tensor  # [Hkv, slots] float32
    k_signs: Optional[torch.Tensor]  # [D] float32, or None
    v_signs: Optional[torch.Tensor]
    k_centroids: torch.Tensor  # [2**k_bits] float32
    k_boundaries: torch.Tensor  # [2**k_bits - 1] float32
    v_centroids: torch.Tensor
    v_boundaries: torch.Tensor
    page_size: int
    scale_rule: str

    def storage(self) -> tuple:
        """The ten storage tensors, in the order the paged ops take them."""
        return tuple(self)[:10]


def _attach_paged(cache: kv.PagedCache) -> PagedCacheTensors:
    storage = (None if a is None else torch.from_dlpack(a) for a in cache._impl._storage)
    cfg = cache._impl.config
    cache._torch = PagedCacheTensors(*storage, cfg.page_size, cfg.scale_rule.name)
    return cache._torch


kv._new_paged_cache_hooks.append(_attach_paged)


def paged_cache_tensors(cache: kv.PagedCache) -> PagedCacheTensors:
    """The paged cache's storage as torch tensors, made once per cache (as cache_tensors)."""
    t = cache._torch
    return t if t is not None else _attach_paged(cache)


def paged_cache(*, num_kv_heads: int, head_dim: int, num_pages: int, page_size: int = 16, k_bits: int = 4,
                v_bits: int = 4, scale_rule: kv.ScaleRule = kv.ScaleRule.l2_norm, k_sign_seed: Optional[int] = None,
                v_sign_seed: Optional[int] = None, device="cpu") -> kv.PagedCache:
    """A kv.PagedCache whose pools torch allocates and owns (its caching allocator, its device), wrapped
    by frugal without a copy: paged_cache_tensors(cache) are those tensors."""
    slots = num_pages * page_size
    k_c, k_b, _ = kv.lloyd_max_codebook(k_bits)
    v_c, v_b, _ = kv.lloyd_max_codebook(v_bits)

    def f32(values):
        return torch.tensor(values, dtype=torch.float32, device=device)

    def signs(seed):
        return None if seed is None else f32(kv.random_signs(seed, head_dim))

    t = PagedCacheTensors(
        torch.zeros((num_kv_heads, slots, head_dim * k_bits // 8), dtype=torch.uint8, device=device),
        torch.zeros((num_kv_heads, slots), dtype=torch.float32, device=device),
        torch.zeros((num_kv_heads, slots, head_dim * v_bits // 8), dtype=torch.uint8, device=device),
        torch.zeros((num_kv_heads, slots), dtype=torch.float32, device=device), signs(k_sign_seed),
        signs(v_sign_seed), f32(k_c), f32(k_b), f32(v_c), f32(v_b), page_size, scale_rule.name)
    cache = kv.PagedCache.wrap(t.k_packed, t.k_scales, t.v_packed, t.v_scales, t.k_centroids, t.k_boundaries,
                               t.v_centroids, t.v_boundaries, k_signs=t.k_signs, v_signs=t.v_signs,
                               page_size=page_size, scale_rule=scale_rule)
    cache._torch = t
    return cache


def _wrap_paged(k_packed, k_scales, v_packed, v_scales, k_signs, v_signs, k_centroids, k_boundaries, v_centroids,
                v_boundaries, page_size, scale_rule="l2_norm"):
    return _frugal.PagedCache._wrap(
        _dl(k_packed), _dl(k_scales), _dl(v_packed), _dl(v_scales), None if k_signs is None else _dl(k_signs),
        None if v_signs is None else _dl(v_signs), _dl(k_centroids), _dl(k_boundaries), _dl(v_centroids),
        _dl(v_boundaries), page_size, _frugal.ScaleRule.__members__[scale_rule])


def _contiguous_last(x: torch.Tensor) -> torch.Tensor:
    return x if x.stride(-1) == 1 else x.contiguous()


@torch.library.custom_op("frugal::paged_append", mutates_args=("k_packed", "k_scales", "v_packed", "v_scales"))
def paged_append_op(k: torch.Tensor, v: torch.Tensor, new_indptr: torch.Tensor, indptr: torch.Tensor,
                    indices: torch.Tensor, last_page_len: torch.Tensor, k_packed: torch.Tensor,
                    k_scales: torch.Tensor, v_packed: torch.Tensor, v_scales: torch.Tensor,
                    k_signs: Optional[torch.Tensor], v_signs: Optional[torch.Tensor], k_centroids: torch.Tensor,
                    k_boundaries: torch.Tensor, v_centroids: torch.Tensor, v_boundaries: torch.Tensor,
                    page_size: int, scale_rule: str) -> None:
    """Quantizes k, v [T, Hkv, D] into the pools these tensors are (kv.PagedCache.append): rows
    new_indptr[b]:new_indptr[b+1] are sequence b's newest tokens; the table (indptr, indices,
    last_page_len: CPU int32) holds the lengths after the append. A refused append writes nothing."""
    c = _wrap_paged(k_packed, k_scales, v_packed, v_scales, k_signs, v_signs, k_centroids, k_boundaries, v_centroids,
                    v_boundaries, page_size, scale_rule)
    k, v = _contiguous_last(k), _contiguous_last(v)
    c.append(_dl(k), _dl(v), _dl(new_indptr), _dl(indptr), _dl(indices), _dl(last_page_len), stream=_stream(k))


@paged_append_op.register_fake
def _(k, v, new_indptr, indptr, indices, last_page_len, k_packed, k_scales, v_packed, v_scales, k_signs, v_signs,
      k_centroids, k_boundaries, v_centroids, v_boundaries, page_size, scale_rule):
    return None


@torch.library.custom_op("frugal::paged_attention", mutates_args=())
def paged_attention_op(q: torch.Tensor, qo_indptr: torch.Tensor, indptr: torch.Tensor, indices: torch.Tensor,
                       last_page_len: torch.Tensor, k_packed: torch.Tensor, k_scales: torch.Tensor,
                       v_packed: torch.Tensor, v_scales: torch.Tensor, k_signs: Optional[torch.Tensor],
                       v_signs: Optional[torch.Tensor], k_centroids: torch.Tensor, k_boundaries: torch.Tensor,
                       v_centroids: torch.Tensor, v_boundaries: torch.Tensor, page_size: int,
                       softmax_scale: Optional[float] = None, causal: bool = True, window_left: int = -1,
                       math: str = "auto", num_splits: int = 0,
                       return_lse: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """kv.paged_attention of q [total_q, Hq, D] over the pools these tensors are -> (out [total_q, Hq, D]
    of q's dtype, lse [total_q, Hq] float32 with return_lse, else an empty [0, Hq]). The index tensors
    are CPU int32."""
    c = _wrap_paged(k_packed, k_scales, v_packed, v_scales, k_signs, v_signs, k_centroids, k_boundaries, v_centroids,
                    v_boundaries, page_size)
    q = _contiguous_last(q)
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty((q.shape[0] if return_lse else 0, q.shape[1]), dtype=torch.float32, device=q.device)
    options = _frugal.PagedOptions(softmax_scale=softmax_scale, causal=causal, window_left=window_left, math=math,
                                   num_splits=num_splits)
    _frugal.paged_attention(_dl(q), c, _dl(qo_indptr), _dl(indptr), _dl(indices), _dl(last_page_len), out=_dl(out),
                            lse=_dl(lse) if return_lse else None, options=options, stream=_stream(q))
    return out, lse


@paged_attention_op.register_fake
def _(q, qo_indptr, indptr, indices, last_page_len, k_packed, k_scales, v_packed, v_scales, k_signs, v_signs,
      k_centroids, k_boundaries, v_centroids, v_boundaries, page_size, softmax_scale=None, causal=True, window_left=-1,
      math="auto", num_splits=0, return_lse=False):
    return q.new_empty(q.shape), q.new_empty((q.shape[0] if return_lse else 0, q.shape[1]), dtype=torch.float32)


def _index_tensor(x) -> torch.Tensor:
    """A CPU int32 index tensor: tensors pass as they are (the op names a wrong dtype or device)."""
    if isinstance(x, torch.Tensor):
        return x
    return torch.as_tensor(x, dtype=torch.int32)


def _paged_tensors(cache) -> PagedCacheTensors:
    return cache if isinstance(cache, PagedCacheTensors) else paged_cache_tensors(cache)


def paged_append(cache, k: torch.Tensor, v: torch.Tensor, new_indptr, table) -> None:
    """cache.append(k, v, new_indptr, table) as the custom op frugal::paged_append (no graph break).
    cache: a kv.PagedCache or its PagedCacheTensors; new_indptr and the table's arrays: CPU int32 tensors
    (tensors keep torch.compile from specializing on the values) or lists."""
    t = _paged_tensors(cache)
    paged_append_op(k, v, _index_tensor(new_indptr), *(_index_tensor(a) for a in table), *t.storage(), t.page_size,
                    t.scale_rule)


def paged_attention(q: torch.Tensor, cache, qo_indptr, table, *, softmax_scale: Optional[float] = None,
                    causal: bool = True, window_left: int = -1, math: str = "auto", num_splits: int = 0,
                    return_lse: bool = False):
    """kv.paged_attention as the custom op frugal::paged_attention: q [total_q, Hq, D] -> out, or
    (out, lse) with return_lse. cache: a kv.PagedCache or its PagedCacheTensors."""
    t = _paged_tensors(cache)
    out, lse = paged_attention_op(q, _index_tensor(qo_indptr), *(_index_tensor(a) for a in table), *t.storage(),
                                  t.page_size, softmax_scale, causal, window_left, math, num_splits, return_lse)
    return (out, lse) if return_lse else out
