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
