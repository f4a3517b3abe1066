"""Hands results back in the caller's array framework, and finds the caller's CUDA stream."""
from __future__ import annotations

from typing import Any, Optional


def framework_of(x: Any) -> str:
    """'torch', 'numpy', 'cupy', 'jax' or 'dlpack', judged by the array's type (nothing imported)."""
    mod = type(x).__module__.split(".")[0]
    if mod == "torch":
        return "torch"
    if mod == "numpy":
        return "numpy"
    if mod == "cupy":
        return "cupy"
    if mod in ("jax", "jaxlib"):
        return "jax"
    return "dlpack"


def wrap(out: Any, like: Any) -> Any:
    """Zero-copy: the frugal result `out` (__dlpack__) as an array of `like`'s framework."""
    fw = framework_of(like)
    if fw == "torch":
        import torch

        return torch.from_dlpack(out)
    if fw == "numpy":
        import numpy as np

        return np.from_dlpack(out)
    if fw == "cupy":
        import cupy

        return cupy.from_dlpack(out)
    if fw == "jax":
        import jax.dlpack

        from . import _frugal

        # JAX reads on its own (non-blocking) streams and takes no stream from us: finish our work first.
        dev = device_of(out)
        if dev != "cpu":
            _frugal.synchronize(dev)
        return jax.dlpack.from_dlpack(out)
    return out


def torch_stream(t: Any) -> Optional[int]:
    """torch's current CUDA stream on t's device (None for CPU tensors), through the fast raw getter."""
    if not t.is_cuda:
        return None
    import torch

    getter = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if getter is not None:
        return getter(t.device.index)
    return torch.cuda.current_stream(t.device).cuda_stream


def dl(x: Any) -> Any:
    """A torch tensor as a DLPack capsule (torch's C++ exporter: no per-call Python checks; the
    stream is passed to frugal explicitly); anything else as it is."""
    if x is not None and framework_of(x) == "torch":
        import torch.utils.dlpack

        return torch.utils.dlpack.to_dlpack(x)
    return x


def stream_of(x: Any, stream: Optional[int]) -> Optional[int]:
    """The CUDA stream to run on: the one given, else torch's current stream for a torch CUDA tensor."""
    if stream is not None:
        return int(stream)
    if framework_of(x) == "torch":
        return torch_stream(x)
    if framework_of(x) == "cupy":
        import cupy

        return cupy.cuda.get_current_stream().ptr
    return None


def device_of(x: Any) -> str:
    """'cpu' or 'cuda:N' for any DLPack-capable array."""
    dev_type, dev_id = x.__dlpack_device__()
    if int(dev_type) == 1:
        return "cpu"
    if int(dev_type) == 2:
        return f"cuda:{dev_id}"
    raise ValueError(f"frugal takes CPU or CUDA arrays, got DLPack device type {int(dev_type)}")
