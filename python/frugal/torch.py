"""frugal's ops as PyTorch custom ops (torch.library), with fake implementations so that
torch.compile can trace them. Outputs are allocated by torch (its caching allocator) and frugal
writes into them on torch's current CUDA stream. Like torch's own ops these take tensors of any
strides (non-contiguous ones are copied to contiguous first); the lower-level frugal.spconv and
frugal.kv functions refuse them with a clear frugal.Error instead of copying behind your back. No libtorch link: the extension speaks DLPack.
"""
from __future__ import annotations

from typing import Optional

import torch

from . import _frugal
from ._interop import dl as _dl
from ._interop import torch_stream as _stream


@torch.library.custom_op("frugal::hadamard_transform", mutates_args=())
def hadamard_transform(x: torch.Tensor) -> torch.Tensor:
    """FWHT(x) / sqrt(D) along the last dimension of an f32 [rows, D] tensor."""
    x = x.contiguous()
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    _frugal.hadamard_transform(_dl(x), _dl(out), stream=_stream(x))
    return out


@hadamard_transform.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x, memory_format=torch.contiguous_format)


_STATS_WORDS = 9  # the length of a map's statistics (python/src/bind_spconv.cpp)
_STATS_ORDER = 8  # the word that says the map runs in Morton order (1) or in its given one (0)


class KernelMap:
    """A kernel map and what frugal knows about it: `columns` [K, N] int32 (sentinel N), the map as the
    convs run it; `stats`, a CPU int64 tensor of the map's statistics (it is valid, its run order, how
    well its rows suit each kernel); and `order` [N] int32, the run order, or None.

    Build it once per coordinate set with `build_kernel_map` and pass it to every conv on those
    coordinates: a map frugal built needs no per-call check (no readback, no wait for the stream), and
    the conv picks its kernel from the statistics. The build picks the order the rows run in: rows in
    lexicographic order of (b, x, y, z) keep it; any other order (a shuffle, a concatenation) runs in
    Morton order, so the conv's speed does not depend on how the rows came. Then columns[k, i] is the
    neighbor (a row of coords) of row order[i]; out[n] still belongs to coords[n]. `nbr` is the map by
    row either way. Its entries must not change afterwards (a changed entry gives wrong numbers, never
    an out-of-bounds access). A map you assembled yourself: `KernelMap.from_user(nbr)` checks it once.
    """

    def __init__(self, columns: torch.Tensor, stats: torch.Tensor, kernel_size: int = 3, dilation: int = 1,
                 order: Optional[torch.Tensor] = None):
        self.columns, self.stats = columns, stats
        self.kernel_size, self.dilation = kernel_size, dilation
        self._order = order  # the build's order buffer (the identity where the map runs in its given order)

    @staticmethod
    def from_user(nbr: torch.Tensor, kernel_size: int = 3, dilation: int = 1) -> "KernelMap":
        """Checks a map nbr [kernel_size**3, N] int32 once (frugal.Error naming a bad entry)."""
        if nbr.dim() != 2 or nbr.shape[0] != kernel_size**3:
            raise ValueError(f"nbr must have shape [{kernel_size**3}, N], got {list(nbr.shape)}")
        return KernelMap(nbr, check_kernel_map_op(nbr), kernel_size, dilation)

    @property
    def order(self) -> Optional[torch.Tensor]:
        """The run order [N] int32 (column i is row order[i]), or None where the rows run as given."""
        return self._order if self._order is not None and int(self.stats[_STATS_ORDER]) == 1 else None

    @property
    def nbr(self) -> torch.Tensor:
        """The map by row, [K, N] int32: nbr[k, n] is the k-th neighbor of coords[n] (columns itself where
        the rows run as given, else a new tensor)."""
        order = self.order
        return self.columns if order is None else map_by_row_op(self.columns, order)

    @property
    def device(self) -> torch.device:
        return self.columns.device

    def __repr__(self) -> str:
        order = "morton" if self.order is not None else "given"
        return (f"KernelMap(K={self.columns.shape[0]}, N={self.columns.shape[1]}, kernel_size={self.kernel_size}, "
                f"dilation={self.dilation}, order={order}, device={self.columns.device})")


