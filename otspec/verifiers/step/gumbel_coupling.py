r"""Drafter-invariant coupling by shared exponentials (Gumbel-max; Daliri, Musco, Suresh 2024).

Drafter and verifier share i.i.d. exponentials :math:`E_j \sim \mathrm{Exp}(1)`, one per token
(equivalently Gumbel noise :math:`G_j = -\log E_j`). The drafter proposes
:math:`X = \arg\min_j E_j / q(j)` (:math:`\sim q`), the verifier outputs
:math:`Y = \arg\min_j E_j / p(j)` (:math:`\sim p`): lossless, and *drafter invariant* -- given the
shared randomness, :math:`Y` does not depend on :math:`q` at all. The match probability is exact
(condition on :math:`E_i` and integrate the other tokens' survival):

.. math:: P(X = Y) = \sum_i \frac{p(i)\, q(i)}{\sum_j \max\big(p(i)\, q(j),\; p(j)\, q(i)\big)}
          \;\ge\; \frac{1 - d_{TV}(p, q)}{1 + d_{TV}(p, q)},

the bound being the paper's claim (their Theorem 1), checked exactly in the tests.

The module also holds the exact joint law of the shared-exponential race with K drafting copies
(:func:`race_joint`), which :mod:`otspec.verifiers.step.gls` uses: on the target clock
:math:`t = \min_{k,j} E_{k,j}/p(j)` the winner has density :math:`p(y) e^{-Kt}`, every other
exponential is :math:`p(j)t + \mathrm{Exp}(1)` (memorylessness), and the draft of each copy is a
race whose law, after the substitution :math:`s = tu`, is an integral of
:math:`e^{-t \varphi(u)}` with :math:`\varphi(u) = \sum_j (q(j)u - p(j))_+` piecewise linear:
a finite sum of exponentials in :math:`t`. Products over copies stay exponential sums, and
:math:`\int_0^\infty e^{-Kt} \sum_r c_r e^{-d_r t}\,dt = \sum_r c_r / (K + d_r)` is exact.

As a verifier (k = 1 drafts) the kernel is :math:`\pi(y \mid x) = P(X = x, Y = y) / q(x)`; its
sampler draws the exponentials *conditionally on the draft* (the race's minimum
:math:`m \sim \mathrm{Exp}(1)` is independent of its winner: :math:`E_x = q(x)m`,
:math:`E_j = q(j)m + \mathrm{Exp}(1)`), so it serves drafts produced elsewhere;
:func:`couple` is the communication-free protocol itself (one shared draw, both outputs).

References
----------
Daliri, Musco, Suresh, "Coupling without communication and drafter-invariant speculative
decoding", arXiv 2408.07978 (2024).
"""

from __future__ import annotations

import numpy as np

from otspec._validation import as_distribution, as_generator, check_same_vocab
from otspec.errors import ProblemTooLargeError
from otspec.laws import DraftLaw
from otspec.verifiers.base import Verifier

__all__ = [
    "DrafterInvariantVerifier",
    "gumbel",
    "gumbel_match_probability",
    "max_product_sums",
    "daliri_lower_bound",
    "race_joint",
    "race_sample",
    "conditional_rows",
    "couple",
    "RACE_KERNEL_MAX_WORK",
    "RACE_KERNEL_MAX_STEPS",
]

#: Largest work the exact race law is computed for: each (tuple, output, winning copy) is one
#: Python-level step multiplying K exponential sums of at most 2V terms each (the winning copy's
#: too), so the work counts steps times terms, N * Y * K * (2V)^K (N tuples, Y outputs per tuple);
#: about ten seconds at the cap on the project machine. (Counting (2V)^(K-1) let V = 49 152, K = 2
#: through to a 1e10-term product.)
RACE_KERNEL_MAX_WORK = 5.0e7
#: Largest number of Python-level steps N * Y * K (the loop's overhead dominates small products).
RACE_KERNEL_MAX_STEPS = 2.0e5


