"""Per-call overhead of the Python binding over the C++ call (issue: <= 10 us).

Runs bench/binding_overhead (the C++ loop) and the same op through _frugal (DLPack in, out= given)
and through the frugal.torch custom op, on small CUDA tensors; prints a markdown table.
Usage: python3 bench/binding_overhead.py <path to the binding_overhead binary>
"""
import subprocess
import sys
import time

import torch

import frugal
import frugal.torch as ft
from frugal import _frugal


def per_call_us(fn, n=20000, reps=5):
    for _ in range(1000):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / n * 1e6)
    return best


def main():
    cpp = float(subprocess.run([sys.argv[1]], capture_output=True, text=True, check=True).stdout.split()[-1])
    x = torch.randn(1, 64, device="cuda")
    y = torch.empty_like(x)
    s = torch.cuda.current_stream().cuda_stream
    raw = per_call_us(lambda: _frugal.hadamard_transform(x, y, stream=s))
    pkg = per_call_us(lambda: frugal.kv.hadamard_transform(x, y))
    from torch.utils.dlpack import to_dlpack
    cap = per_call_us(lambda: _frugal.hadamard_transform(to_dlpack(x), to_dlpack(y), stream=s))
    op = per_call_us(lambda: ft.hadamard_transform(x))
    print("| path | us per call | over C++ |")
    print("|---|---|---|")
    print(f"| C++ kv::hadamard_transform [1,64] | {cpp:.2f} | - |")
    print(f"| _frugal (DLPack in, out= given, stream given) | {raw:.2f} | {raw - cpp:+.2f} |")
    print(f"| _frugal with torch's to_dlpack capsules (what frugal.torch passes) | {cap:.2f} | {cap - cpp:+.2f} |")
    print(f"| frugal.kv.hadamard_transform (finds torch's stream) | {pkg:.2f} | {pkg - cpp:+.2f} |")
    print(f"| frugal.torch custom op (allocates out) | {op:.2f} | {op - cpp:+.2f} |")


if __name__ == "__main__":
    main()
