r"""Typical acceptance (Medusa, Cai et al. 2024, §3.3.1; vLLM's ``TypicalAcceptanceSampler``): lossy.

A drafted token :math:`x` is accepted when the target gives it more than an entropy-dependent
threshold,

.. math:: p(x) > \tau(p) = \min\big(\epsilon,\ \alpha\, e^{-H(p)}\big), \qquad H(p) = -\sum_y p(y)\log p(y),

with vLLM's defaults :math:`\epsilon` = ``posterior_threshold`` = 0.09 and :math:`\alpha` =
``posterior_alpha`` = 0.3. With :math:`k` drafts the output is the passing draft of largest
:math:`p` (Medusa's tie-break by likelihood; the first in draft order among equal :math:`p`). When
no draft passes, the rule **rejects** and emits a token from the target:

* ``on_reject="sample"`` (the default, as Medusa's decoding loop does): :math:`Y \sim p`;
* ``on_reject="argmax"`` (vLLM's recovered token): :math:`Y = \arg\max p` (lowest id among ties).

For one draft :math:`X \sim q` with pass set :math:`A = \{x : p(x) > \tau(p)\}` the exact output law is

.. math:: P(y) = q(y)\,1\{y \in A\} + \big(1 - q(A)\big)\, r(y),
          \qquad r = p \ \text{(sample) or}\ \delta_{\arg\max p}\ \text{(argmax)},

so :math:`d_{TV}(P, p)` and :math:`\mathrm{KL}(P \,\|\, p)` are exact at any V, and the membership
acceptance is :math:`q(A) + \sum_{x \notin A} q(x)\, r(x)`. With several i.i.d. drafts the output law
is closed-form too: for a passing :math:`y`, with :math:`G(y)` the q-mass of the passing tokens of
larger :math:`p` and :math:`E_y` the passing tokens of :math:`p` equal to :math:`p(y)`,

.. math:: P(y) = \big[(1 - G(y))^k - (1 - G(y) - q(E_y))^k\big]\, \frac{q(y)}{q(E_y)} + (1 - q(A))^k\, r(y),

(the output is the first draft in :math:`E_y` when no draft has larger passing :math:`p`), and
:math:`(1 - q(A))^k\, r(y)` off :math:`A`; products of drafters and greedy drafts have the same form
with per-draft factors (O(V log V + kV)). Drafts without replacement have their kernel exact by
enumeration. The membership acceptance has a closed form at any V: a passing draft is always
emitted, and after a rejection (every draft in :math:`B = A^c`) the fresh token is a draft with
probability :math:`r(S)`, :math:`S` the set of drafts, so

.. math:: a = 1 - Q(B^k) + \sum_{x \in B} r(x)\, D_x, \qquad
          D_x = P(x \in S,\ S \subseteq B) = Q(B^k) - Q\big((B \setminus \{x\})^k\big).

For independent drafts (i.i.d. or a product of drafters :math:`q_j`)
:math:`Q(H^k) = \prod_j q_j(H)`; for greedy drafts (fixed tokens G, one draw from
:math:`\tilde q`) :math:`D_x = \tilde q(B)` on G and :math:`\tilde q(x)` off it when
:math:`G \subseteq B` (else every tuple passes). Drafts without replacement have no such product
form: their acceptance is the Monte Carlo mean of the exact per-tuple value (O(k) per tuple).

Deviations: Medusa and vLLM compute :math:`H` as :math:`-\sum p \log(p + 10^{-5})`; we use the exact
entropy (:math:`0 \log 0 = 0`), so :math:`\tau` differs by at most a factor :math:`e^{10^{-5}/\min p}`
on tokens of tiny mass. Medusa's decoding loop also applies temperature to :math:`p` before the test:
pass the tempered :math:`p`.
"""

from __future__ import annotations

import math

import numpy as np

from otspec.errors import InvalidOptionError
from otspec.laws import DraftLaw, without_replacement
from otspec.sampling import sample_categorical_rows
from otspec.verifiers.kernel import AcceptanceEstimate
from otspec.verifiers.lossy import LossyVerifier, as_option_in_range

