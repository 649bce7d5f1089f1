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


# --- confident drafts: the draft's rest off G is ~1e-16, all of it float64 rounding ---------
#
# The truths below are exact rational distributions (fractions.Fraction); the log holds each
# probability rounded to the nearest float64, as an engine writing float64 would. The exact greedy
# optimum P(G) + sum_{x not in G} min(p(x), q(x) / q(off G)) and the exact i.i.d. optimum
# min_H P(H) + 1 - Q(H)^k (every token set H, Hu et al.'s dual) are computed in rationals, so
# "low <= truth <= high" is checked with no tolerance at all.

from fractions import Fraction  # noqa: E402

from otspec.truncation import LOGGED_VALUE_RTOL  # noqa: E402


def _greedy_exact(P, Q, k):
    order = sorted(range(len(Q)), key=lambda i: (-Q[i], i))
    G = set(order[: k - 1])
    rest = sum((Q[i] for i in range(len(Q)) if i not in G), Fraction(0))
    if rest == 0:
        return sum((P[i] for i in G), Fraction(0))
    return sum((P[i] for i in G), Fraction(0)) + sum((min(P[i], Q[i] / rest) for i in range(len(Q)) if i not in G), Fraction(0))


def _iid_exact(P, Q, k):
    V = len(P)
    best = Fraction(2)
    for m in range(1 << V):
        H = [i for i in range(V) if m >> i & 1]
        best = min(best, sum((P[i] for i in H), Fraction(0)) + 1 - sum((Q[i] for i in H), Fraction(0)) ** k)
    return best


def _log(P, Q, K):
    """The top-K log of an exact pair: every probability rounded to the nearest float64."""
    return truncate(np.array([float(x) for x in P]), np.array([float(x) for x in Q]), K)


def _contains(iv, truth):
    return Fraction(iv.low) <= truth <= Fraction(iv.high) and iv.low <= iv.high


def test_issue_31_confident_draft_rest_above_one():
    """q(off G) = 1.6e-16: q_0 rounds up to 1 - 2^-53, the logged sum exceeds 1 by 4.9e-17 (pure
    rounding); the old interval was [1.0, 0.559] (inverted) for a truth of exactly 0.95."""
    P = [Fraction(3, 10), Fraction(3, 10), Fraction(2, 5)]
    Q = [1 - Fraction(16, 10**17), Fraction(104, 10**18), Fraction(56, 10**18)]
    truth = _greedy_exact(P, Q, 2)
    assert truth == Fraction(19, 20)  # 0.3 + min(0.3, 0.65) + min(0.4, 0.35)
    t = _log(P, Q, 3)
    assert _contains(certified_interval(t, "greedy", 2), truth)
    assert t.q_excess > 0  # the float64 log sums above 1 (exactly summed)


def test_issue_31_confident_draft_rest_below_one():
    """q(off G) = 3e-16: q_0 rounds to 1 - 3 * 2^-53, 1 - q(G) = 3.33e-16 instead of 3e-16; the old
    interval collapsed onto 0.9153 for a truth of 0.95."""
    P = [Fraction(3, 10), Fraction(3, 10), Fraction(2, 5)]
    Q = [1 - Fraction(3, 10**16), Fraction(195, 10**18), Fraction(105, 10**18)]
    truth = _greedy_exact(P, Q, 2)
    assert truth == Fraction(19, 20)
    assert _contains(certified_interval(_log(P, Q, 3), "greedy", 2), truth)


def _confident_pair(rng, V, k):
    """An exact pair whose draft puts all but r ~ 1e-17..1e-9 of its mass on k - 1 tokens."""
    w = rng.dirichlet(np.full(V, 0.5 + rng.random()))
    P = [Fraction(float(x)) for x in w]
    s = sum(P)
    P = [x / s for x in P]
    r = Fraction(int(rng.integers(1, 1000)), 10 ** int(rng.integers(11, 20)))
    top = rng.permutation(V)[: k - 1]
    g = rng.dirichlet(np.full(k - 1, 2.0)) if k > 2 else np.ones(1)
    g = [Fraction(float(x)) for x in g]
    g = [x / sum(g) * (1 - r) for x in g]
    off = [i for i in range(V) if i not in set(top.tolist())]
    if rng.random() < 0.2:  # the target's own mass sits off G too
        P = [Fraction(1, V)] * V
    b = [Fraction(float(x)) + Fraction(1, 10**6) for x in rng.dirichlet(np.full(len(off), 0.7))]
    b = [x / sum(b) * r for x in b]
    Q = [Fraction(0)] * V
    for i, x in zip(top.tolist(), g, strict=True):
        Q[i] = x
    for i, x in zip(off, b, strict=True):
        Q[i] = x
    assert sum(P) == 1 and sum(Q) == 1
    return P, Q


def test_greedy_interval_holds_the_exact_optimum_of_confident_drafts():
    """3 000 random confident drafts (seed 31), logged in full (K = V) or in part (k - 1 <= K < V):
    every interval contains the exact optimum (the code before the fix missed 1 485 of these 3 000
    and inverted 691)."""
    rng = np.random.default_rng(31)
    checked = 0
    for _ in range(1500):
        V = int(rng.integers(3, 10))
        k = int(rng.integers(2, min(V, 5) + 1))
        P, Q = _confident_pair(rng, V, k)
        truth = _greedy_exact(P, Q, k)
        for K in (V, int(rng.integers(k - 1, V))):
            t = _log(P, Q, K)
            iv = certified_interval(t, "greedy", k)
            assert _contains(iv, truth), (V, k, K, iv, float(truth))
            checked += 1
    assert checked == 3000


def test_greedy_interval_with_an_imprecise_log_holds_the_optimum():
    """A log whose draft side sums above 1 by 1e-12..1e-6 (beyond rounding, within
    LOGGED_MASS_ATOL): the truth is the scaled log, and the interval still holds it (400 cases)."""
    rng = np.random.default_rng(32)
    for _ in range(400):
        V = int(rng.integers(3, 8))
        k = int(rng.integers(2, min(V, 4) + 1))
        P, Q = _confident_pair(rng, V, k)
        t = _log(P, Q, V)
        e = 10.0 ** rng.uniform(-12, -6)
        t2 = truncated_pair(t.p_ids, t.p_vals, t.q_ids, t.q_vals * (1 + e))
        assert t2.q_excess > LOGGED_VALUE_RTOL
        assert _contains(certified_interval(t2, "greedy", k), _greedy_exact(P, Q, k))


def test_iid_interval_holds_the_exact_optimum_of_confident_drafts():
    """The i.i.d. intervals on the same kind of pairs (600 cases, V <= 6, every token set checked
    in rationals): no division by the rest, but the ends are rounded outward too."""
    rng = np.random.default_rng(33)
    for _ in range(300):
        V = int(rng.integers(3, 7))
        k = int(rng.integers(1, 4))
        P, Q = _confident_pair(rng, V, max(k, 2))
        truth = _iid_exact(P, Q, k)
        for K in (V, int(rng.integers(1, V))):
            assert _contains(certified_interval(_log(P, Q, K), "iid", k), truth), (V, k, K)


def test_full_log_of_an_ordinary_pair_stays_tight():
    """The outward rounding costs ~1e-14, not the interval's meaning: a full log of a pair with a
    spread-out draft still pins the greedy optimum to within 1e-12."""
    for p, q in _pairs(seed=7, V=20, n=5):
        for k in (2, 3):
            iv = certified_interval(truncate(p, q, 20), "greedy", k)
            assert iv.width <= 1e-12 and iv.low <= _exact(p, q, "greedy", k) <= iv.high
