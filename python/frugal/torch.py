"""frugal's ops as PyTorch custom ops (torch.library), with fake implementations so that
torch.compile can trace them. Outputs are allocated by torch (its caching allocator) and frugal
writes into them on torch's current CUDA stream. No libtorch link: the extension speaks DLPack.
"""
from __future__ import annotations

import torch

from . import _frugal


def _stream(t: torch.Tensor):
    return torch.cuda.current_stream(t.device).cuda_stream if t.is_cuda else None


@torch.library.custom_op("frugal::hadamard_transform", mutates_args=())
def hadamard_transform(x: torch.Tensor) -> torch.Tensor:
    """FWHT(x) / sqrt(D) along the last dimension of an f32 [rows, D] tensor."""
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    _frugal.hadamard_transform(x, out, stream=_stream(x))
    return out


@hadamard_transform.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x, memory_format=torch.contiguous_format)
