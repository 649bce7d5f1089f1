"""The row check of the torch side (``otspec_gpu._validation.check_rows``): its blocked row sums
against exact sums, the tolerance's edge on both sides, and bad values.

Exact sums are ``math.fsum`` of the entries (correctly rounded float64), an oracle independent of
torch's reductions.
"""

import math

import numpy as np
import pytest
import torch

from otspec.errors import InvalidDistributionError
from otspec_gpu import _validation
from otspec_gpu._tolerances import SUM_TOL
from otspec_gpu._validation import ROW_SUM_BLOCK, check_rows, row_sums

DTYPES = (torch.float32, torch.float64)


def exact_sums(x: torch.Tensor) -> np.ndarray:
    rows = x.reshape(-1, x.shape[-1]).double().numpy()
    return np.array([math.fsum(r) for r in rows]).reshape(x.shape[:-1])


def rows_of(kind: str, V: int, dtype, gen) -> torch.Tensor:
    """[4, V] non-negative rows of total about 1 (not normalised in ``dtype``)."""
    if kind == "softmax":
        return torch.softmax(3.0 * torch.randn(4, V, generator=gen, dtype=torch.float64), -1).to(dtype)
    if kind == "uniform":
        return torch.full((4, V), 1.0 / V, dtype=dtype)
    # one large entry among tiny ones, each below half an ulp of 0.5 in float32 (a sequential
    # float32 sum loses every one of them)
    x = torch.full((4, V), 2.0**-26, dtype=dtype)
    x[:, 0] = 0.5
    return x


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("V", [1, ROW_SUM_BLOCK - 1, ROW_SUM_BLOCK, ROW_SUM_BLOCK + 1, 1000, 49_152])
@pytest.mark.parametrize("kind", ["softmax", "uniform", "one_large"])
def test_blocked_row_sums_are_within_their_bound(dtype, V, kind):
    x = rows_of(kind, V, dtype, torch.Generator().manual_seed(V))
    s_hat, beta = row_sums(x)
    s = exact_sums(x)
    assert np.all(np.abs(s_hat.numpy() - s) <= beta * s + 2.0**-53 * s)
    assert beta < 0.1 * SUM_TOL[dtype]  # the fast pass decides all but a thin band at the edge


def with_exact_sum(target: float, V: int, dtype, seed: int) -> torch.Tensor:
    """A [1, V] row of ``dtype`` whose exact sum is ``target`` up to one rounding of its largest entry."""
    x = torch.softmax(2.0 * torch.randn(1, V, generator=torch.Generator().manual_seed(seed), dtype=torch.float64), -1).to(dtype)
    top = int(x[0].argmax())
    rest = math.fsum(x[0].double().tolist()) - float(x[0, top])
    x[0, top] = target - rest
    return x


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("V", [7, 49_152])
@pytest.mark.parametrize("frac", [0.5, 0.9, 0.97, 0.99, 0.995, 1.005, 1.01, 1.1, 2.0])
@pytest.mark.parametrize("sign", [1, -1])
def test_a_row_passes_exactly_when_within_the_tolerance(dtype, V, frac, sign):
    """Rows off by a fraction of the tolerance pass (also in the band where only the exact pass can
    tell, 0.97..0.995 tol in float32), rows off by just more than the tolerance fail."""
    tol = SUM_TOL[dtype]
    x = with_exact_sum(1.0 + sign * frac * tol, V, dtype, seed=int(1000 * frac) + V)
    off = abs(exact_sums(x)[0] - 1.0)
    assert abs(off - tol) > 1e-3 * tol  # the row is clearly on one side (up to one entry's rounding)
    if off <= tol:
        check_rows(x, "p")
        check_rows(x.expand(3, V).reshape(3, 1, V), "p")  # any leading shape
    else:
        with pytest.raises(InvalidDistributionError, match="must sum to 1"):
            check_rows(x, "p")


def test_valid_rows_are_decided_by_the_fast_pass(monkeypatch):
    """Float32 softmax rows at V = 49 152 never reach the exact float64 pass (the only user of
    ``torch.where`` in the check)."""
    x = torch.softmax(3.0 * torch.randn(8, 3, 49_152, generator=torch.Generator().manual_seed(0)), -1)

    def no_exact_pass(*a, **kw):
        raise AssertionError("the exact pass ran")

    monkeypatch.setattr(_validation.torch, "where", no_exact_pass)
    check_rows(x, "p")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, -0.25])
def test_bad_values_still_fail(dtype, bad):
    x = torch.full((3, 130), 1.0 / 130, dtype=dtype)
    x[1, 77] = bad
    if bad == -0.25:
        x[1, 78] += 0.25  # the row still sums to 1: only the sign is wrong
    with pytest.raises(InvalidDistributionError, match="finite and non-negative"):
        check_rows(x, "q")
