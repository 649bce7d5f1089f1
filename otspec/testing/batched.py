r"""Batched verifier forms: a whole batch of draft tuples in one call, as engines verify.

* :func:`batched_sampler` -- ``sample(p, q, drafts, rng) -> tokens``: ``drafts`` is ``(N, k)``,
  the result ``(N,)`` (a numpy array, or anything with ``.detach().cpu().numpy()`` such as a torch
  tensor). Sampling-only: tested by :func:`otspec.testing.power.assert_output_law` with stated power.
* :func:`batched_conditional` -- ``pi(p, q, drafts) -> laws``: the ``(N, V)`` exact output laws, so
  losslessness is checked exactly and sampling comes for free.

A torch verifier of the :mod:`otspec_gpu` protocol (``sample(..., generator=)`` and ``conditional``
on tensors) needs no wrapper: :func:`otspec.testing.as_verifier` adapts it through the
``otspec.adapters`` entry point.

Examples
--------
>>> import numpy as np, otspec
>>> from otspec.testing.power import assert_output_law
>>> @batched_conditional(k=1)
... def speculative(p, q, drafts):          # accept x w.p. min(1, p/q), else draw from (p - q)+
...     x = drafts[:, 0]
...     acc = np.minimum(1.0, p[x] / q[x])
...     res = np.maximum(p - q, 0.0)
...     res = res / res.sum() if res.sum() > 0 else p
...     out = (1 - acc)[:, None] * res[None, :]
...     out[np.arange(len(x)), x] += acc
...     return out
>>> assert_output_law(speculative, [0.5, 0.3, 0.2], otspec.iid([0.2, 0.3, 0.5], 1)).tv < 1e-12
True
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from otspec.testing.forms import ConditionalVerifier, SamplerVerifier, VerifierOutputError

__all__ = ["BatchedConditionalVerifier", "BatchedSamplerVerifier", "batched_conditional", "batched_sampler"]


def _as_array(out: Any) -> np.ndarray:
    """A numpy copy of a verifier's output: numpy arrays and sequences as they are; tensors of any
    framework through ``.detach().cpu().numpy()`` (no framework is imported here)."""
    for step in ("detach", "cpu", "numpy"):
        if hasattr(out, step) and not isinstance(out, np.ndarray):
            out = getattr(out, step)()
    return np.asarray(out)


class BatchedSamplerVerifier(SamplerVerifier):
    """A verifier given by a batched sampler ``sample(p, q_or_law, drafts (N, k), rng) -> (N,)``.

    Parameters
    ----------
    sample : callable
        The batched sampler; it receives the read-only ``(N, k)`` int64 draft array and the
        ``numpy.random.Generator`` to draw from, and returns ``N`` token ids.
    name : str, optional
        Name in reports (default: the function's name).
    lossless : bool
        Whether the rule is claimed lossless.
    kinds : str or sequence of str, optional
        Draft-law kinds it is defined for; default every kind.
    k : int or sequence of int, optional
        Draft counts it is defined for; default every k.
    second : {"q", "law"}, optional
        What the second argument is; default: ``"q"`` when that parameter is named ``q``.

    Raises
    ------
    InvalidVerifierError
        If ``sample`` is not callable or an option is invalid.
    """

    def _sample_rows(self, p, law, tuples, coin_rng, res_rng) -> np.ndarray:
        d = np.ascontiguousarray(tuples, dtype=np.int64)
        d.setflags(write=False)
        y = _as_array(self.fn(p, self._arg(law), d, coin_rng))
        if y.shape != (d.shape[0],) or not np.issubdtype(y.dtype, np.integer) or (y.size and (y.min() < 0 or y.max() >= law.V)):
            raise VerifierOutputError(
                f"{self.name} must return {d.shape[0]} token ids in [0, {law.V}) for a batch of {d.shape[0]} draft tuples "
                f"(got shape {y.shape}, dtype {y.dtype}); return one integer token per row"
            )
        return y.astype(np.int64)


class BatchedConditionalVerifier(ConditionalVerifier):
    """A verifier given by its batched conditional law ``pi(p, q_or_law, drafts (N, k)) -> (N, V)``.

    Parameters
    ----------
    pi : callable
        The batched conditional law (row ``n`` is :math:`\\pi(\\cdot \\mid \\text{drafts}[n])`).
    name : str, optional
        Name in reports (default: the function's name).
    lossless : bool
        Whether the rule is claimed lossless.
    kinds : str or sequence of str, optional
        Draft-law kinds it is defined for; default every kind.
    k : int or sequence of int, optional
        Draft counts it is defined for; default every k.
    second : {"q", "law"}, optional
        What the second argument is; default: ``"q"`` when that parameter is named ``q``.

    Raises
    ------
    InvalidVerifierError
        If ``pi`` is not callable or an option is invalid.
    """

    def _rows(self, p: np.ndarray, law, tuples: np.ndarray) -> np.ndarray:
        d = np.ascontiguousarray(tuples, dtype=np.int64)
        d.setflags(write=False)
        rows = _as_array(self.fn(p, self._arg(law), d)).astype(np.float64)
        if rows.shape != (d.shape[0], law.V):
            raise VerifierOutputError(
                f"{self.name} must return output laws of shape ({d.shape[0]}, {law.V}) for {d.shape[0]} draft tuples "
                f"(got shape {rows.shape}); return pi(. | drafts[n]) over the whole vocabulary, one row per tuple"
            )
        return rows


def batched_sampler(sample: Callable | None = None, **kwargs: Any) -> Any:
    """Decorator form of :class:`BatchedSamplerVerifier` (``@batched_sampler`` or ``@batched_sampler(k=1)``).

    Parameters
    ----------
    sample : callable, optional
        The batched sampler; omitted when the decorator is called with options.
    **kwargs
        Options of :class:`BatchedSamplerVerifier`.

    Returns
    -------
    BatchedSamplerVerifier or callable
        The adapter, or a decorator that builds it.

    Examples
    --------
    >>> @batched_sampler(k=1)
    ... def keep(p, q, drafts, rng):
    ...     return drafts[:, 0]
    >>> keep
    <BatchedSamplerVerifier 'keep' (lossless claim)>
    """
    if sample is None:
        return lambda f: BatchedSamplerVerifier(f, **kwargs)
    return BatchedSamplerVerifier(sample, **kwargs)


def batched_conditional(pi: Callable | None = None, **kwargs: Any) -> Any:
    """Decorator form of :class:`BatchedConditionalVerifier`.

    Parameters
    ----------
    pi : callable, optional
        The batched conditional law; omitted when the decorator is called with options.
    **kwargs
        Options of :class:`BatchedConditionalVerifier`.

    Returns
    -------
    BatchedConditionalVerifier or callable
        The adapter, or a decorator that builds it.

    Examples
    --------
    >>> @batched_conditional
    ... def ignore(p, q, drafts):
    ...     return [p] * len(drafts)
    >>> ignore.name
    'ignore'
    """
    if pi is None:
        return lambda f: BatchedConditionalVerifier(f, **kwargs)
    return BatchedConditionalVerifier(pi, **kwargs)
