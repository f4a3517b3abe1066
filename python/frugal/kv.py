"""The Hadamard-rotated low-bit KV cache: codebooks, the FWHT, the per-sequence cache of one layer
and decode attention over it, and the paged cache with the attention family over it."""
from __future__ import annotations

from typing import Any, NamedTuple, Optional, Sequence, Union

import numpy as np

from . import _frugal
from ._interop import check_result_dtype, dl, framework_of, int_arg, stream_of, wrap

ScaleRule = _frugal.ScaleRule
ScaleFormat = _frugal.ScaleFormat
lloyd_max_codebook = _frugal.lloyd_max_codebook
random_signs = _frugal.random_signs


def hadamard_transform(x: Any, out: Any = None, *, stream: Optional[int] = None) -> Any:
    """FWHT(x) / sqrt(D) along the last dimension of an f32 array [rows, D]; D a power of two in [4, 4096].

    Writes into `out` (which may be `x`) when given; otherwise returns a new array of x's framework.
    """
    s = stream_of(x, int_arg("kv::hadamard_transform", "stream", stream, "uint64"))
    if out is not None:
        _frugal.hadamard_transform(dl(x), dl(out), stream=s)
        return out
    return wrap(_frugal.hadamard_transform(dl(x), stream=s), x)


def _storage_view(like: Any, read_only: Any, writable: Any) -> Any:
    """A cache's storage as an array of `like`'s framework: read-only where the framework has
    read-only arrays (numpy, frugal's DLPack objects); torch and cupy have none (and jax's are
    immutable anyway), so they get the plain view rather than a flag they may refuse or drop."""
    if like is not None and framework_of(like) in ("torch", "cupy", "jax"):
        return wrap(writable(), like)
    return wrap(read_only(), like)


# Called with every new Cache (frugal.torch registers one that gives the cache its torch tensors,
# so that a compiled function reads them without calling into the extension).
_new_cache_hooks: list = []


