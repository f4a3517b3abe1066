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
    scales: torch.Tensor  # [batch, H, capacity] float32
    signs: Optional[torch.Tensor]  # [D] float32, or None
    centroids: torch.Tensor  # [2**bits] float32
    boundaries: torch.Tensor  # [2**bits - 1] float32
    positions: torch.Tensor  # [batch] int64 on the CPU: the cache's write positions, the same memory
    sliding: bool
    scale_rule: str


def _attach(cache: kv.Cache) -> CacheTensors:
    packed, scales, signs, centroids, boundaries, positions = (
        None if a is None else torch.from_dlpack(a) for a in cache._impl._storage)
    cfg = cache._impl.config
    cache._torch = CacheTensors(packed, scales, signs, centroids, boundaries, positions, bool(cfg["sliding"]),
                                cfg["scale_rule"].name)
    return cache._torch


kv._new_cache_hooks.append(_attach)


def cache_tensors(cache: kv.Cache) -> CacheTensors:
    """The cache's storage as torch tensors, made once per cache. Caches made after frugal.torch was
    imported have them from the start; an older one gets them on its first use here, which must then
    happen outside torch.compile (it calls into the extension)."""
    t = cache._torch
    return t if t is not None else _attach(cache)


def _wrap_cache(packed, scales, signs, centroids, boundaries, positions, sliding, scale_rule):
    return _frugal.Cache._wrap(_dl(packed), _dl(scales), None if signs is None else _dl(signs), _dl(centroids),
                               _dl(boundaries), _dl(positions), sliding, _frugal.ScaleRule.__members__[scale_rule])


@torch.library.custom_op("frugal::cache_append", mutates_args=("packed", "scales", "positions"))
def cache_append_op(x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, signs: Optional[torch.Tensor],
                    centroids: torch.Tensor, boundaries: torch.Tensor, positions: torch.Tensor, sliding: bool,
                    scale_rule: str, seq: int = -1) -> None:
    """Quantizes x [T, H, D] (batch 1, or sequence `seq` >= 0) or [batch, T, H, D] into the cache whose
    storage these are, at its write positions (positions: CPU int64 [batch]), and advances them by T.
    A refused append writes nothing (frugal.Error naming kv::append)."""
    x = x if x.stride(-1) == 1 else x.contiguous()
    c = _wrap_cache(packed, scales, signs, centroids, boundaries, positions, sliding, scale_rule)
    c.append(_dl(x), seq=None if seq < 0 else seq, stream=_stream(x))
    positions.copy_(torch.from_dlpack(c._storage[5]))


@cache_append_op.register_fake
def _(x, packed, scales, signs, centroids, boundaries, positions, sliding, scale_rule, seq=-1):
    return None


@torch.library.custom_op("frugal::decode_attention", mutates_args=())
def decode_attention_op(q: torch.Tensor, k_packed: torch.Tensor, k_scales: torch.Tensor,
                        k_signs: Optional[torch.Tensor], k_centroids: torch.Tensor, k_boundaries: torch.Tensor,
                        k_positions: torch.Tensor, v_packed: torch.Tensor, v_scales: torch.Tensor,
                        v_signs: Optional[torch.Tensor], v_centroids: torch.Tensor, v_boundaries: torch.Tensor,
                        v_positions: torch.Tensor, sliding: bool, lengths: Optional[torch.Tensor] = None,
                        softmax_scale: Optional[float] = None, math: str = "auto",
                        num_splits: int = 0) -> torch.Tensor:
    """Decode attention (frugal.kv.decode_attention) of q [B, Hq, D] over the K and V caches whose
    storage and write positions these are -> [B, Hq, D] of q's dtype. lengths: None (every held token)
    or a CPU int64 tensor [B]."""
    q = q if q.stride(-1) == 1 else q.contiguous()
    k = _wrap_cache(k_packed, k_scales, k_signs, k_centroids, k_boundaries, k_positions, sliding, "l2_norm")
    v = _wrap_cache(v_packed, v_scales, v_signs, v_centroids, v_boundaries, v_positions, sliding, "l2_norm")
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    _frugal.decode_attention(_dl(q), k, v, out=_dl(out), softmax_scale=softmax_scale,
                             lengths=None if lengths is None else lengths.tolist(), math=math,
                             num_splits=num_splits, stream=_stream(q))
    return out


@decode_attention_op.register_fake
def _(q, k_packed, k_scales, k_signs, k_centroids, k_boundaries, k_positions, v_packed, v_scales, v_signs,
      v_centroids, v_boundaries, v_positions, sliding, lengths=None, softmax_scale=None, math="auto", num_splits=0):
    return q.new_empty(q.shape)


def cache_append(cache: kv.Cache, x: torch.Tensor, seq: Optional[int] = None) -> None:
    """cache.append(x, seq=seq) as the custom op frugal::cache_append: compiles without a graph break."""
    t = cache_tensors(cache)
    cache_append_op(x, t.packed, t.scales, t.signs, t.centroids, t.boundaries, t.positions, t.sliding, t.scale_rule,
                    -1 if seq is None else seq)


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
    return decode_attention_op(q, a.packed, a.scales, a.signs, a.centroids, a.boundaries, a.positions, b.packed,
                               b.scales, b.signs, b.centroids, b.boundaries, b.positions, a.sliding,
                               _lengths_tensor(lengths), softmax_scale, math, num_splits)
