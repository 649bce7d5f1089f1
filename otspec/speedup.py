r"""The speedup model: tokens per second of speculative decoding from exact per-position acceptance
and a cost model, and the best draft length / number of drafts / tree size.

A *round* drafts a tree of depth :math:`\gamma` in which every node has :math:`k` children
(:math:`k = 1`: a chain), runs the target once over every node, and accepts a path: at the node
that stands for text position :math:`t` the verifier accepts one of its :math:`k` children with
probability :math:`\alpha_t` (the verifier's single-step acceptance at that position, e.g. a column
of an ``otspec corpus`` run; the optimum's for the optimal acceptance). Under the model's assumption
-- the acceptance events of successive positions are independent given the text, as on a
teacher-forced corpus -- a round that starts at position :math:`t` accepts

.. math:: P(\tau \ge i \mid t) = \prod_{j=0}^{i-1} \alpha_{t+j}, \qquad i = 1, \dots, \gamma,

and emits :math:`\tau + 1` tokens, so the next round starts at :math:`t + \tau + 1`. The expected
number of rounds :math:`R(t)` to finish a document of :math:`N` positions from :math:`t` solves the
renewal recursion

.. math:: R(t) = 1 + \sum_{\tau=0}^{g_t} P(\tau \mid t)\, R(t + \tau + 1), \qquad R(N) = 0,

with :math:`g_t = \min(\gamma, N - t - 1)` (no draft past the end). Each position's acceptance is
used at most once (a rejected position is emitted by the target), so :math:`R(0)` is exact under
the assumption, not an average of per-round formulas. A round costs

.. math:: T(\gamma, k) = c_d\, B \sum_{i=0}^{\gamma-1} k^i + c_v\!\Big(B \sum_{i=0}^{\gamma} k^i\Big)

(draft forwards of every non-leaf node at :math:`c_d` per token; one target forward scoring every
node, :math:`c_v(n)` seconds for :math:`n` positions; :math:`B` sequences in lockstep), and the
throughput is :math:`B N / (R(0)\, T)` tokens per second against :math:`B / c_v(B)` for
autoregressive decoding.

The constant-acceptance formula of engine docs, :math:`E[\text{tokens}] = (1 - \alpha^{\gamma+1}) /
(1 - \alpha)` (:func:`constant_acceptance_tokens`), equals :math:`N / R(0)` only when every
:math:`\alpha_t` is the same (and the document is long). When acceptance varies along the text --
easy runs (copied code, boilerplate) next to hard ones -- it is wrong in either direction: for
:math:`\alpha = (1, \dots, 1, 0, \dots, 0)` (ten of each, :math:`\gamma = 4`) it predicts 1.94
tokens per round at the mean :math:`\bar\alpha = 1/2`, while rounds emit 5 tokens in the easy half
and 1 in the hard half: 20 tokens in 12 rounds, 1.67.

Examples
--------
>>> import numpy as np
>>> alpha = np.r_[np.ones(10), np.zeros(10)]
>>> round(tokens_per_round(alpha, 4), 4), round(constant_acceptance_tokens(alpha.mean(), 4), 4)
(1.6667, 1.9375)
>>> cost = CostModel(draft_cost=0.0, verify=affine_verify(0.05, 0.01))
>>> p = predict(np.full(200, 0.8), cost, gamma=3)
>>> round(p.tokens_per_round, 3), round(p.speedup, 3)
(2.934, 1.956)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from otspec._validation import as_int_in_range
from otspec.errors import InvalidOptionError

__all__ = [
    "CostModel",
    "Prediction",
    "affine_verify",
    "best_configurations",
    "constant_acceptance_tokens",
    "expected_rounds",
    "measured_verify",
    "plot_speedup",
    "predict",
    "predict_from_cumulative",
    "tokens_per_round",
    "tree_size",
    "verify_points_from_traces",
]


def _acceptance(alpha: Any, name: str = "acceptance") -> np.ndarray:
    try:
        a = np.asarray(alpha, dtype=np.float64)
    except (TypeError, ValueError):
        raise InvalidOptionError(f"{name} must be numbers in [0, 1] (got {str(alpha)[:60]}); pass one acceptance per position") from None
    if a.ndim != 1 or a.size == 0:
        raise InvalidOptionError(
            f"{name} must be a non-empty 1-D array of per-position acceptances (got shape {a.shape}); pass one value per position"
        )
    bad = ~np.isfinite(a) | (a < 0) | (a > 1)
    if bad.any():
        i = int(np.argmax(bad))
        raise InvalidOptionError(
            f"{name}[{i}] = {float(a[i])!r} is not a probability in [0, 1]; pass acceptances, not log-probabilities or counts"
        )
    return a


def _doc_ends(n: int, lengths: Any) -> np.ndarray:
    """For each position, the index one past the end of its document."""
    if lengths is None:
        return np.full(n, n, dtype=np.int64)
    ln = np.asarray(lengths)
    if ln.ndim != 1 or ln.size == 0 or not np.issubdtype(ln.dtype, np.integer) or (ln < 1).any() or int(ln.sum()) != n:
        raise InvalidOptionError(
            f"lengths must be positive integers summing to the number of positions {n} (got {np.asarray(lengths).tolist()[:8]}); "
            "pass each document's number of positions, in order"
        )
    ends = np.cumsum(ln)
    return np.repeat(ends, ln).astype(np.int64)


def expected_rounds(alpha: Any, gamma: Any, *, lengths: Any = None) -> float:
    r"""Expected number of rounds :math:`\sum_d R_d(0)` to emit every position (module docstring).

    Parameters
    ----------
    alpha : array_like, shape (N,)
        Per-position single-step acceptance :math:`\alpha_t \in [0, 1]` (documents concatenated).
    gamma : int
        Draft depth per round.
    lengths : array_like of int, optional
        Positions of each document (summing to N); rounds do not cross documents. Default: one
        document.

    Returns
    -------
    float
        Expected rounds: N when every acceptance is 0, about N / (gamma + 1) when every one is 1.

    Raises
    ------
    InvalidOptionError
        If an acceptance is not in [0, 1] or ``lengths`` does not fit.
    InvalidDraftCountError
        If ``gamma`` is not a positive integer.

    Examples
    --------
    >>> expected_rounds([1.0] * 10, 4)
    2.0
    """
    g = as_int_in_range(gamma, "gamma")
    a = _acceptance(alpha)
    ends = _doc_ends(a.size, lengths)
    n = a.size
    R = [0.0] * (n + 1)
    al = a.tolist()
    for t in range(n - 1, -1, -1):  # R(t) from R(t + 1 .. t + g + 1); R(end of t's document) = 0
        end = int(ends[t])
        gt = min(g, end - t - 1)
        total, reach = 0.0, 1.0  # reach = P(tau >= i)
        for i in range(gt):
            nxt = reach * al[t + i]
            total += (reach - nxt) * R[t + i + 1]  # t + i + 1 <= t + gt < end
            reach = nxt
        total += reach * (R[t + gt + 1] if t + gt + 1 < end else 0.0)
        R[t] = 1.0 + total
    starts = np.r_[0, np.flatnonzero(ends[1:] != ends[:-1]) + 1]
    return float(math.fsum(R[int(s)] for s in starts))


def tokens_per_round(alpha: Any, gamma: Any, *, lengths: Any = None) -> float:
    r"""Tokens per round over the whole text, :math:`N / \sum_d R_d(0)` (exact under the model).

    Parameters
    ----------
    alpha : array_like, shape (N,)
        Per-position single-step acceptance.
    gamma : int
        Draft depth per round.
    lengths : array_like of int, optional
        Positions of each document.

    Returns
    -------
    float
        Mean tokens per round, the bonus / correction token included.

    Examples
    --------
    >>> round(tokens_per_round([0.0] * 6, 3), 12)
    1.0
    """
    a = _acceptance(alpha)
    return a.size / expected_rounds(a, gamma, lengths=lengths)


def constant_acceptance_tokens(alpha: Any, gamma: Any) -> float:
    r"""The constant-acceptance formula of engine docs, :math:`(1 - \alpha^{\gamma+1}) / (1 - \alpha)`.

    .. math:: E[\tau + 1] = \sum_{i=0}^{\gamma} \alpha^i

    Right only when every position is accepted with the same :math:`\alpha`; see the module
    docstring for where it fails.

    Parameters
    ----------
    alpha : float
        Per-position acceptance in [0, 1].
    gamma : int
        Draft tokens per round.

    Returns
    -------
    float
        Tokens per round.

    Examples
    --------
    >>> constant_acceptance_tokens(0.5, 2)
    1.75
    """
    from otspec.metrics import expected_accepted_constant

    return 1.0 + expected_accepted_constant(alpha, gamma)


def tree_size(gamma: Any, k: Any) -> int:
    r"""Drafted nodes of a depth-:math:`\gamma` tree with :math:`k` children per node, :math:`\sum_{i=1}^{\gamma} k^i`.

    Parameters
    ----------
    gamma, k : int
        Depth and branching (``k = 1``: a chain of ``gamma`` tokens).

    Returns
    -------
    int
        Drafted tokens per sequence and round.

    Raises
    ------
    InvalidDraftCountError
        If ``gamma`` or ``k`` is not a positive integer.

    Examples
    --------
    >>> tree_size(4, 1), tree_size(2, 3)
    (4, 12)
    """
    g, kk = as_int_in_range(gamma, "gamma"), as_int_in_range(k, "k")
    return sum(kk**i for i in range(1, g + 1))


def affine_verify(fixed: float, per_position: float) -> Callable[[int], float]:
    r"""A target forward costing :math:`c_v(n) = a + b\,n` seconds for :math:`n` scored positions.

    Parameters
    ----------
    fixed, per_position : float
        :math:`a \ge 0` (weights read once per forward) and :math:`b \ge 0`.

    Returns
    -------
    callable
        ``n -> seconds``.

    Raises
    ------
    InvalidOptionError
        If ``a`` or ``b`` is negative or not finite, or both are 0.

    Examples
    --------
    >>> affine_verify(0.05, 0.01)(5)
    0.1
    """
    a, b = float(fixed), float(per_position)
    if not (math.isfinite(a) and math.isfinite(b) and a >= 0 and b >= 0 and a + b > 0):
        raise InvalidOptionError(
            f"verify cost a + b*n needs finite a, b >= 0, not both 0 (got a={fixed!r}, b={per_position!r}); pass e.g. 0.05, 0.01"
        )
    return lambda n: a + b * n


def measured_verify(positions: Sequence[int], seconds: Sequence[float]) -> Callable[[int], float]:
    r"""A target forward cost interpolated (piecewise linearly) between measured points.

    Beyond the last point the last segment is extended (the cost keeps growing as measured); below
    the first point the first point's cost is kept (a forward never costs less than the smallest
    one measured).

    Parameters
    ----------
    positions : sequence of int
        Scored positions per forward, strictly increasing, at least two.
    seconds : sequence of float
        Measured seconds per forward (positive).

    Returns
    -------
    callable
        ``n -> seconds``.

    Raises
    ------
    InvalidOptionError
        If there are fewer than two points, positions are not strictly increasing from 1, or a
        time is not finite and positive.

    Examples
    --------
    >>> f = measured_verify([1, 5, 9], [0.054, 0.09, 0.13])
    >>> round(f(3), 4), round(f(13), 4)
    (0.072, 0.17)
    """
    n = np.asarray(positions, dtype=np.float64)
    s = np.asarray(seconds, dtype=np.float64)
    if n.ndim != 1 or n.shape != s.shape or n.size < 2 or not (np.diff(n) > 0).all() or n[0] < 1:
        raise InvalidOptionError(
            f"measured verify cost needs >= 2 points with strictly increasing positions >= 1 (got {list(positions)}); pass e.g. 1:0.05,5:0.09"
        )
    if not (np.isfinite(s).all() and (s > 0).all()):
        raise InvalidOptionError(f"measured verify seconds must be finite and > 0 (got {list(seconds)}); pass measured times")

    def cost(m: int) -> float:
        if m >= n[-1]:
            return float(s[-1] + (m - n[-1]) * (s[-1] - s[-2]) / (n[-1] - n[-2]))
        return float(np.interp(m, n, s))

    return cost


def verify_points_from_traces(traces: Sequence[Any]) -> tuple[list[int], list[float]]:
    """Measured target-forward costs from ``otspec decode --trace`` files, for :func:`measured_verify`.

    Each trace gives one point: the positions one round's forward scored, ``batch * drafts *
    (gamma + 1)`` (the decoder scores every drafted sequence with its bonus position), and the
    median over rounds of the target, verification and rollback seconds (everything of a round but
    the draft). Run the decoder at several ``gamma`` (or ``drafts``) for several points.

    Parameters
    ----------
    traces : sequence of str, Path or otspec.io.Trace
        Decoding traces (their per-round ``round_t_*`` phase timings and their configuration).

    Returns
    -------
    positions, seconds : list
        One point per distinct number of positions (medians pooled over traces with the same
        number), sorted by positions.

    Raises
    ------
    InvalidTraceError
        If a file is not a readable trace.
    InvalidOptionError
        If a trace has no round timings or its configuration lacks ``gamma``.

    Examples
    --------
    >>> from otspec.io import Trace
    >>> cols = {"tau": np.zeros(3), "round_t_target": np.array([0.08, 0.09, 0.5]),
    ...         "round_t_verify": np.full(3, 0.004), "round_t_rollback": np.full(3, 0.001)}
    >>> verify_points_from_traces([Trace(cols, {"gamma": 4, "drafts": 1, "batch": 1})])
    ([5], [0.095])
    """
    from otspec.io import load_trace

    by_n: dict[int, list[np.ndarray]] = {}
    for tr in traces:
        t = tr if hasattr(tr, "columns") else load_trace(tr)
        cfg = t.config
        if "gamma" not in cfg or not all(f"round_t_{ph}" in t.columns for ph in ("target", "verify", "rollback")):
            raise InvalidOptionError(
                f"trace {tr!s:.60}: no gamma in its configuration or no round_t_target / _verify / _rollback timings; "
                "record it with otspec decode --trace"
            )
        n = int(cfg.get("batch", 1)) * int(cfg.get("drafts", 1)) * (int(cfg["gamma"]) + 1)
        sec = np.asarray(t["round_t_target"]) + np.asarray(t["round_t_verify"]) + np.asarray(t["round_t_rollback"])
        by_n.setdefault(n, []).append(sec)
    ns = sorted(by_n)
    return ns, [float(np.median(np.concatenate(by_n[n]))) for n in ns]


@dataclass(frozen=True)
class CostModel:
    """What one round costs.

    Attributes
    ----------
    draft_cost : float
        Seconds per drafted token per sequence (0 for prompt lookup).
    verify : callable
        ``n -> seconds`` of one target forward scoring ``n`` positions in all
        (:func:`affine_verify`, :func:`measured_verify`).
    batch : int
        Sequences decoded in lockstep.
    """

    draft_cost: float
    verify: Callable[[int], float]
    batch: int = 1

    def __post_init__(self) -> None:
        if not (math.isfinite(self.draft_cost) and self.draft_cost >= 0):
            raise InvalidOptionError(f"draft_cost must be finite and >= 0 (got {self.draft_cost!r}); pass seconds per draft token")
        as_int_in_range(self.batch, "batch")

    def round_seconds(self, gamma: int, k: int) -> float:
        """Seconds of one round (module docstring: :math:`T(\\gamma, k)`).

        Parameters
        ----------
        gamma, k : int
            Depth and children per node of the drafted tree.

        Returns
        -------
        float
            Draft forwards of the non-leaf nodes plus one target forward over every node.
        """
        nodes = 1 + tree_size(gamma, k)
        inner = nodes - k**gamma  # non-leaf nodes: each runs the draft once
        return self.draft_cost * self.batch * inner + float(self.verify(self.batch * nodes))

    def autoregressive_tokens_per_s(self) -> float:
        """Tokens per second of plain decoding (one position per sequence and forward).

        Returns
        -------
        float
            :math:`B / c_v(B)`.
        """
        return self.batch / float(self.verify(self.batch))


@dataclass(frozen=True)
class Prediction:
    """The model's prediction for one configuration.

    Attributes
    ----------
    gamma, k, tree_size : int
        Depth, children per node, drafted nodes.
    tokens_per_round : float
        Tokens per round (bonus included).
    round_seconds : float
        Seconds per round.
    tokens_per_s : float
        Throughput (all sequences of the batch).
    speedup : float
        Over autoregressive decoding with the same target cost.
    """

    gamma: int
    k: int
    tree_size: int
    tokens_per_round: float
    round_seconds: float
    tokens_per_s: float
    speedup: float


def predict_from_cumulative(cumulative: Any, cost: CostModel, *, k: int = 1) -> Prediction:
    r"""Prediction from a round's exact law of :math:`\tau` (e.g. a block or tree verifier's).

    Tokens per round :math:`1 + \sum_{i=1}^{\gamma} P(\tau \ge i)`, :math:`\gamma` = ``len(cumulative)``.

    Parameters
    ----------
    cumulative : array_like, shape (gamma,)
        :math:`a_i = P(\tau \ge i)`, non-increasing (:mod:`otspec.metrics`).
    cost : CostModel
        The cost model.
    k : int
        Children per node of the drafted tree.

    Returns
    -------
    Prediction
        With the same round cost as :func:`predict`.

    Examples
    --------
    >>> cost = CostModel(0.0, affine_verify(0.05, 0.01))
    >>> round(predict_from_cumulative([0.8, 0.64], cost).tokens_per_round, 12)
    2.44
    """
    from otspec.metrics import expected_accepted_from_cumulative

    a = np.asarray(cumulative, dtype=np.float64)
    tokens = 1.0 + expected_accepted_from_cumulative(a)
    return _prediction(tokens, int(a.size), k, cost)


def _prediction(tokens: float, gamma: int, k: int, cost: CostModel) -> Prediction:
    sec = cost.round_seconds(gamma, k)
    tps = cost.batch * tokens / sec
    return Prediction(gamma, k, tree_size(gamma, k), tokens, sec, tps, tps / cost.autoregressive_tokens_per_s())


def predict(alpha: Any, cost: CostModel, *, gamma: int, k: int = 1, lengths: Any = None) -> Prediction:
    r"""Throughput of one configuration from per-position acceptance (module docstring).

    Parameters
    ----------
    alpha : array_like, shape (N,)
        Single-step acceptance with ``k`` drafts at each position.
    cost : CostModel
        The cost model.
    gamma : int
        Depth.
    k : int
        Children per node (the ``k`` of ``alpha``).
    lengths : array_like of int, optional
        Positions per document.

    Returns
    -------
    Prediction
        Tokens per round (renewal-exact), seconds per round, tokens/s and speedup.

    Raises
    ------
    InvalidOptionError
        If an acceptance is not in [0, 1] or ``lengths`` does not fit.
    InvalidDraftCountError
        If ``gamma`` or ``k`` is not a positive integer.

    Examples
    --------
    >>> cost = CostModel(0.0, affine_verify(0.05, 0.01))
    >>> predict([1.0] * 6, cost, gamma=2).tokens_per_round
    3.0
    """
    return _prediction(tokens_per_round(alpha, gamma, lengths=lengths), as_int_in_range(gamma, "gamma"), as_int_in_range(k, "k"), cost)


def best_configurations(
    acceptance: Mapping[str, Mapping[int, Any]],
    cost: CostModel,
    *,
    gammas: Sequence[int] = tuple(range(1, 9)),
    lengths: Any = None,
) -> dict[str, list[Prediction]]:
    """Every (gamma, k) prediction of every verifier (or optimum), best first.

    Parameters
    ----------
    acceptance : mapping of str to mapping of int to array_like
        ``name -> {k: per-position acceptance (N,)}``.
    cost : CostModel
        The cost model.
    gammas : sequence of int
        Depths to try.
    lengths : array_like of int, optional
        Positions per document (the same for every array).

    Returns
    -------
    dict of str to list of Prediction
        Per name, sorted by tokens/s, highest first (ties: smaller tree first).

    Raises
    ------
    InvalidOptionError
        If ``acceptance`` is empty, or as :func:`predict`.

    Examples
    --------
    >>> cost = CostModel(0.0, affine_verify(0.05, 0.01))
    >>> best = best_configurations({"opt": {1: [0.9] * 50}}, cost, gammas=[1, 2, 3])
    >>> best["opt"][0].gamma
    3
    """
    if not acceptance:
        raise InvalidOptionError("acceptance is empty; pass at least one verifier's per-position acceptance")
    out: dict[str, list[Prediction]] = {}
    for name, by_k in acceptance.items():
        rows = [predict(a, cost, gamma=g, k=int(k), lengths=lengths) for k, a in by_k.items() for g in gammas]
        out[name] = sorted(rows, key=lambda p: (-p.tokens_per_s, p.tree_size, p.gamma))
    return out


def plot_speedup(best: Mapping[str, Sequence[Prediction]], path: Any) -> None:
    """Plot tokens/s against drafted tree size for every name and k (needs matplotlib).

    Parameters
    ----------
    best : mapping of str to sequence of Prediction
        From :func:`best_configurations`.
    path : str or Path
        The image file to write.

    Raises
    ------
    ImportError
        If matplotlib is missing (the message has the install command).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError('the speedup plot needs matplotlib; install it with `pip install "otspec[plots]"`') from None
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for name, preds in best.items():
        for k in sorted({p.k for p in preds}):
            pts = sorted((p.tree_size, p.tokens_per_s) for p in preds if p.k == k)
            ax.plot(*zip(*pts, strict=True), marker="o", label=f"{name} (k={k})")
    ax.set_xscale("log")
    ax.set_xlabel("drafted tokens per round (tree size)")
    ax.set_ylabel("predicted tokens / s")
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
