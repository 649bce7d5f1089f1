r"""Drafts from the target's own feature: Medusa heads and an EAGLE head as decoding drafters.

These draft sources (:class:`otspec_gpu.drafters.DraftSource`) run no draft model: they read the
target's last hidden layer and draft through the target's frozen output layer with a trained head
of :mod:`otspec_gpu.models.heads`. A source says so with ``needs_target_hidden = True``; the decoder
then keeps the target's feature in its caches (:class:`otspec_gpu.scoring.DecodeCaches` with
``hidden=True``) and, at the start of every round, hands the run's drafter

``see_target(hidden, target, transform)``
    ``hidden`` ``[R, H]``: per row, the target's feature :math:`h_t` at the position *before*
    ``last`` (the position whose law ``last`` was drawn from, after the round's rollback);
    ``target`` the target (its output layer, embedding and logit temperature :math:`T_0`);
    ``transform`` the run's sampling transform (temperature, top-k, top-p), applied to the head's
    logits exactly as to the target's.

With :math:`\mathcal T` the transform and ``last`` :math:`= x_{t+1}`, a round drafts

* **Medusa** (:class:`MedusaDraft`): :math:`X_i \sim q_i = \mathcal T(\mathrm{lm\_head}(u_i(h_t)) / T_0)`
  for :math:`i < \gamma` (head :math:`i`); :math:`q_i` does not depend on ``last`` nor on
  :math:`X_{<i}`, so all :math:`\gamma` laws come from one feature;
* **EAGLE** (:class:`EagleDraft`): :math:`\hat f_0 = \mathrm{head}(h_t, \mathrm{last})`,
  :math:`X_0 \sim \mathcal T(\mathrm{lm\_head}(\hat f_0) / T_0)`, then
  :math:`\hat f_i = \mathrm{head}(\hat f_{i-1}, X_{i-1})` and
  :math:`X_i \sim \mathcal T(\mathrm{lm\_head}(\hat f_i) / T_0)`: each law depends on the
  row's earlier drafts.

In every mode the first position is drawn as a draft model's is
(:meth:`otspec_gpu.drafting.ModelDrafter.first_tokens`: one draw per row for a chain, ``k`` drafts
from the verifier's draft law for single-token drafts, i.i.d. or without-replacement first tokens
for a tree), later positions one draw per row, all from the drafting generator; ``Q`` holds exactly
the laws the drafts were drawn from, so every verifier stays lossless whatever the head's weights.

**Cost.** No target layer runs while drafting: Medusa costs, per round, two :math:`H \times H`
products per drafted token and one output layer (:math:`HV`) per drafted token; EAGLE costs per
drafted token ``fc`` (:math:`2H^2`), its MLP (:math:`2HI`) and one output layer. For SmolLM2
(:math:`H = 576`, :math:`V = 49\,152`) the output layer dominates (28 M multiply-adds per token,
about a fifth of a target step's 135 M). Keeping the target's hidden state adds nothing to the
target's forward (the last layer is computed anyway).

Shipped names (:data:`otspec_gpu.drafters.DRAFTERS`): ``smollm2-medusa`` and ``smollm2-eagle``,
whose weights are built by ``otspec train-draft <name>`` and read by
:func:`otspec_gpu.models.heads.load_head`; any head object can be passed instead (``head=``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from otspec.errors import IncompatibleModelsError, InvalidOptionError, UnsupportedMethodError
from otspec_gpu.drafting import ModelDrafter
from otspec_gpu.models.heads import EagleHead, MedusaHeads, load_head
from otspec_gpu.sampling import categorical

__all__ = ["EagleDraft", "HeadDrafter", "MedusaDraft"]


def _resolve(source: Any, kind: type) -> None:
    """Load ``source.weights`` unless a head was given; check the head's class."""
    if source.head is None:
        head, info = load_head(source.weights)
        object.__setattr__(source, "head", head)
        object.__setattr__(source, "info", info)
    if not isinstance(source.head, kind):
        raise InvalidOptionError(
            f"{type(source).__name__} drafts with a {kind.__name__} (got {type(source.head).__name__} from {source.weights!r}); "
            f"pass head={kind.__name__}(...) or the name of {kind.__name__} weights"
        )