class Cache:
    """One layer's quantized K (or V) cache for `batch` sequences, on 'cpu' or 'cuda[:N]'.

    Storage (bit-compatible with the original format when batch=1, bits=4, no signs, L2 scale):
      packed  [batch, num_kv_heads, capacity, head_dim*bits/8] uint8  (little-endian bit stream of codes)
      scales  [batch, num_kv_heads, capacity] float32, or float16 with scale_format="f16" (each the f16
              rounding of the f32 scale, NaN past f16's range; the codes are the f32 format's)
    A sliding cache is a ring (token t at slot t % capacity); a global one refuses to overflow.
    Exact rows: `window` keeps each sequence's newest `window` tokens also in f16 and `sinks` its first
    `sinks` tokens (both at most capacity), in `exact` [batch, num_kv_heads, sinks + window, head_dim]
    float16; dequantize and decode attention read those tokens' f16 values and the codes serve the rest
    (the codes are the same as without exact rows). A ring keeps its sinks after it has wrapped.
    `packed` and `scales` are read-only views in numpy and as frugal's own DLPack objects (torch and
    cupy have no read-only arrays); `writable_views()` gives the same storage writable, for tools
    that load or patch a cache.
    """

    def __init__(self, *, num_kv_heads: int, head_dim: int, capacity: int, batch: int = 1,
                 sliding: bool = False, bits: int = 4, scale_rule: ScaleRule = ScaleRule.l2_norm,
                 sign_seed: Optional[int] = None, scale_format: Union[str, ScaleFormat] = "f32", window: int = 0,
                 sinks: int = 0, device: str = "cpu", _impl: Any = None):
        op = "kv::Cache"
        if isinstance(scale_format, str):
            if scale_format not in ("f32", "f16"):
                raise _frugal.Error(f"[{op}] scale_format must be 'f32' or 'f16', got '{scale_format}'")
            scale_format = getattr(ScaleFormat, scale_format)
        self._impl = _impl if _impl is not None else _frugal.Cache(
            batch=int_arg(op, "batch", batch), num_kv_heads=int_arg(op, "num_kv_heads", num_kv_heads),
            head_dim=int_arg(op, "head_dim", head_dim), capacity=int_arg(op, "capacity", capacity, "int64"),
            sliding=sliding, bits=int_arg(op, "bits", bits), scale_rule=scale_rule,
            sign_seed=int_arg(op, "sign_seed", sign_seed, "uint64"), scale_format=scale_format,
            window=int_arg(op, "window", window),
            sinks=int_arg(op, "sinks", sinks), device=str(device))
        self._like: Any = None  # the framework results come back in: that of the last accepted array
        self._torch: Any = None  # frugal.torch's tensors over the storage (frugal.torch.cache_tensors)
        for hook in _new_cache_hooks:
            hook(self)

    def append(self, x: Any, *, seq: Optional[int] = None, stream: Optional[int] = None) -> None:
        """Quantize x [T, H, D] (batch 1, or into sequence `seq`) or [batch, T, H, D]; f32 | f16 | bf16.

        A refused append changes nothing: not the cache, not the framework results come back in."""
        op = "kv::append"
        self._impl.append(dl(x), seq=int_arg(op, "seq", seq),
                          stream=stream_of(x, int_arg(op, "stream", stream, "uint64")))
        self._like = x

    def dequantize(self, seq: int = 0, begin: int = 0, end: Optional[int] = None, *, dtype: str = "f32",
                   stream: Optional[int] = None, like: Any = None) -> Any:
        """Tokens [begin, end) of sequence `seq` as [end-begin, H, D] in `dtype` (end defaults to write_pos).

        The result is an array of `like`'s framework (default: that of the last appended array);
        numpy and cupy have no bfloat16, so dtype='bf16' needs torch, jax or like=None (DLPack)."""
        op = "kv::dequantize"
        like = like if like is not None else self._like
        check_result_dtype(op, dtype, like)
        out = self._impl.dequantize(int_arg(op, "seq", seq), int_arg(op, "begin", begin, "int64"),
                                    int_arg(op, "end", end, "int64"), dtype,
                                    stream=stream_of(like, int_arg(op, "stream", stream, "uint64")))
        return wrap(out, like)  # `like` None: frugal's own __dlpack__ object

    def write_pos(self, seq: int = 0) -> int:
        return self._impl.write_pos(int_arg("kv::write_pos", "seq", seq))

    def first_held(self, seq: int = 0) -> int:
        """The oldest token of sequence `seq` its codes still hold (a ring's sinks stay held below it)."""
        return self._impl.first_held(int_arg("kv::first_held", "seq", seq))

    def is_exact(self, seq: int, t: int) -> bool:
        """Whether token t (< write_pos) of sequence `seq` is read from an exact row: t < sinks, or one
        of its newest `window` tokens."""
        op = "kv::is_exact"
        return self._impl.is_exact(int_arg(op, "seq", seq), int_arg(op, "t", t, "int64"))

    def reset(self) -> None:
        self._impl.reset()

    def to(self, device: str) -> "Cache":
        c = Cache(num_kv_heads=0, head_dim=0, capacity=0, _impl=self._impl.to(str(device)))
        c._like = self._like
        return c

    @property
    def packed(self) -> Any:
        """A zero-copy view of the packed codes (keeps the cache alive); read-only in numpy."""
        return _storage_view(self._like, lambda: self._impl.packed, lambda: self._impl.writable_views()[0])

    @property
    def scales(self) -> Any:
        """A zero-copy view of the scales (keeps the cache alive); read-only in numpy."""
        return _storage_view(self._like, lambda: self._impl.scales, lambda: self._impl.writable_views()[1])

    @property
    def exact(self) -> Any:
        """A zero-copy view of the exact rows [batch, H, sinks + window, D] float16 (keeps the cache alive;
        read-only in numpy): sequence b's token t < sinks in row t, a window token in row sinks + t % window.
        None without window or sinks."""
        if self._impl.exact is None:
            return None
        return _storage_view(self._like, lambda: self._impl.exact, lambda: self._impl._storage[6])

    def writable_views(self) -> tuple:
        """(packed, scales) as writable zero-copy views. What you write is what the cache holds:
        dequantize and decode attention read it as is (a scale of NaN marks a non-finite vector)."""
        packed, scales = self._impl.writable_views()
        return wrap(packed, self._like), wrap(scales, self._like)

    @property
    def config(self) -> dict:
        return self._impl.config

    @property
    def device(self) -> str:
        return self._impl.device

    @property
    def bytes_per_vector(self) -> int:
        return self._impl.bytes_per_vector


