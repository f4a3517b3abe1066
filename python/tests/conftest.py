"""Shared fixtures: a fresh seeded RNG per test (the seed is printed on failure)."""
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
