"""What the sparse-conv side-by-side scripts share: the peers (spconv 2.3, FlexGEMM) behind one loader
each, the voxel sets (frugal's sphere shells, FlexGEMM's own `sphere_coords`) in any row order, each
library's conv layer behind one interface (map build, forward, training step, gradients in frugal's
layout), and the fp64 oracles of the conv and of its gradients.

A peer is optional: load_spconv / load_flexgemm return (module, None), or (None, why it failed).
FlexGEMM is found on PYTHONPATH; its source tree (for its tests' sphere_coords) at $FLEXGEMM_DIR or
beside the package. Used by spconv_peer.py and spconv_train_peer.py.
"""
import importlib.util
import os

import torch

from shells import sphere_shell

ORDERS = ("generated", "lex", "morton", "random")


def load_spconv():
    try:
        import spconv.pytorch as spc
        return spc, None
    except Exception as e:  # noqa: BLE001 (any failure to import means: run without it)
        return None, f"{type(e).__name__}: {e}"


def load_flexgemm():
    try:
        import flex_gemm
        import flex_gemm.ops.spconv  # noqa: F401 (the conv; its import also compiles nothing)
        return flex_gemm, None
    except Exception as e:  # noqa: BLE001
        return None, f"{type(e).__name__}: {e}"


def version_of(name):
    try:
        from importlib.metadata import version
        return version(name)
    except Exception:  # noqa: BLE001
        return "?"


def shell_coords(res_, dev):
    """frugal's shell of an R^3 grid as int32 [N, 4] rows (b = 0, x, y, z), x slowest."""
    xyz = sphere_shell(res_, dev)
    return torch.cat([torch.zeros(xyz.shape[0], 1, dtype=torch.int32, device=dev), xyz], 1).contiguous()


