r"""The contract of every batched torch single-step verifier: its result type, the
:class:`TorchVerifier` record the registry holds, and the input checks every ``sample`` /
``conditional`` runs (twin of :mod:`otspec.verifiers.base`).

Shapes: ``p``, ``q`` ``[B, V]`` (or ``[1, V]``, shared by every row of drafts) float32/float64
probability rows; ``drafts`` ``[B, k]`` long. Shapes are always checked; values (simplex rows,
drafts in range with ``q[drafts] > 0``) only with ``validate=True``, because those checks
synchronise on CUDA.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch

from otspec.errors import (
    InvalidDraftCountError,
    InvalidDraftsError,
    ShapeMismatchError,
)
from otspec_gpu._validation import check_probs
from otspec_gpu.verifiers.schedule import gather

__all__ = ["StepOutput", "TorchVerifier", "check_step", "deprecated_module_sample", "step_output"]


class StepOutput(NamedTuple):
    r"""Result of one batched verification step: one type for chain, single-step and tree rules.

    Attributes
    ----------
    accepted : torch.Tensor
        ``[B]`` long :math:`\tau`, the number of drafted tokens the step keeps: ``0..gamma`` for a
        chain or a tree, 0 or 1 for a single-step rule (1: the output is one of the drafts).
    token : torch.Tensor
        ``[B]`` long, the token the step emits itself. Chain and tree: the correction
        (:math:`\tau < \gamma`) or the bonus token (:math:`\tau = \gamma`). Single-step: the output
        token :math:`Y` (equal to ``drafts[b, index[b]]`` when ``accepted[b] == 1``; a decoder then
        draws the bonus token after it).
    index : torch.Tensor
        ``[B]`` long, which draft. Single-step: the first draft slot equal to ``token`` (``-1`` if
        none). Tree: the sequence whose first ``accepted`` tokens are kept (the lowest such index).
        Chain: 0.
    """

    accepted: torch.Tensor
    token: torch.Tensor
    index: torch.Tensor


@dataclass(frozen=True)
class TorchVerifier:
    """A batched torch verifier, twin of the numpy verifier of the same ``name``.

    ``sample(p, q, drafts, *, generator, **extra) -> StepOutput`` and
    ``conditional(p, q, drafts, **extra) -> Tensor[B, V]`` (exact output law per row, same dtype as
    ``p``). ``draft_law`` is the otspec law the drafts must come from (``"iid"``,
    ``"without_replacement"`` or ``"greedy"``, see :func:`otspec_gpu.drafting.sample_drafts`);
    ``k_min`` / ``k_max`` bound the number of drafts (``None``: no upper bound).

    Attributes
    ----------
    name : str
        Registry name (that of the numpy twin).
    draft_law : str
        Draft law the drafts must come from.
    lossless : bool
        Whether the rule reproduces the target exactly.
    conditional : callable
        ``conditional(p, q, drafts, **extra) -> Tensor[B, V]``.
    k_min, k_max : int or None
        Allowed numbers of drafts (``k_max=None``: unbounded).
    reference : str
        The paper or algorithm the rule implements.
    uniforms : callable or None
        ``uniforms(p, q, drafts, generator) -> tuple of Tensor``: every uniform one ``sample`` call
        consumes, drawn from ``generator`` in ``sample``'s order (``None``: the rule has no pure step).
    step : callable or None
        ``step(p, q, drafts, *uniforms, **extra) -> StepOutput``: the pure step (no generator, no
        validation, no host synchronisation on CUDA); ``sample`` is the checks, ``uniforms``, then
        ``step``.
    laws : tuple of str
        The draft laws the rule is defined on beyond ``draft_law`` (empty: ``draft_law`` alone; with
        one draft every law is one draw from q, so any law the core twin accepts runs at ``k = 1``).
    check_drafts : callable or None
        ``check_drafts(q, drafts)``: the rule's own checks of the drafts' values (distinct drafts,
        the greedy law's top tokens), run by the default ``sample`` with ``validate=True``.
    sample : callable
        ``sample(p, q, drafts, *, generator, validate=True, **extra) -> StepOutput``. Left out, it
        is the default every rule with a pure step shares: :func:`check_step` (with ``k_min``,
        ``k_max`` and ``name``), ``check_drafts``, ``uniforms``, then ``step``. A rule passes its
        own only when it takes extra arguments (a law, a predicate, a method).
    """

    name: str
    draft_law: str
    lossless: bool
    conditional: Callable[..., torch.Tensor] = field(repr=False)
    k_min: int = 1
    k_max: int | None = None
    reference: str = ""
    uniforms: Callable[..., tuple] | None = field(default=None, repr=False)
    step: Callable[..., StepOutput] | None = field(default=None, repr=False)
    laws: tuple[str, ...] = ()
    check_drafts: Callable[[torch.Tensor, torch.Tensor], None] | None = field(default=None, repr=False)
    sample: Callable[..., StepOutput] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.sample is None:
            if self.uniforms is None or self.step is None:
                raise TypeError(f"TorchVerifier {self.name!r} needs a sample, or uniforms and step for the default sample")
            object.__setattr__(self, "sample", self._default_sample)

    def _default_sample(
        self, p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, *, generator: torch.Generator, validate: bool = True
    ) -> StepOutput:
        """The checks, the uniforms from ``generator``, then the pure step."""
        p, q, drafts = check_step(p, q, drafts, k_min=self.k_min, k_max=self.k_max, validate=validate, name=self.name)
        if validate and self.check_drafts is not None:
            self.check_drafts(q, drafts)
        return self.step(p, q, drafts, *self.uniforms(p, q, drafts, generator))


def check_step(p: Any, q: Any, drafts: Any, *, k_min: int = 1, k_max: int | None = None, validate: bool = True, name: str = "") -> tuple:
    """Validate one single-step problem; returns ``(p, q, drafts)``.

    Shapes are always checked (no device sync). With ``validate`` (the default) the values are
    checked too: rows on the simplex, drafts in ``[0, V)`` and of positive draft probability
    ``q[drafts] > 0`` (a draft the drafter could not have produced raises
    :class:`~otspec.errors.InvalidDraftsError`, as the numpy ``sample`` does). Pass
    ``validate=False`` in a hot loop on CUDA to skip the synchronising checks; a draft with
    ``q = 0`` then gets accept probability 1 (the numpy convention).

    Parameters
    ----------
    p, q : torch.Tensor
        ``[B, V]`` (or ``[1, V]``) target and draft rows, same dtype and device.
    drafts : torch.Tensor
        ``[B, k]`` long drafts.
    k_min, k_max : int
        Bounds on ``k`` for this verifier (``k_max=None``: no upper bound).
    validate : bool
        Check the values too (synchronises on CUDA).
    name : str
        The verifier's name, for the messages.

    Returns
    -------
    tuple of torch.Tensor
        ``(p, q, drafts)``, unchanged.

    Raises
    ------
    InvalidDistributionError, ShapeMismatchError
        If ``p`` or ``q`` is malformed, or the three tensors disagree in shape, dtype or device.
    InvalidDraftsError
        If ``drafts`` is not a long tensor, or (``validate``) holds an id outside ``[0, V)`` or a draft
        with ``q = 0``.
    InvalidDraftCountError
        If ``k`` is outside ``[k_min, k_max]``.
    """
    p = check_probs(p, "p", validate=validate)
    q = check_probs(q, "q", validate=validate)
    if q.shape != p.shape or q.dtype != p.dtype or q.device != p.device:
        raise ShapeMismatchError(
            f"p and q must share shape, dtype and device (got {tuple(p.shape)} {p.dtype} {p.device} and {tuple(q.shape)} {q.dtype} {q.device}); "
            "process both with the same transform"
        )
    if not isinstance(drafts, torch.Tensor) or drafts.dtype != torch.long:
        raise InvalidDraftsError(
            f"drafts must be a torch.long tensor of shape [B, k] (got {getattr(drafts, 'dtype', type(drafts).__name__)}); build it with torch.as_tensor(..., dtype=torch.long)"
        )
    if drafts.ndim != 2 or (drafts.shape[0] != p.shape[0] and p.shape[0] != 1) or drafts.device != p.device:
        raise ShapeMismatchError(
            f"drafts must have shape [B, k] = [{p.shape[0]}, k] on {p.device} (got {tuple(drafts.shape)} on {drafts.device}); "
            "one row of drafts per row of p (or p, q of shape [1, V], shared by every row of drafts)"
        )
    k = drafts.shape[1]
    if k < k_min or (k_max is not None and k > k_max):
        rng = f"exactly {k_min}" if k_max == k_min else f"between {k_min} and {k_max if k_max is not None else 'any'}"
        raise InvalidDraftCountError(f"verifier {name!r} takes {rng} drafts per row (got k = {k}); draft that many tokens")
    if validate and drafts.numel():
        V = p.shape[1]
        if bool(((drafts < 0) | (drafts >= V)).any()):
            raise InvalidDraftsError(
                f"drafts must be token ids in [0, {V}) (got {int(drafts.min())}..{int(drafts.max())}); pass ids of the vocabulary"
            )
        qd = gather(q, drafts)
        if bool((qd <= 0).any()):
            b, j = (qd <= 0).nonzero()[0].tolist()
            raise InvalidDraftsError(
                f"draft {int(drafts[b, j])} in row {b} has draft probability q = 0, so the drafter never proposes it; pass drafts sampled from q (otspec_gpu.drafting.sample_drafts)"
            )
    return p, q, drafts


def step_output(token: torch.Tensor, drafts: torch.Tensor) -> StepOutput:
    """Wrap output tokens ``[B]`` with their draft-membership flags and first draft slot.

    Parameters
    ----------
    token : torch.Tensor
        ``[B]`` long output tokens.
    drafts : torch.Tensor
        ``[B, k]`` long drafts.

    Returns
    -------
    StepOutput
        ``accepted`` (1 where the output is one of the drafts, else 0), ``token`` and ``index`` (first
        matching slot, ``-1`` if none).
    """
    eq = drafts == token[:, None]
    hit = eq.any(dim=1)
    index = torch.where(hit, torch.argmax(eq.to(torch.uint8), dim=1), torch.full_like(token, -1))
    return StepOutput(accepted=hit.long(), token=token, index=index)


def deprecated_module_sample(verifier: TorchVerifier) -> Callable[[str], Any]:
    """A module ``__getattr__`` that keeps the module-level ``sample`` of 0.1.0 for one minor release.

    The rules' modules no longer define ``sample`` (the :class:`TorchVerifier` default is the same
    function); ``module.sample`` still returns the verifier's ``sample``, with a
    :class:`DeprecationWarning` naming the replacement.

    Parameters
    ----------
    verifier : TorchVerifier
        The module's verifier.

    Returns
    -------
    callable
        ``__getattr__(name)`` for the module.
    """

    def __getattr__(name: str) -> Any:
        if name == "sample":
            import warnings

            warnings.warn(
                f"otspec_gpu.verifiers.step.{verifier.name}.sample is deprecated; call the verifier's own "
                f"otspec_gpu.verifiers.SINGLE_STEP[{verifier.name!r}].sample (the same function)",
                DeprecationWarning,
                stacklevel=2,
            )
            return verifier.sample
        raise AttributeError(f"module 'otspec_gpu.verifiers.step.{verifier.name}' has no attribute {name!r}")

    return __getattr__
