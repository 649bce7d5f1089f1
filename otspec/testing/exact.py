r"""Exact checks of a verifier's kernel: a transport plan, lossless, and its acceptance.

A verifier with conditional output law :math:`\pi(\cdot \mid \bar x)` is **lossless** for
``(p, Q)`` iff every row is a distribution and :math:`\sum_{\bar x} Q(\bar x)\, \pi(y \mid \bar x)
= p(y)` for every token :math:`y`; its **acceptance** is :math:`\alpha = \sum_{\bar x} Q(\bar x)
\sum_{y \in \bar x} \pi(y \mid \bar x)`. On failure the assertions raise
:class:`~otspec.testing.VerifierAssertionError` naming the token, the expected and actual mass and
the draft tuples that contribute most.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from otspec._tolerances import EXACT_ATOL
from otspec.errors import UnsupportedMethodError
from otspec.laws import DraftLaw
from otspec.testing._docs import fill_doc
from otspec.testing._findings import TOP_CONTRIBUTORS, VerifierAssertionError, fmt_number, tuple_text
from otspec.testing.adapters import step_verifier
from otspec.testing.forms import SamplerVerifier

__all__ = ["assert_acceptance_matches_kernel", "assert_kernel_valid", "assert_lossless"]


@fill_doc
def assert_lossless(verifier: Any, p: Any, law: DraftLaw, *, atol: float = EXACT_ATOL) -> None:
    r"""Assert, exactly from the kernel, that ``verifier`` outputs ``p`` when drafts follow ``law``.

    Checks that every kernel row :math:`\pi(\cdot \mid \bar x)` is a distribution (non-negative,
    sums to 1 within ``atol``) and that the output law
    :math:`\sum_{\bar x} Q(\bar x)\, \pi(\cdot \mid \bar x)` equals ``p`` within ``atol`` at every
    token.

    Parameters
    ----------
    {step_args}
    atol : float
        Absolute tolerance per token (default :data:`otspec._tolerances.EXACT_ATOL`).

    Raises
    ------
    VerifierAssertionError
        Naming the token with the largest error, its expected mass ``p[y]`` and the actual
        output mass, and the draft tuples :math:`\bar x` with the largest contributions
        :math:`Q(\bar x)\,(\pi(y \mid \bar x) - p(y))` to it (these sum to the error); or the
        first tuple whose row is not a distribution.

    Examples
    --------
    >>> import otspec
    >>> from otspec.verifiers import kseq
    >>> assert_lossless(kseq, [0.5, 0.3, 0.2], otspec.iid([0.2, 0.3, 0.5], 2))
    >>> def keep_always(p, q, drafts):
    ...     out = [0.0] * len(p); out[drafts[0]] = 1.0; return out
    >>> assert_lossless(keep_always, [0.5, 0.5], otspec.iid([0.75, 0.25], 1))
    Traceback (most recent call last):
    ...
    otspec.testing.VerifierAssertionError: verifier 'keep_always' is not lossless on iid(V=2, k=1): token 0 gets output mass 0.75 but p[0] = 0.5 (error +0.25, atol 1e-09)...
    """
    finding = check_lossless(verifier, p, law, atol=atol)
    if finding is not None:
        raise finding


@fill_doc
def assert_kernel_valid(verifier: Any, p: Any, law: DraftLaw, *, atol: float = EXACT_ATOL) -> Any:
    r"""Assert that ``verifier.kernel(p, law)`` is a well-formed transport plan; return the kernel.

    The kernel must list every ordered draft tuple of positive probability once (``tuples``
    ``(M, k)``) with its probability :math:`Q(\bar x)` (``weights`` ``(M,)``, as ``law.enumerate()``
    gives it, within ``atol``), and one output law per tuple (``pi`` ``(M, V)``) that is a
    distribution: entries :math:`\ge -\text{atol}`, sum within ``atol`` of 1. This holds for lossy
    verifiers too; losslessness is :func:`assert_lossless`.

    Parameters
    ----------
    {step_args}
    atol : float
        Absolute tolerance on weights, entries and row sums.

    Returns
    -------
    Kernel
        The verifier's kernel (``tuples``, ``weights``, ``pi``), checked.

    Raises
    ------
    VerifierAssertionError
        Naming the first malformed part (missing or repeated tuples, wrong weights, a row that is
        not a distribution).
    UnsupportedMethodError
        If the verifier is a chain verifier, or a sampler without a kernel.

    Examples
    --------
    >>> import otspec
    >>> from otspec.verifiers import nss
    >>> assert_kernel_valid(nss, [0.5, 0.5], otspec.iid([0.9, 0.1], 2)).pi.shape
    (4, 2)
    """
    v, p = step_verifier(verifier, p, law)
    K = v.kernel(p, law)
    finding = kernel_finding(v.name, K, law, atol=atol)
    if finding is not None:
        raise finding
    return K


def kernel_finding(name: str, kernel: Any, law: DraftLaw, *, atol: float = EXACT_ATOL) -> VerifierAssertionError | None:
    """The error :func:`assert_kernel_valid` raises for ``kernel``, or ``None``."""
    tuples, weights, pi = np.asarray(kernel.tuples), np.asarray(kernel.weights), np.asarray(kernel.pi)
    where = f"kernel of {name!r} on {law!r}"
    M = tuples.shape[0] if tuples.ndim == 2 else -1
    if tuples.shape != (M, law.k) or weights.shape != (M,) or pi.shape != (M, law.V):
        return VerifierAssertionError(
            f"{where} has tuples {tuples.shape}, weights {weights.shape}, pi {pi.shape}; expected (M, {law.k}), (M,), (M, {law.V})",
            {"property": "kernel"},
        )
    ref_t, ref_w = law.enumerate()
    ref = {tuple(int(x) for x in t): float(w) for t, w in zip(ref_t, ref_w, strict=False)}
    got = {tuple(int(x) for x in t): float(w) for t, w in zip(tuples, weights, strict=False)}
    if len(got) != M or set(got) != set(ref) or any(abs(got[t] - ref[t]) > atol for t in ref):
        bad = next((t for t in sorted(set(ref) | set(got)) if abs(got.get(t, 0.0) - ref.get(t, 0.0)) > atol), None)
        return VerifierAssertionError(
            f"{where} does not list the law's draft tuples with their probabilities: x = {bad} has weight "
            f"{got.get(bad, 0.0):.6g} in the kernel and {ref.get(bad, 0.0):.6g} in the law (or a tuple is repeated)",
            {"property": "kernel", "tuples": [list(bad)] if bad else []},
        )
    sums, bad_rows = _bad_rows(pi, atol)
    if bad_rows.size:
        b = int(bad_rows[0])
        return VerifierAssertionError(
            f"pi(.|x) of {name!r} for drafts x = {tuple_text(tuples[b])} on {law!r} is not a distribution: "
            f"sums to {fmt_number(sums[b])}, smallest entry {pi[b].min():.3g} ({bad_rows.size} of {M} rows)",
            {"property": "kernel", "tuples": [tuples[b].tolist()], "row_sum": float(sums[b])},
        )
    return None


def check_lossless(verifier: Any, p: Any, law: DraftLaw, *, atol: float = EXACT_ATOL, kernel: Any = None) -> VerifierAssertionError | None:
    """:func:`assert_lossless` returning the error instead of raising it (``None`` when it holds);
    ``kernel`` is the verifier's kernel for ``(p, law)`` when the caller already has it."""
    v, p = step_verifier(verifier, p, law)
    if isinstance(v, SamplerVerifier):
        raise UnsupportedMethodError(
            f"verifier {v.name!r} is a sampler only, so exact losslessness cannot be checked; use assert_sampler_lossless"
        )
    K = v.kernel(p, law) if kernel is None else kernel
    pi, w, tuples = np.asarray(K.pi), np.asarray(K.weights), np.asarray(K.tuples)
    where = f"verifier {v.name!r} is not lossless on {law!r}"
    out = w @ pi
    err = out - p
    y = int(np.argmax(np.abs(err))) if err.size else 0
    sums, row_bad = _bad_rows(pi, atol)
    if not np.all(np.isfinite(err)) or abs(err[y]) > atol:
        contrib = w * (pi[:, y] - p[y])
        order = np.argsort(-np.sign(err[y]) * contrib, kind="stable")[:TOP_CONTRIBUTORS]
        lines = [
            f"{where}: token {y} gets output mass {fmt_number(out[y])} but p[{y}] = {fmt_number(p[y])} (error {err[y]:+.3g}, atol {atol:g})",
            f"draft tuples contributing most, Q(x) * (pi({y}|x) - p[{y}]) (these sum to the error):",
        ]
        lines += [
            f"  x = {tuple_text(tuples[m])}: Q(x) = {fmt_number(w[m])}, pi({y}|x) = {fmt_number(pi[m, y])}, contribution {contrib[m]:+.3g}"
            for m in order
        ]
        if row_bad.size:
            b = int(row_bad[0])
            lines.append(
                f"and {row_bad.size} kernel row(s) are not distributions, e.g. x = {tuple_text(tuples[b])} sums to {fmt_number(sums[b])}"
            )
        lines.append(f"output law {np.array2string(out, precision=6)} vs p {np.array2string(p, precision=6)}")
        return VerifierAssertionError(
            "\n".join(lines),
            {
                "property": "lossless",
                "token": y,
                "expected": float(p[y]),
                "actual": float(out[y]),
                "error": float(err[y]),
                "tuples": [tuples[m].tolist() for m in order],
                "contributions": [float(contrib[m]) for m in order],
            },
        )
    if row_bad.size:
        b = int(row_bad[0])
        return VerifierAssertionError(
            f"{where}: pi(.|x) for drafts x = {tuple_text(tuples[b])} is not a distribution "
            f"(sums to {fmt_number(sums[b])}, smallest entry {fmt_number(pi[b].min())}); {row_bad.size} such row(s)",
            {"property": "lossless", "tuples": [tuples[b].tolist()], "row_sum": float(sums[b])},
        )
    return None


