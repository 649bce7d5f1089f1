r"""Drafts without replacement verified at the i.i.d. optimum (registered as ``wor_iid``).

Drafts without replacement from q are the first k *distinct* tokens of an i.i.d. stream of draws
from q (the "hit stream"). From the ordered drafts :math:`d_1, \dots, d_k` alone the verifier
resamples that stream exactly: with :math:`m_j = q(d_1) + \dots + q(d_j)` the mass already drafted,
the next hit is a repeat of :math:`d_i` (:math:`i \le j`) with probability :math:`q(d_i)` and the
next new draft :math:`d_{j+1}` with probability :math:`1 - m_j`. The first k hits are then k
i.i.d. draws from q and every one of them is a draft. The optimal i.i.d. selection
(:mod:`~otspec.verifiers.step.optimal_iid`) applied to those hits selects a draft with the law
:math:`r^*_{iid}`; single-draft speculative sampling from :math:`r^*_{iid}` to p (keep y with
:math:`\min(1, p/r^*)`, else draw from :math:`\mathrm{norm}((p - r^*)_+)`) is lossless.

Acceptance. The kept selections alone give :math:`\sum_y \min(p, r^*_{iid}) = \alpha^*_{iid}`
(the optimum for k i.i.d. drafts); a residual draw may also land on a draft that no hit reached,
so the membership acceptance :math:`P(Y \in D)` is at least :math:`\alpha^*_{iid}` and at most
:math:`\alpha^*_{WOR}` (the verifier is lossless). The certified gap to the optimum is therefore
at most :math:`\alpha^*_{WOR} - \alpha^*_{iid}`. The exact membership acceptance comes from the
kernel on enumerable laws; at scale it is :math:`\alpha^*_{iid}` plus a Monte Carlo estimate of
the residual's share (each sampled draft tuple and selection contributes its exact probability of a
rejection followed by a residual draw inside D). That estimate's 99% interval starts at
:math:`\alpha^*_{iid}` (every sample is at least that); when fewer than 10 samples had a nonzero
residual share its upper end is an exact binomial bound (Clopper-Pearson on the share of such
samples, times the largest share a sample can have) instead of a normal interval of width ~0.
``docs/wor_iid.rst`` has the proofs.

Cost per draw: :math:`O(k^2)` for the hit stream plus one draw of ``optimal_iid`` (whose
preparation is built once per (p, q, k)).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from otspec._docs import fill_doc
from otspec._tolerances import KERNEL_AUTO_MAX_ENTRIES, SAMPLE_CHUNK_ENTRIES
from otspec.bounds.multidraft import optimal_acceptance
from otspec.laws import DraftLaw, iid
from otspec.sampling import spawn_streams
from otspec.verifiers.base import Verifier
from otspec.verifiers.kernel import AcceptanceEstimate
from otspec.verifiers.step.optimal_iid import OptimalIIDState, prepare
from otspec.verifiers.tuples import membership_mask

__all__ = ["WorIIDVerifier", "hit_strings", "hit_string_weights", "rebuild_hits", "wor_iid"]

#: The Monte Carlo acceptance uses its normal interval only when at least this many samples had a
#: nonzero residual share (the usual n p >= 10 rule for a normal approximation of a rare event);
#: below it the upper end is an exact binomial (Clopper-Pearson) bound.
_MIN_NONZERO_FOR_NORMAL = 10


def _binomial_cdf(m: int, n: int, x: float) -> float:
    r""":math:`P(\mathrm{Bin}(n, x) \le m)`, summed in log space (m is small here)."""
    if x <= 0.0:
        return 1.0
    if x >= 1.0:
        return 0.0 if m < n else 1.0
    lx, l1x = math.log(x), math.log1p(-x)
    terms = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * lx + (n - i) * l1x for i in range(m + 1)]
    top = max(terms)
    return min(1.0, math.exp(top) * math.fsum(math.exp(t - top) for t in terms))


def _clopper_pearson_upper(m: int, n: int, tail: float) -> float:
    """Exact upper confidence bound on a binomial proportion after m successes in n trials: the
    largest proportion under which seeing at most m has probability ``tail`` (m = 0: the rule of
    three's exact form, ``1 - tail ** (1 / n)``).

    The binomial CDF is decreasing in the proportion, so bisection finds the root to float
    resolution and returns the bracket's upper end. (No scipy.stats: its import alone
    took over a second, more than the Monte Carlo it serves.)
    """
    if m >= n:
        return 1.0
    if m == 0:
        return -math.expm1(math.log(tail) / n)
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid <= lo or mid >= hi:
            break
        if _binomial_cdf(m, n, mid) > tail:
            lo = mid
        else:
            hi = mid
    return hi


def hit_strings(k: int) -> np.ndarray:
    """Every pattern of the first k hits of the stream, as draft positions.

    A pattern ``h`` lists, for each of the first k hits, which draft it hit (0-based position in
    the ordered draft tuple). Drafts are discovered in order, so ``h[0] = 0`` and each entry is at
    most one more than the largest before it (restricted growth strings; there are Bell(k)).

    Parameters
    ----------
    k : int
        Number of hits (``>= 1``).

    Returns
    -------
    ndarray of int64, shape (Bell(k), k)
        One pattern per row, in lexicographic order.
    """
    rows = [[0]]
    for _ in range(1, k):
        rows = [r + [i] for r in rows for i in range(max(r) + 2)]
    return np.asarray(rows, dtype=np.int64).reshape(-1, k)


def hit_string_weights(q_drafts: np.ndarray, patterns: np.ndarray) -> np.ndarray:
    r"""Probability of each hit pattern given the ordered drafts.

    With :math:`m_j` the q-mass of the first j drafts, a hit pattern has probability
    :math:`\prod_{\text{repeat hits}} q(d_{h_i}) \prod_{\text{new hits after the first}} (1 - m_{h_i})`.

    Parameters
    ----------
    q_drafts : ndarray, shape (n, k)
        q of each ordered draft tuple's tokens.
    patterns : ndarray of int64, shape (H, k)
        Hit patterns (:func:`hit_strings`).

    Returns
    -------
    ndarray, shape (n, H)
        Row ``i``: the law of the pattern given tuple ``i`` (sums to 1).
    """
    n, k = q_drafts.shape
    # 1 - m_j as the mass outside the first j drafts (m_0 = 0)
    outside = np.clip(1.0 - np.concatenate([np.zeros((n, 1)), np.cumsum(q_drafts, axis=1)], axis=1), 0.0, 1.0)
    w = np.ones((n, patterns.shape[0]))
    seen = np.ones(patterns.shape[0], dtype=np.int64)
    for i in range(1, k):
        h = patterns[:, i]
        new = h == seen
        w *= np.where(new[None, :], outside[:, h], q_drafts[:, h])
        seen = seen + new
    return w


def rebuild_hits(q_drafts: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Resample the first k hits of the stream, as draft positions, from uniforms.

    Hit ``i >= 1`` with uniform ``u[:, i - 1]``: with ``j`` drafts found so far and ``C`` the
    cumulative q of the ordered drafts, the hit repeats draft ``#{l : C_l <= u}`` when that is below
    ``j`` (probability :math:`q(d_l)` each), else it is the next new draft ``j``.

    Parameters
    ----------
    q_drafts : ndarray, shape (n, k)
        q of each ordered draft tuple's tokens.
    u : ndarray, shape (n, k - 1)
        Independent uniforms on [0, 1).

    Returns
    -------
    ndarray of int64, shape (n, k)
        Draft positions of the first k hits; ``positions[:, 0] == 0``.
    """
    n, k = q_drafts.shape
    cum = np.cumsum(q_drafts, axis=1)
    pos = np.zeros((n, k), dtype=np.int64)
    found = np.ones(n, dtype=np.int64)
    for i in range(1, k):
        idx = np.sum(cum <= u[:, i - 1 : i], axis=1)
        rep = idx < found
        pos[:, i] = np.where(rep, idx, found)
        found = found + ~rep
    return pos