def gumbel_match_probability(p, q) -> float:
    r"""Exact :math:`P(X = Y)` of the shared-exponential (Gumbel-max) coupling of ``q`` and ``p``.

    .. math:: \sum_i \frac{p(i) q(i)}{\sum_j \max(p(i) q(j), p(j) q(i))}

    Parameters
    ----------
    p, q : array_like, shape (V,)
        Target and draft distributions.

    Returns
    -------
    float
        The match probability (tokens with :math:`p(i) q(i) = 0` contribute 0).

    Raises
    ------
    InvalidDistributionError, ShapeMismatchError
        If ``p`` or a draft distribution is not a distribution, or their vocabularies differ.

    Examples
    --------
    >>> gumbel_match_probability([0.5, 0.5], [0.5, 0.5])
    1.0
    """
    p = as_distribution(p, "p")
    q = as_distribution(q, "q")
    check_same_vocab(p, q)
    both = np.flatnonzero((p > 0) & (q > 0))
    return float(np.sum(p[both] * q[both] / max_product_sums(p, q, both)))


def max_product_sums(p: np.ndarray, q: np.ndarray, x: np.ndarray) -> np.ndarray:
    r""":math:`D(i) = \sum_j \max(p(i) q(j), p(j) q(i))` for the tokens ``x``, in O(V log V) time and
    O(V) memory (the direct sum is a V x V array: 512 GiB at V = 262 144).

    With the ratio :math:`r(j) = p(j)/q(j)` (:math:`+\infty` where q = 0), the larger product is
    :math:`p(i) q(j)` exactly when :math:`r(j) \le r(i)`, so

    .. math:: D(i) = p(i)\, Q(r \le r(i)) + q(i)\, P(r > r(i)),

    two running sums in ratio order (tokens with p = q = 0 add 0 to both; ties add the same either
    way). The suffix sum of p is accumulated from the top, never as a difference.

    Parameters
    ----------
    p, q : ndarray, shape (V,)
        Target and draft distributions (validated by the caller).
    x : ndarray of int
        Token ids with :math:`p(i) q(i) > 0` or any other ids; shape (n,).

    Returns
    -------
    ndarray, shape (n,)
    """
    r = np.where(q > 0, p / np.where(q > 0, q, 1.0), np.inf)
    order = np.argsort(r, kind="stable")
    rs = r[order]
    q_le = np.cumsum(q[order])  # Q(r <= rs[m])
    p_gt = np.append(np.cumsum(p[order][::-1])[::-1][1:], 0.0)  # P of the tokens after position m
    last = np.searchsorted(rs, r[x], side="right") - 1  # the last position with r <= r(i) (ties included)
    return p[x] * q_le[last] + q[x] * p_gt[last]


def daliri_lower_bound(p, q) -> float:
    r"""The paper's guarantee :math:`(1 - d_{TV}) / (1 + d_{TV})` for the Gumbel-max coupling.

    Parameters
    ----------
    p, q : array_like, shape (V,)
        Target and draft distributions.

    Returns
    -------
    float

    Raises
    ------
    InvalidDistributionError, ShapeMismatchError
        If ``p`` or a draft distribution is not a distribution, or their vocabularies differ.

    Examples
    --------
    >>> round(daliri_lower_bound([1.0, 0.0], [0.5, 0.5]), 12)  # TV = 1/2
    0.333333333333
    """
    p = as_distribution(p, "p")
    q = as_distribution(q, "q")
    check_same_vocab(p, q)
    tv = float(np.maximum(p - q, 0.0).sum())
    return (1.0 - tv) / (1.0 + tv)


# -- the race on the target clock: exponential sums in t ---------------------------------------


def _phi(p, q, valid, u):
    """sum_j (q_j u - p_j)_+ over the valid tokens (u finite)."""
    with np.errstate(over="ignore"):  # u near the float limit after a denormal q: +inf rate, term 0
        return float(np.maximum(q[valid] * u - p[valid], 0.0).sum())