__all__ = ["TypicalVerifier", "typical", "typical_threshold", "rejection_weights", "POSTERIOR_THRESHOLD", "POSTERIOR_ALPHA"]

#: vLLM's default ``posterior_threshold`` (the hard threshold epsilon).
POSTERIOR_THRESHOLD = 0.09
#: vLLM's default ``posterior_alpha`` (the entropy-scaled threshold's factor).
POSTERIOR_ALPHA = 0.3


def typical_threshold(p: np.ndarray, posterior_threshold: float = POSTERIOR_THRESHOLD, posterior_alpha: float = POSTERIOR_ALPHA) -> float:
    r"""The threshold :math:`\tau(p) = \min(\epsilon, \alpha\, e^{-H(p)})` (exact entropy, nats).

    Parameters
    ----------
    p : ndarray, shape (V,)
        Target distribution (validated).
    posterior_threshold, posterior_alpha : float
        :math:`\epsilon` and :math:`\alpha`.

    Returns
    -------
    float

    Examples
    --------
    >>> round(typical_threshold(np.array([0.5, 0.5])), 6)   # min(0.09, 0.3 * 0.5)
    0.09
    """
    on = p > 0.0
    h = float(-np.sum(p[on] * np.log(p[on])))
    return float(min(posterior_threshold, posterior_alpha * math.exp(-h)))


def rejection_weights(q: np.ndarray, tuples: np.ndarray, b: float) -> np.ndarray:
    r"""Likelihood ratio of ordered tuples drawn without replacement from :math:`q` against the
    same drawn from :math:`q` restricted to a set B of mass :math:`b` (tuples inside B).

    .. math:: \frac{P_q(s)}{P_{q|B}(s)} = \prod_{i=1}^{k} \frac{b - m_i}{1 - m_i},
              \qquad m_i = q(s_1) + \dots + q(s_{i-1}),

    since :math:`P_q(s) = \prod_i q(s_i) / (1 - m_i)` and
    :math:`P_{q|B}(s) = \prod_i (q(s_i)/b) / (1 - m_i/b)`. Each factor is in :math:`[0, 1]`.

    Parameters
    ----------
    q : ndarray, shape (V,)
        The draft distribution.
    tuples : ndarray of int64, shape (n, k)
        Ordered tuples of distinct tokens of B.
    b : float
        :math:`q(B)`.

    Returns
    -------
    ndarray, shape (n,)
        The ratio per tuple.

    Examples
    --------
    >>> q = np.array([0.5, 0.3, 0.2])   # B = {1, 2}, b = 0.5
    >>> float(rejection_weights(q, np.array([[1, 2]]), 0.5)[0])   # (0.5 / 1) * (0.2 / 0.7)
    0.14285714285714288
    """
    qd = q[tuples]
    m = np.concatenate([np.zeros((qd.shape[0], 1)), np.cumsum(qd[:, :-1], axis=1)], axis=1)
    return np.prod(np.maximum(b - m, 0.0) / np.maximum(1.0 - m, np.finfo(float).tiny), axis=1)


