"""CuPy and JAX arrays through the DLPack path (GPU only; skipped where the framework or a GPU is missing).

The same calls as the numpy tests, checked against the numpy oracle: the result comes back as an
array of the caller's framework, zero-copy, and is correct once the caller's framework reads it.
"""
import os

import numpy as np
import pytest

import frugal
from frugal import kv, spconv

from test_kv import hadamard_matrix, oracle_quantize
from test_spconv import dense_oracle, random_coords

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # jax must leave the GPU to the others


def has_cuda():
    try:
        return frugal.cuda_available()
    except AttributeError:
        return False


cuda_only = pytest.mark.skipif(not has_cuda(), reason="no CUDA device for frugal")


@pytest.fixture
def cupy():
    return pytest.importorskip("cupy")


@pytest.fixture
def jax():
    jax = pytest.importorskip("jax")
    try:
        jax.devices("gpu")
    except RuntimeError:
        pytest.skip("jax has no GPU backend here")
    return jax


@cuda_only
def test_cupy_hadamard_on_a_non_blocking_stream(cupy, rng):
    x = rng.standard_normal((257, 128)).astype(np.float32)
    with cupy.cuda.Stream(non_blocking=True) as s:
        xd = cupy.asarray(x)
        y = kv.hadamard_transform(xd)  # runs on cupy's current stream (s)
        assert isinstance(y, cupy.ndarray)
        got = cupy.asnumpy(y, stream=s)
        s.synchronize()
    np.testing.assert_allclose(got, x.astype(np.float64) @ hadamard_matrix(128) / np.sqrt(128), atol=2e-5)


@cuda_only
def test_cupy_cache_round_trip_matches_the_oracle(cupy, rng):
    x = rng.standard_normal((33, 2, 64)).astype(np.float32)
    c = kv.Cache(num_kv_heads=2, head_dim=64, capacity=40, device="cuda")
    c.append(cupy.asarray(x))
    packed, norms, margin = oracle_quantize(x, 4)
    got = cupy.asnumpy(c.packed)[0, :, :33].transpose(1, 0, 2)
    safe = margin.min(-1) > 1e-6  # vectors with a coordinate within 1e-6 of a boundary may differ
    np.testing.assert_array_equal(got[safe], packed[safe])
    deq = c.dequantize()
    assert isinstance(deq, cupy.ndarray) and deq.shape == (33, 2, 64)


@cuda_only
def test_cupy_conv_matches_dense_oracle(cupy, rng):
    coords = random_coords(rng, 2, 10, 0.3)
    ci, co = 16, 8
    feats = rng.standard_normal((len(coords), ci)).astype(np.float32)
    weight = rng.standard_normal((27, ci, co)).astype(np.float32)
    bias = rng.standard_normal(co).astype(np.float32)
    nbr = spconv.build_kernel_map(cupy.asarray(coords))
    assert isinstance(nbr, cupy.ndarray)
    out = spconv.submanifold_conv(cupy.asarray(feats), nbr, cupy.asarray(weight), cupy.asarray(bias))
    assert isinstance(out, cupy.ndarray)
    ref = dense_oracle(coords, feats, weight, bias, 3, 1)
    np.testing.assert_allclose(cupy.asnumpy(out), ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


@cuda_only
def test_jax_hadamard_and_conv(jax, rng):
    import jax.numpy as jnp

    gpu = jax.devices("gpu")[0]
    x = rng.standard_normal((65, 256)).astype(np.float32)
    y = kv.hadamard_transform(jax.device_put(x, gpu))
    assert isinstance(y, jax.Array)
    np.testing.assert_allclose(np.asarray(y), x.astype(np.float64) @ hadamard_matrix(256) / 16.0, atol=2e-5)

    coords = random_coords(rng, 1, 9, 0.35)
    feats = rng.standard_normal((len(coords), 8)).astype(np.float32)
    weight = rng.standard_normal((27, 8, 4)).astype(np.float32)
    nbr = spconv.build_kernel_map(jax.device_put(coords, gpu))
    out = spconv.submanifold_conv(jax.device_put(feats, gpu), nbr, jax.device_put(weight, gpu))
    assert isinstance(out, jax.Array)
    ref = dense_oracle(coords, feats, weight, np.zeros(4, np.float32), 3, 1)
    np.testing.assert_allclose(np.asarray(jnp.asarray(out)), ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


@cuda_only
def test_cupy_has_no_bf16_results_and_frugal_says_so(cupy, rng):
    c = kv.Cache(num_kv_heads=2, head_dim=64, capacity=8, device="cuda")
    c.append(cupy.asarray(rng.standard_normal((3, 2, 64)).astype(np.float32)))
    with pytest.raises(frugal.Error, match=r"a cupy result cannot be bf16.*jax: f32, f16, bf16"):
        c.dequantize(dtype="bf16")
    assert c.dequantize(dtype="f16").dtype == cupy.float16


@cuda_only
def test_cupy_gets_plain_views_of_the_storage(cupy, rng):
    c = kv.Cache(num_kv_heads=2, head_dim=64, capacity=8, device="cuda")
    c.append(cupy.asarray(rng.standard_normal((3, 2, 64)).astype(np.float32)))
    assert isinstance(c.packed, cupy.ndarray) and isinstance(c.scales, cupy.ndarray)
    assert c.scales.shape == (1, 2, 8)
