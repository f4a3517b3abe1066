"""Submanifold sparse voxel convolution: kernel map and fused conv (never materializes the gather)."""
from __future__ import annotations

from typing import Any, Optional, Sequence

from . import _frugal
from ._interop import dl, int_arg, stream_of, wrap

_s = _frugal.spconv
OffsetOrder = _s.OffsetOrder
kernel_offset = _s.kernel_offset
offset_permutation = _s.offset_permutation


def build_kernel_map(coords: Any, kernel_size: int = 3, dilation: int = 1, *, stream: Optional[int] = None) -> Any:
    """nbr [K, N] int32 for coords [N, 4] int32 (b, x, y, z); nbr[k, n] = N when voxel n has no k-th neighbor."""
    op = "spconv::build_kernel_map"
    kernel_size, dilation = int_arg(op, "kernel_size", kernel_size), int_arg(op, "dilation", dilation)
    return wrap(_s.build_kernel_map(dl(coords), kernel_size, dilation, stream=stream_of(coords, stream)), coords)


def check_kernel_map(nbr: Any, *, stream: Optional[int] = None) -> list:
    """Checks every entry of a map nbr [K, N] int32 once; returns its statistics (the conv's `stats`)."""
    return _s.check_kernel_map(dl(nbr), stream=stream_of(nbr, stream))


def submanifold_conv(feats: Any, nbr: Any, weight: Any, bias: Any = None, *, checked: bool = True,
                     stream: Optional[int] = None, stats: Optional[Sequence[int]] = None) -> Any:
    """out [N, Co] = bias + sum_k feats[nbr[k]] @ weight[k]; f32 accumulation, bitwise deterministic.

    checked=True raises frugal.Error for nbr entries outside [0, N] (one small readback on CUDA).
    stats (from check_kernel_map): the map is known valid, so it is not checked, and its statistics
    pick the kernel.
    """
    out = _s.submanifold_conv(dl(feats), dl(nbr), dl(weight), dl(bias), checked=checked,
                              stream=stream_of(feats, stream), stats=None if stats is None else list(stats))
    return wrap(out, feats)
