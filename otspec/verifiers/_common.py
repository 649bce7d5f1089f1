r"""Shared machinery of the single-step verifiers: result types, the verifier base class and the
mathematics more than one verifier needs (residuals, the K-SEQ division factor, closed forms).

Everything a verifier computes is built from one object, a :class:`SequentialPlan`: the rule
visits drafted tokens :math:`t_1, \dots, t_R` in order, stops at round :math:`j` with probability
:math:`a_j` (outputting :math:`t_j`), and otherwise draws from a residual law :math:`r`. Its exact
conditional output law is

.. math:: \pi(y \mid \bar x) = \sum_{j=1}^{R} \Big[\prod_{l<j} (1 - a_l)\Big] a_j\, 1\{y = t_j\}
          + \Big[\prod_{l \le R} (1 - a_l)\Big]\, r(y),

and its sampler draws one accept coin per round from one random stream and the residual token from
a *separate* child stream (DESIGN.md section 4: reusing the accept uniform biases the residual).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from otspec._validation import (
    InvalidDraftsError,
    ProblemTooLargeError,
    UnsupportedMethodError,
    as_distribution,
    as_generator,
    as_supported_drafts,
    as_token_tuples,
    check_memory,
)
from otspec.laws import DraftLaw

__all__ = [
    "VerifierKernel",
    "AcceptanceEstimate",
    "KSeqDetails",
    "SequentialPlan",
    "Verifier",
    "residual",
    "residual_rows",
    "accept_ratio",
    "plan_rows",
    "sample_plan",
    "sample_categorical",
    "sample_categorical_rows",
    "split_streams",
    "kseq_beta",
    "kseq_rho_star",
    "kseq_details",
    "rrs_closed_form",
    "greedy_closed_form",
    "greedy_parts",
    "memo",
    "first_draft_marginal",
    "membership_mask",
    "distinct_mask",
    "set_index",
    "KERNEL_AUTO_MAX_ENTRIES",
    "SAMPLE_CHUNK_ENTRIES",
    "MC_CONFIDENCE_Z",
]

#: ``acceptance(method="auto")`` builds the kernel only when it has at most this many entries
#: (M tuples x V tokens; 2**24 float64 = 128 MiB), otherwise it falls back to Monte Carlo.
KERNEL_AUTO_MAX_ENTRIES = 2**24

#: Batched samplers and Monte Carlo work on chunks of at most this many (row x token) entries,
#: so that memory stays near 32 MiB at any vocabulary size.
SAMPLE_CHUNK_ENTRIES = 2**22

#: Two-sided 99% normal quantile used for Monte Carlo confidence intervals.
MC_CONFIDENCE_Z = 2.5758293035489004


# ------------------------------------------------------------------------------------------------
# Result types


@dataclass(frozen=True, eq=False)
class VerifierKernel:
    r"""The exact transport plan of a verifier on an enumerable draft law.

    Attributes
    ----------
    tuples : ndarray of int64, shape (M, k)
        Every ordered draft tuple of positive probability.
    weights : ndarray, shape (M,)
        :math:`Q(\bar x_m)`.
    pi : ndarray, shape (M, V)
        ``pi[m]`` is the output law :math:`\pi(\cdot \mid \bar x_m)` (a distribution).
    verifier : str
        Name of the verifier that produced it.

    Examples
    --------
    >>> import numpy as np, otspec
    >>> from otspec.verifiers import rrs
    >>> K = rrs.kernel(np.array([0.5, 0.5]), otspec.iid([0.75, 0.25], 1))
    >>> K.output_law().round(12).tolist(), round(K.acceptance(), 12)
    ([0.5, 0.5], 0.75)
    """

    tuples: np.ndarray
    weights: np.ndarray
    pi: np.ndarray
    verifier: str = ""

    @property
    def V(self) -> int:
        return int(self.pi.shape[1])

    def output_law(self) -> np.ndarray:
        r""":math:`\sum_m Q(\bar x_m)\, \pi(\cdot \mid \bar x_m)`, shape ``(V,)`` (equals p for a lossless verifier)."""
        return self.weights @ self.pi

    def per_tuple_acceptance(self) -> np.ndarray:
        r""":math:`\sum_{y \in \mathrm{set}(\bar x_m)} \pi(y \mid \bar x_m)` for every tuple, shape ``(M,)``."""
        return np.sum(np.where(membership_mask(self.tuples, self.V), self.pi, 0.0), axis=1)

    def acceptance(self) -> float:
        r"""Membership acceptance :math:`\sum_m Q(\bar x_m) \sum_{y \in \bar x_m} \pi(y \mid \bar x_m)`."""
        return float(self.weights @ self.per_tuple_acceptance())


@dataclass(frozen=True, eq=False)
class AcceptanceEstimate:
    r"""Acceptance probability :math:`P(Y \in \{X_1..X_k\})` of a verifier, and how it was obtained.

    Attributes
    ----------
    value : float
        The acceptance (exact for ``how`` in ``{"closed_form", "kernel"}``, an estimate otherwise).
    how : str
        ``"closed_form"`` (a formula, any V), ``"kernel"`` (exact enumeration of the draft law) or
        ``"monte_carlo"`` (mean of the exact conditional acceptance over sampled draft tuples).
    ci_low, ci_high : float
        99% confidence interval for Monte Carlo; equal to ``value`` for exact answers.
    n_samples : int
        Number of sampled draft tuples (0 for exact answers).
    extras : mapping
        Verifier-specific quantities (e.g. K-SEQ's ``rho_star`` and ``phase1``).
    """

    value: float
    how: str
    ci_low: float
    ci_high: float
    n_samples: int = 0
    extras: Mapping[str, Any] = field(default_factory=dict)

    @property
    def exact(self) -> bool:
        return self.how in ("closed_form", "kernel")

    def __repr__(self) -> str:
        ci = "" if self.exact else f", ci=[{self.ci_low:.6g}, {self.ci_high:.6g}], n={self.n_samples}"
        return f"AcceptanceEstimate(value={self.value:.12g}, how={self.how!r}{ci})"


@dataclass(frozen=True)
class KSeqDetails:
    r"""SpecTr K-SEQ quantities at the optimal division factor (MATH.md section 2.2).

    ``rho_star`` :math:`\rho^*\in[1,k]`; ``beta`` :math:`\beta(\rho^*) = \sum_x \min(p/\rho^*, q)`;
    ``phase1`` :math:`1-(1-\beta)^k` (some draft accepted in the loop); ``gamma`` = phase1 / beta;
    ``membership`` the full acceptance :math:`P(Y \in \bar X)` (a residual draw may land on a
    rejected draft); ``k``.
    """

    rho_star: float
    beta: float
    phase1: float
    gamma: float
    membership: float
    k: int


@dataclass(frozen=True, eq=False)
class SequentialPlan:
    """Rounds of a sequential accept/reject rule for ``n`` draft tuples (see the module docstring).

    ``tokens`` and ``accept`` are ``(n, R)``; ``residual`` is ``(V,)`` (shared) or ``(n, V)``;
    each residual row is a distribution (any distribution where it is reached with probability 0).
    """

    tokens: np.ndarray
    accept: np.ndarray
    residual: np.ndarray


# ------------------------------------------------------------------------------------------------
# Elementary math


def residual(p: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, float]:
    r"""Return :math:`(\mathrm{norm}((p-q)_+),\ \sum (p-q)_+)`.

    When the mass is 0 (p == q on the support) the residual is never sampled; ``p`` is returned in
    its place so that callers never see 0/0.

    Examples
    --------
    >>> import numpy as np
    >>> r, m = residual(np.array([0.5, 0.5]), np.array([0.75, 0.25]))
    >>> r.tolist(), m
    ([0.0, 1.0], 0.25)
    """
    diff = np.maximum(p - q, 0.0)
    mass = float(diff.sum())
    if mass > 0.0:
        return diff / mass, mass
    return np.array(p, dtype=np.float64, copy=True), 0.0


def residual_rows(P: np.ndarray, Q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row-wise :func:`residual` for ``(n, V)`` arrays: rows of zero mass keep ``P``."""
    diff = np.maximum(P - Q, 0.0)
    mass = diff.sum(axis=1)
    ok = mass > 0.0
    out = np.where(ok[:, None], diff / np.where(ok, mass, 1.0)[:, None], P)
    return out, mass


def accept_ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    r""":math:`\min(1, \text{num}/\text{den})` elementwise, with 1 where ``den == 0`` (a token with
    zero draft probability is never drafted, so the value there is never used)."""
    num = np.asarray(num, dtype=np.float64)
    den = np.asarray(den, dtype=np.float64)
    safe = np.where(den > 0.0, den, 1.0)
    with np.errstate(over="ignore"):  # a denormal den overflows num/den to +inf: min(1, inf) = 1 is exact
        return np.where(den > 0.0, np.minimum(1.0, num / safe), 1.0)


def membership_mask(tuples: np.ndarray, V: int) -> np.ndarray:
    """Boolean ``(M, V)``: ``mask[m, y]`` iff token y occurs in tuple m."""
    tuples = np.asarray(tuples, dtype=np.int64)
    mask = np.zeros((tuples.shape[0], V), dtype=bool)
    rows = np.repeat(np.arange(tuples.shape[0]), tuples.shape[1])
    mask[rows, tuples.ravel()] = True
    return mask


def set_index(sets: np.ndarray, tuples: np.ndarray) -> np.ndarray:
    """Row of ``sets`` (distinct tokens, ``-1`` padded, as from ``law.enumerate_sets()``) holding
    the set of distinct tokens of each draft tuple ``(n, k)``; raises if a set is absent."""
    index = {tuple(sorted(int(x) for x in row if x >= 0)): s for s, row in enumerate(sets)}
    srt = np.sort(np.asarray(tuples, dtype=np.int64), axis=1)
    uniq, inv = np.unique(srt, axis=0, return_inverse=True)
    idx = np.empty(uniq.shape[0], dtype=np.int64)
    for u, row in enumerate(uniq):
        key = tuple(sorted(set(int(x) for x in row)))
        s = index.get(key)
        if s is None:
            raise InvalidDraftsError(f"drafts {list(key)} form a set of probability 0 under the law; pass drafts from the law")
        idx[u] = s
    return idx[inv.ravel()]


def plan_rows(plan: SequentialPlan, V: int) -> np.ndarray:
    """Exact conditional output laws ``(n, V)`` of a :class:`SequentialPlan`."""
    tok, acc = plan.tokens, plan.accept
    n = tok.shape[0]
    surv = np.ones(n)
    pi = np.zeros((n, V))
    r = np.arange(n)
    for j in range(tok.shape[1]):
        pi[r, tok[:, j]] += surv * acc[:, j]
        surv = surv * (1.0 - acc[:, j])
    res = plan.residual
    pi += surv[:, None] * (res[None, :] if res.ndim == 1 else res)
    return pi


def plan_row_acceptance(plan: SequentialPlan, drafts: np.ndarray, V: int) -> np.ndarray:
    """Conditional membership acceptance of each row of a plan given the full draft tuples."""
    pi = plan_rows(plan, V)
    return np.sum(np.where(membership_mask(drafts, V), pi, 0.0), axis=1)


def split_streams(rng: np.random.Generator) -> tuple[np.random.Generator, np.random.Generator]:
    """Two independent generators derived from ``rng``: (coins, residual draws).

    The coin stream is ``rng`` itself; the residual stream is a child spawned from it
    (``Generator.spawn``; on numpy < 1.25 a child seeded from one draw of ``rng``). Accept uniforms
    are therefore never reused for residual draws.
    """
    rng = as_generator(rng)
    try:
        child = rng.spawn(1)[0]
    except AttributeError:  # numpy < 1.25
        child = np.random.default_rng(int(rng.integers(0, 2**63 - 1)))
    return rng, child


def sample_categorical(rng: np.random.Generator, w: np.ndarray, size: int) -> np.ndarray:
    """``size`` draws from the (unnormalised, non-negative) weights ``w`` by inverse CDF."""
    if size == 0:
        return np.zeros(0, dtype=np.int64)
    cdf = np.cumsum(w)
    u = rng.random(size) * cdf[-1]
    idx = np.searchsorted(cdf, u, side="right")
    last = int(np.flatnonzero(w > 0)[-1])
    return np.minimum(idx, last).astype(np.int64)


def sample_categorical_rows(rng: np.random.Generator, W: np.ndarray) -> np.ndarray:
    """One draw from each row of the (unnormalised) weights ``W`` ``(n, V)``."""
    n = W.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    cdf = np.cumsum(W, axis=1)
    u = rng.random(n) * cdf[:, -1]
    idx = np.sum(cdf <= u[:, None], axis=1)
    # never step onto a trailing zero-weight token because of rounding
    pos = W > 0
    last = W.shape[1] - 1 - np.argmax(pos[:, ::-1], axis=1)
    return np.minimum(idx, last).astype(np.int64)


def sample_plan(plan: SequentialPlan, coin_rng: np.random.Generator, res_rng: np.random.Generator) -> np.ndarray:
    """Run the sequential rule once per row: accept coins from ``coin_rng`` (one uniform per round,
    accept iff U < a_j), residual draws from ``res_rng``."""
    tok, acc = plan.tokens, plan.accept
    n, R = tok.shape
    out = np.empty(n, dtype=np.int64)
    if R:
        hit = coin_rng.random((n, R)) < acc
        any_hit = hit.any(axis=1)
        first = np.argmax(hit, axis=1)
        out[any_hit] = tok[np.flatnonzero(any_hit), first[any_hit]]
    else:
        any_hit = np.zeros(n, dtype=bool)
    rej = np.flatnonzero(~any_hit)
    if rej.size:
        res = plan.residual
        if res.ndim == 1:
            out[rej] = sample_categorical(res_rng, res, rej.size)
        else:
            out[rej] = sample_categorical_rows(res_rng, res[rej])
    return out


def distinct_mask(tuples: np.ndarray) -> np.ndarray:
    """Boolean ``(n, k)``: True at the first occurrence of each token within its tuple."""
    t = np.asarray(tuples)
    keep = np.ones(t.shape, dtype=bool)
    for j in range(1, t.shape[1]):
        keep[:, j] = np.all(t[:, :j] != t[:, j : j + 1], axis=1)
    return keep


def first_draft_marginal(law: DraftLaw) -> np.ndarray:
    """The marginal law of the first draft X_1 (any law)."""
    kind = law.kind
    if kind in ("iid", "without_replacement"):
        return np.asarray(law.q)
    if kind == "greedy":
        top, q_rest = greedy_parts(law)
        if law.k == 1:
            return q_rest
        m = np.zeros(law.V)
        m[int(top[0])] = 1.0
        return m
    if kind == "product":
        return np.asarray(law.qs[0])
    tuples, weights = law.enumerate()
    return np.bincount(tuples[:, 0], weights=weights, minlength=law.V)


def _one_minus_pow(beta: float, k: int) -> float:
    """:math:`1-(1-\\beta)^k` accurately for small beta."""
    if beta >= 1.0:
        return 1.0
    return float(-math.expm1(k * math.log1p(-beta)))


# ------------------------------------------------------------------------------------------------
# K-SEQ (SpecTr Algorithm 2)


def kseq_beta(p: np.ndarray, q: np.ndarray, rho: float) -> float:
    r""":math:`\beta(\rho) = \sum_x \min(p(x)/\rho, q(x))`."""
    return float(np.minimum(p / rho, q).sum())


def kseq_rho_star(p: np.ndarray, q: np.ndarray, k: int) -> float:
    r"""The optimal division factor :math:`\rho^*\in[1,k]` of K-SEQ, by bisection.

    :math:`f(\rho) = 1-(1-\beta(\rho))^k - \rho\,\beta(\rho)` is non-increasing in :math:`\rho`
    (:math:`\beta` decreases, :math:`\rho\beta(\rho) = \sum\min(p, \rho q)` increases), with
    :math:`f(1) \ge 0 \ge f(k)`. We return the *upper* end of the final bracket, so that
    :math:`f(\rho^*) \le 0`: the rule is valid (lossless) at the returned value, not just near it.

    Cost: one O(V) pass, then a shrinking working set. For :math:`\rho` in the current bracket
    :math:`[lo, hi]` only tokens with ratio :math:`p/q \in (lo, hi]` can switch between the two
    branches of the minimum; the others are folded into constants
    (:math:`\beta(\rho) = (A + \sum_{r \le \rho} p)/\rho + B + \sum_{r > \rho} q`), and every
    bisection step drops the tokens outside the new bracket (about half of them).

    Examples
    --------
    >>> import numpy as np
    >>> kseq_rho_star(np.array([0.5, 0.5]), np.array([0.5, 0.5]), 4)
    1.0
    """
    if k == 1:
        return 1.0
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # over: denormal q, ratio +inf
        r = p / q  # q = 0: ratio inf (or nan when p = 0 too): such tokens sit on the q branch, adding 0
    lo, hi = 1.0, float(k)
    below = r <= lo
    band = (r > lo) & (r <= hi)
    A = float(np.add.reduce(p, where=below))  # tokens always on the p / rho branch
    B = float(np.add.reduce(q, where=~(below | band)))  # tokens always on the q branch
    idx = np.flatnonzero(band)
    rb, pb, qb = r[idx], p[idx], q[idx]

    def f_at(rho: float, P_in: float, Q_out: float) -> float:
        b = (A + P_in) / rho + B + Q_out
        return _one_minus_pow(b, k) - rho * b

    if f_at(lo, 0.0, float(qb.sum())) <= 0.0:
        return lo
    if f_at(hi, float(pb.sum()), 0.0) > 0.0:  # impossible in exact arithmetic (MATH 2.2: clamp)
        return hi
    while True:
        mid = 0.5 * (lo + hi)
        if not (lo < mid < hi):
            return hi
        inside = rb <= mid
        P_in = float(pb[inside].sum())
        Q_out = float(qb[~inside].sum())
        if f_at(mid, P_in, Q_out) > 0.0:
            lo = mid
            A += P_in
            keep = ~inside
        else:
            hi = mid
            B += Q_out
            keep = inside
        if rb.size:
            rb, pb, qb = rb[keep], pb[keep], qb[keep]


def kseq_details(p: np.ndarray, q: np.ndarray, k: int) -> KSeqDetails:
    r"""K-SEQ's division factor, phase-1 and membership acceptance (MATH.md section 2.2).

    .. math::
        \alpha_{\text{K-SEQ}} = p_{acc} + (1-p_{acc}) \sum_t p_{res}(t)\big(1-(1-r(t))^k\big),
        \qquad r = \frac{(q - p/\rho^*)_+}{1-\beta(\rho^*)},

    with :math:`p_{acc} = 1-(1-\beta(\rho^*))^k` and
    :math:`p_{res} = \mathrm{norm}\big((p - \gamma \min(p/\rho^*, q))_+\big)`, :math:`\gamma = p_{acc}/\beta`.
    """
    rho = kseq_rho_star(p, q, k)
    m = np.minimum(p / rho, q)
    beta = float(m.sum())
    phase1 = _one_minus_pow(beta, k)
    gamma = phase1 / beta if beta > 0 else 0.0
    membership = phase1
    if phase1 < 1.0 and beta < 1.0:
        pres, _ = residual(p, gamma * m)
        # only tokens that carry residual mass and that a rejected draft can be contribute
        idx = np.flatnonzero((pres > 0) & (q > m))
        # law of a rejected draft: (q - p / rho)_+ / (1 - beta); the denominator is summed directly
        # (1 - beta cancels when beta is close to 1), as the laws module does for successive sampling
        r = (q[idx] - m[idx]) / float((q - m).sum())
        with np.errstate(divide="ignore"):  # r == 1 gives log1p(-1) = -inf and hit = 1, as intended
            hit = -np.expm1(k * np.log1p(-np.minimum(r, 1.0)))  # 1 - (1 - r)^k
        membership = phase1 + (1.0 - phase1) * float(pres[idx] @ hit)
    return KSeqDetails(rho_star=float(rho), beta=beta, phase1=phase1, gamma=float(gamma), membership=float(membership), k=int(k))


# ------------------------------------------------------------------------------------------------
# Closed forms shared by several verifiers


def rrs_closed_form(p: np.ndarray, qs: list) -> tuple[float, float]:
    r"""Membership and round acceptance of recursive rejection sampling with independent drafts
    :math:`X_j \sim q_j` (MATH.md section 5.1).

    Round j accepts with :math:`\beta_j = \sum\min(p_{j-1}, q_j)`, :math:`p_j =
    \mathrm{norm}((p_{j-1}-q_j)_+)`. A rejected :math:`X_j` has law :math:`(q_j-p_{j-1})_+/(1-\beta_j)`,
    independent across rounds, so

    .. math:: \alpha = (1-P_{rej}) + P_{rej} \sum_t p_k(t)\Big(1 - \prod_j \big(1 - \tfrac{(q_j-p_{j-1})_+(t)}{1-\beta_j}\big)\Big),
              \qquad P_{rej} = \prod_j (1-\beta_j).

    Returns ``(membership, round_acceptance)``.
    """
    surv = 1.0
    acc = 0.0
    miss = np.ones_like(p)
    pc = p
    total = float(p.sum())
    for qj in qs:
        d = np.subtract(pc, qj)
        pos = np.maximum(d, 0.0)  # (p_{j-1} - q_j)_+
        mass = float(pos.sum())
        b = total - mass  # sum min(p_{j-1}, q_j) = sum p_{j-1} - sum (p_{j-1} - q_j)_+
        acc += surv * b
        if b >= 1.0 or mass <= 0.0:
            surv = 0.0
            break
        np.subtract(pos, d, out=d)  # d := (q_j - p_{j-1})_+, the rejected draft's mass
        rej = float(d.sum())  # = 1 - b, summed directly (1 - b cancels when b is close to 1)
        d *= 1.0 / rej if rej > 0 else 0.0
        np.subtract(1.0, d, out=d)
        miss *= d
        surv *= 1.0 - b
        pos *= 1.0 / mass
        pc = pos
        total = float(pc.sum())
    membership = acc + surv * float(pc @ (1.0 - miss)) if surv > 0 else acc
    return float(min(membership, 1.0)), float(acc)


def greedy_parts(law: DraftLaw) -> tuple[np.ndarray, np.ndarray]:
    """``(law.top, law.q_rest)`` computed with a partial sort (the law's properties fully sort q
    on every access) and memoised per law object. Same tie rule: larger q first, then lower id."""

    def build():
        q = np.asarray(law.q)
        m = law.k - 1
        if m == 0:
            top = np.zeros(0, dtype=np.int64)
        else:
            part = np.argpartition(-q, m - 1)[:m]
            cand = np.flatnonzero(q >= q[part].min())  # every token tied with the m-th largest
            top = cand[np.argsort(-q[cand], kind="stable")][:m].astype(np.int64)
        rest = q.copy()
        rest[top] = 0.0
        return top, rest / rest.sum()

    return memo("greedy_parts", law, None, build)


def greedy_closed_form(p: np.ndarray, law: DraftLaw) -> float:
    r""":math:`\alpha^*_{greedy} = P(G) + \sum_{x \notin G} \min(p(x), \tilde q(x))` (MATH.md 3.3)."""
    top, q_rest = greedy_parts(law)
    # q_rest vanishes on G, so the second sum may run over every token.
    return float(min(p[top].sum() + np.minimum(p, q_rest).sum(), 1.0))


_MEMO: dict = {}
_MEMO_SIZE = 32


def memo(tag: str, law: DraftLaw, p: np.ndarray | None, build):
    """Memoise per-(verifier step, law object, target) precomputations (rho*, residuals, ...), so
    that repeated ``sample`` calls and chunked ``sample_batch`` do O(V) work once. Keys use the
    law's identity (laws are immutable) and a 128-bit hash of p's bytes."""
    key = (tag, id(law), None if p is None else hashlib.blake2b(np.ascontiguousarray(p).view(np.uint8), digest_size=16).digest())
    hit = _MEMO.get(key)
    if hit is not None and hit[0] is law:
        return hit[1]
    value = build()
    if len(_MEMO) >= _MEMO_SIZE:
        _MEMO.pop(next(iter(_MEMO)))
    _MEMO[key] = (law, value)
    return value


# ------------------------------------------------------------------------------------------------
# The verifier base class


def _validate_batch(law: DraftLaw, drafts: Any) -> np.ndarray:
    """Vectorised :meth:`DraftLaw.validate_drafts` for ``(N, k)`` draft tuples."""
    arr = np.asarray(drafts)
    if arr.ndim == 1:
        arr = arr[None, :]
    d = as_token_tuples(arr, law.V, name="drafts")
    if d.shape[1] != law.k:
        raise InvalidDraftsError(
            f"drafts must hold exactly k = {law.k} token ids per tuple for {law!r} (got {d.shape[1]}); pass tuples of k drafts"
        )
    kind = law.kind
    if kind in ("iid", "without_replacement"):
        return as_supported_drafts(d, law.q, distinct=kind == "without_replacement")
    if kind == "product":
        return as_supported_drafts(d, np.stack(law.qs), q_name="qs")
    if kind == "greedy":
        top, q_rest = greedy_parts(law)
        ok = np.all(d[:, :-1] == top[None, :], axis=1) & (q_rest[d[:, -1]] > 0)
    else:
        ok = np.array([law.tuple_probability(row) > 0 for row in d], dtype=bool)
    if not np.all(ok):
        bad = d[int(np.flatnonzero(~ok)[0])]
        raise InvalidDraftsError(f"drafts {bad.tolist()} have probability 0 under {law!r}; pass drafts sampled from this law")
    return d


class Verifier:
    """Base class of single-step verifiers (DESIGN.md section 2).

    Subclasses set ``name``, ``lossless``, ``rule`` (when it applies, in words), ``reference``, and
    implement :meth:`applies_to` and either :meth:`_plan` (sequential rules) or :meth:`_rows` and
    :meth:`_sample_rows`; optionally :meth:`_closed_form`.
    """

    name: str = "verifier"
    lossless: bool = True
    rule: str = ""
    fix: str = "use a verifier that applies to this law (see otspec.verifiers.ALL)"
    reference: str = ""
    #: whether Monte Carlo acceptance is possible for laws too large to enumerate
    monte_carlo_ok: bool = True

    # -- to implement ----------------------------------------------------------------------
    def applies_to(self, law: DraftLaw) -> bool:
        """True when the verifier is defined (and, if flagged lossless, lossless) for ``law``."""
        raise NotImplementedError

    def _plan(self, p: np.ndarray, law: DraftLaw, tuples: np.ndarray) -> SequentialPlan:
        raise NotImplementedError

    def _closed_form(self, p: np.ndarray, law: DraftLaw) -> tuple[float, dict] | None:
        return None

    def _rows(self, p: np.ndarray, law: DraftLaw, tuples: np.ndarray) -> np.ndarray:
        return plan_rows(self._plan(p, law, tuples), law.V)

    def _sample_rows(self, p, law, tuples, coin_rng, res_rng) -> np.ndarray:
        return sample_plan(self._plan(p, law, tuples), coin_rng, res_rng)

    def _tuple_acceptance(self, p: np.ndarray, law: DraftLaw, tuples: np.ndarray) -> np.ndarray:
        """Exact conditional acceptance of each draft tuple (default: from the kernel rows)."""
        pi = self._rows(p, law, tuples)
        return np.sum(np.where(membership_mask(tuples, law.V), pi, 0.0), axis=1)

    def _prepare(self, p: np.ndarray, law: DraftLaw) -> None:
        """Hook run once per public call after validation (e.g. to solve an LP)."""

    # -- boundary checks -------------------------------------------------------------------
    def _check(self, p: Any, law: Any) -> np.ndarray:
        if not isinstance(law, DraftLaw):
            raise UnsupportedMethodError(
                f"law must be a draft law (got {type(law).__name__}); build one with otspec.iid, otspec.without_replacement, "
                "otspec.greedy, otspec.product or otspec.explicit"
            )
        p = as_distribution(p, "p")
        law.check_compatible(p)
        if not self.applies_to(law):
            raise UnsupportedMethodError(
                f"verifier {self.name!r} does not apply to the draft law {law!r}: {self.rule}; {self.fix}"
            )
        return p

    # -- public API ------------------------------------------------------------------------
    def kernel(self, p: Any, law: DraftLaw, *, memory_cap: float | None = None) -> VerifierKernel:
        r"""Exact conditional output law :math:`\pi(y \mid \bar x)` for every draft tuple of ``law``.

        Refuses (:class:`~otspec._validation.ProblemTooLargeError`) laws whose enumeration, or
        whose ``(M, V)`` kernel, would exceed ``memory_cap`` bytes.
        """
        p = self._check(p, law)
        n = law.num_tuples()
        check_memory(
            8.0 * n * law.V * 3,
            memory_cap,
            f"the kernel of {self.name!r} on {law!r} ({n:,} tuples x {law.V:,} tokens)",
            "use acceptance() (closed form or Monte Carlo) or a smaller V/k",
        )
        tuples, weights = law.enumerate(memory_cap=memory_cap)
        self._prepare(p, law)
        pi = self._rows(p, law, tuples)
        pi.setflags(write=False)
        return VerifierKernel(tuples=tuples, weights=weights, pi=pi, verifier=self.name)

    def acceptance(
        self,
        p: Any,
        law: DraftLaw,
        *,
        method: str = "auto",
        n_samples: int = 2000,
        rng: np.random.Generator | None = None,
    ) -> AcceptanceEstimate:
        r"""Membership acceptance :math:`P(Y \in \{X_1, \dots, X_k\})`.

        ``method="auto"`` uses the closed form when the verifier has one for this law, else the
        exact kernel when it has at most :data:`KERNEL_AUTO_MAX_ENTRIES` entries, else Monte
        Carlo: ``n_samples`` draft tuples drawn from the law, each contributing its *exact*
        conditional acceptance (a Rao-Blackwellised estimator), with a 99% normal interval.
        ``rng`` (default ``numpy.random.default_rng(0)``, so results are reproducible) is used
        only by Monte Carlo. ``method`` may force ``"closed_form"``, ``"kernel"`` or
        ``"monte_carlo"``.
        """
        if method not in ("auto", "closed_form", "kernel", "monte_carlo"):
            raise UnsupportedMethodError(
                f"method must be one of 'auto', 'closed_form', 'kernel', 'monte_carlo' (got {method!r}); pick one of those"
            )
        p = self._check(p, law)
        if method in ("auto", "closed_form"):
            cf = self._closed_form(p, law)
            if cf is not None:
                value, extras = cf
                return AcceptanceEstimate(float(value), "closed_form", float(value), float(value), 0, dict(extras))
            if method == "closed_form":
                raise UnsupportedMethodError(
                    f"verifier {self.name!r} has no closed-form acceptance for {law!r}; use method='kernel' or 'monte_carlo'"
                )
        if method == "kernel" or (method == "auto" and law.num_tuples() * law.V <= KERNEL_AUTO_MAX_ENTRIES):
            K = self.kernel(p, law)
            v = K.acceptance()
            return AcceptanceEstimate(v, "kernel", v, v, 0, {})
        if not self.monte_carlo_ok:
            raise ProblemTooLargeError(
                f"verifier {self.name!r} needs an enumerable law and {law!r} has {law.num_tuples():,} tuples x {law.V:,} tokens; "
                "use a smaller V/k"
            )
        return self._monte_carlo(p, law, int(n_samples), np.random.default_rng(0) if rng is None else as_generator(rng))

    def _monte_carlo(self, p, law, n, rng) -> AcceptanceEstimate:
        if n < 2:
            raise UnsupportedMethodError(f"n_samples must be >= 2 for Monte Carlo (got {n}); pass more samples")
        self._prepare(p, law)
        chunk = max(1, SAMPLE_CHUNK_ENTRIES // max(law.V, 1))
        vals = []
        done = 0
        while done < n:
            m = min(chunk, n - done)
            tuples = law.sample(rng, m)
            vals.append(self._tuple_acceptance(p, law, tuples))
            done += m
        v = np.concatenate(vals)
        mean = float(v.mean())
        half = MC_CONFIDENCE_Z * float(v.std(ddof=1)) / math.sqrt(n)
        return AcceptanceEstimate(
            mean,
            "monte_carlo",
            max(0.0, mean - half),
            min(1.0, mean + half),
            n,
            {"confidence": 0.99, "estimator": "mean over sampled draft tuples of the exact conditional acceptance"},
        )

    def sample(self, p: Any, law: DraftLaw, drafts: Any, *, rng: np.random.Generator) -> int:
        """One output token for one draft tuple (validated with ``law.validate_drafts``).

        Accept coins come from ``rng``; residual draws from a child stream spawned from it
        (:func:`split_streams`).
        """
        p = self._check(p, law)
        d = law.validate_drafts(drafts)
        coin_rng, res_rng = split_streams(rng)
        self._prepare(p, law)
        return int(self._sample_rows(p, law, d[None, :], coin_rng, res_rng)[0])

    def sample_batch(self, p: Any, law: DraftLaw, drafts: Any, *, rng: np.random.Generator) -> np.ndarray:
        """One output token per row of ``drafts`` ``(N, k)``, vectorised; the same rule and the
        same stream discipline as :meth:`sample` (``sample(d) == sample_batch([d])[0]`` for the
        same generator state)."""
        p = self._check(p, law)
        d = _validate_batch(law, drafts)
        coin_rng, res_rng = split_streams(rng)
        self._prepare(p, law)
        chunk = max(1, SAMPLE_CHUNK_ENTRIES // max(law.V, 1))
        out = np.empty(d.shape[0], dtype=np.int64)
        for s in range(0, d.shape[0], chunk):
            out[s : s + chunk] = self._sample_rows(p, law, d[s : s + chunk], coin_rng, res_rng)
        return out

    def __repr__(self) -> str:
        return f"<verifier {self.name!r} ({'lossless' if self.lossless else 'lossy'})>"