def decode_attention(q: Any, k: Cache, v: Cache, *, softmax_scale: Optional[float] = None,
                     lengths: Optional[list] = None, math: str = "auto", num_splits: int = 0,
                     stream: Optional[int] = None) -> Any:
    """Decode attention read straight from the packed caches: q [B, Hq, D] -> [B, Hq, D] (q's dtype).

    Computed in the rotated domain (q rotated once, one inverse transform per output row), f32
    softmax; GQA when Hq is a multiple of the caches' heads; `lengths` (one per sequence) attends the
    last `capacity` tokens before L of a ring, or [0, L) of a global cache; default (None): every held
    token. An empty list is refused (it has no entry for any sequence). Caches with exact rows (equal
    window and sinks for K and V) attend those tokens' f16 values, in the same softmax; a ring attends
    its sinks besides the tokens it holds.
    math: 'auto' (tensor cores for f16/bf16 queries on a GPU), 'f32' or 'f16'.
    """
    op = "attention::decode_attention"
    if lengths is not None:
        lengths = [int_arg(op, f"lengths[{i}]", n, "int64") for i, n in enumerate(lengths)]
    out = _frugal.decode_attention(dl(q), k._impl, v._impl, softmax_scale=softmax_scale, lengths=lengths,
                                   math=math, num_splits=int_arg(op, "num_splits", num_splits),
                                   stream=stream_of(q, int_arg(op, "stream", stream, "uint64")))
    return wrap(out, q)


# ---- the paged cache (frugal/paged_cache.h) and the attention family over it ------------------

PagedVariant = _frugal.PagedVariant
PagedChoice = _frugal.PagedChoice
PAGED_FORMAT_VERSION = _frugal.PAGED_FORMAT_VERSION


