"""frugal.torch on torch tensors: CPU always (when torch is installed), CUDA on a GPU machine."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
import frugal  # noqa: E402
import frugal.torch as ft  # noqa: E402
from frugal import kv  # noqa: E402

devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() and frugal.cuda_available() else [])


def hadamard_matrix(d, device):
    h = torch.ones(1, 1, dtype=torch.float64, device=device)
    while h.shape[0] < d:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h


@pytest.mark.parametrize("device", devices)
def test_hadamard_custom_op_matches_matrix_and_passes_opcheck(device):
    x = torch.randn(7, 256, device=device)
    y = ft.hadamard_transform(x)
    ref = (x.double() @ hadamard_matrix(256, device)) / 16.0
    assert torch.linalg.norm(y.double() - ref) / torch.linalg.norm(ref) < 1e-6
    torch.library.opcheck(ft.hadamard_transform, (x,))


@pytest.mark.parametrize("device", devices)
def test_cache_takes_torch_tensors_and_returns_torch_tensors(device):
    x = torch.randn(5, 4, 64, device=device, dtype=torch.float16)
    c = kv.Cache(num_kv_heads=4, head_dim=64, capacity=8, device=device)
    c.append(x)
    y = c.dequantize(dtype="f16")
    assert isinstance(y, torch.Tensor) and y.device.type == device and y.dtype == torch.float16
    err = torch.linalg.norm((y - x).float()) / torch.linalg.norm(x.float())
    assert err < 0.15
    assert isinstance(c.packed, torch.Tensor) and c.packed.dtype == torch.uint8


@pytest.mark.skipif("cuda" not in devices, reason="needs a GPU")
def test_work_runs_on_a_non_default_stream():
    s = torch.cuda.Stream()
    x = torch.randn(64, 128, device="cuda")
    with torch.cuda.stream(s):
        y = ft.hadamard_transform(x)
    s.synchronize()
    ref = ft.hadamard_transform(x)
    torch.cuda.synchronize()
    assert torch.equal(y, ref)


@pytest.mark.parametrize("device", devices)
def test_non_contiguous_inputs_refused_by_the_plain_api_and_handled_by_the_torch_ops(device):
    x = torch.randn(128, 64, device=device).t()
    with pytest.raises(frugal.Error, match=r"\[kv::hadamard_transform\] x must be contiguous"):
        kv.hadamard_transform(x)
    ref = ft.hadamard_transform(x.contiguous())
    assert torch.equal(ft.hadamard_transform(x), ref)


def random_coords(n_side, density, device, batches=2):
    occ = torch.rand(batches, n_side, n_side, n_side) < density
    return torch.nonzero(occ).to(torch.int32).to(device)


@pytest.mark.parametrize("device", devices)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_submconv_matches_dense_conv3d_with_spconv_weights(device, dtype):
    if device == "cpu" and dtype != torch.float32:
        pytest.skip("torch's CPU conv3d reference in f32 only")
    ks, ci, co, side = 3, 16, 8, 10
    coords = random_coords(side, 0.3, device)
    feats = torch.randn(coords.shape[0], ci, device=device).to(dtype)
    w_spconv = torch.randn(co, ks, ks, ks, ci, device=device).to(dtype) * 0.1  # spconv's KRSC layout
    conv = ft.SubMConv3d(ci, co, ks, device=device, dtype=dtype)
    conv.load_state_dict({"weight": w_spconv, "bias": torch.zeros(co, device=device, dtype=dtype)})
    nbr = ft.build_kernel_map(coords, ks)
    out = conv(feats, nbr)
    # Dense reference: conv3d is a cross-correlation with weight [Co, Ci, kx, ky, kz].
    dense = torch.zeros(2, ci, side, side, side, device=device, dtype=torch.float64)
    b, x, y, z = coords.long().unbind(1)
    dense[b, :, x, y, z] = feats.double()
    w_dense = w_spconv.double().permute(0, 4, 1, 2, 3)
    ref = torch.nn.functional.conv3d(dense, w_dense, padding=ks // 2)[b, :, x, y, z]
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    assert torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref) < tol


def small_conv(device):
    """coords, their 3x3x3 KernelMap, feats [N, 8] and weights [27, 8, 4] on a small random grid."""
    coords = random_coords(6, 0.4, device)
    km = ft.build_kernel_map(coords, 3)
    return coords, km, torch.randn(coords.shape[0], 8, device=device), torch.randn(27, 8, 4, device=device)


@pytest.mark.parametrize("device", devices)
def test_build_kernel_map_returns_the_map_and_its_statistics(device):
    coords, km, feats, w = small_conv(device)
    assert isinstance(km, ft.KernelMap) and km.kernel_size == 3 and km.dilation == 1
    assert km.nbr.dtype == torch.int32 and km.nbr.shape == (27, coords.shape[0]) and km.nbr.device == coords.device
    assert km.stats.device.type == "cpu" and km.stats.dtype == torch.int64
    plain = frugal.spconv.build_kernel_map(coords.cpu().contiguous().numpy(), 3)
    assert np.array_equal(km.nbr.cpu().numpy(), plain)
    assert km.order is None and int(km.stats[8]) == 0  # torch.nonzero's rows are lexicographic: kept
    # The same statistics when a map (in its given order) assembled elsewhere is checked once.
    given = ft.build_kernel_map(coords, 3, order="given")
    assert given.order is None and given.columns is given.nbr
    assert torch.equal(ft.KernelMap.from_user(given.nbr.clone()).stats, given.stats)


@pytest.mark.parametrize("device", devices)
def test_spconv_custom_ops_pass_opcheck(device):
    coords, km, feats, w = small_conv(device)
    torch.library.opcheck(ft.build_kernel_map_op, (coords, 3, 1))
    torch.library.opcheck(ft.check_kernel_map_op, (km.nbr,))
    torch.library.opcheck(ft.submanifold_conv_op, (feats, km.nbr, w, torch.randn(4, device=device)))
    torch.library.opcheck(ft.submanifold_conv_op, (feats, km.nbr, w, None, False))
    torch.library.opcheck(ft.submanifold_conv_op, (feats, km.columns, w, None, True, km.stats, km._order))
    shuffled = ft.build_kernel_map(coords[torch.randperm(coords.shape[0], device=device)], 3)
    assert shuffled.order is not None  # a shuffle runs in Morton order
    torch.library.opcheck(ft.build_kernel_map_op, (coords[torch.randperm(coords.shape[0], device=device)], 3, 1))
    torch.library.opcheck(ft.submanifold_conv_op, (feats, shuffled.columns, w, None, True, shuffled.stats,
                                                   shuffled._order))
    torch.library.opcheck(ft.map_by_row_op, (shuffled.columns, shuffled._order))


@pytest.mark.parametrize("device", devices)
def test_conv_over_a_kernel_map_equals_the_checked_and_unchecked_conv_over_its_tensor(device):
    coords, km, feats, w = small_conv(device)
    want = ft.submanifold_conv(feats, km.nbr, w)
    assert torch.equal(ft.submanifold_conv(feats, km.nbr, w, None, False), want)
    assert torch.equal(ft.submanifold_conv(feats, km, w), want)
    conv = ft.SubMConv3d(8, 4, bias=False, device=device)
    with torch.no_grad():
        conv.weight.copy_(w)
        assert torch.equal(conv(feats, km), conv(feats, km.nbr))


@pytest.mark.parametrize("device", devices)
def test_a_plain_map_is_checked_per_call_and_a_kernel_map_once(device):
    coords, km, feats, w = small_conv(device)
    bad = km.nbr.clone()
    bad[5, 3] = coords.shape[0] + 7
    with pytest.raises(frugal.Error, match="nbr"):
        ft.submanifold_conv(feats, bad, w)
    with pytest.raises(frugal.Error, match=r"\[spconv::check_kernel_map\] nbr\[5, 3\]"):
        ft.KernelMap.from_user(bad)
    # A KernelMap's entries are not checked again: one changed afterwards counts as absent.
    changed = ft.KernelMap(bad, km.stats, order=km._order)
    ft.submanifold_conv(feats, changed, w)


@pytest.mark.parametrize("device", devices)
def test_shuffled_rows_give_the_shuffled_output_and_gradients(device):
    coords, _, _, _ = small_conv(device)
    srt = coords[torch.from_numpy(np.lexsort(coords.cpu().numpy().T[::-1]).copy()).to(device)]
    perm = torch.randperm(coords.shape[0], device=device)
    feats = torch.randn(coords.shape[0], 16, device=device)
    w = torch.randn(27, 16, 8, device=device) * 0.1
    # Both in Morton order: the same tiles, the same sums, bit for bit up to the permutation.
    km_s = ft.build_kernel_map(srt, 3, order="morton")
    km_x = ft.build_kernel_map(srt[perm], 3)
    assert km_x.order is not None and ft.build_kernel_map(srt, 3).order is None
    conv = ft.SubMConv3d(16, 8, device=device)
    with torch.no_grad():
        conv.weight.copy_(w)
    f_s, f_x = feats.clone().requires_grad_(), feats[perm].clone().requires_grad_()
    out_s, out_x = conv(f_s, km_s), conv(f_x, km_x)
    assert torch.equal(out_s[perm], out_x)
    g = torch.randn_like(out_s)
    (gs_f, gs_w) = torch.autograd.grad(out_s, (f_s, conv.weight), g)
    (gx_f, gx_w) = torch.autograd.grad(out_x, (f_x, conv.weight), g[perm])
    assert torch.equal(gs_f[perm], gx_f) and torch.equal(gs_w, gx_w)
    # Against the plain map of the shuffled rows: the same numbers.
    with torch.no_grad():
        assert torch.allclose(conv(feats[perm], km_x.nbr), out_x, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", devices)
def test_conv_over_a_kernel_map_compiles(device):
    coords, km, feats, w = small_conv(device)
    conv = ft.SubMConv3d(8, 4, device=device)
    with torch.no_grad():
        want = conv(feats, km)
        got = torch.compile(lambda f: conv(f, km), backend="aot_eager", fullgraph=True)(feats)
    assert torch.equal(got, want)


@pytest.mark.skipif("cuda" not in devices, reason="needs a GPU")
def test_unchecked_conv_can_be_captured_in_a_cuda_graph():
    coords = random_coords(8, 0.4, "cuda")
    km = ft.build_kernel_map(coords, 3)
    feats = torch.randn(coords.shape[0], 16, device="cuda")
    # A plain map, unchecked; a KernelMap, checked by default (it needs no readback).
    for conv, nbr in ((ft.SubMConv3d(16, 8, checked=False).cuda(), km.nbr), (ft.SubMConv3d(16, 8).cuda(), km)):
        with torch.no_grad():
            want = conv(feats, nbr)
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                conv(feats, nbr)  # warm-up on the capture stream (frugal's pool, module load)
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                got = conv(feats, nbr)
            feats.copy_(feats * 1)  # same values: the replay must reproduce the eager result
            g.replay()
            torch.cuda.synchronize()
        assert torch.equal(got, want)


def sphere_shell(res, device):
    """int32 [N, 4] rows (0, x, y, z) of the voxels within 0.87 of the sphere of radius 0.45 res, x slowest."""
    g = torch.arange(res, dtype=torch.float32)
    d = ((g.view(-1, 1, 1) - res / 2) ** 2 + (g.view(1, -1, 1) - res / 2) ** 2 + (g.view(1, 1, -1) - res / 2) ** 2).sqrt()
    c = ((d - 0.45 * res).abs() < 0.87).nonzero().int()
    return torch.cat([torch.zeros_like(c[:, :1]), c], 1).to(device)


@pytest.mark.skipif("cuda" not in devices or torch.cuda.get_device_capability() != (9, 0),
                    reason="needs an sm_90 GPU (the halo kernel is sm_90a code)")
def test_a_kernel_map_of_rows_in_order_reaches_the_halo_kernel():
    coords = sphere_shell(128, "cuda")
    km = ft.build_kernel_map(coords, 3)
    feats = torch.randn(coords.shape[0], 64, device="cuda", dtype=torch.float16)
    w = torch.randn(27, 64, 64, device="cuda", dtype=torch.float16) * 0.02
    assert ft.choose_conv(feats, km, w).startswith("halo_pipe")
    assert not ft.choose_conv(feats, km.nbr, w).startswith("halo_pipe")  # a plain map: no statistics
    shuffled = ft.build_kernel_map(coords[torch.randperm(coords.shape[0], device="cuda")], 3)
    assert not ft.choose_conv(feats, shuffled, w).startswith("halo_pipe")  # its tiles do not fit
    # The same sums at 64 channels, whichever kernel runs them.
    assert torch.equal(ft.submanifold_conv(feats, km, w), ft.submanifold_conv(feats, km.nbr, w))


@pytest.mark.skipif("cuda" not in devices, reason="needs a GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_decode_attention_matches_sdpa_over_the_dequantized_cache(dtype):
    b, hkv, hq, d, t = 3, 4, 16, 128, 1000
    k = kv.Cache(batch=b, num_kv_heads=hkv, head_dim=d, capacity=t, device="cuda")
    v = kv.Cache(batch=b, num_kv_heads=hkv, head_dim=d, capacity=t, device="cuda")
    k.append(torch.randn(b, t, hkv, d, device="cuda", dtype=dtype))
    v.append(torch.randn(b, t, hkv, d, device="cuda", dtype=dtype))
    q = torch.randn(b, hq, d, device="cuda", dtype=dtype)
    out = kv.decode_attention(q, k, v)
    assert isinstance(out, torch.Tensor) and out.dtype == dtype and out.is_cuda
    kd = torch.stack([k.dequantize(i) for i in range(b)]).transpose(1, 2)  # [B, Hkv, T, D]
    vd = torch.stack([v.dequantize(i) for i in range(b)]).transpose(1, 2)
    g = hq // hkv
    ref = torch.nn.functional.scaled_dot_product_attention(
        q.float()[:, :, None, :], kd.repeat_interleave(g, 1), vd.repeat_interleave(g, 1))[:, :, 0, :]
    tol = 1e-5 if dtype == torch.float32 else 5e-3
    assert torch.linalg.norm(out.float() - ref) / torch.linalg.norm(ref) < tol
