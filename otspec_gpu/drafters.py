r"""Drafters: what proposes the tokens of a decoding round, behind one protocol, chosen by name.

:func:`otspec_gpu.decoding.decode` takes its ``draft`` as a **draft source** (:class:`DraftSource`):
a draft model (:class:`ModelDraft`), prompt lookup (:class:`otspec_gpu.prompt_lookup.PromptLookup`),
and whatever comes next (a trained head, an early-exit draft, a deterministic top-k tree). A source
says

* ``name``: what the trace and the report call it;
* ``modes``: what it supports, the decoding modes it can feed (``"chain"``: one drafted sequence
  per prompt; ``"single"``: ``k`` single-token drafts from the verifier's draft law; ``"tree"``:
  ``k`` drafted sequences), see :func:`otspec_gpu.decoding.mode_for` and :func:`check_supports`;
* ``model``: the model whose KV cache the scorer keeps beside the target's (``None``: no model);
* ``drafter(mode, prompts, V, device)``: the run's :class:`Drafter`;
* ``needs_target_hidden`` (optional, default ``False``; read by :func:`needs_target_hidden`): the
  source drafts from the target's own feature (a trained head, :mod:`otspec_gpu.head_drafters`).
  The scorer then keeps the target's last hidden layer, and at the start of every round the decoder
  calls the drafter's ``see_target(hidden, target, transform)`` with ``hidden`` ``[R, H]``, per row
  the target's feature at the position before the last emitted token (the one whose law that token
  was drawn from), the target model and the run's sampling transform.

A **drafter** holds a run's drafting state and has three methods, called once per round:

* ``draft(next_q, first, first_valid, generator) -> (X, Q, n_drafts)``: drafts ``X`` ``[R, gamma]``
  (``R = B k`` rows, prompt ``b`` owns rows ``b k .. b k + k - 1``), the draft conditionals they
  were drawn from ``Q`` ``[R, gamma, V]`` float64 and the number of real drafts per prompt
  ``[B]``; ``next_q(ids, valid)`` feeds the draft model (:meth:`otspec_gpu.scoring.DecodeCaches.next_q`)
  and ``generator`` is the drafting stream;
* ``observe(emitted)``: the tokens each prompt emitted this round;
* ``record() -> dict``: entries for the run's config (e.g. prompt lookup's matched n-grams).

The decoder asks only these and never branches on which drafter it has. Sources are chosen by name
like verifiers: :func:`by_name` resolves the names of :data:`DRAFTERS` (drafters that need no draft
model) and, otherwise, the model names of :func:`otspec_gpu.models.load`; :func:`as_source` turns
decode's ``draft`` argument (a model, a name or a source) into a source. Adding a drafter is one
class with these members plus one line in :data:`DRAFTERS`.

Any draft law is verified losslessly as long as ``Q`` holds the conditionals the drafts were drawn
from (a one-hot row for a deterministic draft): the verifiers are couplings of ``p`` with whatever
``q`` they are given.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

import torch

from otspec.errors import OtspecInputError, UnknownModelError, UnsupportedMethodError
from otspec_gpu.drafting import ModelDrafter
from otspec_gpu.head_drafters import EagleDraft, MedusaDraft
from otspec_gpu.prompt_lookup import PromptLookup

__all__ = [
    "DRAFTERS",
    "DraftSource",
    "Drafter",
    "ModelDraft",
    "as_source",
    "by_name",
    "check_supports",
    "needs_target_hidden",
    "options_of",
]

#: What each decoding mode drafts per prompt (for messages).
_MODE_WORDS = {"chain": "one drafted sequence", "single": "k single-token drafts", "tree": "a tree of k drafted sequences"}


@runtime_checkable
class Drafter(Protocol):
    """A run's drafting state (see the module docstring): ``draft``, ``observe``, ``record``.

    A protocol: any object with these three methods is a drafter (``isinstance`` checks it at run
    time); it is made by :meth:`DraftSource.drafter`, never constructed here.
    """

    def draft(self, next_q, first: torch.Tensor, first_valid: torch.Tensor, generator: torch.Generator):
        """Draft one round.

        Parameters
        ----------
        next_q : callable
            ``next_q(ids, valid) -> q``: feeds ``ids`` ``[R, n]`` to the draft's cache and returns
            the processed conditionals ``[R, V]`` after the last one (``None`` for a drafter
            without a model).
        first : torch.Tensor
            ``[B]`` the last emitted token of each prompt (the first input of the round).
        first_valid : torch.Tensor
            ``[B]`` bool, which prompts are still generating.
        generator : torch.Generator
            The round's source of randomness.

        Returns
        -------
        tuple
            ``(X [R, gamma], Q [R, gamma, V], n_drafts [B])``: drafted tokens, the law each was drawn
            from, and how many of each prompt's rows are real drafts.
        """

    def observe(self, emitted) -> None:
        """Take note of the tokens each prompt emitted this round.

        Parameters
        ----------
        emitted : sequence
            Per prompt, the tokens the verifier emitted this round.
        """

    def record(self) -> dict:
        """Entries for the run's config.

        Returns
        -------
        dict
            JSON-serialisable facts about the drafting (e.g. how often prompt lookup matched).
        """


@runtime_checkable
class DraftSource(Protocol):
    """What :func:`otspec_gpu.decoding.decode` drafts with (see the module docstring): ``name``,
    ``modes`` (what it supports), ``model`` (or ``None``) and ``drafter(...)``."""

    name: str
    modes: tuple[str, ...]
    model: Any

    def drafter(self, mode, prompts, V: int, device) -> Drafter:
        """The run's drafter for a :class:`~otspec_gpu.decoding.DecodeMode`.

        Parameters
        ----------
        mode : otspec_gpu.decoding.DecodeMode
            Chain, single-step or tree, with k and gamma.
        prompts : sequence
            The prompts' token ids (a drafter without a model drafts from them).
        V : int
            Vocabulary size.
        device : torch.device or str
            Where the drafts live.

        Returns
        -------
        Drafter
        """


@dataclass(frozen=True)
class ModelDraft:
    """Drafts sampled from a draft model sharing the target's vocabulary, in every decoding mode.

    Parameters
    ----------
    model : otspec_gpu.models.LM
        The draft model (its processed conditionals are the draft law; the scorer keeps its cache).

    Examples
    --------
    >>> from otspec_gpu import models
    >>> ModelDraft(models.tiny(seed=0)).modes
    ('chain', 'single', 'tree')
    """

    model: Any
    modes: ClassVar[tuple[str, ...]] = ("chain", "single", "tree")

    @property
    def name(self) -> str:
        """The model's name (e.g. ``"smollm2-int8"``).

        Returns
        -------
        str
        """
        return self.model.name

    def drafter(self, mode, prompts, V: int, device) -> ModelDrafter:
        """The run's :class:`otspec_gpu.drafting.ModelDrafter`.

        Parameters
        ----------
        mode : otspec_gpu.decoding.DecodeMode
            The run's mode (``mode``, ``k``, ``gamma``, ``draft_law``).
        prompts : list of list of int
            Token ids per prompt.
        V : int
            Vocabulary size.
        device : torch.device
            The models' device.

        Returns
        -------
        otspec_gpu.drafting.ModelDrafter
        """
        return ModelDrafter(mode.mode, len(prompts), mode.k, mode.gamma, mode.draft_law, getattr(mode, "branching", ()))


#: Drafters that need no draft model, by name (``by_name(name, **options)`` builds them; their
#: dataclass fields are the options). Every other drafter name is a model name. The trained heads
#: load their weights when built (``otspec train-draft <name>`` builds them).
DRAFTERS: dict[str, type] = {"prompt-lookup": PromptLookup, "smollm2-medusa": MedusaDraft, "smollm2-eagle": EagleDraft}


def needs_target_hidden(source: Any) -> bool:
    """Whether ``source`` drafts from the target's feature (its ``needs_target_hidden``, default ``False``).

    Parameters
    ----------
    source : DraftSource
        A draft source.

    Returns
    -------
    bool

    Examples
    --------
    >>> needs_target_hidden(by_name("prompt-lookup"))
    False
    """
    return bool(getattr(source, "needs_target_hidden", False))


def options_of(name: str) -> tuple[str, ...]:
    """The options ``by_name(name, **options)`` takes (a draft model takes none).

    Parameters
    ----------
    name : str
        A drafter name.

    Returns
    -------
    tuple of str

    Examples
    --------
    >>> options_of("prompt-lookup")
    ('max_ngram',)
    """
    cls = DRAFTERS.get(name) if isinstance(name, str) else None
    return tuple(f.name for f in dataclasses.fields(cls) if f.init) if cls is not None else ()


def by_name(name: str, **options: Any) -> DraftSource:
    """The draft source called ``name``: a drafter of :data:`DRAFTERS` built with ``options``, or a
    draft model loaded by :func:`otspec_gpu.models.load`.

    Parameters
    ----------
    name : str
        ``"prompt-lookup"``, or a model name (``"smollm2-int8"``, ``"tiny-draft"``, ...).
    **options
        The drafter's options (:func:`options_of`), e.g. ``max_ngram`` for prompt lookup.

    Returns
    -------
    DraftSource

    Raises
    ------
    UnsupportedMethodError
        If ``name`` is not a string, or an option is not one the drafter takes.
    UnknownModelError
        If ``name`` is neither a drafter of :data:`DRAFTERS` nor a model name.

    Examples
    --------
    >>> by_name("prompt-lookup", max_ngram=2).name
    'prompt-lookup-n2'
    """
    if not isinstance(name, str):
        raise UnsupportedMethodError(f"a drafter name must be a string (got {name!r}); e.g. 'prompt-lookup' or a model name")
    takes = options_of(name)
    extra = sorted(set(options) - set(takes))
    if extra:
        kind = f"takes the options {list(takes)}" if takes else "is a draft model, which takes no options"
        raise UnsupportedMethodError(f"drafter {name!r} {kind} (got {extra}); drop them")
    if name in DRAFTERS:
        return DRAFTERS[name](**options)
    from otspec_gpu import models

    try:
        return ModelDraft(models.load(name))
    except UnknownModelError as exc:
        raise UnknownModelError(f"unknown drafter {name!r}: neither one of {sorted(DRAFTERS)} nor a model ({exc})") from None


def as_source(draft: Any) -> DraftSource:
    """The draft source of :func:`~otspec_gpu.decoding.decode`'s ``draft`` argument.

    Parameters
    ----------
    draft : otspec_gpu.models.LM, str or DraftSource
        A draft model, a drafter name (:func:`by_name`) or a source.

    Returns
    -------
    DraftSource

    Raises
    ------
    OtspecInputError
        If ``draft`` is none of these.
    UnknownModelError
        If a name is unknown.
    """
    from otspec_gpu.models import LM

    if isinstance(draft, LM):
        return ModelDraft(draft)
    if isinstance(draft, str):
        return by_name(draft)
    if isinstance(draft, DraftSource):
        return draft
    raise OtspecInputError(
        f"draft must be an otspec_gpu.models.LM, a drafter name ({', '.join(sorted(DRAFTERS))} or a model name) or an "
        f"otspec_gpu.drafters.DraftSource (got {type(draft).__name__}); load a model with otspec_gpu.models.load or wrap"
    )


def check_supports(source: DraftSource, mode) -> None:
    """Check that ``source`` can feed the decoding mode ``mode`` (its ``modes``).

    Parameters
    ----------
    source : DraftSource
        The draft source.
    mode : otspec_gpu.decoding.DecodeMode
        The resolved request (:func:`otspec_gpu.decoding.mode_for`).

    Raises
    ------
    UnsupportedMethodError
        If ``mode.mode`` is not one of ``source.modes``; the message names the modes it feeds and
        the verifiers that run them.
    """
    if mode.mode in source.modes:
        return
    from otspec_gpu.verifiers import VERIFIERS

    feeds = " or ".join(f"{_MODE_WORDS[m]} per prompt ({m})" for m in source.modes)
    rules = sorted(n for n, r in VERIFIERS.items() if any(m in r.modes for m in source.modes) and n != "approximate")
    raise UnsupportedMethodError(
        f"drafter {source.name!r} proposes {feeds}, but verifier {mode.verifier!r} with drafts = {mode.k}, gamma = {mode.gamma} "
        f"needs {_MODE_WORDS[mode.mode]} per prompt ({mode.mode}); use one of the verifiers {rules}"
        + (" with drafts=1" if source.modes == ("chain",) else "")
    )
