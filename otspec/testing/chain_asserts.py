r"""Exact checks of chain (block) verifiers: the decoded stream keeps the target's law, and
:math:`E[\tau]` stays below :func:`otspec.block_optimum`."""

from __future__ import annotations

from typing import Any

import numpy as np

from otspec._tolerances import EXACT_ATOL
from otspec.errors import UnsupportedMethodError
from otspec.testing._docs import fill_doc
from otspec.testing._findings import TOP_CONTRIBUTORS, VerifierAssertionError, fmt_number, tuple_text
from otspec.testing.adapters import as_verifier
from otspec.testing.chain_forms import ChainVerifier
from otspec.testing.optimum import AcceptanceRatio

__all__ = ["assert_chain_lossless", "assert_chain_within_optimum"]


def check_chain_lossless(
    verifier: Any, p_model: Any, q_model: Any, gamma: int, *, atol: float = EXACT_ATOL
) -> VerifierAssertionError | None:
    """:func:`assert_chain_lossless` returning the error instead of raising it."""
    from otspec import models

    v = as_verifier(verifier)
    if not isinstance(v, ChainVerifier):
        raise UnsupportedMethodError(f"{v!r} is a single-step verifier; use assert_lossless(verifier, p, law)")
    p_model = models.as_model(p_model, name="p_model")
    K = v.kernel(p_model, q_model, gamma)
    where = f"chain verifier {v.name!r} is not lossless for gamma = {gamma}"
    sums = K.law.sum(axis=(1, 2))
    bad = np.flatnonzero(~np.isfinite(sums) | (np.abs(sums - 1.0) > atol) | np.any(K.law < -atol, axis=(1, 2)))
    if bad.size:
        b = int(bad[0])
        return VerifierAssertionError(
            f"{where}: the law of (tau, Y) given the drafted path {tuple_text(K.paths[b])} is not a distribution (sums to {fmt_number(sums[b])})",
            {"property": "lossless", "tuples": [K.paths[b].tolist()], "row_sum": float(sums[b])},
        )
    # Losslessness criterion: with Q(h) = P(O starts with h, |O| >= |h|) and C(h) = P(O starts
    # with h, |O| > |h|), the stream is exact iff Q(h + (y,)) = C(h) * M_b(y | h) for all h, y.
    blaw = K.block_law()
    Q: dict = {}
    C: dict = {}
    for o, w in blaw.items():
        for i in range(1, len(o) + 1):
            Q[o[:i]] = Q.get(o[:i], 0.0) + w
        for i in range(len(o)):
            C[o[:i]] = C.get(o[:i], 0.0) + w
    worst = (0.0, (), 0, 0.0, 0.0)
    for head in sorted(set(C) | {key[:-1] for key in Q}, key=lambda h: (len(h), h)):
        c = C.get(head, 0.0)
        target = p_model(head)
        for y in range(p_model.V):
            got, want = Q.get(head + (y,), 0.0), c * float(target[y])
            if abs(got - want) > worst[0] + 1e-300:
                worst = (abs(got - want), head, y, want, got)
    err, head, y, want, got = worst
    if err <= atol:
        return None
    key = head + (y,)
    h, g = len(head), K.paths.shape[1]
    contrib = []
    for path, w, lw in zip(K.paths, K.weights, K.law, strict=False):  # mass each path puts on blocks starting with key
        if tuple(int(x) for x in path[:h]) != head:
            continue
        c = w * lw[h, y] + (w * lw[h + 1 :].sum() if h < g and int(path[h]) == y else 0.0)
        if c > 0:
            contrib.append((float(c), tuple(int(x) for x in path)))
    contrib.sort(key=lambda z: -z[0])
    lines = [
        f"{where}: the emitted blocks start with {tuple_text(key)} with probability {fmt_number(got)} but the target gives "
        f"C{tuple_text(head)} * M_b({y}|{tuple_text(head)}) = {fmt_number(want)} (error {got - want:+.3g}, atol {atol:g})",
        "drafted paths putting the most mass on it: "
        + ", ".join(f"{tuple_text(pth)} ({fmt_number(c)})" for c, pth in contrib[:TOP_CONTRIBUTORS]),
    ]
    return VerifierAssertionError(
        "\n".join(lines),
        {
            "property": "lossless",
            "prefix": list(head),
            "token": y,
            "expected": want,
            "actual": got,
            "tuples": [list(pth) for _, pth in contrib[:TOP_CONTRIBUTORS]],
        },
    )


@fill_doc
def assert_chain_lossless(verifier: Any, p_model: Any, q_model: Any, gamma: int, *, atol: float = EXACT_ATOL) -> None:
    r"""Assert, exactly, that a chain verifier keeps the decoded stream's law equal to the target's.

    The emitted block :math:`O = (X^\tau, Y)` must satisfy, for every prefix :math:`h` and token
    :math:`y`, :math:`P(O \text{ starts with } h y) = P(O \text{ starts with } h,\ |O| > |h|)\,
    M_b(y \mid h)` -- each token the stream emits after :math:`h` follows the target's conditional.

    Parameters
    ----------
    {chain_args}
    atol : float
        Absolute tolerance per emitted block prefix.

    Raises
    ------
    VerifierAssertionError
        Naming the block prefix with the largest error, the expected and emitted masses and the
        drafted paths contributing most; or the first path whose law is not a distribution.
    UnsupportedMethodError
        If ``verifier`` is a single-step verifier.

    Examples
    --------
    >>> from otspec import models
    >>> from otspec.verifiers import block
    >>> p, q = models.context_free([1/3, 2/3]), models.context_free([2/3, 1/3])
    >>> assert_chain_lossless(block, p, q, 2)
    """
    finding = check_chain_lossless(verifier, p_model, q_model, gamma, atol=atol)
    if finding is not None:
        raise finding


@fill_doc
def assert_chain_within_optimum(verifier: Any, p_model: Any, q_model: Any, gamma: int, *, atol: float = EXACT_ATOL) -> AcceptanceRatio:
    r"""Assert :math:`E[\tau] \le` :func:`otspec.block_optimum` and return the ratio.

    Parameters
    ----------
    {chain_args}
    atol : float
        Slack on the comparison.

    Returns
    -------
    AcceptanceRatio
        :math:`E[\tau]` against the block optimum (``how="kernel"``).

    Raises
    ------
    VerifierAssertionError
        If :math:`E[\tau]` exceeds the optimum of any lossless chain verifier.

    Examples
    --------
    >>> from otspec import models
    >>> from otspec.verifiers import block
    >>> p, q = models.context_free([1/3, 2/3]), models.context_free([2/3, 1/3])
    >>> round(assert_chain_within_optimum(block, p, q, 2).ratio, 9)
    1.0
    """
    import otspec

    v = as_verifier(verifier)
    e = v.expected_accepted(p_model, q_model, gamma)
    opt = float(otspec.block_optimum(p_model, q_model, gamma).value)
    r = AcceptanceRatio(e, opt, e / opt if opt > 0 else 1.0, opt - e, "kernel", e, e)
    if e > opt + atol:
        raise VerifierAssertionError(
            f"chain verifier {v.name!r} accepts E[tau] = {fmt_number(e)} drafts for gamma = {gamma}, above the optimum {fmt_number(opt)} of any "
            "lossless chain verifier: it is lossy",
            {"property": "optimum", "acceptance": e, "optimum": opt},
        )
    return r
