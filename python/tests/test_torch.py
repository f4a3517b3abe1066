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
    """coords, their 3x3x3 map, feats [N, 8] and weights [27, 8, 4] on a small random grid."""
    coords = random_coords(6, 0.4, device)
    nbr = ft.build_kernel_map(coords, 3)
    return coords, nbr, torch.randn(coords.shape[0], 8, device=device), torch.randn(27, 8, 4, device=device)


@pytest.mark.parametrize("device", devices)
def test_spconv_custom_ops_pass_opcheck(device):
    coords, nbr, feats, w = small_conv(device)
    torch.library.opcheck(ft.build_kernel_map, (coords, 3, 1))
    torch.library.opcheck(ft.submanifold_conv, (feats, nbr, w, torch.randn(4, device=device)))
    torch.library.opcheck(ft.submanifold_conv, (feats, nbr, w, None, False))


@pytest.mark.parametrize("device", devices)
def test_unchecked_conv_equals_checked_and_checked_refuses_a_bad_map(device):
    coords, nbr, feats, w = small_conv(device)
    assert torch.equal(ft.submanifold_conv(feats, nbr, w, None, False), ft.submanifold_conv(feats, nbr, w))
    bad = nbr.clone()
    bad[5, 3] = coords.shape[0] + 7
    with pytest.raises(frugal.Error, match="nbr"):
        ft.submanifold_conv(feats, bad, w)


@pytest.mark.skipif("cuda" not in devices, reason="needs a GPU")
def test_unchecked_conv_can_be_captured_in_a_cuda_graph():
    coords = random_coords(8, 0.4, "cuda")
    conv = ft.SubMConv3d(16, 8, checked=False).cuda()
    nbr = ft.build_kernel_map(coords, 3)
    feats = torch.randn(coords.shape[0], 16, device="cuda")
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
