"""The Hadamard-rotated low-bit KV cache: codebooks, the FWHT, and the cache of one layer."""
from __future__ import annotations

from typing import Any, Optional

from . import _frugal
from ._interop import check_result_dtype, dl, framework_of, int_arg, stream_of, wrap

ScaleRule = _frugal.ScaleRule
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


# Called with every new Cache (frugal.torch registers one that gives the cache its torch tensors,
# so that a compiled function reads them without calling into the extension).
_new_cache_hooks: list = []


class Cache:
    """One layer's quantized K (or V) cache for `batch` sequences, on 'cpu' or 'cuda[:N]'.

    Storage (bit-compatible with the original format when batch=1, bits=4, no signs, L2 scale):
      packed  [batch, num_kv_heads, capacity, head_dim*bits/8] uint8  (little-endian bit stream of codes)
      scales  [batch, num_kv_heads, capacity] float32
    A sliding cache is a ring (token t at slot t % capacity); a global one refuses to overflow.
    `packed` and `scales` are read-only views in numpy and as frugal's own DLPack objects (torch and
    cupy have no read-only arrays); `writable_views()` gives the same storage writable, for tools
    that load or patch a cache.
    """

    def __init__(self, *, num_kv_heads: int, head_dim: int, capacity: int, batch: int = 1,
                 sliding: bool = False, bits: int = 4, scale_rule: ScaleRule = ScaleRule.l2_norm,
                 sign_seed: Optional[int] = None, device: str = "cpu", _impl: Any = None):
        op = "kv::Cache"
        self._impl = _impl if _impl is not None else _frugal.Cache(
            batch=int_arg(op, "batch", batch), num_kv_heads=int_arg(op, "num_kv_heads", num_kv_heads),
            head_dim=int_arg(op, "head_dim", head_dim), capacity=int_arg(op, "capacity", capacity, "int64"),
            sliding=sliding, bits=int_arg(op, "bits", bits), scale_rule=scale_rule,
            sign_seed=int_arg(op, "sign_seed", sign_seed, "uint64"), device=str(device))
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
        return self._impl.first_held(int_arg("kv::first_held", "seq", seq))

    def reset(self) -> None:
        self._impl.reset()

    def to(self, device: str) -> "Cache":
        c = Cache(num_kv_heads=0, head_dim=0, capacity=0, _impl=self._impl.to(str(device)))
        c._like = self._like
        return c

    def _view(self, read_only: Any, index: int) -> Any:
        # torch and cupy have no read-only arrays (and jax's are immutable anyway): they get the
        # plain view rather than a flag they may refuse or drop.
        if self._like is not None and framework_of(self._like) in ("torch", "cupy", "jax"):
            return wrap(self._impl.writable_views()[index], self._like)
        return wrap(read_only, self._like)

    @property
    def packed(self) -> Any:
        """A zero-copy view of the packed codes (keeps the cache alive); read-only in numpy."""
        return self._view(self._impl.packed, 0)

    @property
    def scales(self) -> Any:
        """A zero-copy view of the scales (keeps the cache alive); read-only in numpy."""
        return self._view(self._impl.scales, 1)

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
    token. An empty list is refused (it has no entry for any sequence).
    math: 'auto' (tensor cores for f16/bf16 queries on a GPU), 'f32' or 'f16'.
    """
    op = "attention::decode_attention"
    if lengths is not None:
        lengths = [int_arg(op, f"lengths[{i}]", n, "int64") for i, n in enumerate(lengths)]
    out = _frugal.decode_attention(dl(q), k._impl, v._impl, softmax_scale=softmax_scale, lengths=lengths,
                                   math=math, num_splits=int_arg(op, "num_splits", num_splits),
                                   stream=stream_of(q, int_arg(op, "stream", stream, "uint64")))
    return wrap(out, q)
