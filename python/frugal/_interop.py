"""Hands results back in the caller's array framework, finds the caller's CUDA stream, and checks
the Python arguments the C++ types cannot hold (so that the error names the argument)."""
from __future__ import annotations

import operator
from typing import Any, Optional

from . import _frugal

# The C++ integer types of the bindings' arguments, as inclusive ranges.
INT_RANGES = {
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint64": (0, 2**64 - 1),
}

# Result dtypes each framework can hold (numpy and cupy have no bfloat16).
FRAMEWORK_DTYPES = {
    "numpy": ("f32", "f16", "u8", "i32", "i64"),
    "cupy": ("f32", "f16", "u8", "i32", "i64"),
    "torch": ("f32", "f16", "bf16", "u8", "i32", "i64"),
    "jax": ("f32", "f16", "bf16", "u8", "i32", "i64"),
    "dlpack": ("f32", "f16", "bf16", "u8", "i32", "i64"),
}


def int_arg(op: str, name: str, value: Any, kind: str = "int32") -> Any:
    """`value` as a Python int if it is an integer that fits the C++ type `kind`; None stays None.

    Raises TypeError for a non-integer and frugal.Error for an integer out of range, both naming
    `op` and `name` (nanobind's own TypeError names neither)."""
    if value is None:
        return None
    try:
        v = operator.index(value)  # ints, numpy integers, 0-d integer tensors; not floats or strings
    except TypeError:
        raise TypeError(f"[{op}] {name} must be an integer, got {type(value).__name__} {value!r}") from None
    lo, hi = INT_RANGES[kind]
    if not lo <= v <= hi:
        raise _frugal.Error(f"[{op}] {name} must be in [{lo}, {hi}] ({kind}), got {v}")
    return v


def check_result_dtype(op: str, dtype: str, like: Any) -> None:
    """Refuses, before any work, a result dtype the framework of `like` cannot hold."""
    fw = framework_of(like) if like is not None else "dlpack"
    allowed = FRAMEWORK_DTYPES[fw]
    if dtype in FRAMEWORK_DTYPES["torch"] and dtype not in allowed:
        takes = "; ".join(f"{k}: {', '.join(v)}" for k, v in FRAMEWORK_DTYPES.items() if k != "dlpack")
        raise _frugal.Error(f"[{op}] a {fw} result cannot be {dtype} ({fw} has no such dtype); "
                            f"ask for another dtype or pass like= an array of a framework that has it ({takes})")


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