class WorIIDVerifier(Verifier):
    r"""Drafts without replacement verified by the optimal i.i.d. rule on the rebuilt hit stream.

    Lossless for ``otspec.without_replacement(q, k)``; its acceptance lies between
    :math:`\alpha^*_{iid}` (the kept selections alone) and :math:`\alpha^*_{WOR}`.

    Examples
    --------
    >>> import numpy as np, otspec
    >>> from otspec.verifiers import wor_iid
    >>> p, q = np.array([0.1, 0.2, 0.3, 0.4]), np.array([0.4, 0.3, 0.2, 0.1])
    >>> law = otspec.without_replacement(q, 2)
    >>> a = wor_iid.acceptance(p, law).value
    >>> a_iid = otspec.optimal_acceptance(p, otspec.iid(q, 2)).value
    >>> a_wor = otspec.optimal_acceptance(p, law).value
    >>> bool(a_iid - 1e-12 <= a <= a_wor + 1e-12)
    True
    """

    name = "wor_iid"
    rule = "the i.i.d. embedding rebuilds the hit stream of drafts sampled without replacement (otspec.without_replacement)"
    fix = "use optimal_iid for i.i.d. drafts, greedy_optimal for greedy drafts, or optimal_plan on small laws"
    reference = "otspec: drafts without replacement at the i.i.d. optimum (docs/wor_iid.rst)"

    def applies_to(self, law: DraftLaw) -> bool:
        return law.without_replacement_q is not None

    @fill_doc
    def state(self, p: Any, law: DraftLaw) -> OptimalIIDState:
        """The optimal i.i.d. state for ``(p, q, k)`` the rule runs on the hits (cached on the law).

        Parameters
        ----------
        {p_wor_law_args}

        Returns
        -------
        OptimalIIDState
            ``alpha`` is :math:`\\alpha^*_{iid}`, the acceptance of the kept selections, a lower
            bound on this verifier's acceptance.

        Raises
        ------
        {wor_law_raises}
        """
        p = self._check(p, law)
        return self._state(p, law)

    @fill_doc
    def certified_lower_bound(self, p: Any, law: DraftLaw) -> float:
        r"""A certified lower bound on the acceptance: :math:`\alpha^*_{iid}`, the kept selections' share.

        The acceptance itself has no closed form at scale (a Monte Carlo estimate); this bound is
        exact (the optimal i.i.d. value, a prefix scan), so :math:`\alpha^*_{WOR}` minus it bounds
        the verifier's shortfall from above (``otspec bound --verifiers`` prints it).

        Parameters
        ----------
        {p_wor_law_args}

        Returns
        -------
        float
            :math:`\alpha^*(p, q^{\otimes k})`.

        Raises
        ------
        {wor_law_raises}
        """
        return float(self.state(p, law).alpha)

    #: Why :meth:`certified_bracket` stands in for the acceptance when no fit is asked for.
    bracket_reason = "its acceptance at this V is a Monte Carlo estimate over the selection tree (about a second)"

    @fill_doc
    def certified_bracket(self, p: Any, law: DraftLaw) -> tuple[float, float] | None:
        r"""A certified interval for the acceptance without sampling, or None when the law is small
        enough for the exact kernel.

        The kept selections alone accept :math:`\alpha^*_{iid}` (:meth:`certified_lower_bound`) and
        no lossless verifier of drafts without replacement accepts more than :math:`\alpha^*_{WOR}`,
        so the acceptance lies in :math:`[\alpha^*_{iid} - \epsilon_{iid}, \alpha^*_{WOR} +
        \epsilon_{WOR}]`, both ends from the prefix scans with their error bounds (no selection
        state, no compiled kernel); the Monte Carlo estimate needs the selection tree.
        ``otspec bound --verifiers`` prints this interval unless ``--fit-wor`` is given.

        Parameters
        ----------
        {p_wor_law_args}

        Returns
        -------
        tuple of float, or None
            ``(low, high)`` with ``low <= acceptance <= high``; None for an enumerable law.

        Raises
        ------
        {wor_law_raises}
        """
        p = self._check(p, law)
        if law.num_tuples() * law.V <= KERNEL_AUTO_MAX_ENTRIES:
            return None
        low = optimal_acceptance(p, iid(law.q, law.k), method="prefix")
        high = optimal_acceptance(p, law, method="prefix")
        return max(0.0, float(low.value - low.error_bound)), min(1.0, float(high.value + high.error_bound))

    def _state(self, p: np.ndarray, law: DraftLaw) -> OptimalIIDState:
        return law.cached("wor_iid.state", p, lambda: prepare(p, np.asarray(law.q, dtype=np.float64), law.k))

    def _prepare(self, p, law):
        self._state(p, law)

    @staticmethod
    def _residual(stt: OptimalIIDState, p: np.ndarray) -> np.ndarray:
        cdf = stt.residual_cdf
        res = np.diff(np.concatenate([[0.0], cdf]))
        return res / cdf[-1] if cdf[-1] > 0 else p

    def _selection(self, p, law, tuples) -> np.ndarray:
        """Exact selection law per WOR tuple ``(n, V)``: the i.i.d. rule's rows averaged over the hit patterns."""
        stt = self._state(p, law)
        n, k = tuples.shape
        pats = hit_strings(k)
        w = hit_string_weights(np.asarray(law.q, dtype=np.float64)[tuples], pats)  # (n, H)
        out = np.zeros((n, law.V))
        step = max(1, SAMPLE_CHUNK_ENTRIES // max(pats.shape[0] * law.V, 1))  # (chunk, H, V) stays bounded
        for a in range(0, n, step):
            hits = tuples[a : a + step][:, pats]  # (m, H, k)
            beta = stt.selection_rows(hits.reshape(-1, k)).reshape(hits.shape[0], pats.shape[0], law.V)
            out[a : a + step] = np.einsum("nh,nhv->nv", w[a : a + step], beta)
        return out

    def _rows(self, p, law, tuples):
        stt = self._state(p, law)
        acc = self._selection(p, law, tuples) * stt.accept[None, :]
        return acc + (1.0 - acc.sum(axis=1))[:, None] * self._residual(stt, p)[None, :]

    def _tuple_acceptance(self, p, law, tuples):
        pi = self._rows(p, law, tuples)
        return np.sum(np.where(membership_mask(tuples, law.V), pi, 0.0), axis=1)

    def _hits(self, law: DraftLaw, tuples: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        qd = np.asarray(law.q, dtype=np.float64)[tuples]
        pos = rebuild_hits(qd, rng.random((tuples.shape[0], tuples.shape[1] - 1)))
        return np.take_along_axis(tuples, pos, axis=1)

    def _monte_carlo(self, p, law, n, rng) -> AcceptanceEstimate:
        # Rao-Blackwellised over the accept coin and the residual draw: given (tuple, hits,
        # selection y), P(Y in D) = a(y) + (1 - a(y)) res(D) with a = min(1, p/r*); and since
        # E[a(y)] = alpha*_iid exactly (the selection law is r*), the kept part is replaced by its
        # mean (a control variate): each sample is alpha*_iid + (1 - a(y)) res(D) >= alpha*_iid.
        # (The per-tuple exact value would sum over Bell(k) hit patterns.)
        if n < 2:
            return super()._monte_carlo(p, law, n, rng)
        stt = self._state(p, law)
        res = self._residual(stt, p)
        tuples = law.sample(rng, n)
        hit_rng, level_rng, choice_rng = spawn_streams(rng, 3)
        y = stt.select(self._hits(law, tuples, hit_rng), level_rng.random(n), choice_rng.random(n))
        keep = stt.accept[y]
        z = (1.0 - keep) * res[tuples].sum(axis=1)  # the residual's share of each sample, >= 0
        est = AcceptanceEstimate.from_samples(
            stt.alpha + z, "alpha*_iid + mean over sampled draft tuples and selections of P(rejected, residual in D | tuple, selection)"
        )
        low, high = max(stt.alpha, est.ci_low), est.ci_high  # every sample is >= alpha*_iid: a certified floor
        m = int(np.count_nonzero(z))
        interval = "normal"
        if m < _MIN_NONZERO_FOR_NORMAL:
            # The normal interval needs a spread of nonzero terms: with none it has width 0 (the
            # residual's share is rare, not absent), with a handful it is too narrow. Each term lies
            # in [0, z_max], so the mean is at most z_max P(z > 0), and P(z > 0) has the exact
            # Clopper-Pearson upper bound for m positives in n at the interval's one-sided level.
            z_max = min(1.0, float((1.0 - stt.accept).max()) * float(np.sort(res)[-law.k :].sum()))
            high = max(high, min(1.0, stt.alpha + z_max * _clopper_pearson_upper(m, n, (1.0 - est.extras["confidence"]) / 2)))
            interval = "clopper_pearson"
        extras = dict(est.extras, alpha_iid=stt.alpha, nonzero_residual_samples=m, interval=interval)
        return AcceptanceEstimate(est.value, est.how, low, high, est.n_samples, extras)

    def _sample(self, p, law, d, rng) -> np.ndarray:
        streams = spawn_streams(rng, 5)
        return self._state(p, law).sample_rows(self._hits(law, d, streams[0]), streams[1:])

    @fill_doc
    def sample(self, p: Any, law: DraftLaw, drafts: Any, *, rng: np.random.Generator) -> int:
        """One output token for one ordered draft tuple.

        Five independent child streams are spawned from ``rng``: the hit stream, then the four
        of :meth:`OptimalIIDState.sample_rows <otspec.verifiers.step.optimal_iid.OptimalIIDState.sample_rows>`.

        Parameters
        ----------
        {p_wor_law_args}
        drafts : array_like of int, shape (k,)
            One ordered draft tuple (distinct tokens, in drafting order).
        rng : numpy.random.Generator
            The caller's generator.

        Returns
        -------
        int
            The output token.

        Raises
        ------
        {wor_law_raises}
        InvalidDraftsError
            If ``drafts`` is not a tuple the law can produce.
        OtspecTypeError
            If ``rng`` is not a ``numpy.random.Generator``.
        """
        p = self._check(p, law)
        d = law.validate_drafts(drafts)
        return int(self._sample(p, law, d[None, :], rng)[0])

    @fill_doc
    def sample_batch(self, p: Any, law: DraftLaw, drafts: Any, *, rng: np.random.Generator) -> np.ndarray:
        """One output token per row of ``drafts`` ``(N, k)``, with the streams of :meth:`sample`
        (``sample(d) == sample_batch([d])[0]`` for the same generator state).

        Parameters
        ----------
        {p_wor_law_args}
        drafts : array_like of int, shape (N, k) or (k,)
            Ordered draft tuples, one per row.
        rng : numpy.random.Generator
            The caller's generator.

        Returns
        -------
        ndarray of int64, shape (N,)
            One output token per row.

        Raises
        ------
        {wor_law_raises}
        InvalidDraftsError
            If a row is not a tuple the law can produce.
        OtspecTypeError
            If ``rng`` is not a ``numpy.random.Generator``.
        """
        p = self._check(p, law)
        d = law.validate_draft_batch(drafts)
        return np.asarray(self._sample(p, law, d, rng), dtype=np.int64)


wor_iid = WorIIDVerifier()
