"""The sphere-shell voxel sets of the anchors (shared/anchors): the voxels of an R^3 grid within
0.87 of the sphere of radius 0.45 R about the grid's centre; built in x-slabs of 64 so R = 1024
fits in memory. Shared by spconv_torch.py, spconv_peer.py, conv_burst.py and conv_ab.sh
(`python3 bench/shells.py [--order O] R [R ...]` writes /tmp/coords_R.bin, or /tmp/coords_R_O.bin for an
order other than the generated one, for bench/spconv --coords).

Row orders (`reorder`): generated (as sphere_shell makes them: x-slabs, nonzero's order within, which is
lexicographic), lex (sorted by (b, x, y, z)), morton (sorted by the Morton key of (b, x, y, z) in the
set's frame, as frugal's KernelMap orders shuffled rows), random (a permutation from a seeded generator)."""
import argparse

import torch

ORDERS = ("generated", "lex", "morton", "random")


def sphere_shell(res_, dev):
    """int32 [N, 3] (x, y, z) coordinates of the shell, x slowest."""
    r = 0.45 * res_
    g = torch.arange(res_, device=dev, dtype=torch.float32)
    out = []
    for x0 in range(0, res_, 64):
        x = g[x0:x0 + 64].view(-1, 1, 1)
        d = torch.sqrt((x - res_ / 2) ** 2 + (g.view(1, -1, 1) - res_ / 2) ** 2 + (g.view(1, 1, -1) - res_ / 2) ** 2)
        c = ((d - r).abs() < 0.87).nonzero()
        c[:, 0] += x0
        out.append(c)
    return torch.cat(out).int()


def morton_keys(bxyz):
    """int64 [N] Morton keys of int [N, 4] rows (b, x, y, z): the offsets from the set's smallest x, y, z
    interleaved bit by bit (x highest in each triple), the batch above them; the key frugal sorts by."""
    c = bxyz.long()
    d = c[:, 1:] - c[:, 1:].min(0).values
    bits = int(d.max()).bit_length() if len(c) else 0
    key = c[:, 0] << (3 * bits)
    for j in range(bits):
        for a in range(3):
            key |= ((d[:, a] >> j) & 1) << (3 * j + 2 - a)
    return key


def reorder(bxyz, order, seed=0):
    """The rows of int [N, 4] (b, x, y, z) in `order` (ORDERS)."""
    if order == "generated":
        return bxyz
    if order == "random":
        g = torch.Generator(device="cpu").manual_seed(seed)
        return bxyz[torch.randperm(len(bxyz), generator=g).to(bxyz.device)]
    if order == "lex":
        c = bxyz.long()
        lo, span = c.min(0).values, c.max(0).values - c.min(0).values + 1
        key = (((c[:, 0] - lo[0]) * span[1] + c[:, 1] - lo[1]) * span[2] + c[:, 2] - lo[2]) * span[3] + c[:, 3] - lo[3]
    elif order == "morton":
        key = morton_keys(bxyz)
    else:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    return bxyz[torch.argsort(key)]


def neighbour_masks(res_):
    """The shell on the CPU in map order (x, y, z slowest to fastest) and each voxel's 27-bit mask of the
    3×3×3 neighbours present (bit k = 9 (dx + 1) + 3 (dy + 1) + dz + 1), as numpy int64."""
    import numpy as np
    c = sphere_shell(res_, "cpu").numpy().astype(np.int64)
    key = (c[:, 0] * res_ + c[:, 1]) * res_ + c[:, 2]
    ks = np.sort(key)
    mask = np.zeros(len(c), np.int64)
    k = 0
    for dx in (-1, 0, 1):
        for dy in (-1, 0, 1):
            for dz in (-1, 0, 1):
                q = ((c[:, 0] + dx) * res_ + (c[:, 1] + dy)) * res_ + (c[:, 2] + dz)
                i = np.minimum(np.searchsorted(ks, q), len(c) - 1)
                mask |= (ks[i] == q).astype(np.int64) << k
                k += 1
    return c, mask


def coords_path(res_, order="generated"):
    return f"/tmp/coords_{res_}.bin" if order == "generated" else f"/tmp/coords_{res_}_{order}.bin"


def write_coords(res_, path=None, dev="cuda", order="generated", seed=0):
    """The shell as bench/spconv reads it (--coords): raw int32 [N, 4] rows (b = 0, x, y, z), in `order`.
    Returns the path."""
    path = path or coords_path(res_, order)
    c = sphere_shell(res_, dev)
    c = reorder(torch.cat([torch.zeros_like(c[:, :1]), c], 1), order, seed)
    c.cpu().numpy().astype("int32").tofile(path)
    return path


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("res", type=int, nargs="+")
    ap.add_argument("--order", choices=ORDERS, default="generated")
    ap.add_argument("--seed", type=int, default=0, help="the random order's generator seed")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()
    for r in a.res:
        write_coords(r, dev=a.device, order=a.order, seed=a.seed)