def _draft_integral(p, q, x, u_hi, skip):
    r"""Exponential sum (c, d) of :math:`\int_{u_x}^{u_{hi}} q(x)\, t\, e^{-t\varphi(u)}\, du` with
    :math:`\varphi` over the tokens other than ``skip``: the probability (at target time t) that a
    copy whose exponentials are :math:`p(j)t + \mathrm{Exp}(1)` (``skip``'s is fixed) drafts x.

    In increasing ratio order :math:`u_{(i)}` the slope of :math:`\varphi` is the running sum
    :math:`\beta_{(i)}` of q and :math:`\varphi(u_{(i)})` a running sum of non-negative steps
    :math:`\beta_{(i-1)} (u_{(i)} - u_{(i-1)})`: O(V log V), no (segments x V) table."""
    valid = q > 0
    if skip is not None:
        valid[skip] = False
    with np.errstate(over="ignore"):  # a denormal q overflows p/q to +inf: the right limit
        ux = p[x] / q[x]
        uv = p[valid] / q[valid]
    if not ux < u_hi:
        return np.zeros(0), np.zeros(0)
    order = np.argsort(uv, kind="stable")
    us, beta_run = uv[order], np.cumsum(q[valid][order])
    fin = np.isfinite(us)
    gaps = np.diff(us[fin])
    phi_run = np.full(us.size, np.inf)  # phi at each finite break (a +inf ratio is never reached)
    phi_run[fin] = np.concatenate([[0.0], np.cumsum(beta_run[fin][:-1] * gaps)])
    inner = np.unique(us[(us > ux) & (us < u_hi)])
    pts = np.concatenate([[ux], inner])  # segment starts; the last segment ends at u_hi
    ends = np.concatenate([inner, [u_hi]])
    last = np.searchsorted(us, pts, side="right") - 1  # >= 0: x itself is a break <= u_x
    beta = beta_run[last]  # >= q(x) > 0: x is active from u_x on
    phi_a = phi_run[last] + beta * (pts - us[last])
    fe = np.isfinite(ends)
    le = np.searchsorted(us, ends[fe], side="right") - 1
    phi_b = phi_run[le] + beta_run[le] * (ends[fe] - us[le])
    cs = np.concatenate([q[x] / beta, -q[x] / beta[fe]])
    ds = np.concatenate([phi_a, phi_b])
    return cs, ds


def _winner_copy(p, q, x, y):
    """Exponential sum of P(this copy drafts x | its token y wins the target race at time t)."""
    with np.errstate(over="ignore"):  # denormal q: +inf, the right limit
        uy = p[y] / q[y] if q[y] > 0 else np.inf
    if x == y:
        valid = q > 0
        valid[y] = False
        return np.ones(1), np.array([_phi(p, q, valid, uy)])
    return _draft_integral(p, q, x, uy, skip=y)


def _other_copy(p, q, x):
    """Exponential sum of P(this copy drafts x | it lost the target race, at time t)."""
    return _draft_integral(p, q, x, np.inf, skip=None)


