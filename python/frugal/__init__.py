"""frugal: fused, memory-frugal kernels for generative inference, on the CPU or a CUDA GPU.

Arrays of any DLPack framework (numpy, torch, cupy, jax) go in without a copy; results come back
in the framework of the inputs. CUDA work runs on the caller's current stream (torch's for torch
tensors) unless `stream=` names another. Errors raise `frugal.Error` with the op's message.
"""
from . import _frugal, kv, spconv
from ._frugal import Error, built_with_cuda, cuda_available, device_name, synchronize
from ._version import __version__  # written from the VERSION file by CMake

__all__ = ["Error", "built_with_cuda", "cuda_available", "device_name", "synchronize", "kv", "spconv"]