class TypicalVerifier(LossyVerifier):
    r"""Medusa's typical acceptance (lossy; any draft law).

    Parameters
    ----------
    posterior_threshold : float, default 0.09
        :math:`\epsilon \ge 0`, vLLM's default.
    posterior_alpha : float, default 0.3
        :math:`\alpha \ge 0`, vLLM's default.
    on_reject : {"sample", "argmax"}
        What is emitted when no draft passes: a draw from p (Medusa) or argmax p (vLLM).
    name : str
        Name shown in tables.

    Raises
    ------
    InvalidOptionError
        If a threshold is negative or not finite, or ``on_reject`` is unknown.

    Examples
    --------
    >>> import otspec
    >>> from otspec.verifiers import typical
    >>> p, law = [0.6, 0.3, 0.1], otspec.iid([0.2, 0.2, 0.6], 1)   # tau = 0.09: token 2 passes
    >>> typical.acceptance(p, law).value          # q(A) + sum_{x not in A} q(x) p(x) = 1.0
    1.0
    >>> round(typical.tv_to_target(p, law), 12)   # P = q here
    0.5
    """

    rule = "typical acceptance applies to every draft law"
    reference = "Medusa (Cai et al. 2024) §3.3.1; vLLM TypicalAcceptanceSampler (posterior_threshold 0.09, posterior_alpha 0.3)"

    def __init__(
        self,
        posterior_threshold: float = POSTERIOR_THRESHOLD,
        posterior_alpha: float = POSTERIOR_ALPHA,
        *,
        on_reject: str = "sample",
        name: str = "typical",
    ):
        self.posterior_threshold = as_option_in_range(posterior_threshold, "posterior_threshold", 0.0, 1.0, why="a probability threshold")
        self.posterior_alpha = as_option_in_range(posterior_alpha, "posterior_alpha", 0.0, math.inf, why="a factor on exp(-H(p))")
        if on_reject not in ("sample", "argmax"):
            raise InvalidOptionError(f"on_reject must be 'sample' or 'argmax' (got {on_reject!r}); pick one of those")
        self.on_reject = on_reject
        self.name = str(name)

    def applies_to(self, law: DraftLaw) -> bool:
        return True

    def _reject_law(self, p: np.ndarray) -> np.ndarray:
        if self.on_reject == "sample":
            return p
        r = np.zeros_like(p)
        r[int(np.argmax(p))] = 1.0
        return r

    def _chosen(self, p: np.ndarray, law: DraftLaw, tuples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per tuple: whether a draft passes, and the passing draft of largest p (first among ties)."""
        tau = self._threshold(p, law)
        px = p[tuples]  # (n, k)
        score = np.where(px > tau, px, -1.0)
        j = np.argmax(score, axis=1)  # first maximum: draft order breaks ties
        passed = score[np.arange(tuples.shape[0]), j] >= 0.0
        return passed, tuples[np.arange(tuples.shape[0]), j]

    def _rows(self, p, law, tuples):
        passed, tok = self._chosen(p, law, tuples)
        pi = np.where(passed[:, None], 0.0, self._reject_law(p)[None, :])
        rows = np.flatnonzero(passed)
        pi[rows, tok[rows]] = 1.0
        return pi

    def _sample_rows(self, p, law, tuples, coin_rng, res_rng):
        passed, tok = self._chosen(p, law, tuples)
        if self.on_reject == "argmax":
            return np.where(passed, tok, int(np.argmax(p)))
        out = tok.copy()
        rej = np.flatnonzero(~passed)
        if rej.size:
            out[rej] = sample_categorical_rows(res_rng, np.broadcast_to(p, (rej.size, p.size)))
        return out

    def _tuple_acceptance(self, p, law, tuples):
        passed, _ = self._chosen(p, law, tuples)
        r = self._reject_law(p)
        # r over the distinct drafts of each row: O(k^2) per tuple, never a (n, V) mask
        first = np.ones(tuples.shape, dtype=bool)
        for j in range(1, tuples.shape[1]):
            first[:, j] = np.all(tuples[:, :j] != tuples[:, j : j + 1], axis=1)
        on_reject = np.sum(np.where(first, r[tuples], 0.0), axis=1)
        return np.where(passed, 1.0, on_reject)

    def _monte_carlo(self, p, law, n, rng):
        # Each tuple costs O(k^2) here (no V-wide rows), so the tuples are drawn in one batch
        # rather than in the base class's memory-bounded chunks of V-wide kernel rows.
        if n < 2:
            return super()._monte_carlo(p, law, n, rng)
        if law.without_replacement_q is not None:
            return self._without_replacement_estimate(p, law, n, rng)
        vals = self._tuple_acceptance(p, law, law.sample(rng, n))
        return AcceptanceEstimate.from_samples(vals, "mean over sampled draft tuples of the exact conditional acceptance")

    def _without_replacement_estimate(self, p, law, n, rng):
        r"""Drafts without replacement: :math:`1 - Q(B^k)` exactly (the law's race integral) plus an
        importance-sampling estimate of :math:`R = E[r(S)\, 1\{S \subseteq B\}]`.

        Tuples :math:`S'` are drawn without replacement from :math:`q` restricted to B (mass b);
        with :math:`m_i` the q-mass of the first i - 1 drafts the likelihood ratio is
        :math:`w(S') = \prod_i (b - m_i) / (1 - m_i) \in [0, 1]` (:func:`rejection_weights`), so
        :math:`R = E'[r(S') w(S')]`: every sample carries a rejected tuple's share, so the
        estimate has a small relative error where plain sampling of the law sees almost no
        rejected tuple (:math:`Q(B^k)` small). The 99% interval is
        intersected with the certified :math:`[1 - Q(B^k),\ 1 - Q(B^k) + Q(B^k) \max_S r(S)]`.
        """
        q = np.asarray(law.without_replacement_q, dtype=np.float64)
        B = p <= self._threshold(p, law)
        qB = np.where(B, q, 0.0)
        if np.count_nonzero(qB) < law.k:  # k distinct drafts cannot all lie in B: every tuple passes
            return AcceptanceEstimate(1.0, "closed_form", 1.0, 1.0, 0, {"estimator": "no tuple lies in the reject set"})
        all_in = float(law.prob_all_in(B))
        r = np.where(B, self._reject_law(p), 0.0)
        r_max = min(1.0, float(np.sort(r[qB > 0])[-law.k :].sum()))  # the most r(S) any tuple in B has
        tuples = without_replacement(qB / qB.sum(), law.k).sample(rng, n)
        vals = 1.0 - all_in + r[tuples].sum(axis=1) * rejection_weights(q, tuples, float(qB.sum()))
        est = AcceptanceEstimate.from_samples(
            vals, "1 - Q(B^k) (exact) + importance-sampled E[r(S) 1{S in B}] (drafts without replacement from q on B)"
        )
        low, high = 1.0 - all_in, min(1.0, 1.0 - all_in + all_in * r_max)
        extras = dict(est.extras, prob_all_rejected=all_in)
        value = min(max(est.value, low), high)  # projecting onto the certified interval only reduces the error
        return AcceptanceEstimate(value, est.how, min(max(low, est.ci_low), value), max(min(high, est.ci_high), value), n, extras)

    def _threshold(self, p: np.ndarray, law: DraftLaw) -> float:
        return law.cached(
            f"typical.threshold({self.posterior_threshold!r}, {self.posterior_alpha!r})",
            p,
            lambda: typical_threshold(p, self.posterior_threshold, self.posterior_alpha),
        )

    def _closed_form(self, p, law):
        tau = self._threshold(p, law)
        if law.k != 1:
            value = self._membership_closed_form(p, law, p <= tau)
            return None if value is None else (value, {"threshold": tau})
        q = law.first_draft_marginal()
        a = p > tau
        value = float(q @ np.where(a, 1.0, self._reject_law(p)))
        P = self._output_law(p, law)
        return value, {"tv_to_target": float(0.5 * np.abs(P - p).sum()), "threshold": tau}

    def _membership_closed_form(self, p: np.ndarray, law: DraftLaw, B: np.ndarray) -> float | None:
        r""":math:`1 - Q(B^k) + \sum_{x \in B} r(x) D_x` (module docstring) for laws with a product
        form of :math:`Q(H^k)`: independent drafts and greedy drafts; ``None`` for other laws."""
        r = np.where(B, self._reject_law(p), 0.0)
        on = np.flatnonzero(r > 0.0)
        q = law.iid_q
        if q is not None:  # i.i.d.: q(B)^k - (q(B) - q(x))^k, one vector (not k copies of q)
            b = float(q @ B)
            all_in = b**law.k
            return 1.0 - all_in + float(r[on] @ (all_in - np.maximum(b - q[on], 0.0) ** law.k))
        qs = law.independent_qs
        if qs is not None:
            qs = np.asarray(qs, dtype=np.float64)  # (k, V)
            b = qs @ B  # q_j(B)
            all_in = float(np.prod(b))
            # D_x = prod_j q_j(B) - prod_j (q_j(B) - q_j(x)), only where r(x) > 0 (x in B)
            rest = np.prod(np.maximum(b[:, None] - qs[:, on], 0.0), axis=0)
            return 1.0 - all_in + float(r[on] @ (all_in - rest))
        tr = law.top_and_rest
        if tr is not None:
            top, q_rest = tr
            top = np.asarray(top, dtype=np.int64)
            if not B[top].all():  # a fixed draft passes: every tuple passes
                return 1.0
            all_in = float(q_rest @ B)
            D = np.asarray(q_rest, dtype=np.float64).copy()  # off G: the last draw is x
            D[top] = all_in  # on G: x is drafted, the tuple is in B iff the last draw is
            return 1.0 - all_in + float(r @ D)
        return None

    def _output_law(self, p, law):
        if law.k == 1:
            q = law.first_draft_marginal()
            a = p > self._threshold(p, law)
            return np.where(a, q, 0.0) + float(q @ ~a) * self._reject_law(p)
        qs = law.independent_qs
        if qs is None and law.top_and_rest is not None:
            top, q_rest = law.top_and_rest  # a product law: one-hot fixed drafts, then one draw
            qs = [np.eye(1, p.size, int(t)).ravel() for t in top] + [np.asarray(q_rest, dtype=np.float64)]
        if qs is None:
            return None
        return self._independent_output_law(p, law, np.asarray(qs, dtype=np.float64))

    def _independent_output_law(self, p: np.ndarray, law: DraftLaw, qs: np.ndarray) -> np.ndarray:
        r"""The exact output law for independent drafts :math:`X_j \sim q_j` (in draft order), any V:
        O(V log V + kV).

        Group the passing tokens by their value of :math:`p` (group :math:`E`, the groups of larger
        :math:`p` having union :math:`G`). The output is in :math:`E` iff no draft is in :math:`G` and
        some draft is in :math:`E`, and then it is the first draft in :math:`E`, so for :math:`y \in E`

        .. math:: P(y) = \sum_j q_j(y) \prod_{i < j} ig(1 - q_i(G) - q_i(E)ig) \prod_{i > j} ig(1 - q_i(G)ig)
                  + \prod_j q_j(B)\, r(y),

        and :math:`P(y) = \prod_j q_j(B)\, r(y)` off the pass set. For i.i.d. drafts the first term is
        :math:`q(y)\,[(1-q(G))^k - (1-q(G)-q(E))^k] / q(E)`. Each :math:`1 - q_i(G)` is summed from
        below (:math:`q_i(B)` plus the groups of smaller :math:`p`): no cancellation at small mass.
        """
        on = np.flatnonzero(p > self._threshold(p, law))
        qB = qs.sum(axis=1) - qs[:, on].sum(axis=1) if on.size else qs.sum(axis=1)
        out = float(np.prod(qB)) * self._reject_law(p)
        if not on.size:
            return out
        levels, group = np.unique(-p[on], return_inverse=True)  # group 0: the largest p
        mass = np.stack([np.bincount(group, weights=qj[on], minlength=levels.size) for qj in qs])  # (k, L)
        from_g = np.cumsum(mass[:, ::-1], axis=1)[:, ::-1]  # q_i(E_g) + q_i(groups of smaller p)
        above = qB[:, None] + from_g  # 1 - q_i(G): no draft above the group
        below = above - mass  # 1 - q_i(G) - q_i(E): no draft in or above the group
        k = qs.shape[0]
        before = np.vstack([np.ones((1, levels.size)), np.cumprod(below[:-1], axis=0)])  # prod_{i<j}
        after = np.vstack([np.cumprod(above[:0:-1], axis=0)[::-1], np.ones((1, levels.size))])  # prod_{i>j}
        weight = before * after if k > 1 else np.ones((1, levels.size))
        out[on] += np.sum(qs[:, on] * weight[:, group], axis=0)
        return out

    def __repr__(self) -> str:
        return (
            f"<verifier {self.name!r} (lossy; posterior_threshold={self.posterior_threshold:g}, "
            f"posterior_alpha={self.posterior_alpha:g}, on_reject={self.on_reject!r})>"
        )


#: The registry's instance: vLLM's defaults, rejection emits a draw from p.
typical = TypicalVerifier()
