r"""Token-level verification of a drafted block (Sun et al., Algorithm 1; Leviathan et al.).

A draft :math:`X^\gamma \sim M_s` is checked token by token: position :math:`i` is accepted with
probability :math:`\min(1, r_i)`, :math:`r_i = M_b(X_i \mid X^{i-1}) / M_s(X_i \mid X^{i-1})`, and
the first rejection stops the block; the next token is drawn from the residual
:math:`\mathrm{norm}((M_b - M_s)_+)` at the rejected position, or from :math:`M_b(\cdot\mid X^\gamma)`
(the bonus token) when all :math:`\gamma` drafts pass.

This module also holds what every chain verifier shares: :class:`ChainKernel` (the exact law of
(tau, next token) for every drafted path), :func:`output_law` and :func:`lossless_violation` (the
criterion of MATH.md section 0.1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from otspec import models as _models
from otspec._validation import (
    InvalidDistributionError,
    InvalidDraftsError,
    ShapeMismatchError,
    UnsupportedMethodError,
    as_draft_count,
    as_generator,
    as_supported_drafts,
    as_token_tuples,
)

__all__ = [
    "ChainKernel",
    "kernel",
    "conditional_law",
    "expected_accepted",
    "expected_accepted_given_path",
    "sample",
    "output_law",
    "lossless_violation",
]

_KERNEL_BYTES_PER_ENTRY = 32


@dataclass(frozen=True, eq=False)
class ChainKernel:
    r"""Exact law of :math:`(\tau, Y)` given each drafted path, for one chain verifier.

    Attributes
    ----------
    paths : ndarray, shape (N, gamma)
        Every drafted path of positive draft probability (lexicographic).
    weights : ndarray, shape (N,)
        Their draft probabilities :math:`M_s(x^\gamma)` (summing to 1).
    law : ndarray, shape (N, gamma + 1, V)
        ``law[n, t, y]`` :math:`= P(\tau = t, Y = y \mid X^\gamma = \text{paths}[n])`.
    verifier : str
        ``"token"`` or ``"block"``.
    """

    paths: np.ndarray
    weights: np.ndarray
    law: np.ndarray
    verifier: str

    @property
    def gamma(self) -> int:
        return int(self.paths.shape[1])

    @property
    def V(self) -> int:
        return int(self.law.shape[2])

    def tau_law(self) -> np.ndarray:
        """``(N, gamma + 1)``: :math:`P(\\tau = t \\mid \\text{path})`."""
        return self.law.sum(axis=2)

    def expected_accepted(self) -> float:
        r""":math:`E[\tau] = \sum_x M_s(x) \sum_t t\, P(\tau = t \mid x)`."""
        return float(self.weights @ (self.tau_law() @ np.arange(self.gamma + 1)))

    def output_law(self) -> dict:
        """Law of the emitted block :math:`O = (X^\\tau, Y)` as ``{tuple: probability}``."""
        out: dict = {}
        for path, w, lw in zip(self.paths, self.weights, self.law):
            for t in range(self.gamma + 1):
                head = tuple(int(v) for v in path[:t])
                for y in np.flatnonzero(lw[t] > 0):
                    key = head + (int(y),)
                    out[key] = out.get(key, 0.0) + float(w * lw[t, y])
        return out

    def __repr__(self) -> str:
        return f"ChainKernel(verifier={self.verifier!r}, V={self.V}, gamma={self.gamma}, paths={self.paths.shape[0]}, E[tau]={self.expected_accepted():.12g})"


def output_law(kernel_or_law: Any) -> dict:
    """The emitted-block law ``{O: P(O)}`` of a :class:`ChainKernel` (a dict is returned as is)."""
    if isinstance(kernel_or_law, Mapping):
        return dict(kernel_or_law)
    return kernel_or_law.output_law()


def lossless_violation(block_law: Mapping, p_model: Any) -> float:
    r"""Largest violation of the losslessness criterion (MATH.md section 0.1) by a block law.

    With :math:`Q(x^i) = P(|O| \ge i, O^i = x^i)` and :math:`C(x^i) = P(|O| > i, O^i = x^i)`, the
    decoded stream has the target law iff :math:`Q(x^i y) = C(x^i)\, M_b(y \mid x^i)` for every
    :math:`i \ge 0`, :math:`x^i` and :math:`y` (with :math:`C(\emptyset) = 1`). Returns
    :math:`\max |Q(x^i y) - C(x^i) M_b(y \mid x^i)|` (0 for a lossless verifier, up to rounding),
    also counting :math:`|1 - \sum_O P(O)|`.

    Examples
    --------
    >>> from otspec import models
    >>> from otspec.verifiers import token_chain
    >>> p = models.context_free([0.5, 0.5])
    >>> token_chain.lossless_violation({(0,): 0.5, (1,): 0.5}, p)
    0.0
    """
    p_model = _models.as_model(p_model, name="p_model")
    Q: dict = {}
    C: dict = {}
    total = 0.0
    for o, w in block_law.items():
        total += w
        for i in range(1, len(o) + 1):
            Q[o[:i]] = Q.get(o[:i], 0.0) + w
        for i in range(0, len(o)):
            C[o[:i]] = C.get(o[:i], 0.0) + w
    worst = abs(1.0 - total)
    for head, c in C.items():
        target = p_model(head)
        got = np.array([Q.get(head + (y,), 0.0) for y in range(p_model.V)])
        worst = max(worst, float(np.abs(got - c * target).max()))
    # Q mass on x^i y whose head x^i never continues (C = 0) must be zero as well.
    for key, q in Q.items():
        if key[:-1] not in C and len(key) > 0:
            worst = max(worst, q)
    return worst


# ------------------------------------------------------------------------------------------------
def _check_row(row: np.ndarray, name: str, i: int) -> None:
    """One conditional along a path: finite, non-negative, sums to 1 (a cache-sized pass each)."""
    total = np.einsum("i->", row)  # ~2x faster than row.sum() at V = 262 144
    V = row.shape[0]
    if not np.isfinite(total) or abs(total - 1.0) > 1e-9 * max(1.0, V / 1e5):
        raise InvalidDistributionError(f"{name}[{i}] must be a finite distribution summing to 1 (got sum {total:.12g}); normalise in float64")
    low = row.min()
    if low < 0:
        raise InvalidDistributionError(f"{name}[{i}] must be non-negative (got {low:.3g}); clip rounding noise yourself if intended")


def _check_drafted(Qc: np.ndarray, x: np.ndarray) -> None:
    as_supported_drafts(x, Qc, q_name="q_conds")


def _check_path_arrays(p_conds: Any, q_conds: Any, drafts: Any, *, validate: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Shapes: drafts (gamma,), q_conds (gamma, V), p_conds (gamma, V) or (gamma + 1, V)."""
    P = np.asarray(p_conds, dtype=np.float64)
    Qc = np.asarray(q_conds, dtype=np.float64)
    if Qc.ndim != 2 or Qc.shape[0] < 1:
        raise ShapeMismatchError(f"q_conds must have shape (gamma, V) with gamma >= 1 (got {Qc.shape}); row i is M_s(. | x^i)")
    g, V = Qc.shape
    if P.ndim != 2 or P.shape[1] != V or P.shape[0] not in (g, g + 1):
        raise ShapeMismatchError(
            f"p_conds must have shape ({g}, {V}) or ({g + 1}, {V}) to match q_conds (got {P.shape}); row i is M_b(. | x^i)"
        )
    x = as_token_tuples(np.asarray(drafts).reshape(1, -1), V, name="drafts")[0]
    if x.shape[0] != g:
        raise ShapeMismatchError(f"drafts must hold gamma = {g} tokens to match q_conds (got {x.shape[0]}); pass the drafted path")
    if validate:
        for i in range(g):  # the bonus row of p_conds is not used by the estimators
            _check_row(P[i], "p_conds", i)
            _check_row(Qc[i], "q_conds", i)
        _check_drafted(Qc, x)
    return P, Qc, x