# long-function: a long numpydoc docstring with the race integral; the code is 38 lines
def race_joint(p, qs, tuples, *, drafted_only: bool = False) -> np.ndarray:
    r"""Exact joint law :math:`P(X_1..X_K = \bar x, Y = y)` of the K-copy shared-exponential race.

    Copy k drafts :math:`X_k = \arg\min_j E_{k,j}/q_k(j)`; the target is the token of
    :math:`\arg\min_{k,j} E_{k,j}/p(j)`. Summing over the winning copy :math:`k^*` and integrating
    the target clock,

    .. math:: P(\bar x, y) = \sum_{k^*} \int_0^\infty p(y) e^{-Kt}\, w_{k^*}(x_{k^*}; y, t)
              \prod_{k \ne k^*} h_k(x_k; t)\, dt,

    with :math:`w, h` exponential sums in t (module notes), so the integral is a finite sum.

    Parameters
    ----------
    p : ndarray, shape (V,)
        Target distribution.
    qs : sequence of K ndarrays, shape (V,)
        The copies' draft distributions.
    tuples : ndarray of int, shape (N, K)
        Draft tuples (each draft with :math:`q_k(x_k) > 0`).
    drafted_only : bool
        Compute only the outputs :math:`y \in \bar x_n` (what the acceptance needs; the other
        entries are 0).

    Returns
    -------
    ndarray, shape (N, V)
        :math:`P(\bar X = \bar x_n, Y = y)`; row sums are :math:`\prod_k q_k(x_{n,k})` and the
        column sums over all tuples are p (when every output is computed).

    Raises
    ------
    ProblemTooLargeError
        If the work exceeds :data:`RACE_KERNEL_MAX_WORK` or :data:`RACE_KERNEL_MAX_STEPS`.

    Examples
    --------
    >>> import numpy as np
    >>> J = race_joint(np.array([0.5, 0.5]), [np.array([0.5, 0.5])], np.array([[0], [1]]))
    >>> np.round(J, 12)  # p == q: the race couples perfectly
    array([[0.5, 0. ],
           [0. , 0.5]])
    """
    p = np.asarray(p, dtype=np.float64)
    qs = [np.asarray(q, dtype=np.float64) for q in qs]
    tuples = np.asarray(tuples, dtype=np.int64)
    V, K = p.size, len(qs)
    steps = float(tuples.shape[0]) * (K if drafted_only else V) * K
    work = steps * float(2 * V) ** K
    if steps > RACE_KERNEL_MAX_STEPS or work > RACE_KERNEL_MAX_WORK:
        raise ProblemTooLargeError(
            f"the exact race law of {tuples.shape[0]:,} draft tuples (V = {V}, K = {K}) needs {steps:.3g} steps and {work:.3g} "
            f"terms, more than RACE_KERNEL_MAX_STEPS = {RACE_KERNEL_MAX_STEPS:.3g} / RACE_KERNEL_MAX_WORK = {RACE_KERNEL_MAX_WORK:.3g}; "
            "use a smaller V or K (k = 1 has a closed form at any V)"
        )
    other: dict = {}  # (copy's q, x) -> exponential sum, on first use (only drafted x are needed)
    win = {}
    out = np.zeros((tuples.shape[0], V))
    for n, xs in enumerate(tuples):
        for y in np.unique(xs).tolist() if drafted_only else range(V):
            if p[y] == 0.0:
                continue
            total = 0.0
            for ks in range(K):
                wkey = (qs[ks].tobytes(), int(xs[ks]), y)
                if wkey not in win:
                    win[wkey] = _winner_copy(p, qs[ks], int(xs[ks]), y)
                c, d = win[wkey]
                for k in range(K):
                    if k == ks or c.size == 0:
                        continue
                    okey = (qs[k].tobytes(), int(xs[k]))
                    if okey not in other:
                        other[okey] = _other_copy(p, qs[k], int(xs[k]))
                    c2, d2 = other[okey]
                    c = (c[:, None] * c2[None, :]).ravel()
                    d = (d[:, None] + d2[None, :]).ravel()
                total += float(np.sum(c / (K + d)))
            out[n, y] = p[y] * total
    return np.maximum(out, 0.0)  # exact sums of signed terms: clip the last-bit negatives


