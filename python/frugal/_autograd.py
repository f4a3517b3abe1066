"""Autograd for frugal.torch's sparse conv: the backward as its own custom op,
frugal::submanifold_conv_backward (with a fake implementation, so torch.compile traces it), registered as
the derivative of frugal::submanifold_conv through torch.library.register_autograd. SubMConv3d then trains,
eager or compiled; gradients are bitwise deterministic (fixed chunks of N, added in order).

dgrad relies on the map's submanifold symmetry (nbr[k, n] = m <=> nbr[K-1-k, m] = n), which every map
build_kernel_map makes; a hand-made map without it gets the gradient of its symmetric completion.
"""
from __future__ import annotations

from typing import Optional

import torch

from . import _frugal
from ._interop import dl as _dl
from ._interop import torch_stream as _stream


def _empty(like: torch.Tensor) -> torch.Tensor:
    return like.new_empty(0)  # the placeholder for a gradient not asked for


@torch.library.custom_op("frugal::submanifold_conv_backward", mutates_args=())
def submanifold_conv_backward_op(grad_out: torch.Tensor, feats: torch.Tensor, nbr: torch.Tensor,
                                 weight: torch.Tensor, need_feats: bool, need_weight: bool, need_bias: bool,
                                 checked: bool = True, stats: Optional[torch.Tensor] = None,
                                 order: Optional[torch.Tensor] = None
                                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(grad_feats shaped like feats, grad_weight [K, Ci, Co], grad_bias [Co]) of
    out = submanifold_conv(feats, nbr, weight, bias) given grad_out [N, Co]. A gradient not asked for comes
    back empty (numel 0). checked / stats / order: as for submanifold_conv (the map is checked once if asked)."""
    grad_out, feats, nbr, weight = grad_out.contiguous(), feats.contiguous(), nbr.contiguous(), weight.contiguous()
    gf = torch.empty(feats.shape, dtype=feats.dtype, device=feats.device) if need_feats else _empty(feats)
    gw = torch.empty(weight.shape, dtype=weight.dtype, device=weight.device) if need_weight else _empty(weight)
    gb = weight.new_empty(weight.shape[2]) if need_bias else _empty(weight)
    if need_feats or need_weight or need_bias:
        _frugal.spconv.submanifold_conv_backward(
            _dl(grad_out), _dl(feats), _dl(nbr), _dl(weight),
            grad_feats=_dl(gf) if need_feats else None, grad_weight=_dl(gw) if need_weight else None,
            grad_bias=_dl(gb) if need_bias else None, checked=checked, stream=_stream(feats),
            stats=None if stats is None else stats.tolist(), order=None if order is None else _dl(order.contiguous()))
    return gf, gw, gb


@submanifold_conv_backward_op.register_fake
def _(grad_out, feats, nbr, weight, need_feats, need_weight, need_bias, checked=True, stats=None, order=None):
    return (feats.new_empty(feats.shape) if need_feats else _empty(feats),
            weight.new_empty(weight.shape) if need_weight else _empty(weight),
            weight.new_empty(weight.shape[2]) if need_bias else _empty(weight))


def _setup_context(ctx, inputs, output):
    feats, nbr, weight = inputs[:3]
    bias = inputs[3] if len(inputs) > 3 else None
    stats = inputs[5] if len(inputs) > 5 else None
    order = inputs[6] if len(inputs) > 6 else None
    ctx.save_for_backward(feats, nbr, weight, stats, order)
    ctx.has_bias = bias is not None


def _backward(ctx, grad):
    feats, nbr, weight, stats, order = ctx.saved_tensors
    inputs = len(ctx.needs_input_grad)  # the arguments the call passed (the defaults are not counted)
    need_feats, _, need_weight, need_bias = (tuple(ctx.needs_input_grad) + (False,) * 4)[:4]
    need_bias = bool(need_bias) and ctx.has_bias
    # The forward ran over this map (and checked it where asked), and autograd refuses a saved map changed
    # since: no second check.
    gf, gw, gb = submanifold_conv_backward_op(grad.contiguous(), feats, nbr, weight, bool(need_feats),
                                              bool(need_weight), need_bias, False, stats, order)
    grads = (gf if need_feats else None, None, gw if need_weight else None, gb if need_bias else None)
    return (grads + (None,) * inputs)[:inputs]


def register_autograd(op) -> None:
    """Makes op (frugal::submanifold_conv: feats, nbr, weight, bias, checked, stats, order) differentiable in
    feats, weight and bias."""
    torch.library.register_autograd(op, _backward, setup_context=_setup_context)