def _ratios(P: np.ndarray, Qc: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    g = x.shape[0]
    return P[np.arange(g), x], Qc[np.arange(g), x]


def expected_accepted_given_path(p_conds: Any, q_conds: Any, drafts: Any, *, validate: bool = True) -> float:
    r"""Exact :math:`E[\tau \mid X^\gamma = x^\gamma]` for token verification, from the path's conditionals.

    .. math:: E[\tau \mid x^\gamma] = \sum_{i=1}^{\gamma} \prod_{j=1}^{i} \min(1, r_j), \qquad
              r_j = \frac{M_b(x_j \mid x^{j-1})}{M_s(x_j \mid x^{j-1})}.

    Averaging it over drafted paths is an unbiased, lower-variance estimate of :math:`E[\tau]` than
    counting accepted tokens (it integrates the accept coins out exactly).

    Parameters
    ----------
    p_conds : array, shape (gamma, V) or (gamma + 1, V)
        Target conditionals along the path, row ``i`` = :math:`M_b(\cdot \mid x^i)`.
    q_conds : array, shape (gamma, V)
        Draft conditionals, row ``i`` = :math:`M_s(\cdot \mid x^i)`.
    drafts : array of int, shape (gamma,)
        The drafted path.
    validate : bool
        Check every row sums to 1 (one pass over the arrays; turn off in hot loops).

    Examples
    --------
    >>> from otspec.verifiers import token_chain
    >>> token_chain.expected_accepted_given_path([[1/3, 2/3]] * 2, [[2/3, 1/3]] * 2, [0, 1])
    1.0
    """
    P, Qc, x = _check_path_arrays(p_conds, q_conds, drafts, validate=validate)
    px, qx = _ratios(P, Qc, x)
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.minimum(1.0, np.where(qx > 0, px / qx, 1.0))
    return float(np.cumprod(a).sum())


def _path_law(P: np.ndarray, Qc: np.ndarray, x: np.ndarray) -> np.ndarray:
    """(gamma + 1, V): P(tau = t, Y = y | path) for token verification."""
    g, V = Qc.shape
    px, qx = _ratios(P, Qc, x)
    a = np.minimum(1.0, px / qx)
    reach = np.concatenate([[1.0], np.cumprod(a)])  # P(tau >= t)
    law = np.zeros((g + 1, V))
    for t in range(g):
        stop = reach[t] * (1.0 - a[t])
        if stop > 0:
            res = np.maximum(P[t] - Qc[t], 0.0)
            mass = res.sum()
            if mass > 0:
                law[t] = stop * res / mass
    if P.shape[0] > g:
        law[g] = reach[g] * P[g]
    return law


def kernel(p_model: Any, q_model: Any, gamma: int, *, memory_cap: float | None = None) -> ChainKernel:
    r"""The exact law of :math:`(\tau, Y)` given every drafted path (token verification).

    .. math:: P(\tau = t \mid x^\gamma) = \Big(\prod_{j \le t} a_j\Big)(1 - a_{t+1}), \quad
              a_j = \min(1, r_j), \qquad
              Y \mid \tau = t < \gamma \sim \mathrm{norm}\big((M_b - M_s)_+(\cdot \mid x^t)\big),

    and :math:`Y \sim M_b(\cdot \mid x^\gamma)` when :math:`\tau = \gamma`. Paths of draft
    probability 0 are left out.

    References
    ----------
    Sun, Mendlovic, Leviathan, Aharoni, Ro, Beirami, Suresh, "Block Verification Accelerates
    Speculative Decoding" (ICLR 2025), Algorithm 1.

    Examples
    --------
    >>> from otspec import models
    >>> from otspec.verifiers import token_chain
    >>> p, q = models.context_free([1/3, 2/3]), models.context_free([2/3, 1/3])
    >>> round(token_chain.kernel(p, q, 2).expected_accepted() * 9, 9)
    10.0
    """
    return _kernel_from_table(_kernel_table(p_model, q_model, gamma, memory_cap), _path_law, "token")


def _kernel_table(p_model: Any, q_model: Any, gamma: int, memory_cap: float | None) -> "_models.PrefixTable":
    """Enumerate the prefixes, budgeting for the (N, gamma + 1, V) kernel on top."""
    V = _models.as_model(p_model, name="p_model").V
    gamma = as_draft_count(gamma, "gamma")
    extra = _KERNEL_BYTES_PER_ENTRY * float(V) ** (gamma + 1) * (gamma + 1)
    return _models.enumerate_prefixes(p_model, q_model, gamma, memory_cap=memory_cap, extra_bytes=extra)


def _kernel_from_table(table: "_models.PrefixTable", path_law, name: str) -> ChainKernel:
    g, V = table.gamma, table.V
    paths = table.paths(g)
    keep = table.q_joint[g] > 0
    anc = table.ancestors(g)[keep]
    paths, weights = paths[keep], table.q_joint[g][keep]
    law = np.empty((paths.shape[0], g + 1, V))
    for n in range(paths.shape[0]):
        P = np.stack([table.p_cond[i][anc[n, i]] for i in range(g + 1)])
        Qc = np.stack([table.q_cond[i][anc[n, i]] for i in range(g)])
        law[n] = path_law(P, Qc, paths[n])
    for arr in (paths, weights, law):
        arr.setflags(write=False)
    return ChainKernel(paths=paths, weights=weights, law=law, verifier=name)


def expected_accepted(p_model: Any, q_model: Any, gamma: int, *, method: str = "closed_form", memory_cap: float | None = None) -> float:
    r"""Exact :math:`E[\tau]` of token verification over a block of ``gamma`` drafts.

    .. math:: E[\tau_{\text{token}}] = \sum_{i=1}^{\gamma} \sum_{x^i} \prod_{j=1}^{i}
              \min\{M_s(x_j \mid x^{j-1}), M_b(x_j \mid x^{j-1})\}.

    Parameters
    ----------
    method : {"closed_form", "kernel"}
        ``"closed_form"``: the product-of-mins sum above, vectorised over all prefixes;
        ``"kernel"``: from the exact per-path law of :func:`kernel` (a cross-check).

    Examples
    --------
    >>> from otspec import models
    >>> from otspec.verifiers import token_chain
    >>> p, q = models.context_free([1/3, 2/3]), models.context_free([2/3, 1/3])
    >>> round(token_chain.expected_accepted(p, q, 2) * 9, 9)
    10.0
    """
    if method == "kernel":
        return kernel(p_model, q_model, gamma, memory_cap=memory_cap).expected_accepted()
    if method != "closed_form":
        raise UnsupportedMethodError(f"method must be 'closed_form' or 'kernel' (got {method!r})")
    table = _models.enumerate_prefixes(p_model, q_model, gamma, memory_cap=memory_cap)
    return float(sum(m.sum() for m in token_prefix_mass(table)[1:]))


def token_prefix_mass(table: "_models.PrefixTable") -> list:
    r"""``[T_0, ..., T_gamma]`` with :math:`T_i(x^i) = P(\tau \ge i, X^i = x^i) = \prod_j \min(M_s, M_b)`."""
    out = [np.ones(1, dtype=table.q_joint[0].dtype)]
    for i in range(1, table.gamma + 1):
        out.append((out[-1][:, None] * np.minimum(table.p_cond[i - 1], table.q_cond[i - 1])).ravel())
    return out


def sample(p_model: Any, q_model: Any, drafts: Any, *, rng: np.random.Generator) -> tuple[int, int]:
    r"""Run token verification once on a drafted path; returns ``(tau, y)``.

    The accept coins and the residual / bonus draw use two independent streams spawned from
    ``rng`` (reusing one uniform for both biases the output, DESIGN.md section 4).

    Examples
    --------
    >>> import numpy as np
    >>> from otspec import models
    >>> from otspec.verifiers import token_chain
    >>> p = models.context_free([0.5, 0.5])
    >>> token_chain.sample(p, p, [0, 1], rng=np.random.default_rng(0))[0]
    2
    """
    p_model = _models.as_model(p_model, name="p_model")
    q_model = _models.as_model(q_model, V=p_model.V, name="q_model")
    rng = as_generator(rng)
    x = _models.as_prefix(np.asarray(drafts).reshape(-1).tolist(), p_model.V, name="drafts")
    g = as_draft_count(len(x), "gamma (len(drafts))")
    coins, draws = rng.spawn(2)
    for i in range(g):
        p, q = p_model(x[:i]), q_model(x[:i])
        if q[x[i]] <= 0:
            raise InvalidDraftsError(f"drafts[{i}] = {x[i]} has draft probability 0 after {x[:i]}; pass a path the draft can produce")
        if not coins.random() < min(1.0, p[x[i]] / q[x[i]]):
            res = np.maximum(p - q, 0.0)
            return i, int(draws.choice(p_model.V, p=res / res.sum()))
    return g, int(draws.choice(p_model.V, p=p_model(x)))


def conditional_law(p_model: Any, q_model: Any, drafts: Any) -> np.ndarray:
    """``(gamma + 1, V)``: :math:`P(\\tau = t, Y = y \\mid X^\\gamma = \\text{drafts})` for one path.

    Examples
    --------
    >>> from otspec import models
    >>> from otspec.verifiers import token_chain
    >>> p = models.context_free([0.5, 0.5])
    >>> token_chain.conditional_law(p, p, [1]).tolist()
    [[0.0, 0.0], [0.5, 0.5]]
    """
    p_model = _models.as_model(p_model, name="p_model")
    P = _models.conditionals_along(p_model, np.asarray(drafts).reshape(-1).tolist())
    Qc = _models.conditionals_along(_models.as_model(q_model, V=p_model.V, name="q_model"), np.asarray(drafts).reshape(-1).tolist(), include_last=False)
    P, Qc, x = _check_path_arrays(P, Qc, drafts, validate=True)
    return _path_law(P, Qc, x)