def race_sample(p, qs, tuples, m_rng: np.random.Generator, f_rng: np.random.Generator) -> np.ndarray:
    r"""Sample the target token of the shared race *given* the drafts (one per row of ``tuples``).

    Each copy's exponentials are drawn conditionally on its draft: :math:`m_k \sim \mathrm{Exp}(1)`
    from ``m_rng``, :math:`E_{k,x_k} = q_k(x_k) m_k` and :math:`E_{k,j} = q_k(j) m_k + F_{k,j}`
    with :math:`F \sim \mathrm{Exp}(1)` from ``f_rng``; the output is the token of
    :math:`\arg\min_{k,j} E_{k,j}/p(j)`.

    Parameters
    ----------
    p : ndarray, shape (V,)
    qs : sequence of K ndarrays, shape (V,)
    tuples : ndarray of int, shape (N, K)
    m_rng, f_rng : numpy.random.Generator
        Streams for the race minima and for the other exponentials.

    Returns
    -------
    ndarray of int64, shape (N,)

    Examples
    --------
    >>> import numpy as np
    >>> g = np.random.default_rng(0)
    >>> race_sample(np.array([0.0, 1.0]), [np.array([0.5, 0.5])], np.array([[0]]), g, g).tolist()
    [1]
    """
    p = np.asarray(p, dtype=np.float64)
    tuples = np.asarray(tuples, dtype=np.int64)
    N, K = tuples.shape
    Q = np.stack([np.asarray(q, dtype=np.float64) for q in qs])  # [K, V]
    m = m_rng.exponential(size=(N, K))  # [N, K]
    E = Q[None, :, :] * m[:, :, None] + f_rng.exponential(size=(N, K, p.size))  # [N, K, V]
    rows, cols = np.meshgrid(np.arange(N), np.arange(K), indexing="ij")
    E[rows, cols, tuples] = Q[cols, tuples] * m
    with np.errstate(divide="ignore"):
        ratio = np.where(p > 0, E / np.where(p > 0, p, 1.0), np.inf)  # [N, K, V]
    return (np.argmin(ratio.reshape(N, -1), axis=1) % p.size).astype(np.int64)


def couple(p, qs, rng: np.random.Generator, size: int = 1) -> tuple[np.ndarray, np.ndarray]:
    r"""The communication-free protocol: one shared draw, K drafts and the target token.

    Draws :math:`E \sim \mathrm{Exp}(1)^{K \times V}` once; returns the drafts
    :math:`X_k = \arg\min_j E_{k,j}/q_k(j)` and :math:`Y` = the token of
    :math:`\arg\min_{k,j} E_{k,j}/p(j)`. ``Y`` is computed from ``p`` and ``E`` only
    (drafter invariance: the same ``rng`` state gives the same ``Y`` for every ``qs``).

    Parameters
    ----------
    p : array_like, shape (V,)
        Target distribution.
    qs : sequence of array_like, shape (V,)
        One draft distribution per copy (K >= 1).
    rng : numpy.random.Generator
        The shared randomness.
    size : int
        Number of independent rounds.

    Returns
    -------
    drafts : ndarray of int64, shape (size, K)
    y : ndarray of int64, shape (size,)

    Raises
    ------
    InvalidDistributionError, ShapeMismatchError
        If ``p`` or a draft distribution is not a distribution, or their vocabularies differ.
    OtspecTypeError
        If ``rng`` is not a ``numpy.random.Generator``.

    Examples
    --------
    >>> import numpy as np
    >>> d, y = couple([0.5, 0.5], [[0.5, 0.5]], np.random.default_rng(0), size=3)
    >>> bool(np.all(d[:, 0] == y))  # identical laws couple perfectly
    True
    """
    p = as_distribution(p, "p")
    Q = np.stack([as_distribution(q, f"qs[{i}]") for i, q in enumerate(qs)])
    for q in Q:
        check_same_vocab(p, q)
    rng = as_generator(rng)
    E = rng.exponential(size=(int(size), Q.shape[0], p.size))  # [N, K, V]
    with np.errstate(divide="ignore", over="ignore"):  # denormal q: +inf, the right limit
        rq = np.where(Q[None] > 0, E / np.where(Q[None] > 0, Q[None], 1.0), np.inf)
        rp = np.where(p > 0, E / np.where(p > 0, p, 1.0), np.inf)
    drafts = np.argmin(rq, axis=2).astype(np.int64)
    y = (np.argmin(rp.reshape(int(size), -1), axis=1) % p.size).astype(np.int64)
    return drafts, y