def _bad_rows(pi: np.ndarray, atol: float) -> tuple[np.ndarray, np.ndarray]:
    """Row sums of ``pi`` ``(M, V)`` and the rows that are not distributions within ``atol``."""
    sums = pi.sum(axis=1)
    return sums, np.flatnonzero(~np.isfinite(sums) | (np.abs(sums - 1.0) > atol) | np.any(pi < -atol, axis=1))


@fill_doc
def assert_acceptance_matches_kernel(
    verifier: Any, p: Any, law: DraftLaw, *, method: str = "auto", atol: float = EXACT_ATOL, rng: np.random.Generator | None = None
) -> Any:
    r"""Assert that ``verifier.acceptance(p, law, method=method)`` equals the kernel's exact acceptance.

    The kernel's value is :math:`\sum_{\bar x} Q(\bar x) \sum_{y \in \bar x} \pi(y \mid \bar x)`.
    An exact answer (closed form or kernel) must agree within ``atol``; a Monte Carlo answer must
    hold it in its 99% interval. ``method="closed_form"`` checks a closed form (and raises
    ``UnsupportedMethodError`` where there is none).

    Parameters
    ----------
    {step_args}
    method : str
        Passed to ``verifier.acceptance`` (``"auto"``, ``"closed_form"``, ``"kernel"``,
        ``"monte_carlo"``).
    atol : float
        Slack on the comparison.
    rng : numpy.random.Generator, optional
        For a Monte Carlo acceptance (default ``numpy.random.default_rng(0)``).

    Returns
    -------
    AcceptanceEstimate
        The verifier's acceptance, as checked.

    Raises
    ------
    VerifierAssertionError
        If the acceptance disagrees with the kernel's.
    UnsupportedMethodError
        If the verifier has no kernel, or no such ``method``.

    Examples
    --------
    >>> import otspec
    >>> from otspec.verifiers import kseq
    >>> assert_acceptance_matches_kernel(kseq, [0.5, 0.3, 0.2], otspec.iid([0.2, 0.3, 0.5], 2), method="closed_form").how
    'closed_form'
    """
    v, p = step_verifier(verifier, p, law)
    est = v.acceptance(p, law, method=method, rng=np.random.default_rng(0) if rng is None else rng)
    finding = acceptance_finding(v.name, est, v.kernel(p, law), law, atol=atol)
    if finding is not None:
        raise finding
    return est


def acceptance_finding(name: str, est: Any, kernel: Any, law: Any, *, atol: float = EXACT_ATOL) -> VerifierAssertionError | None:
    """The error :func:`assert_acceptance_matches_kernel` raises, or ``None``."""
    exact = kernel.acceptance()
    if est.how == "monte_carlo":
        ok = est.ci_low - atol <= exact <= est.ci_high + atol
    else:
        ok = abs(est.value - exact) <= atol
    if ok:
        return None
    return VerifierAssertionError(
        f"acceptance() of {name!r} on {law!r} is {est.value:.12g} ({est.how}) but its kernel gives {exact:.12g} (atol {atol:g})",
        {"property": "acceptance", "acceptance": float(est.value), "kernel": float(exact)},
    )