class HeadDrafter:
    """A run's drafter for a head on the target's feature (made by :class:`MedusaDraft` /
    :class:`EagleDraft`): :meth:`see_target` each round, then :meth:`draft`.

    Parameters
    ----------
    head : MedusaHeads or EagleHead
        The head.
    mode : otspec_gpu.decoding.DecodeMode
        The run's mode (``mode``, ``k``, ``gamma``, ``draft_law``).
    B : int
        Prompts in the batch (``R = B k`` rows).
    record : dict
        The run's config entries (:meth:`record`).
    """

    def __init__(self, head: Any, mode: Any, B: int, record: dict):
        if getattr(mode, "branching", ()):
            raise UnsupportedMethodError(
                "a deterministic top-k tree (draft_tree='topk') is drafted by a draft model; a head drafts sampled chains, "
                "single-token drafts or trees: drop draft_tree"
            )
        self.head, self.gamma, self._record = head, mode.gamma, record
        self.first = ModelDrafter(mode.mode, B, mode.k, mode.gamma, mode.draft_law)
        self.h = self.target = self.transform = None

    def see_target(self, hidden: torch.Tensor, target: Any, transform) -> None:
        """Take the round's target feature (called by the decoder before :meth:`draft`).

        Parameters
        ----------
        hidden : torch.Tensor
            ``[R, H]`` the target's last hidden layer at the position before ``last``, per row.
        target : otspec_gpu.models.LM
            The target (output layer, embedding, logit temperature).
        transform : callable
            ``transform(logits [..., V]) -> probabilities``, the run's sampling transform.

        Raises
        ------
        IncompatibleModelsError
            If the feature's width is not the head's hidden size.
        """
        if hidden.shape[-1] != self.head.hidden:
            raise IncompatibleModelsError(
                f"the head reads features of width {self.head.hidden} but target {target.name!r} has hidden size {hidden.shape[-1]}; "
                "decode with the target the head was trained on"
            )
        self.h, self.target, self.transform = hidden, target, transform

    def law(self, feature: torch.Tensor) -> torch.Tensor:
        """The processed law ``[..., V]`` float64 of a feature through the target's output layer.

        Parameters
        ----------
        feature : torch.Tensor
            ``[..., H]`` features.

        Returns
        -------
        torch.Tensor
        """
        lm_head = self.target.model.get_output_embeddings()
        w = getattr(lm_head, "weight", None)
        if isinstance(w, torch.Tensor) and w.is_floating_point():  # a half-precision target: its dtype
            feature = feature.to(w.dtype)
        logits = lm_head(feature).float()
        return self.transform(logits / self.target.logit_temperature)

    def draft(self, next_q, first: torch.Tensor, first_valid: torch.Tensor, generator: torch.Generator):
        """Draft one round (``next_q`` is not used: no draft model runs).

        Parameters
        ----------
        next_q : callable or None
            Ignored.
        first : torch.Tensor
            ``[R, w]`` tokens not yet seen by a draft model; the last column is ``last``.
        first_valid : torch.Tensor
            ``[R, w]`` bool (unused).
        generator : torch.Generator
            The drafting stream.

        Returns
        -------
        (torch.Tensor, torch.Tensor, torch.Tensor)
            Drafts ``X`` ``[R, gamma]``, the laws they were drawn from ``Q`` ``[R, gamma, V]``
            float64, and the number of real drafts per prompt ``[B]``.
        """
        with torch.no_grad():
            qs, xs, n_drafts, x = [], [], None, first[:, -1]
            for i in range(self.gamma):
                q = self.next_law(i, x)  # [R, V]
                if i == 0:
                    x, n_drafts = self.first.first_tokens(q, generator)
                else:
                    x = categorical(q, generator)
                qs.append(q)
                xs.append(x)
        return torch.stack(xs, 1), torch.stack(qs, 1), n_drafts

    def next_law(self, i: int, x: torch.Tensor) -> torch.Tensor:
        """The law ``[R, V]`` of draft position ``i``, after the token ``x`` ``[R]`` (``last`` at
        ``i = 0``, else the row's draft ``i - 1``); the head's subclass says how.

        Parameters
        ----------
        i : int
            Draft position.
        x : torch.Tensor
            ``[R]`` long, the token before position ``i``.

        Returns
        -------
        torch.Tensor
        """
        raise NotImplementedError(f"{type(self).__name__} must define next_law")

    def observe(self, emitted) -> None:
        """Nothing to do: the feature comes from the target's cache each round.

        Parameters
        ----------
        emitted : sequence of sequence of int
            Per prompt, the round's emitted tokens.
        """

    def record(self) -> dict:
        """The head's entries for the run's config.

        Returns
        -------
        dict
            ``{"draft_head": {...}}``: its architecture, and the weights' seed and training steps
            when the sidecar records them.
        """
        return dict(self._record)


class _MedusaDrafter(HeadDrafter):
    """Every law from the one feature: head ``i`` for position ``i``, whatever came before."""

    def next_law(self, i, x):
        if i == 0:
            self._q = self.law(self.head.features(self.h, self.gamma))  # [R, gamma, V]
        return self._q[:, i]


class _EagleDrafter(HeadDrafter):
    """The head's own feature, fed back with the token drawn from it."""

    def next_law(self, i, x):
        self._f = self.head.features(self.h if i == 0 else self._f, x, self.target.model.get_input_embeddings())
        return self.law(self._f)