def conditional_rows(J: np.ndarray, p: np.ndarray, qs, tuples: np.ndarray) -> np.ndarray:
    r"""Kernel rows :math:`\pi(\cdot \mid \bar x) = J(\bar x, \cdot) / Q(\bar x)` from the joint law.

    A row of ``J`` sums to :math:`Q(\bar x)` exactly (tested on :func:`race_joint`); dividing by the
    computed row sum rather than by :math:`Q(\bar x)` keeps the row's relative accuracy when
    :math:`Q(\bar x)` is tiny (the exponential sums carry absolute rounding). A row whose mass
    underflows (a draft of denormal probability) takes the limit :math:`q(x) \to 0`: that copy's
    exponential :math:`q(x) m \to 0` wins the target race at x when :math:`p(x) > 0` (the drafted
    token of smallest :math:`q/p` among those); with no such draft, p (a tuple of probability below
    the float range).

    Parameters
    ----------
    J : ndarray, shape (N, V)
        :func:`race_joint` of ``tuples``.
    p : ndarray, shape (V,)
    qs : sequence of K ndarrays, shape (V,)
    tuples : ndarray of int, shape (N, K)

    Returns
    -------
    ndarray, shape (N, V)
    """
    tot = J.sum(axis=1, keepdims=True)
    out = np.divide(J, tot, out=np.zeros_like(J), where=tot > 0)
    for n in np.flatnonzero(tot[:, 0] <= 0):
        xs = tuples[n]
        key = np.array([qs[k][xs[k]] / p[xs[k]] if p[xs[k]] > 0 else np.inf for k in range(len(qs))])
        if np.isfinite(key).any():
            out[n, xs[int(np.argmin(key))]] = 1.0
        else:
            out[n] = p
    return out


class DrafterInvariantVerifier(Verifier):
    r"""The Gumbel-max (shared exponential) coupling as a single-draft verifier (k = 1).

    Lossless; acceptance :math:`\sum_i p(i)q(i) / \sum_j \max(p(i)q(j), p(j)q(i))` in closed form
    at any V, which is :math:`\ge (1-d_{TV})/(1+d_{TV})` and :math:`\le 1 - d_{TV}` (the maximal
    coupling, the price of needing no communication).

    Examples
    --------
    >>> import otspec
    >>> from otspec.verifiers import gumbel
    >>> round(gumbel.acceptance([1.0, 0.0], otspec.iid([0.5, 0.5], 1)).value, 12)
    0.5
    """

    name = "gumbel"
    rule = "the drafter-invariant Gumbel-max coupling needs exactly k = 1 draft"
    fix = "use gls (K drafts from shared exponentials) or a law with k = 1"
    reference = "Daliri, Musco, Suresh 2024 (arXiv 2408.07978)"

    def applies_to(self, law: DraftLaw) -> bool:
        return law.k == 1

    def _rows(self, p, law, tuples):
        q = law.first_draft_marginal()
        return conditional_rows(race_joint(p, [q], tuples[:, :1]), p, [q], tuples[:, :1])

    def _sample_rows(self, p, law, tuples, coin_rng, res_rng):
        return race_sample(p, [law.first_draft_marginal()], tuples[:, :1], coin_rng, res_rng)

    def _tuple_acceptance(self, p, law, tuples):
        # P(Y = x | X = x) = p(x) / sum_j max(p(x) q(j), p(j) q(x)): O(V) per draft
        q = law.first_draft_marginal()
        x = tuples[:, 0]
        den = max_product_sums(p, q, x)
        return np.where(p[x] > 0, p[x] / np.where(den > 0, den, 1.0), 0.0)

    def _closed_form(self, p, law):
        q = law.first_draft_marginal()
        return gumbel_match_probability(p, q), {"daliri_lower_bound": daliri_lower_bound(p, q)}


gumbel = DrafterInvariantVerifier()