class PageTable(NamedTuple):
    """A batch's block tables in FlashInfer's convention, as host int32 arrays (numpy arrays, CPU torch
    tensors, or lists): sequence b owns the pages indices[indptr[b]:indptr[b+1]] in token order, and
    its last page holds last_page_len[b] tokens (0 for a sequence with no pages), so it holds
    (pages - 1) * page_size + last_page_len[b] tokens. Token t sits in slot
    indices[indptr[b] + t // page_size] * page_size + t % page_size."""

    indptr: Any
    indices: Any
    last_page_len: Any

    @staticmethod
    def from_pages(pages: Sequence[Sequence[int]], lengths: Sequence[int], page_size: int) -> "PageTable":
        """The table of sequences of lengths[b] tokens in the first ceil(lengths[b] / page_size) of
        pages[b] (numpy int32 arrays)."""
        indptr, indices, last = [0], [], []
        for b, n in enumerate(lengths):
            used = -(-int(n) // page_size)
            if used > len(pages[b]):
                raise _frugal.Error(f"[kv::PageTable] sequence {b} of {n} tokens needs {used} pages of "
                                    f"{page_size}, got {len(pages[b])}")
            indices.extend(pages[b][:used])
            indptr.append(len(indices))
            last.append(int(n) - (used - 1) * page_size if used else 0)
        return PageTable(*(np.asarray(a, dtype=np.int32) for a in (indptr, indices, last)))


def _host_i32(op: str, name: str, x: Any) -> Any:
    """An index array as the binding takes it: arrays go as they are (a wrong dtype or device is the
    binding's frugal.Error naming `name`); a list becomes int32, each entry checked to fit."""
    if hasattr(x, "__dlpack__"):
        return dl(x)
    return np.array([int_arg(op, f"{name}[{i}]", v) for i, v in enumerate(x)], dtype=np.int32)


def _table_args(op: str, table: Union[PageTable, Sequence[Any]]) -> tuple:
    if len(table) != 3:
        raise TypeError(f"[{op}] table must be a PageTable (indptr, indices, last_page_len), got {len(table)} items")
    return tuple(_host_i32(op, n, a) for n, a in zip(PageTable._fields, table))


def _variant(op: str, name: str, v: Any) -> Any:
    if v is None or isinstance(v, PagedVariant):
        return v
    try:
        return PagedVariant.__members__[v]
    except (KeyError, TypeError):
        raise _frugal.Error(f"[{op}] {name} must be one of {', '.join(PagedVariant.__members__)}, got {v!r}") from None


def _paged_options(op: str, softmax_scale: Optional[float], causal: bool, window_left: int, math: str,
                   num_splits: int, rows: Any, tiles: Any, max_kv_len: int = 0) -> Any:
    return _frugal.PagedOptions(softmax_scale=softmax_scale, causal=bool(causal),
                                window_left=int_arg(op, "window_left", window_left, "int64"), math=math,
                                num_splits=int_arg(op, "num_splits", num_splits),
                                rows=_variant(op, "rows", rows), tiles=_variant(op, "tiles", tiles),
                                max_kv_len=int_arg(op, "max_kv_len", max_kv_len, "int64"))


# Called with every new PagedCache (frugal.torch registers one that gives it its torch tensors).
_new_paged_cache_hooks: list = []


class PagedCache:
    """One layer's quantized K and V for many sequences in a pool of `num_pages` pages of `page_size`
    tokens (16, 32 or 64), on 'cpu' or 'cuda[:N]'; K and V widths may differ (2, 3, 4 or 8 bits).

    Storage (paged format version PAGED_FORMAT_VERSION; a vector has the per-sequence format's bytes):
      k_packed [num_kv_heads, num_pages * page_size, head_dim*k_bits/8] uint8, k_scales [.., slots] float32
      v_packed, v_scales alike with v_bits
    Which pages hold which sequence is the caller's: every call takes a PageTable. `k_packed` ...
    `v_scales` are read-only views in numpy; `writable_views()` gives the same memory writable.
    `PagedCache.wrap` makes a cache over storage someone else allocated (e.g. torch tensors).
    """

    def __init__(self, *, num_kv_heads: int, head_dim: int, num_pages: int, page_size: int = 16, k_bits: int = 4,
                 v_bits: int = 4, scale_rule: ScaleRule = ScaleRule.l2_norm, k_sign_seed: Optional[int] = None,
                 v_sign_seed: Optional[int] = None, device: str = "cpu", _impl: Any = None):
        op = "kv::PagedCache"
        if _impl is None:
            config = _frugal.PagedConfig(
                num_kv_heads=int_arg(op, "num_kv_heads", num_kv_heads), head_dim=int_arg(op, "head_dim", head_dim),
                num_pages=int_arg(op, "num_pages", num_pages, "int64"), page_size=int_arg(op, "page_size", page_size),
                k_bits=int_arg(op, "k_bits", k_bits), v_bits=int_arg(op, "v_bits", v_bits), scale_rule=scale_rule,
                k_sign_seed=int_arg(op, "k_sign_seed", k_sign_seed, "uint64"),
                v_sign_seed=int_arg(op, "v_sign_seed", v_sign_seed, "uint64"))
            _impl = _frugal.PagedCache(config, device=str(device))
        self._impl = _impl
        self._like: Any = None  # the framework results come back in: that of the last accepted array
        self._torch: Any = None  # frugal.torch's tensors over the storage (frugal.torch.paged_cache_tensors)
        for hook in _new_paged_cache_hooks:
            hook(self)

    @staticmethod
    def wrap(k_packed: Any, k_scales: Any, v_packed: Any, v_scales: Any, k_centroids: Any, k_boundaries: Any,
             v_centroids: Any, v_boundaries: Any, *, k_signs: Any = None, v_signs: Any = None, page_size: int = 16,
             scale_rule: ScaleRule = ScaleRule.l2_norm) -> "PagedCache":
        """A cache over these arrays, without a copy (they stay alive as long as the cache): shapes as
        the class says, the codebooks of lloyd_max_codebook(bits) and the signs of random_signs(seed,
        head_dim), all contiguous on one device. The config is read off the shapes; a mismatch is a
        frugal.Error naming kv::PagedCache::wrap and the array."""
        arrays = (k_packed, k_scales, v_packed, v_scales, k_signs, v_signs, k_centroids, k_boundaries, v_centroids,
                  v_boundaries)
        impl = _frugal.PagedCache._wrap(*(None if a is None else dl(a) for a in arrays),
                                        page_size=int_arg("kv::PagedCache::wrap", "page_size", page_size),
                                        scale_rule=scale_rule)
        c = PagedCache(num_kv_heads=0, head_dim=0, num_pages=0, _impl=impl)
        c._like = k_packed
        return c

    def append(self, k: Any, v: Any, new_indptr: Any, table: Union[PageTable, Sequence[Any]], *,
               stream: Optional[int] = None) -> None:
        """Quantize k, v [T, Hkv, D] (f32 | f16 | bf16) into the pages: rows new_indptr[b]:new_indptr[b+1]
        are the newest tokens of sequence b, and `table` holds the lengths after the append (FlashInfer's
        convention), so they go to its positions [L_b - n_b, L_b). A page written must be referenced once
        in the whole table. Everything is checked first: a refused append writes nothing."""
        op = "kv::PagedCache::append"
        self._impl.append(dl(k), dl(v), _host_i32(op, "new_indptr", new_indptr), *_table_args(op, table),
                          stream=stream_of(k, int_arg(op, "stream", stream, "uint64")))
        self._like = k

    def dequantize(self, table: Union[PageTable, Sequence[Any]], seq: int, begin: int = 0, end: Optional[int] = None,
                   *, dtype: str = "f32", stream: Optional[int] = None, like: Any = None) -> tuple:
        """(k, v): tokens [begin, end) of sequence `seq` of `table` as [end-begin, Hkv, D] in `dtype` (end
        defaults to the sequence's length); arrays of `like`'s framework (default: the last appended's)."""
        op = "kv::PagedCache::dequantize"
        like = like if like is not None else self._like
        check_result_dtype(op, dtype, like)
        k, v = self._impl.dequantize(*_table_args(op, table), int_arg(op, "seq", seq),
                                     int_arg(op, "begin", begin, "int64"), int_arg(op, "end", end, "int64"), dtype,
                                     stream=stream_of(like, int_arg(op, "stream", stream, "uint64")))
        return wrap(k, like), wrap(v, like)

    def _view(self, name: str, index: int) -> Any:
        return _storage_view(self._like, lambda: getattr(self._impl, name), lambda: self._impl._storage[index])

    @property
    def k_packed(self) -> Any:
        """A zero-copy view of the K pool's codes [Hkv, slots, D*k_bits/8]; read-only in numpy."""
        return self._view("k_packed", 0)

    @property
    def k_scales(self) -> Any:
        """A zero-copy view of the K pool's scales [Hkv, slots]; read-only in numpy."""
        return self._view("k_scales", 1)

    @property
    def v_packed(self) -> Any:
        return self._view("v_packed", 2)

    @property
    def v_scales(self) -> Any:
        return self._view("v_scales", 3)

    def writable_views(self) -> tuple:
        """(k_packed, k_scales, v_packed, v_scales) as writable zero-copy views: what you write is what
        dequantize and attention read (a scale of NaN marks a non-finite vector)."""
        return tuple(wrap(a, self._like) for a in self._impl._storage[:4])

    @property
    def config(self) -> dict:
        return self._impl.config._asdict()

    @property
    def device(self) -> str:
        return self._impl.device

    @property
    def slots(self) -> int:
        return self._impl.slots


def _attention_result(out: Any, lse: Any, got: tuple, q: Any, with_lse: bool) -> Any:
    o = out if out is not None else wrap(got[0], q)
    if not with_lse:
        return o
    return o, (lse if lse is not None else wrap(got[1], q))


def paged_attention(q: Any, cache: PagedCache, qo_indptr: Any, table: Union[PageTable, Sequence[Any]], *,
                    out: Any = None, lse: Any = None, return_lse: bool = False,
                    softmax_scale: Optional[float] = None, causal: bool = True, window_left: int = -1,
                    math: str = "auto", num_splits: int = 0, rows: Any = None, tiles: Any = None,
                    stream: Optional[int] = None) -> Any:
    """Attention of ragged query tokens over the paged cache, in one call (plans and runs; see PagedPlan
    for steps that repeat a batch shape). q [total_q, Hq, D] (f32 | f16 | bf16) holds the newest tokens
    of sequence b in rows qo_indptr[b]:qo_indptr[b+1] (1 for decode, a few for speculative, many for
    prefill, mixed freely), whose K and V the cache already holds (append first): query j of sequence b
    sits at position L_b - n_b + j. Causal aligned to each sequence's end (the last query sees every
    cached token), or causal=False (all L_b); window_left=w >= 0 also drops tokens before p - w. GQA when
    Hq is a multiple of Hkv. Returns out [total_q, Hq, D] (q's dtype, or the given `out`, which may be
    f32), and with return_lse=True (or an `lse` array) (out, lse [total_q, Hq] f32, natural log).
    math: 'auto' (tensor cores for f16/bf16 q on a GPU), 'f32' or 'f16'; rows/tiles force a kernel
    (a PagedVariant or its name)."""
    op = "attention::paged_attention"
    options = _paged_options(op, softmax_scale, causal, window_left, math, num_splits, rows, tiles)
    got = _frugal.paged_attention(dl(q), cache._impl, _host_i32(op, "qo_indptr", qo_indptr), *_table_args(op, table),
                                  out=dl(out), lse=dl(lse), return_lse=bool(return_lse), options=options,
                                  stream=stream_of(q, int_arg(op, "stream", stream, "uint64")))
    return _attention_result(out, lse, got, q, return_lse or lse is not None)


class PagedPlan:
    """paged_attention planned once for a batch description (FlashInfer's plan/run split): the plan
    validates the batch, fixes the kernels (`choice`), the splits and the workspace, and copies the
    description to the device once; `run` then does no host synchronization and no allocation (with
    `out` given), so a decode step can be captured in a CUDA graph. `update` takes a new batch of the
    same shape class (as many sequences and rows at most, each sequence within max_kv_len)."""

    def __init__(self, cache: PagedCache, q_heads: int, q_dtype: str, qo_indptr: Any,
                 table: Union[PageTable, Sequence[Any]], *, softmax_scale: Optional[float] = None,
                 causal: bool = True, window_left: int = -1, math: str = "auto", num_splits: int = 0,
                 rows: Any = None, tiles: Any = None, max_kv_len: int = 0, stream: Optional[int] = None):
        op = "attention::PagedPlan"
        options = _paged_options(op, softmax_scale, causal, window_left, math, num_splits, rows, tiles, max_kv_len)
        self._impl = _frugal.PagedPlan(cache._impl, int_arg(op, "q_heads", q_heads), str(q_dtype),
                                       _host_i32(op, "qo_indptr", qo_indptr), *_table_args(op, table),
                                       options=options, stream=int_arg(op, "stream", stream, "uint64"))

    def update(self, qo_indptr: Any, table: Union[PageTable, Sequence[Any]], *, stream: Optional[int] = None) -> None:
        """A new batch into the plan's buffers; refused, changing nothing, when it outgrows the plan.
        On a GPU the copies go to `stream` (default: the legacy default stream, torch's unless you
        switched): the stream of the runs that follow."""
        op = "attention::PagedPlan::update"
        self._impl.update(_host_i32(op, "qo_indptr", qo_indptr), *_table_args(op, table),
                          stream=int_arg(op, "stream", stream, "uint64"))

    def run(self, q: Any, cache: PagedCache, *, out: Any = None, lse: Any = None, return_lse: bool = False,
            stream: Optional[int] = None) -> Any:
        """As paged_attention, for the plan's current batch: out, or (out, lse)."""
        op = "attention::PagedPlan::run"
        got = self._impl.run(dl(q), cache._impl, out=dl(out), lse=dl(lse), return_lse=bool(return_lse),
                             stream=stream_of(q, int_arg(op, "stream", stream, "uint64")))
        return _attention_result(out, lse, got, q, return_lse or lse is not None)

    @property
    def choice(self) -> PagedChoice:
        """The kernels serving the plan: choice.rows, choice.tiles (PagedVariant), splits, tokens_per_split."""
        return self._impl.choice

    @property
    def batch(self) -> int:
        return self._impl.batch

    @property
    def total_q(self) -> int:
        return self._impl.total_q

    @property
    def workspace_bytes(self) -> int:
        return self._impl.workspace_bytes
