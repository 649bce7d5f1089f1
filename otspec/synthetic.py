r"""Seeded synthetic (target, draft) pairs for notebooks, the CLI and benchmarks.

Families
--------
``"zipf"`` (default; LM-shaped)
    Target logits :math:`\ell_x = -s \log r_x + \sigma_t \varepsilon_x` where :math:`r` is a random
    ranking of the V tokens (rank 1 is most likely), :math:`s` = ``zipf_exponent`` and
    :math:`\varepsilon \sim N(0,1)`. Draft logits :math:`\ell + \sigma_d \eta` with
    :math:`\eta \sim N(0, 1)` independent (``draft_noise`` = :math:`\sigma_d`): a drafter that agrees
    with the target up to noise. Both are turned into distributions by a float64 softmax at
    ``temperature``.
``"dirichlet"``
    :math:`p, q \sim \mathrm{Dirichlet}(a \mathbf 1)` independently (``concentration`` = a);
    ``temperature`` T maps :math:`p \mapsto \mathrm{norm}(p^{1/T})`. Small a gives sparse,
    near-one-hot pairs; large a gives near-uniform ones.

Every draw uses ``numpy.random.default_rng(seed)`` once, so the pair is a function of the arguments.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from otspec._validation import as_int_in_range, check_memory
from otspec.errors import OtspecInputError

__all__ = ["FAMILIES", "SyntheticDefaults", "DEFAULTS", "synthetic_pair", "softmax"]

FAMILIES = ("zipf", "dirichlet")

#: Bytes budgeted per token while building a synthetic pair.
_PAIR_BYTES_PER_TOKEN = 80


@dataclass(frozen=True)
class SyntheticDefaults:
    """The documented defaults (the CLI reads them from here).

    Attributes
    ----------
    family : str
        ``"zipf"`` or ``"dirichlet"`` (see the module's Families).
    seed : int
        Seed of ``numpy.random.default_rng``.
    temperature : float
        Softmax temperature :math:`T` applied to both distributions.
    zipf_exponent : float
        :math:`s`, the slope of the Zipf log-ranks.
    target_noise : float
        :math:`\\sigma_t`, standard deviation of the Gaussian noise on the target logits.
    draft_noise : float
        :math:`\\sigma_d`, standard deviation of the draft's extra logit noise.
    concentration : float
        Dirichlet parameter :math:`a` of the ``"dirichlet"`` family.
    """

    family: str = "zipf"
    seed: int = 0
    temperature: float = 1.0
    zipf_exponent: float = 1.1
    target_noise: float = 1.0
    draft_noise: float = 0.5
    concentration: float = 0.1


DEFAULTS = SyntheticDefaults()


def softmax(logits: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """Float64 softmax of ``logits / temperature`` (max-shifted; exact zeros only by underflow).

    Parameters
    ----------
    logits : array_like, shape (V,)
        Finite logits (``-inf`` entries give probability 0).
    temperature : float
        :math:`T > 0`.

    Returns
    -------
    ndarray, shape (V,)
        :math:`e^{\\ell_x / T} / \\sum_y e^{\\ell_y / T}`, float64.

    Examples
    --------
    >>> softmax(np.log([1.0, 3.0])).tolist()
    [0.25, 0.75]
    """
    z = np.asarray(logits, dtype=np.float64) / temperature
    z = z - z.max()
    e = np.exp(z)
    return e / e.sum()


def _positive(name: str, value: float) -> float:
    v = float(value)
    if not np.isfinite(v) or v <= 0:
        raise OtspecInputError(f"{name} must be a positive finite number (got {value!r}); pass e.g. 1.0")
    return v


# long-function: a long numpydoc docstring with the generator's model; the code is short
def synthetic_pair(
    V: int,
    *,
    family: str = DEFAULTS.family,
    seed: int = DEFAULTS.seed,
    temperature: float = DEFAULTS.temperature,
    zipf_exponent: float = DEFAULTS.zipf_exponent,
    target_noise: float = DEFAULTS.target_noise,
    draft_noise: float = DEFAULTS.draft_noise,
    concentration: float = DEFAULTS.concentration,
    memory_cap: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Return a seeded ``(p, q)`` pair of float64 distributions over ``V`` tokens.

    ``memory_cap`` (bytes, default 4 GiB): a V whose pair would need more raises
    :class:`~otspec.errors.ProblemTooLargeError` before anything is allocated.

    Parameters
    ----------
    V : int
        Vocabulary size, ``>= 1``.
    family : {"zipf", "dirichlet"}
        Which construction (module docstring, Families).
    seed : int
        Non-negative seed; the pair is a deterministic function of all the arguments.
    temperature : float
        Softmax temperature :math:`T > 0`.
    zipf_exponent : float
        :math:`s > 0` (``"zipf"`` only).
    target_noise : float
        :math:`\\sigma_t` (``"zipf"`` only).
    draft_noise : float
        :math:`\\sigma_d`: how far the draft's logits stray from the target's (``"zipf"`` only).
    concentration : float
        Dirichlet :math:`a > 0` (``"dirichlet"`` only).
    memory_cap : float, optional
        Bytes (default 4 GiB).

    Returns
    -------
    p, q : ndarray, shape (V,)
        Target and draft distributions (float64, each summing to 1).

    Raises
    ------
    NotAnIntegerError, InvalidDraftCountError
        If ``V`` or ``seed`` is not an integer in range.
    OtspecInputError
        If ``family`` is unknown, or ``temperature``, ``zipf_exponent`` or ``concentration`` is
        not a positive finite number.
    ProblemTooLargeError
        If the pair would exceed ``memory_cap``.

    Examples
    --------
    >>> p, q = synthetic_pair(1000, seed=1)
    >>> p.shape, round(float(p.sum()), 12), round(float(q.sum()), 12)
    ((1000,), 1.0, 1.0)
    """
    V = as_int_in_range(V, "vocab", minimum=1)
    # the pair, the ranking, two logit vectors and the softmax temporaries: ~10 float64 per token
    check_memory(
        _PAIR_BYTES_PER_TOKEN * V, memory_cap, f"a synthetic pair over V = {V:,} tokens", "use a smaller vocab (or raise memory_cap)"
    )
    if family not in FAMILIES:
        raise OtspecInputError(f"family must be one of {', '.join(FAMILIES)} (got {family!r}); pick one of those")
    temperature = _positive("temperature", temperature)
    rng = np.random.default_rng(as_int_in_range(seed, "seed", minimum=0))
    if family == "zipf":
        rank = rng.permutation(V) + 1.0
        logits = -_positive("zipf_exponent", zipf_exponent) * np.log(rank) + target_noise * rng.standard_normal(V)
        draft = logits + draft_noise * rng.standard_normal(V)
        return softmax(logits, temperature), softmax(draft, temperature)
    a = _positive("concentration", concentration)
    p = rng.dirichlet(np.full(V, a))
    q = rng.dirichlet(np.full(V, a))
    if temperature != 1.0:
        with np.errstate(divide="ignore"):
            p = softmax(np.log(p), temperature)
            q = softmax(np.log(q), temperature)
    return p, q
