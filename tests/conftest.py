"""Shared test configuration: hypothesis profiles and small random-instance helpers."""

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

# Every default run is reproducible: `dev` (the default: 30 examples per property) and `ci` (120,
# selected when CI is set) are derandomized, so `python -m pytest` runs the same examples every
# time and on every machine. Random exploration is opt-in:
#     HYPOTHESIS_PROFILE=explore python -m pytest
# (new examples each run; a failure it finds should become a fixed regression test).
settings.register_profile("dev", max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
settings.register_profile("ci", max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
settings.register_profile("explore", max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


def random_simplex(rng: np.random.Generator, V: int, *, zeros: int = 0, alpha: float = 1.0) -> np.ndarray:
    """A random distribution on V tokens with ``zeros`` entries forced to exactly 0."""
    x = rng.dirichlet(np.full(V, alpha))
    if zeros:
        x[rng.choice(V, size=min(zeros, V - 1), replace=False)] = 0.0
        x = x / x.sum()
    return x


@pytest.fixture
def rng():
    return np.random.default_rng(20261122)
