"""Shared test configuration: hypothesis profiles and small random-instance helpers."""

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

# `dev` is quick for local runs; `ci` explores more examples. Select with HYPOTHESIS_PROFILE.
settings.register_profile("dev", max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
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
