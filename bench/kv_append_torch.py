"""The peer of bench/kv_append.cu: the same Hadamard-rotated 4-bit quantize-append written in
torch ops (FWHT as a matmul with the Hadamard matrix, norm, bucketize, nibble packing), timed
with CUDA events on the same GPU. Prints a markdown table; --quick shrinks the prefill."""
import sys
import time

import torch


def hadamard(d, device):
    h = torch.ones(1, 1)
    while h.shape[0] < d:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return (h / d**0.5).to(device)


def boundaries(bits):
    """Lloyd-Max boundaries of N(0,1) by Lloyd iteration (as frugal computes them)."""
    n = torch.distributions.Normal(0.0, 1.0)
    levels = 1 << bits
    c = torch.linspace(-2.5, 2.5, levels, dtype=torch.float64)
    for _ in range(2000):
        b = torch.cat([torch.tensor([-float("inf")], dtype=torch.float64), (c[1:] + c[:-1]) / 2,
                       torch.tensor([float("inf")], dtype=torch.float64)])
        pdf = torch.exp(-0.5 * b.clamp(-40, 40) ** 2) / (2 * torch.pi) ** 0.5
        pdf[0] = pdf[-1] = 0
        mass = n.cdf(b[1:]) - n.cdf(b[:-1])
        c = (pdf[:-1] - pdf[1:]) / mass
    return ((c[1:] + c[:-1]) / 2).float()


def quantize(x, h, bnd, bits):
    d = x.shape[-1]
    y = x.float() @ h
    n = y.norm(dim=-1, keepdim=True)
    u = y / n * d**0.5
    idx = torch.bucketize(u, bnd, out_int32=True)  # number of boundaries strictly below u
    if bits == 4:
        packed = (idx[..., 0::2] | (idx[..., 1::2] << 4)).to(torch.uint8)
    else:
        packed = idx.to(torch.uint8)
    return packed, n.squeeze(-1)


def event_ms(f, reps=10):
    for _ in range(3):
        f()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        f()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[len(times) // 2]


def main():
    quick = "--quick" in sys.argv
    dev = torch.device("cuda")
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
    heads, tokens = 8, (1 << 17 if quick else 1 << 20)
    rows = ["| D | bits | torch prefill (ms) | effective TB/s | torch decode wall per call (us) |", "|---|---|---|---|---|"]
    for d in (128, 64, 256):
        for bits in (4, 8):
            h, bnd = hadamard(d, dev), boundaries(bits).to(dev)
            x = torch.randn(tokens, heads, d, device=dev, dtype=torch.float16)
            ms = event_ms(lambda: quantize(x, h, bnd, bits), 5 if quick else 10)
            moved = tokens * heads * (2 * d + d * bits / 8 + 4)
            xs = torch.randn(1, heads, d, device=dev, dtype=torch.float16)
            for _ in range(50):
                quantize(xs, h, bnd, bits)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            calls = 2000
            for _ in range(calls):
                quantize(xs, h, bnd, bits)
            torch.cuda.synchronize()
            wall = (time.perf_counter() - t0) / calls * 1e6
            rows.append(f"| {d} | {bits} | {ms:.3f} | {moved / ms / 1e9:.2f} | {wall:.1f} |")
            del x
            torch.cuda.empty_cache()
    print(f"\n### torch peer: T = {tokens} tokens x {heads} heads, fp16 input\n")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
