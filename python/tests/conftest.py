"""Shared fixtures: a fresh seeded RNG per test (the seed is printed on failure), a torch.compile
backend that counts graphs."""
import os
import random

import numpy as np
import pytest


@pytest.fixture
def rng(request):
    seed = int(os.environ.get("FRUGAL_SEED", random.randrange(2**32)))
    request.node.user_properties.append(("seed", seed))
    print(f"FRUGAL_SEED={seed}")
    return np.random.default_rng(seed)


class CountingBackend:
    """A torch.compile backend that counts the graphs it is given (a recompile is a second graph)."""

    def __init__(self):
        self.graphs = 0

    def __call__(self, gm, example_inputs):
        self.graphs += 1
        return gm.forward


@pytest.fixture
def counting_backend():
    """A fresh CountingBackend: torch.compile(fn, backend=counting_backend) and read .graphs."""
    return CountingBackend()