@torch.library.custom_op("frugal::build_kernel_map", mutates_args=())
def build_kernel_map_op(coords: torch.Tensor, kernel_size: int = 3, dilation: int = 1,
                        order: Optional[str] = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(columns [K, N] int32 of coords [N, 4] int32 (b, x, y, z), sentinel N; the run order [N] int32
    (0, 1, ... where the statistics say the order is the given one); the map's statistics, CPU int64).
    order: None (the rule's: given for rows in lexicographic order, else morton), "given" or "morton"."""
    coords = coords.contiguous()  # torch ops take any strides (torch.nonzero's output is column-major)
    out = torch.empty((kernel_size**3, coords.shape[0]), dtype=torch.int32, device=coords.device)
    run = torch.empty(coords.shape[0], dtype=torch.int32, device=coords.device)
    run_order = None if order is None else getattr(_frugal.spconv.RowOrder, order)
    stats = _frugal.spconv.build_kernel_map(_dl(coords), kernel_size, dilation, out=_dl(out), order=_dl(run),
                                            run_order=run_order, stream=_stream(coords))
    if not stats[_STATS_ORDER]:  # the given order: write it, so that the op's outputs are all defined
        torch.arange(coords.shape[0], dtype=torch.int32, device=coords.device, out=run)
    return out, run, torch.tensor(stats, dtype=torch.int64)


@build_kernel_map_op.register_fake
def _(coords: torch.Tensor, kernel_size: int = 3, dilation: int = 1, order: Optional[str] = None):
    return (coords.new_empty((kernel_size**3, coords.shape[0]), dtype=torch.int32),
            coords.new_empty(coords.shape[0], dtype=torch.int32),
            torch.empty(_STATS_WORDS, dtype=torch.int64, device="cpu"))


@torch.library.custom_op("frugal::map_by_row", mutates_args=())
def map_by_row_op(columns: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """nbr [K, N] with nbr[k, order[i]] = columns[k, i]: a map in a run order, by row."""
    columns, order = columns.contiguous(), order.contiguous()
    out = torch.empty_like(columns)
    _frugal.spconv.map_by_row(_dl(columns), _dl(order), _dl(out), stream=_stream(columns))
    return out


@map_by_row_op.register_fake
def _(columns: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(columns)


@torch.library.custom_op("frugal::check_kernel_map", mutates_args=())
def check_kernel_map_op(nbr: torch.Tensor) -> torch.Tensor:
    """The statistics of a map nbr [K, N] int32 the caller assembled, after checking every entry once."""
    nbr = nbr.contiguous()
    return torch.tensor(_frugal.spconv.check_kernel_map(_dl(nbr), stream=_stream(nbr)), dtype=torch.int64)


@check_kernel_map_op.register_fake
def _(nbr: torch.Tensor) -> torch.Tensor:
    return torch.empty(_STATS_WORDS, dtype=torch.int64, device="cpu")


def build_kernel_map(coords: torch.Tensor, kernel_size: int = 3, dilation: int = 1,
                     order: Optional[str] = None) -> KernelMap:
    """The KernelMap of coords [N, 4] int32 (b, x, y, z): its columns, statistics and run order (order:
    None for the rule's, or "given" / "morton"). See frugal.spconv."""
    columns, run, stats = build_kernel_map_op(coords, kernel_size, dilation, order)
    return KernelMap(columns, stats, kernel_size, dilation, run)


@torch.library.custom_op("frugal::submanifold_conv", mutates_args=())
def submanifold_conv_op(feats: torch.Tensor, nbr: torch.Tensor, weight: torch.Tensor,
                        bias: Optional[torch.Tensor] = None, checked: bool = True,
                        stats: Optional[torch.Tensor] = None, order: Optional[torch.Tensor] = None) -> torch.Tensor:
    """out [N, Co] = bias + sum_k feats[nbr[k]] @ weight[k] (weight [K, Ci, Co]); never materializes the gather.

    stats: the statistics of nbr (KernelMap.stats). With them the map is known valid and not checked;
    without, checked=True raises frugal.Error for nbr entries outside [0, N], which on CUDA costs one
    8-byte readback (a wait for the stream), and checked=False skips it: a bad entry then counts as an
    absent neighbor — wrong numbers, never an out-of-bounds access. order: the map's run order buffer
    (a KernelMap's), used where stats say the map runs in Morton order (nbr is then its columns).
    """
    feats, nbr, weight = feats.contiguous(), nbr.contiguous(), weight.contiguous()
    bias = bias.contiguous() if bias is not None else None
    out = torch.empty((nbr.shape[1], weight.shape[2]), dtype=feats.dtype, device=feats.device)
    _frugal.spconv.submanifold_conv(_dl(feats), _dl(nbr), _dl(weight), _dl(bias), out=_dl(out), checked=checked,
                                    stream=_stream(feats), stats=None if stats is None else stats.tolist(),
                                    order=None if order is None else _dl(order.contiguous()))
    return out


@submanifold_conv_op.register_fake
def _(feats, nbr, weight, bias=None, checked=True, stats=None, order=None):
    return feats.new_empty((nbr.shape[1], weight.shape[2]))


def submanifold_conv(feats: torch.Tensor, nbr, weight: torch.Tensor, bias: Optional[torch.Tensor] = None,
                     checked: bool = True) -> torch.Tensor:
    """out [N, Co] = bias + sum_k feats[nbr[k]] @ weight[k]. nbr: a KernelMap (no per-call check; the
    kernel picked from its statistics) or a plain map tensor [K, N] int32 (checked per call as `checked` says)."""
    if isinstance(nbr, KernelMap):
        return submanifold_conv_op(feats, nbr.columns, weight, bias, checked, nbr.stats, nbr._order)
    return submanifold_conv_op(feats, nbr, weight, bias, checked)


def choose_conv(feats: torch.Tensor, nbr, weight: torch.Tensor, bias: Optional[torch.Tensor] = None) -> str:
    """The kernel submanifold_conv(feats, nbr, weight, bias) runs, e.g. 'halo_pipe(tile_co 64, ...)'."""
    if isinstance(nbr, KernelMap):
        m, stats, order = nbr.columns, nbr.stats.tolist(), nbr._order
    else:
        m, stats, order = nbr, None, None
    out = torch.empty((m.shape[1], weight.shape[2]), dtype=feats.dtype, device=feats.device)
    b = _dl(bias.contiguous()) if bias is not None else None
    return _frugal.spconv.choose_conv(_dl(feats.contiguous()), _dl(m.contiguous()), _dl(weight.contiguous()), b,
                                      _dl(out), stats=stats, order=None if order is None else _dl(order))


def weight_from_spconv(w: torch.Tensor) -> torch.Tensor:
    """spconv 2.x SubMConv3d weight [Co, k, k, k, Ci] -> frugal's [K, Ci, Co].

    Both order the kernel offsets with the first coordinate column slowest, so k = (i*ks + j)*ks + l
    for spconv's weight[:, i, j, l, :]; only the channel axes move.
    """
    co, k1, k2, k3, ci = w.shape
    return w.permute(1, 2, 3, 4, 0).reshape(k1 * k2 * k3, ci, co).contiguous()


class SubMConv3d(torch.nn.Module):
    """A drop-in submanifold 3D conv: forward(feats [N, Ci], nbr) -> [N, Co].

    nbr: the KernelMap `build_kernel_map(coords, kernel_size, dilation)` returns, built once per
    coordinate set and reused for every conv on those coords (no per-call check), or a plain map
    tensor [K, N] int32 (checked per call unless checked=False). The weight is [K, Ci, Co]; a state
    dict saved by spconv's SubMConv3d (weight [Co, k, k, k, Ci]) loads as is and is permuted on the way in.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int = 3, dilation: int = 1,
                 bias: bool = True, device=None, dtype=None, checked: bool = True):
        super().__init__()
        self.checked = checked  # for plain map tensors; False: no readback per call (CUDA graphs)
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size, self.dilation = kernel_size, dilation
        k = kernel_size**3
        self.weight = torch.nn.Parameter(torch.empty((k, in_channels, out_channels), device=device, dtype=dtype))
        self.bias = torch.nn.Parameter(torch.empty(out_channels, device=device, dtype=dtype)) if bias else None
        bound = 1.0 / (k * in_channels) ** 0.5
        torch.nn.init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            torch.nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, feats: torch.Tensor, nbr) -> torch.Tensor:
        return submanifold_conv(feats, nbr, self.weight, self.bias, self.checked)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        w = state_dict.get(prefix + "weight")
        if w is not None and w.dim() == 5:
            state_dict[prefix + "weight"] = weight_from_spconv(w)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"dilation={self.dilation}, bias={self.bias is not None}")


# ---- autograd (python/frugal/_autograd.py): submanifold_conv's backward, so SubMConv3d trains ----
from ._autograd import register_autograd as _register_autograd, submanifold_conv_backward_op  # noqa: E402,F401
_register_autograd(submanifold_conv_op)

# ---- the KV cache and attention (python/frugal/_torch_kv.py): custom ops over the caches' storage ----
from ._torch_kv import (CacheTensors, PagedCacheTensors, cache_append, cache_append_op,  # noqa: E402,F401
                        cache_tensors, decode_attention, decode_attention_op, paged_append, paged_append_op,
                        paged_attention, paged_attention_op, paged_cache, paged_cache_tensors)
