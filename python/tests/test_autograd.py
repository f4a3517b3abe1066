"""Training through frugal.torch's sparse conv: gradients against torch's dense conv3d (autograd through
it, f64), gradcheck in f64 on the CPU, opcheck with the autograd checks, torch.compile, SubMConv3d
fitting a target, determinism; f16/bf16 on CUDA on a GPU machine."""
import pytest

torch = pytest.importorskip("torch")
import frugal  # noqa: E402
import frugal.torch as ft  # noqa: E402

devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() and frugal.cuda_available() else [])


def random_coords(n_side, density, device, batches=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    occ = torch.rand(batches, n_side, n_side, n_side, generator=g) < density
    return torch.nonzero(occ).to(torch.int32).to(device)


def dense_reference(coords, feats, weight, bias, ks, dilation, side):
    """conv3d on the dense grid (zero padding), read at the active sites: differentiable in all three."""
    b, x, y, z = coords.long().unbind(1)
    dense = feats.new_zeros(int(b.max()) + 1, feats.shape[1], side, side, side)
    dense[b, :, x, y, z] = feats
    # frugal's weight [K, Ci, Co], k = (i*ks + j)*ks + l  ->  conv3d's [Co, Ci, i, j, l]
    w = weight.reshape(ks, ks, ks, weight.shape[1], weight.shape[2]).permute(4, 3, 0, 1, 2)
    out = torch.nn.functional.conv3d(dense, w, bias, padding=dilation * (ks // 2), dilation=dilation)
    return out[b, :, x, y, z]


def leaf(t):
    return t.detach().clone().requires_grad_(True)


@pytest.mark.parametrize("device", devices)
@pytest.mark.parametrize("ks,dilation,ci,co", [(3, 1, 5, 7), (1, 1, 4, 4), (3, 2, 3, 24), (5, 1, 6, 3)])
def test_gradients_match_dense_conv3d_autograd(device, ks, dilation, ci, co):
    side = 7
    coords = random_coords(side, 0.35, device)
    km = ft.build_kernel_map(coords, ks, dilation)
    n, k = coords.shape[0], ks**3
    dt = torch.float64 if device == "cpu" else torch.float32
    feats, weight = torch.randn(n, ci, device=device, dtype=dt), torch.randn(k, ci, co, device=device, dtype=dt) * 0.2
    bias, grad = torch.randn(co, device=device, dtype=dt), torch.randn(n, co, device=device, dtype=dt)
    ours = [leaf(feats), leaf(weight), leaf(bias)]
    ft.submanifold_conv(ours[0], km, ours[1], ours[2]).backward(grad)
    ref = [leaf(feats.double()), leaf(weight.double()), leaf(bias.double())]
    dense_reference(coords, ref[0], ref[1], ref[2], ks, dilation, side).backward(grad.double())
    tol = 1e-12 if dt == torch.float64 else 1e-5
    for name, a, b in zip(("feats", "weight", "bias"), ours, ref):
        err = torch.linalg.norm(a.grad.double() - b.grad) / torch.linalg.norm(b.grad)
        assert err < tol, f"grad {name}: {err}"


@pytest.mark.parametrize("use_kernel_map", [True, False])
def test_gradcheck_in_f64_on_the_cpu(use_kernel_map):
    coords = random_coords(4, 0.4, "cpu", seed=1)
    km = ft.build_kernel_map(coords, 3)
    nbr = km if use_kernel_map else km.nbr
    n = coords.shape[0]
    feats = torch.randn(n, 3, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(27, 3, 2, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda f, w, b: ft.submanifold_conv(f, nbr, w, b), (feats, weight, bias))
    assert torch.autograd.gradcheck(lambda f, w: ft.submanifold_conv(f, nbr, w), (feats, weight))


@pytest.mark.parametrize("device", devices)
def test_opcheck_with_the_autograd_checks(device):
    coords = random_coords(5, 0.4, device, seed=2)
    km = ft.build_kernel_map(coords, 3)
    n = coords.shape[0]
    dt = torch.float64 if device == "cpu" else torch.float32
    feats = torch.randn(n, 8, device=device, dtype=dt, requires_grad=True)
    weight = torch.randn(27, 8, 4, device=device, dtype=dt, requires_grad=True)
    bias = torch.randn(4, device=device, dtype=dt, requires_grad=True)
    torch.library.opcheck(ft.submanifold_conv_op, (feats, km.nbr, weight, bias))
    torch.library.opcheck(ft.submanifold_conv_op, (feats, km.nbr, weight, None, True, km.stats))
    torch.library.opcheck(ft.submanifold_conv_op, (feats.detach(), km.nbr, weight, bias, False))
    grad = torch.randn(n, 4, device=device, dtype=dt)
    torch.library.opcheck(ft.submanifold_conv_backward_op,
                          (grad, feats.detach(), km.nbr, weight.detach(), True, True, True, True, km.stats))
    torch.library.opcheck(ft.submanifold_conv_backward_op,
                          (grad, feats.detach(), km.nbr, weight.detach(), False, True, False, False, None))


@pytest.mark.parametrize("device", devices)
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_backward_under_torch_compile(device, backend):
    coords = random_coords(6, 0.4, device, seed=3)
    km = ft.build_kernel_map(coords, 3)
    conv = ft.SubMConv3d(8, 4, device=device)
    feats = torch.randn(coords.shape[0], 8, device=device)

    def step(f):
        return (conv(f, km) ** 2).sum()

    want_f = leaf(feats)
    step(want_f).backward()
    want = [want_f.grad] + [p.grad.clone() for p in conv.parameters()]
    conv.zero_grad()
    got_f = leaf(feats)
    torch.compile(step, backend=backend, fullgraph=True)(got_f).backward()
    got = [got_f.grad] + [p.grad for p in conv.parameters()]
    for a, b in zip(got, want):
        assert torch.equal(a, b)


@pytest.mark.parametrize("device", devices)
def test_gradients_are_bitwise_deterministic(device):
    coords = random_coords(12, 0.3, device, seed=4)
    km = ft.build_kernel_map(coords, 3)
    feats, grad = torch.randn(coords.shape[0], 32, device=device), torch.randn(coords.shape[0], 48, device=device)
    dtypes = [torch.float32] + ([torch.float16, torch.bfloat16] if device == "cuda" else [])
    for dt in dtypes:
        conv = ft.SubMConv3d(32, 48, device=device, dtype=dt)
        runs = []
        for _ in range(2):
            f = leaf(feats.to(dt))
            conv.zero_grad()
            conv(f, km).backward(grad.to(dt))
            runs.append([f.grad.clone(), conv.weight.grad.clone(), conv.bias.grad.clone()])
        for a, b in zip(*runs):
            assert torch.equal(a, b)


def sphere_shell(r, device):
    ax = torch.arange(-r - 1, r + 2)
    x, y, z = torch.meshgrid(ax, ax, ax, indexing="ij")
    on = ((x**2 + y**2 + z**2).double().sqrt() - r).abs() < 0.87
    xyz = torch.stack([x[on], y[on], z[on]], 1)
    return torch.cat([torch.zeros(xyz.shape[0], 1, dtype=xyz.dtype), xyz], 1).to(torch.int32).to(device)


@pytest.mark.parametrize("device", devices)
def test_submconv3d_layers_fit_a_target(device):
    torch.manual_seed(0)
    coords = sphere_shell(6, device)
    km = ft.build_kernel_map(coords, 3)
    p = coords[:, 1:].float() / 6
    x = torch.cat([p, torch.ones(p.shape[0], 1, device=device)], 1)
    target = (torch.sin(1.3 * p[:, 0]) * torch.cos(0.7 * p[:, 1]) + 0.5 * p[:, 2])[:, None]
    layers = torch.nn.ModuleList([ft.SubMConv3d(4, 16, device=device), ft.SubMConv3d(16, 16, device=device),
                                  ft.SubMConv3d(16, 1, device=device)])
    opt = torch.optim.Adam(layers.parameters(), lr=1e-2)
    losses = []
    for _ in range(60):
        h = x
        for i, layer in enumerate(layers):
            h = layer(h, km)
            if i + 1 < len(layers):
                h = torch.relu(h)
        loss = torch.nn.functional.mse_loss(h, target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.1 * losses[0], losses[::10]


def test_backward_op_reports_nothing_for_no_gradients_and_empty_maps():
    coords = torch.zeros(0, 4, dtype=torch.int32)
    km = ft.build_kernel_map(coords, 3)
    feats, weight = torch.zeros(0, 3, requires_grad=True), torch.randn(27, 3, 5, requires_grad=True)
    bias = torch.randn(5, requires_grad=True)
    ft.submanifold_conv(feats, km, weight, bias).sum().backward()
    assert feats.grad.shape == (0, 3)
    assert torch.equal(weight.grad, torch.zeros_like(weight)) and torch.equal(bias.grad, torch.zeros_like(bias))


def test_backward_refuses_a_mismatched_gradient():
    coords = random_coords(4, 0.5, "cpu")
    km = ft.build_kernel_map(coords, 3)
    n = coords.shape[0]
    with pytest.raises(frugal.Error, match=r"\[spconv::submanifold_conv_backward\] grad_out must have shape"):
        ft.submanifold_conv_backward_op(torch.zeros(n, 5), torch.zeros(n, 3), km.nbr, torch.zeros(27, 3, 4),
                                        True, True, True)


@pytest.mark.skipif("cuda" not in devices, reason="needs a GPU")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_gradients_on_cuda_match_f32(dtype):
    coords = random_coords(16, 0.3, "cuda", seed=5)
    km = ft.build_kernel_map(coords, 3)
    n = coords.shape[0]
    feats, weight = torch.randn(n, 64, device="cuda"), torch.randn(27, 64, 64, device="cuda") * 0.05
    bias, grad = torch.randn(64, device="cuda"), torch.randn(n, 64, device="cuda")
    ref = [leaf(feats), leaf(weight), leaf(bias)]
    ft.submanifold_conv(ref[0], km, ref[1], ref[2]).backward(grad)
    half = [leaf(t.to(dtype)) for t in (feats, weight, bias)]
    ft.submanifold_conv(half[0], km, half[1], half[2]).backward(grad.to(dtype))
    for a, b in zip(half, ref):
        assert torch.linalg.norm(a.grad.float() - b.grad) / torch.linalg.norm(b.grad) < 1e-2
