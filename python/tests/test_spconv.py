"""The sparse-conv binding against a dense numpy convolution (CPU)."""
import itertools

import numpy as np
import pytest

import frugal
from frugal import spconv


def random_coords(rng, batches, grid, density):
    occ = rng.random((batches, grid, grid, grid)) < density
    b, x, y, z = np.nonzero(occ)
    coords = np.stack([b, x - grid // 2, y - grid // 2, z - grid // 2], axis=1).astype(np.int32)
    return coords[rng.permutation(len(coords))]


def dense_oracle(coords, feats, weight, bias, ks, dil):
    """Plain double-precision cross-correlation over a dense grid, read at the active sites."""
    lo = coords[:, 1:].min(0) - (ks // 2) * dil
    hi = coords[:, 1:].max(0) + (ks // 2) * dil
    nb = coords[:, 0].max() + 1
    dims = hi - lo + 1
    grid = np.zeros((nb, *dims, feats.shape[1]))
    grid[coords[:, 0], *(coords[:, 1:] - lo).T] = feats
    out = np.tile(bias.astype(np.float64), (len(coords), 1))
    offsets = list(itertools.product(range(ks), repeat=3))
    for k, (i, j, l) in enumerate(offsets):
        d = (np.array([i, j, l]) - ks // 2) * dil
        p = coords[:, 1:] - lo + d
        inside = np.all((p >= 0) & (p < dims), axis=1)
        g = np.zeros((len(coords), feats.shape[1]))
        g[inside] = grid[coords[inside, 0], *p[inside].T]
        out += g @ weight[k].astype(np.float64)
    return out


@pytest.mark.parametrize("ks,dil,ci,co", [(3, 1, 17, 5), (3, 2, 3, 8), (5, 1, 8, 6)])
def test_conv_matches_dense_oracle(rng, ks, dil, ci, co):
    coords = random_coords(rng, 2, 8, 0.3)
    feats = rng.standard_normal((len(coords), ci)).astype(np.float32)
    weight = rng.standard_normal((ks**3, ci, co)).astype(np.float32)
    bias = rng.standard_normal(co).astype(np.float32)
    nbr = spconv.build_kernel_map(coords, ks, dil)
    assert isinstance(nbr, np.ndarray) and nbr.shape == (ks**3, len(coords)) and nbr.dtype == np.int32
    out = spconv.submanifold_conv(feats, nbr, weight, bias)
    ref = dense_oracle(coords, feats, weight, bias, ks, dil)
    assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 1e-5


def test_map_is_symmetric(rng):
    coords = random_coords(rng, 1, 10, 0.2)
    nbr = spconv.build_kernel_map(coords, 3)
    n = len(coords)
    k_idx, rows = np.nonzero(nbr < n)
    assert np.array_equal(nbr[26 - k_idx, nbr[k_idx, rows]], rows)


def test_duplicate_coordinates_raise():
    coords = np.array([[0, 1, 2, 3], [0, 4, 5, 6], [0, 1, 2, 3]], np.int32)
    with pytest.raises(frugal.Error, match=r"\[spconv::build_kernel_map\].*duplicate"):
        spconv.build_kernel_map(coords)


def test_bad_map_entries_raise(rng):
    coords = random_coords(rng, 1, 6, 0.3)
    nbr = spconv.build_kernel_map(coords).copy()
    nbr[3, 0] = len(coords) + 5
    feats = np.ones((len(coords), 4), np.float32)
    with pytest.raises(frugal.Error, match=r"\[spconv::submanifold_conv\]"):
        spconv.submanifold_conv(feats, nbr, np.ones((27, 4, 4), np.float32))


def test_empty_input_gives_empty_output():
    coords = np.zeros((0, 4), np.int32)
    nbr = spconv.build_kernel_map(coords)
    out = spconv.submanifold_conv(np.zeros((0, 4), np.float32), nbr, np.ones((27, 4, 2), np.float32))
    assert out.shape == (0, 2)


def test_a_checked_map_carries_statistics_that_skip_the_per_call_check(rng):
    coords = random_coords(rng, 1, 8, 0.3)
    nbr = spconv.build_kernel_map(coords)
    stats = spconv.check_kernel_map(nbr)
    assert len(stats) == 9 and stats[:3] == [len(coords), 27, 1] and stats[8] == 0  # rows, offsets, valid; order
    feats = rng.standard_normal((len(coords), 4)).astype(np.float32)
    weight = rng.standard_normal((27, 4, 3)).astype(np.float32)
    want = spconv.submanifold_conv(feats, nbr, weight)
    assert np.array_equal(spconv.submanifold_conv(feats, nbr, weight, stats=stats), want)
    bad = nbr.copy()
    bad[3, 0] = len(coords) + 5
    with pytest.raises(frugal.Error, match=r"\[spconv::check_kernel_map\] nbr\[3, 0\]"):
        spconv.check_kernel_map(bad)
    with pytest.raises(frugal.Error, match=r"map_stats describe a map"):
        spconv.submanifold_conv(feats[:-1], np.ascontiguousarray(nbr[:, :-1]), weight, stats=stats)


def test_shuffled_rows_run_in_morton_order_and_give_the_same_output(rng):
    coords = random_coords(rng, 2, 10, 0.3)  # shuffled rows
    columns, order, stats = spconv.build_run_map(coords)
    assert order is not None and stats[8] == 1 and sorted(order.tolist()) == list(range(len(coords)))
    nbr = spconv.build_kernel_map(coords)
    assert np.array_equal(spconv.map_by_row(columns, order), nbr)
    assert np.array_equal(columns, nbr[:, order])  # column i is row order[i]
    feats = rng.standard_normal((len(coords), 8)).astype(np.float32)
    weight = rng.standard_normal((27, 8, 5)).astype(np.float32)
    want = spconv.submanifold_conv(feats, nbr, weight)
    got = spconv.submanifold_conv(feats, columns, weight, stats=stats, order=order)
    assert np.array_equal(got, want)  # the CPU sums each row in the same order either way
    with pytest.raises(frugal.Error, match="no order was given"):
        spconv.submanifold_conv(feats, columns, weight, stats=stats)
    srt = coords[np.lexsort(coords.T[::-1])]  # lexicographic rows keep their order
    _, order_s, stats_s = spconv.build_run_map(srt)
    assert order_s is None and stats_s[8] == 0
    _, forced, stats_f = spconv.build_run_map(srt, order=spconv.RowOrder.morton)
    assert forced is not None and stats_f[8] == 1
