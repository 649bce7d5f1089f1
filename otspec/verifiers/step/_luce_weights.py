r"""Luce weights b whose two-level Luce rule has a prescribed selection law (Sinkhorn / IPF).

With :math:`\theta = \log b` the selection law :math:`r_\theta` of the two-level Luce rule
(:mod:`otspec.verifiers.step._luce_law`) is the gradient of the convex function

.. math:: \Psi_0(\theta) = \sum_U P(D = U) \log \sum_{y \in U'} e^{\theta_y},

so the weights realising a target :math:`r^*` minimise :math:`\Psi(\theta) = \Psi_0(\theta) -
r^* \cdot \theta` (gradient :math:`r_\theta - r^*`). A minimiser exists whenever :math:`r^*` lies
in the relative interior of the achievable laws on the rule's pattern (the matrix-scaling theorem:
Sinkhorn and Knopp 1967; Rothblum and Schneider 1989), which holds when A, the empty set and the
whole vocabulary are the only tight sets of :math:`r^*`. The iteration is the IPF /
Sinkhorn fixed point :math:`\theta \leftarrow \theta + \log r^* - \log r_\theta` (each step
rescales every weight by its target-to-current ratio) with Anderson acceleration (type II, memory
``m``, least squares on the last residual differences), safeguarded: a mixed step whose residual
:math:`\|r_\theta - r^*\|_1` exceeds twice the best one so far is discarded, the history is
cleared and plain steps are taken from the best point until the residual improves on it (the plain
step is the minorise-maximise update of Luce models, which never increases :math:`\Psi`). Tokens with :math:`r^*(y) = 0`
get :math:`b_y = 0`. Each level's weights are normalised to maximum 1 at the end (only ratios
within a level matter).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from otspec._docs import fill_doc
from otspec.verifiers.step._luce_law import LuceLaw

__all__ = ["LuceFit", "STEP_SCALE_MAX", "fit_luce_weights", "fit_luce_weights_exact", "fit_luce_weights_sets"]

#: Largest factor by which the preconditioned step may exceed the MM step.
STEP_SCALE_MAX = 1e3


@dataclass(frozen=True, eq=False)
class LuceFit:
    """Result of :func:`fit_luce_weights`.

    Attributes
    ----------
    b : ndarray, shape (V,)
        The weights (each level's maximum is 1; zero where the target is zero).
    law : LuceLaw
        The oracle's law at ``b`` (the last evaluation).
    residual : float
        :math:`\\|r_b - r^*\\|_1` by the oracle.
    iterations : int
        Oracle evaluations made.
    converged : bool
        Whether ``residual <= tol``.
    history : list of float
        The residual after each evaluation.
    """

    b: np.ndarray
    law: LuceLaw
    residual: float
    iterations: int
    converged: bool
    history: list = field(default_factory=list)


def _step(law: LuceLaw, log_rs: np.ndarray, active: np.ndarray, precondition: bool = True, damping: float = 2.0) -> np.ndarray:
    r"""The preconditioned Sinkhorn step: :math:`\log(r^*/r)` (the MM / IPF step) scaled by
    :math:`r_y / (c\, H_{yy})`, :math:`H_{yy} = r_y - \text{second}_y` the Hessian's diagonal,
    clipped to [1, STEP_SCALE_MAX], with damping c. The Hessian is a weighted graph Laplacian, so
    :math:`H \preceq 2\,\mathrm{diag}(H)`: c = 2 is the safe half-Jacobi Newton step near the
    solution; c = 1 is the full Jacobi Newton step, exact Newton when the Hessian is the Laplacian
    of product weights :math:`\mathrm{diag}(d) - d d^T / \sum d` with :math:`d = \mathrm{diag}(H)`
    on each level (its null space, the level's shift, is harmless), which is about what many small
    tokens give. MM's :math:`\mathrm{diag}(r) \succeq \mathrm{diag}(H)` crawls for tokens that are
    often alone in their level (:math:`H_{yy} \ll r_y`)."""
    r = np.maximum(law.r, 1e-300)
    f = np.where(active, log_rs - np.log(r), 0.0)
    if law.second is None or not precondition:
        return f
    h = np.maximum(r - law.second, 1e-300)
    scale = np.clip(r / (damping * h), 1.0, STEP_SCALE_MAX)
    return np.where(active, f * scale, 0.0)


def _normalise(theta: np.ndarray, active: np.ndarray, in_A: np.ndarray) -> np.ndarray:
    b = np.zeros(theta.size)
    for lev in (in_A & active, ~in_A & active):
        if lev.any():
            b[lev] = np.exp(theta[lev] - theta[lev].max())
    return b


# long-function: one Newton / fixed-point loop whose state is shared by every step
def fit_luce_weights(
    r_star: np.ndarray,
    q: np.ndarray,
    in_A: np.ndarray,
    oracle: Callable[[np.ndarray], LuceLaw],
    *,
    tol: float,
    max_iter: int,
    memory: int = 5,
    b0: np.ndarray | None = None,
    patience: int = 8,
    precondition: bool = True,
    damping: float = 2.0,
) -> LuceFit:
    """Weights b of a two-level Luce rule whose selection law is ``r_star``.

    Parameters
    ----------
    r_star : ndarray, shape (V,)
        The target selection law.
    q : ndarray, shape (V,)
        Draft distribution (only its support matters; the start is :math:`b = r^*`).
    in_A : ndarray of bool, shape (V,)
        The upper level.
    oracle : callable
        ``oracle(b) -> LuceLaw``, the rule's selection law.
    tol : float
        Stop when :math:`\\|r_b - r^*\\|_1 \\le` tol.
    max_iter : int
        Most oracle evaluations.
    memory : int
        Anderson memory (0: plain Sinkhorn / IPF).
    b0 : ndarray, optional
        Starting weights (e.g. a fit on a coarser oracle).
    patience : int
        Stop when the best residual has not halved in this many evaluations (the oracle's own
        error is then the floor).
    precondition : bool
        Scale the Sinkhorn step by the Hessian's diagonal (:func:`_step`); False: the plain MM /
        IPF step.
    damping : float
        c of the preconditioned step :math:`r_y / (c H_{yy})` (2: half Jacobi, 1: full Jacobi).

    Returns
    -------
    LuceFit
        The weights with the best residual seen, their law and the convergence record.
    """
    active = (r_star > 0) & (q > 0)
    if b0 is None:
        theta = np.where(active, np.log(np.where(active, r_star, 1.0)), 0.0)
    else:
        theta = np.where(active, np.log(np.where(active & (b0 > 0), b0, 1e-300)), 0.0)
    log_rs = np.log(np.where(active, r_star, 1.0))
    Xs: list[np.ndarray] = []  # iterates
    Fs: list[np.ndarray] = []  # their residuals log r* - log r
    best = (np.inf, theta, None)
    history: list[float] = []
    it = 0
    last_halving = 0
    plain = False  # after a rejected mixed step: plain (monotone MM) steps until a new best
    while it < max_iter:
        b = _normalise(theta, active, in_A)
        law = oracle(b)
        it += 1
        res = float(np.abs(law.r - r_star).sum())
        history.append(res)
        if res < 0.5 * best[0]:
            last_halving = it
        if res < best[0]:
            best = (res, theta.copy(), law)
            plain = False
        if res <= tol or it - last_halving >= patience:
            break
        f = _step(law, log_rs, active, precondition, damping)
        if not plain and res > 2.0 * best[0] and Xs:  # safeguard: discard the mixed step
            theta = best[1].copy()
            f = _step(best[2], log_rs, active, precondition, damping)
            Xs, Fs = [], []
            plain = True
        Xs.append(theta.copy())
        Fs.append(f)
        if len(Xs) > memory + 1:
            Xs.pop(0)
            Fs.pop(0)
        if memory > 0 and len(Xs) > 1 and not plain:
            dF = np.stack([Fs[i + 1] - Fs[i] for i in range(len(Fs) - 1)], axis=1)
            dX = np.stack([Xs[i + 1] - Xs[i] for i in range(len(Xs) - 1)], axis=1)
            gamma, *_ = np.linalg.lstsq(dF, f, rcond=None)
            theta = theta + f - (dX + dF) @ gamma
        else:
            theta = theta + f
    res, theta, law = best
    b = _normalise(theta, active, in_A)
    return LuceFit(b=b, law=law, residual=res, iterations=it, converged=res <= tol, history=history)


def _levels(sets: np.ndarray, in_A: np.ndarray, active: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    valid = sets >= 0
    T = np.maximum(sets, 0)
    inA = in_A[T] & valid
    level = np.where(inA.any(axis=1)[:, None], inA, valid) & active[T]
    return T, level


def _psi(theta, T, level, weights, r_star, active):
    """Psi(theta), the softmax weights per set and r_theta."""
    z = np.where(level, theta[T], -np.inf)
    zmax = np.max(z, axis=1, keepdims=True)
    zmax = np.where(np.isfinite(zmax), zmax, 0.0)
    e = np.where(level, np.exp(z - zmax), 0.0)
    tot = e.sum(axis=1, keepdims=True)
    ok = tot[:, 0] > 0
    sig = e / np.where(tot > 0, tot, 1.0)
    lse = np.where(ok, np.log(np.where(ok, tot[:, 0], 1.0)) + zmax[:, 0], 0.0)
    psi = float(weights @ lse - np.dot(np.where(active, r_star, 0.0), theta))
    r = np.bincount(T.ravel(), weights=(sig * weights[:, None]).ravel(), minlength=theta.size)
    return psi, sig, r


@fill_doc
def fit_luce_weights_exact(
    r_star: np.ndarray,
    sets: np.ndarray,
    weights: np.ndarray,
    in_A: np.ndarray,
    *,
    tol: float,
    max_iter: int = 200,
    b0: np.ndarray | None = None,
) -> tuple[np.ndarray, float, int]:
    """Newton's method on the convex :math:`\\Psi` over enumerated draft sets (small problems).

    The Hessian :math:`\\sum_U P(U)(\\mathrm{diag}\\,\\sigma_U - \\sigma_U\\sigma_U^T)` is assembled
    exactly; the step solves it in the least-squares sense (its null space is the per-level shift
    of :math:`\\theta`, which does not change the rule), with a backtracking (Armijo) line search on
    :math:`\\Psi`. Near-tight sets, where the diagonal MM / Sinkhorn step crawls, converge in a few
    steps; on a degenerate pattern (a further tight set) some weights run off to 0 or infinity and
    the residual falls only slowly -- the caller reports it.

    Parameters
    ----------
    {luce_sets_args}
    tol : float
        Stop when :math:`\\|r_b - r^*\\|_1 \\le` tol.
    max_iter : int
        Most Newton steps.
    b0 : ndarray, optional
        Starting weights (default :math:`r^*`); Newton is fast near the solution, so the caller
        starts it from the Anderson-accelerated Sinkhorn iterate.

    Returns
    -------
    b : ndarray, shape (V,)
        The weights (each level's maximum is 1; zero where the target is zero).
    residual : float
        :math:`\\|r_b - r^*\\|_1`.
    iterations : int
        Newton steps taken.
    """
    V = r_star.size
    active = r_star > 0
    T, level = _levels(sets, in_A, active)
    start = r_star if b0 is None else np.where(b0 > 0, b0, 1e-300)
    theta = np.where(active, np.log(np.where(active, start, 1.0)), 0.0)
    idx = np.flatnonzero(active)
    psi, sig, r = _psi(theta, T, level, weights, r_star, active)
    res = float(np.abs(r - r_star).sum())
    it = 0
    while res > tol and it < max_iter:
        it += 1
        g = (r - r_star)[idx]
        H = np.zeros((V, V))
        sw = sig * weights[:, None]
        np.add.at(H, (T.ravel(), T.ravel()), sw.ravel())
        outer = np.einsum("si,sj->sij", sig, sig * weights[:, None])
        np.add.at(H, (T[:, :, None].repeat(T.shape[1], 2), T[:, None, :].repeat(T.shape[1], 1)), -outer)
        Hs = H[np.ix_(idx, idx)]
        sc = np.sqrt(np.maximum(np.diag(Hs), 1e-300))  # Jacobi scaling: curvatures span decades
        d_idx, *_ = np.linalg.lstsq(Hs / np.outer(sc, sc), -g / sc, rcond=1e-14)
        d_idx = d_idx / sc
        d = np.zeros(V)
        d[idx] = d_idx
        slope = float(np.dot(g, d_idx))
        if not slope < 0:
            d[idx], slope = -g, -float(np.dot(g, g))
        step = 1.0
        while True:
            psi_n, sig_n, r_n = _psi(theta + step * d, T, level, weights, r_star, active)
            if psi_n <= psi + 1e-4 * step * slope or step < 1e-12:
                break
            step *= 0.5
        res_n = float(np.abs(r_n - r_star).sum())
        if step < 1e-12 and res_n >= res:
            break
        theta = theta + step * d
        psi, sig, r, res = psi_n, sig_n, r_n, res_n
    return _normalise(theta, active, in_A), res, it


@fill_doc
def fit_luce_weights_sets(
    r_star: np.ndarray, sets: np.ndarray, weights: np.ndarray, in_A: np.ndarray, *, tol: float, max_iter: int = 300
) -> tuple[np.ndarray, float, int]:
    """Weights over enumerated draft sets: Anderson-accelerated Sinkhorn, then Newton polish.

    The Sinkhorn iteration (:func:`fit_luce_weights` with the exact oracle; the plain MM step
    first, then the preconditioned one) converges in a few steps except near a tight set, where
    it crawls; Newton's method (:func:`fit_luce_weights_exact`) started from the best iterate
    finishes the job. The weights with the smallest residual are returned.

    Parameters
    ----------
    {luce_sets_args}
    tol : float
        Target :math:`\\|r_b - r^*\\|_1`.
    max_iter : int
        Most oracle evaluations of the Sinkhorn phase (Newton gets a third of it).

    Returns
    -------
    b : ndarray, shape (V,)
        The weights.
    residual : float
        :math:`\\|r_b - r^*\\|_1` (exact up to rounding).
    iterations : int
        Sinkhorn evaluations plus Newton steps.
    """
    from otspec.verifiers.step._luce_law import luce_law_exact

    q_support = np.zeros(r_star.size)
    q_support[sets[sets >= 0]] = 1.0
    best = (np.inf, None)
    its = 0
    for pre in (False, True):  # plain MM + Anderson first, then the preconditioned step
        fit = fit_luce_weights(
            r_star,
            q_support,
            in_A,
            lambda b: luce_law_exact(sets, weights, b, in_A),
            tol=tol,
            max_iter=max_iter,
            patience=max_iter,
            precondition=pre,
        )
        its += fit.iterations
        if fit.residual < best[0]:
            best = (fit.residual, fit.b)
        if fit.converged:
            return fit.b, fit.residual, its
    b2, res2, n2 = fit_luce_weights_exact(r_star, sets, weights, in_A, tol=tol, max_iter=max(1, max_iter // 3), b0=best[1])
    its += n2
    if res2 < best[0]:
        return b2, res2, its
    return best[1], best[0], its