def flexgemm_shell_coords(res_, dev):
    """FlexGEMM's own benchmark shell (tests/utils.py sphere_coords: radius R/2, 1.25 thick, generated in
    256^3 blocks) as int32 [N, 4] rows (b, x, y, z); None when its source tree is not found."""
    root = os.environ.get("FLEXGEMM_DIR")
    if not root:
        flex, _ = load_flexgemm()
        root = os.path.dirname(os.path.dirname(flex.__file__)) if flex else ""
    path = os.path.join(root, "tests", "utils.py")
    if not os.path.exists(path):
        return None
    spec = importlib.util.spec_from_file_location("flexgemm_test_utils", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    _, coords, _ = mod.sphere_coords(res_, 1, device=dev)
    return coords.int().contiguous()


def _spread3(v, bits=11):
    """The bits of v (< 2^bits) moved to every third position (bit i -> bit 3 i)."""
    v = v.long()
    out = torch.zeros_like(v)
    for i in range(bits):
        out |= ((v >> i) & 1) << (3 * i)
    return out


def row_order(coords, order, res_, seed=0):
    """int64 permutation p for coords [N, 4] (b, x, y, z): coords[p] is the set in `order`: as generated
    (identity), lexicographic by (b, x, y, z), Morton (bits of x, y, z interleaved, batch slowest) or a
    random permutation."""
    n = coords.shape[0]
    c = coords.long()
    if order == "generated":
        return torch.arange(n, device=coords.device)
    if order == "lex":
        return torch.argsort(((c[:, 0] * res_ + c[:, 1]) * res_ + c[:, 2]) * res_ + c[:, 3], stable=True)
    if order == "morton":
        assert res_ <= 2048, "Morton keys of 11 bits a coordinate"
        key = (c[:, 0] << 33) | (_spread3(c[:, 1]) << 2) | (_spread3(c[:, 2]) << 1) | _spread3(c[:, 3])
        return torch.argsort(key, stable=True)
    if order == "random":
        g = torch.Generator(device="cpu").manual_seed(seed)
        return torch.randperm(n, generator=g).to(coords.device)
    raise ValueError(f"row order {order!r}, expected one of {ORDERS}")


def conv_flop(nbr, ci, co):
    """Useful FLOPs of one conv (forward, dgrad or wgrad alike): 2 * pairs * Ci * Co, pairs = the map's
    non-sentinel entries."""
    pairs = int((nbr != nbr.shape[1]).sum())
    return pairs, 2.0 * pairs * ci * co


def reference_conv(feats, nbr, w, rows):
    """fp64, the plain way, on the sampled output rows: out[n] = sum_k feats[nbr[k, n]] @ w[k]."""
    f = torch.cat([feats.double(), feats.new_zeros(1, feats.shape[1], dtype=torch.float64)])
    idx = nbr[:, rows].long()  # [K, S]; sentinel N -> the zero row
    return torch.einsum("ksc,kco->so", f[idx], w.double())


def reference_grads(feats, nbr, w, grad_out):
    """fp64, the plain way, of out = bias + sum_k feats[nbr[k]] @ w[k] given grad_out: grad_feats scattered
    along each offset's pairs (no use of the map's symmetry), grad_weight[k] = feats[nbr[k]]^T grad_out
    over the pairs of offset k, grad_bias = sum_n grad_out[n]."""
    n = feats.shape[0]
    f, g, w64 = feats.double(), grad_out.double(), w.double()
    gf = torch.zeros_like(f)
    gw = torch.empty(w.shape, dtype=torch.float64, device=w.device)
    for k in range(nbr.shape[0]):
        src = nbr[k].long()
        dst = (src < n).nonzero().squeeze(1)
        src = src[dst]
        gw[k] = f[src].T @ g[dst]
        gf.index_add_(0, src, g[dst] @ w64[k].T)
    return gf, gw, g.sum(0)


def rel_err(a, ref):
    """max |a - ref| / max |ref| (ref's scale, so that near-zero entries do not dominate)."""
    scale = float(ref.abs().max()) or 1.0
    return float((a.double() - ref.double()).abs().max()) / scale


# ---- one library's conv layer: build_map(feats, train), forward(feats), map_and_forward(feats) (a first call
# on new coordinates), step(feats, grad_out), grads(feats) ----
# The weight is given as spconv's / FlexGEMM's [Co, 3, 3, 3, Ci] (w5); gradients come back in frugal's
# layout (grad_feats [N, Ci], grad_weight [27, Ci, Co], grad_bias [Co]).


def _zero_grads(tensors):
    for t in tensors:
        t.grad = None


class FrugalLayer:
    name = "frugal"

    def __init__(self, coords, w5, bias):
        import frugal.torch as ft
        self.ft, self.coords = ft, coords
        co, _, _, _, ci = w5.shape
        self.conv = ft.SubMConv3d(ci, co, 3, bias=bias is not None, device=w5.device, dtype=w5.dtype)
        with torch.no_grad():
            self.conv.weight.copy_(ft.weight_from_spconv(w5))
            if bias is not None:
                self.conv.bias.copy_(bias)

    def build_map(self, feats=None, train=False):
        self.km = self.ft.build_kernel_map(self.coords)

    def forward(self, feats):
        with torch.no_grad():
            return self.conv(feats, self.km)

    def map_and_forward(self, feats):
        with torch.no_grad():
            return self.conv(feats, self.ft.build_kernel_map(self.coords))

    def params(self):
        return [p for p in (self.conv.weight, self.conv.bias) if p is not None]

    def step(self, feats, grad_out):
        _zero_grads([feats] + self.params())
        out = self.conv(feats, self.km)
        out.backward(grad_out)
        return out

    def grads(self, feats):
        return feats.grad, self.conv.weight.grad, None if self.conv.bias is None else self.conv.bias.grad


class FlexGemmLayer:
    """FlexGEMM's SubMConv3dFunction with its default algorithm (masked implicit GEMM split-K) and its
    neighbour cache built once (with the backward's extra arrays when train)."""
    name = "flexgemm"

    def __init__(self, coords, w5, bias, res_):
        from flex_gemm.ops.spconv import SubMConv3dFunction, sparse_submanifold_conv3d
        self.fn, self.conv3d, self.coords = SubMConv3dFunction, sparse_submanifold_conv3d, coords
        co, _, _, _, ci = w5.shape
        batches = int(coords[:, 0].max()) + 1 if coords.shape[0] else 1
        self.shape = torch.Size([batches, ci, res_, res_, res_])
        self.weight = torch.nn.Parameter(w5.detach().clone())
        # FlexGEMM's backward reads bias.requires_grad: a layer without bias cannot train there
        self.bias = None if bias is None else torch.nn.Parameter(bias.detach().clone())

    def build_map(self, feats=None, train=False):
        self.cache = self.fn._compute_neighbor_cache(self.coords, self.shape, (3, 3, 3), (1, 1, 1), train)

    def forward(self, feats):
        with torch.no_grad():
            return self.conv3d(feats, self.coords, self.shape, self.weight, self.bias, self.cache)[0]

    def map_and_forward(self, feats):
        with torch.no_grad():
            return self.conv3d(feats, self.coords, self.shape, self.weight, self.bias, None)[0]

    def params(self):
        return [p for p in (self.weight, self.bias) if p is not None]

    def step(self, feats, grad_out):
        _zero_grads([feats] + self.params())
        out = self.conv3d(feats, self.coords, self.shape, self.weight, self.bias, self.cache)[0]
        out.backward(grad_out)
        return out

    def grads(self, feats):
        from frugal.torch import weight_from_spconv
        return feats.grad, weight_from_spconv(self.weight.grad), None if self.bias is None else self.bias.grad


class SpconvLayer:
    """spconv 2.3's SubMConv3d (its default algorithm), the pairs built once and reused through the
    indice_key cache of the first call's output."""
    name = "spconv"

    def __init__(self, spc, coords, w5, bias, res_, train=False):
        self.spc, self.coords, self.res = spc, coords, res_
        co, _, _, _, ci = w5.shape
        self.batches = int(coords[:, 0].max()) + 1 if coords.shape[0] else 1
        self.conv = spc.SubMConv3d(ci, co, 3, bias=bias is not None, indice_key="subm").to(w5.device).to(w5.dtype)
        self.conv.train(train)  # spconv builds the backward's pair arrays only in training mode
        with torch.no_grad():
            self.conv.weight.copy_(w5)
            if bias is not None:
                self.conv.bias.copy_(bias)

    def _tensor(self, feats):
        return self.spc.SparseConvTensor(feats, self.coords, [self.res] * 3, self.batches)

    def build_map(self, feats, train=False):
        """spconv builds its pairs inside its first conv call: this is that call (feats: any of the right shape;
        whether the backward's pairs are built follows the module's training flag)."""
        with torch.no_grad():
            self.cached = self.conv(self._tensor(feats))

    def forward(self, feats):
        with torch.no_grad():
            return self.conv(self.cached.replace_feature(feats)).features

    def map_and_forward(self, feats):
        with torch.no_grad():
            return self.conv(self._tensor(feats)).features

    def params(self):
        return [p for p in (self.conv.weight, self.conv.bias) if p is not None]

    def step(self, feats, grad_out):
        _zero_grads([feats] + self.params())
        out = self.conv(self.cached.replace_feature(feats)).features
        out.backward(grad_out)
        return out

    def grads(self, feats):
        from frugal.torch import weight_from_spconv
        return (feats.grad, weight_from_spconv(self.conv.weight.grad),
                None if self.conv.bias is None else self.conv.bias.grad)
