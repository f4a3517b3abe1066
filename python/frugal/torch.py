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


@torch.library.custom_op("frugal::build_kernel_map", mutates_args=())
def build_kernel_map(coords: torch.Tensor, kernel_size: int = 3, dilation: int = 1) -> torch.Tensor:
    """nbr [K, N] int32 of coords [N, 4] int32 (b, x, y, z); sentinel N. See frugal.spconv."""
    coords = coords.contiguous()  # torch ops take any strides (torch.nonzero's output is column-major)
    out = torch.empty((kernel_size**3, coords.shape[0]), dtype=torch.int32, device=coords.device)
    _frugal.spconv.build_kernel_map(_dl(coords), kernel_size, dilation, out=_dl(out), stream=_stream(coords))
    return out


@build_kernel_map.register_fake
def _(coords: torch.Tensor, kernel_size: int = 3, dilation: int = 1) -> torch.Tensor:
    return coords.new_empty((kernel_size**3, coords.shape[0]), dtype=torch.int32)


@torch.library.custom_op("frugal::submanifold_conv", mutates_args=())
def submanifold_conv(feats: torch.Tensor, nbr: torch.Tensor, weight: torch.Tensor,
                     bias: Optional[torch.Tensor] = None, checked: bool = True) -> torch.Tensor:
    """out [N, Co] = bias + sum_k feats[nbr[k]] @ weight[k] (weight [K, Ci, Co]); never materializes the gather.

    checked=True raises frugal.Error for nbr entries outside [0, N]; on CUDA that costs one 8-byte
    readback, i.e. a wait for the stream. checked=False skips it (what CUDA-graph capture needs):
    a bad entry then counts as an absent neighbor — wrong numbers, never an out-of-bounds access.
    """
    feats, nbr, weight = feats.contiguous(), nbr.contiguous(), weight.contiguous()
    bias = bias.contiguous() if bias is not None else None
    out = torch.empty((nbr.shape[1], weight.shape[2]), dtype=feats.dtype, device=feats.device)
    _frugal.spconv.submanifold_conv(_dl(feats), _dl(nbr), _dl(weight), _dl(bias), out=_dl(out), checked=checked,
                                    stream=_stream(feats))
    return out


@submanifold_conv.register_fake
def _(feats, nbr, weight, bias=None, checked=True):
    return feats.new_empty((nbr.shape[1], weight.shape[2]))


def weight_from_spconv(w: torch.Tensor) -> torch.Tensor:
    """spconv 2.x SubMConv3d weight [Co, k, k, k, Ci] -> frugal's [K, Ci, Co].

    Both order the kernel offsets with the first coordinate column slowest, so k = (i*ks + j)*ks + l
    for spconv's weight[:, i, j, l, :]; only the channel axes move.
    """
    co, k1, k2, k3, ci = w.shape
    return w.permute(1, 2, 3, 4, 0).reshape(k1 * k2 * k3, ci, co).contiguous()


class SubMConv3d(torch.nn.Module):
    """A drop-in submanifold 3D conv: forward(feats [N, Ci], nbr [K, N]) -> [N, Co].

    Build nbr once per coordinate set with `build_kernel_map(coords, kernel_size, dilation)` and
    reuse it for every conv on those coords. The weight is [K, Ci, Co]; a state dict saved by
    spconv's SubMConv3d (weight [Co, k, k, k, Ci]) loads as is and is permuted on the way in.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int = 3, dilation: int = 1,
                 bias: bool = True, device=None, dtype=None, checked: bool = True):
        super().__init__()
        self.checked = checked  # False: no readback per call (CUDA graphs); see submanifold_conv
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size, self.dilation = kernel_size, dilation
        k = kernel_size**3
        self.weight = torch.nn.Parameter(torch.empty((k, in_channels, out_channels), device=device, dtype=dtype))
        self.bias = torch.nn.Parameter(torch.empty(out_channels, device=device, dtype=dtype)) if bias else None
        bound = 1.0 / (k * in_channels) ** 0.5
        torch.nn.init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            torch.nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, feats: torch.Tensor, nbr: torch.Tensor) -> torch.Tensor:
        return submanifold_conv(feats, nbr, self.weight, self.bias, self.checked)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        w = state_dict.get(prefix + "weight")
        if w is not None and w.dim() == 5:
            state_dict[prefix + "weight"] = weight_from_spconv(w)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"dilation={self.dilation}, bias={self.bias is not None}")
