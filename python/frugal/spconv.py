"""Submanifold sparse voxel convolution: kernel map and fused conv (never materializes the gather)."""
from __future__ import annotations

from typing import Any, Optional, Sequence

from . import _frugal
from ._interop import dl, int_arg, stream_of, wrap

_s = _frugal.spconv
OffsetOrder = _s.OffsetOrder
RowOrder = _s.RowOrder
kernel_offset = _s.kernel_offset
offset_permutation = _s.offset_permutation


def build_kernel_map(coords: Any, kernel_size: int = 3, dilation: int = 1, *, stream: Optional[int] = None) -> Any:
    """nbr [K, N] int32 for coords [N, 4] int32 (b, x, y, z); nbr[k, n] = N when voxel n has no k-th neighbor."""
    op = "spconv::build_kernel_map"
    kernel_size, dilation = int_arg(op, "kernel_size", kernel_size), int_arg(op, "dilation", dilation)
    return wrap(_s.build_kernel_map(dl(coords), kernel_size, dilation, stream=stream_of(coords, stream)), coords)


def build_run_map(coords: Any, kernel_size: int = 3, dilation: int = 1, *, order: Optional[RowOrder] = None,
                  stream: Optional[int] = None) -> tuple:
    """(columns [K, N] int32, order [N] int32 or None, stats): the map in the order its convs run the rows
    in (the rule's for these rows: rows in lexicographic order keep theirs, any other order runs in
    Morton order; or `order`). columns[k, i] is the neighbor of row order[i]; pass the order and the
    statistics to submanifold_conv. map_by_row(columns, order) gives the map by row."""
    op = "spconv::build_kernel_map"
    kernel_size, dilation = int_arg(op, "kernel_size", kernel_size), int_arg(op, "dilation", dilation)
    columns, run, stats = _s.build_run_map(dl(coords), kernel_size, dilation, run_order=order,
                                           stream=stream_of(coords, stream))
    return wrap(columns, coords), (None if run is None else wrap(run, coords)), stats


def map_by_row(columns: Any, order: Any, *, stream: Optional[int] = None) -> Any:
    """nbr [K, N] with nbr[k, order[i]] = columns[k, i] (a copy where order is None)."""
    return wrap(_s.map_by_row(dl(columns), None if order is None else dl(order), stream=stream_of(columns, stream)),
                columns)


def check_kernel_map(nbr: Any, *, stream: Optional[int] = None) -> list:
    """Checks every entry of a map nbr [K, N] int32 once; returns its statistics (the conv's `stats`)."""
    return _s.check_kernel_map(dl(nbr), stream=stream_of(nbr, stream))


def submanifold_conv(feats: Any, nbr: Any, weight: Any, bias: Any = None, *, checked: bool = True,
                     stream: Optional[int] = None, stats: Optional[Sequence[int]] = None, order: Any = None) -> Any:
    """out [N, Co] = bias + sum_k feats[nbr[k]] @ weight[k]; f32 accumulation, bitwise deterministic.

    checked=True raises frugal.Error for nbr entries outside [0, N] (one small readback on CUDA).
    stats (from check_kernel_map or build_run_map): the map is known valid, so it is not checked, and its
    statistics pick the kernel. order: build_run_map's run order, where it gave one (nbr is then its columns).
    """
    out = _s.submanifold_conv(dl(feats), dl(nbr), dl(weight), dl(bias), checked=checked,
                              stream=stream_of(feats, stream), stats=None if stats is None else list(stats),
                              order=None if order is None else dl(order))
    return wrap(out, feats)