def _record(source: Any) -> dict:
    """The config entry of a head source: architecture, and the sidecar's seed, steps and target."""
    info = source.info or {}
    entry = {"weights": source.weights if source.info else None, "architecture": source.head.architecture()}
    entry.update({k: info[k] for k in ("seed", "steps", "target") if k in info})
    training = info.get("training")
    if isinstance(training, dict) and "steps" in training:  # the trainer's record nests its step count
        entry["steps"] = training["steps"]
    return {"draft_head": entry}


class _HeadSource:
    """What the two head sources share: their modes, no draft model, the target's feature, the name."""

    modes: ClassVar[tuple[str, ...]] = ("chain", "single", "tree")
    model: ClassVar[Any] = None
    needs_target_hidden: ClassVar[bool] = True

    @property
    def name(self) -> str:
        """The draft's name in traces (``weights``).

        Returns
        -------
        str
        """
        return self.weights


@dataclass(frozen=True)
class MedusaDraft(_HeadSource):
    """Medusa heads on the target's feature, as a draft source (registered as ``"smollm2-medusa"``).

    Parameters
    ----------
    weights : str
        The trained heads' name (files under ``cache_dir()/drafts``, built by
        ``otspec train-draft <weights>``), or the label of ``head`` in traces.
    head : MedusaHeads, optional
        The heads to draft with (default: loaded from ``weights``).

    Raises
    ------
    MissingModelPackageError
        If ``head`` is not given and the weights are not built (the message names the command).
    InvalidOptionError
        If ``head`` (or the loaded weights) is not a :class:`~otspec_gpu.models.heads.MedusaHeads`.

    Notes
    -----
    ``gamma`` is at most the number of heads (head ``i`` drafts position ``i``).

    Examples
    --------
    >>> from otspec_gpu.models.heads import MedusaHeads
    >>> MedusaDraft("tiny-medusa", MedusaHeads(16, 3)).name
    'tiny-medusa'
    """

    weights: str = "smollm2-medusa"
    head: Any = None
    info: dict | None = field(default=None, init=False, repr=False, compare=False)
    """The loaded weights' JSON sidecar (training seed, steps, data); ``None`` when ``head`` was given."""

    def __post_init__(self):
        _resolve(self, MedusaHeads)

    def drafter(self, mode, prompts, V: int, device) -> HeadDrafter:
        """The run's drafter.

        Parameters
        ----------
        mode : otspec_gpu.decoding.DecodeMode
            The run's mode.
        prompts : list of list of int
            Token ids per prompt.
        V : int
            Vocabulary size.
        device : torch.device
            The target's device (the head is moved there).

        Returns
        -------
        HeadDrafter

        Raises
        ------
        UnsupportedMethodError
            If ``gamma`` exceeds the number of heads, or the mode is a deterministic tree.
        """
        if mode.gamma > self.head.n_heads:
            raise UnsupportedMethodError(
                f"drafter {self.name!r} has {self.head.n_heads} heads, so it drafts at most {self.head.n_heads} tokens per round "
                f"(got gamma = {mode.gamma}); pass gamma <= {self.head.n_heads}"
            )
        return _MedusaDrafter(self.head.to(device), mode, len(prompts), _record(self))


@dataclass(frozen=True)
class EagleDraft(_HeadSource):
    """An EAGLE head on the target's feature, as a draft source (registered as ``"smollm2-eagle"``).

    Parameters
    ----------
    weights : str
        The trained head's name (files under ``cache_dir()/drafts``, built by
        ``otspec train-draft <weights>``), or the label of ``head`` in traces.
    head : EagleHead, optional
        The head to draft with (default: loaded from ``weights``); the target's embedding is used
        whatever the head was built with.

    Raises
    ------
    MissingModelPackageError
        If ``head`` is not given and the weights are not built (the message names the command).
    InvalidOptionError
        If ``head`` (or the loaded weights) is not an :class:`~otspec_gpu.models.heads.EagleHead`.

    Examples
    --------
    >>> from otspec_gpu.models.heads import EagleHead
    >>> EagleDraft("tiny-eagle", EagleHead(16)).modes
    ('chain', 'single', 'tree')
    """

    weights: str = "smollm2-eagle"
    head: Any = None
    info: dict | None = field(default=None, init=False, repr=False, compare=False)
    """The loaded weights' JSON sidecar (training seed, steps, data); ``None`` when ``head`` was given."""

    def __post_init__(self):
        _resolve(self, EagleHead)

    def drafter(self, mode, prompts, V: int, device) -> HeadDrafter:
        """The run's drafter (any length ``gamma``: the head feeds itself).

        Parameters
        ----------
        mode : otspec_gpu.decoding.DecodeMode
            The run's mode.
        prompts : list of list of int
            Token ids per prompt.
        V : int
            Vocabulary size.
        device : torch.device
            The target's device (the head is moved there).

        Returns
        -------
        HeadDrafter

        Raises
        ------
        UnsupportedMethodError
            If the mode is a deterministic tree.
        """
        return _EagleDrafter(self.head.to(device), mode, len(prompts), _record(self))
