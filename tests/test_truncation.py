"""Certified intervals of top-K-truncated pairs (otspec.truncation) against the exact optimum of the
full pairs they were cut from."""

import numpy as np
import pytest

import otspec
from otspec.errors import InvalidDistributionError, UnsupportedMethodError
from otspec.truncation import (
    LOGGED_MASS_ATOL,
    certified_interval,
    merged_pair,
    split_pair,
    truncate,
    truncated_pair,
)

#: the prefix closed forms are exact to ~1e-15 at these sizes; the ends are computed the same way
ATOL = 1e-12


def _pairs(seed, V=30, n=12):
    rng = np.random.default_rng(seed)
    for i in range(n):
        # LM-shaped: a few heavy tokens and a long tail; the draft a noisy copy (or an unrelated one)
        z = rng.standard_normal(V) * (1.0 + 2.0 * rng.random())
        p = np.exp(z - z.max())
        p /= p.sum()
        noise = rng.standard_normal(V) * (0.3 if i % 3 else 2.0)
        q = np.exp(z + noise - (z + noise).max())
        q /= q.sum()
        yield p, q


def _exact(p, q, law, k):
    lawobj = otspec.iid(q, k) if law == "iid" else otspec.greedy(q, k)
    return otspec.optimal_acceptance(p, lawobj, method="prefix").value


@pytest.mark.parametrize("law", ["iid", "greedy"])
@pytest.mark.parametrize("k", [1, 2, 4])
def test_interval_contains_the_exact_value_at_every_K(law, k):
    checked = 0
    for p, q in _pairs(seed=10 * k + (law == "greedy")):
        exact = _exact(p, q, law, k)
        widths = []
        for K in (1, 2, 3, 5, 8, 15, 30):
            if law == "greedy" and k - 1 > K:
                continue
            iv = certified_interval(truncate(p, q, K), law, k)
            assert iv.low - ATOL <= exact <= iv.high + ATOL, (K, iv, exact)
            widths.append(iv.width)
            checked += 1
        # the full log (K = V) leaves nothing undetermined
        assert widths[-1] == pytest.approx(0.0, abs=ATOL)
    assert checked >= 60


def test_lower_end_is_attained_by_a_consistent_pair():
    """The split pair is itself a full pair whose top-K log is the given one (tails spread over
    many fresh tokens keep each below the logged minimum), so the lower end cannot be raised."""
    for p, q in _pairs(seed=3, V=25, n=6):
        K = 4
        t = truncate(p, q, K)
        low = certified_interval(t, "iid", 3).low
        # spread each tail over m fresh tokens, each below the smallest logged value
        m = 200
        pl, ql = split_pair(t)
        pfull = np.concatenate([pl[:-2], np.full(m, pl[-2] / m), np.zeros(m)])
        qfull = np.concatenate([ql[:-2], np.zeros(m), np.full(m, ql[-1] / m)])
        t2 = truncate(pfull, qfull, K)
        assert set(t2.p_ids.tolist()) == set(np.searchsorted(np.union1d(t.p_ids, t.q_ids), t.p_ids).tolist())
        assert _exact(pfull, qfull, "iid", 3) == pytest.approx(low, abs=ATOL)


def test_upper_end_is_the_merge_of_any_consistent_pair():
    p, q = next(_pairs(seed=5))
    t = truncate(p, q, 6)
    pb, qb = merged_pair(t)
    both = np.intersect1d(t.p_ids, t.q_ids)
    assert pb[:-1] == pytest.approx(p[both]) and qb[:-1] == pytest.approx(q[both])
    assert pb.sum() == pytest.approx(1.0) and qb.sum() == pytest.approx(1.0)


def test_single_draft_interval_by_hand():
    t = truncated_pair([0, 1], [0.5, 0.3], [1, 2], [0.6, 0.1])
    iv = certified_interval(t, "iid", 1)
    # shared token 1: min(0.3, 0.6) = 0.3; the rest: p 0.7, q 0.4 -> at most 0.4 more
    assert (iv.low, iv.high) == pytest.approx((0.3, 0.7))


def test_excess_mass_within_tolerance_widens_the_interval():
    t = truncated_pair([0, 1], [0.6, 0.4 + LOGGED_MASS_ATOL / 2], [0, 1], [0.5, 0.5])
    assert t.p_excess == pytest.approx(LOGGED_MASS_ATOL / 2)
    assert t.p_vals.sum() == pytest.approx(1.0, abs=1e-15)
    iv = certified_interval(t, "iid", 1)
    e = LOGGED_MASS_ATOL / 2
    scaled = 0.5 + (0.4 + e) / (1 + e)  # sum of min(p / (1 + e), q)
    assert iv.low == pytest.approx(scaled - e, abs=1e-12)
    assert iv.high == pytest.approx(min(1.0, scaled + e), abs=1e-12)


@pytest.mark.parametrize(
    "args, match",
    [
        (([0, 1], [0.7, 0.4], [0], [1.0]), "sum to"),
        (([0, 0], [0.3, 0.3], [0], [1.0]), "distinct"),
        (([0, 1], [0.3], [0], [1.0]), "same length"),
        (([0, -1], [0.3, 0.1], [0], [1.0]), r"\[0"),
        (([0, 1], [0.3, np.nan], [0], [1.0]), "finite"),
        (([], [], [0], [1.0]), "same length"),
    ],
)
def test_bad_records_are_refused(args, match):
    with pytest.raises(InvalidDistributionError, match=match):
        truncated_pair(*args)


def test_without_replacement_and_short_greedy_logs_are_refused():
    t = truncated_pair([0, 1], [0.5, 0.3], [1, 2], [0.6, 0.1])
    with pytest.raises(UnsupportedMethodError, match="without replacement"):
        certified_interval(t, "without_replacement", 2)
    with pytest.raises(UnsupportedMethodError, match="largest draft"):
        certified_interval(t, "greedy", 5)
