"""The sphere-shell voxel sets of the anchors (shared/anchors): the voxels of an R^3 grid within
0.87 of the sphere of radius 0.45 R about the grid's centre; built in x-slabs of 64 so R = 1024
fits in memory. Shared by spconv_torch.py, spconv_peer.py, conv_burst.py and conv_ab.sh
(`python3 bench/shells.py R [R ...]` writes /tmp/coords_R.bin for bench/spconv --coords)."""
import sys

import torch


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


def coords_path(res_):
    return f"/tmp/coords_{res_}.bin"


def write_coords(res_, path=None, dev="cuda"):
    """The shell as bench/spconv reads it (--coords): raw int32 [N, 4] rows (b = 0, x, y, z). Returns the path."""
    path = path or coords_path(res_)
    c = sphere_shell(res_, dev)
    torch.cat([torch.zeros_like(c[:, :1]), c], 1).cpu().numpy().astype("int32").tofile(path)
    return path


if __name__ == "__main__":
    for r in sys.argv[1:]:
        write_coords(int(r))
