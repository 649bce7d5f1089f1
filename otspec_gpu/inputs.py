"""Argument checks shared by the speculative decoder and SPRINTER: models, prompts, sampling, seeds.

Every check raises the error class its caller passes (``OtspecInputError`` for
:func:`otspec_gpu.decoding.decode`, ``SprinterInputError`` for SPRINTER; both are
:class:`otspec.errors.OtspecInputError`), with a message that names the argument, the value, the
rule and the fix. Whole numbers follow one rule everywhere (:func:`otspec._validation.as_int_in_range`:
``3`` and ``np.int64(3)`` pass, ``3.0``, ``1.5`` and booleans do not).
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np
import torch

from otspec.errors import IncompatibleModelsError, OtspecInputError
from otspec.plugin import as_int_in_range

__all__ = ["Prompts", "as_prompts", "check_models", "check_sampling", "generators", "whole"]


def whole(value: Any, name: str, *, minimum: int = 1, error: type | None = None, fix: str = "") -> int:
    """``value`` as a Python int ``>= minimum`` (the one rule for ``max_new_tokens``, ``seed``, ``cap``...).

    Parameters
    ----------
    value : object
        The argument.
    name : str
        Its name, for the message.
    minimum : int
        Smallest allowed value.
    error : type, optional
        Raise this class instead (same message).
    fix : str
        Extra advice appended to the message.

    Returns
    -------
    int
        The value.

    Raises
    ------
    NotAnIntegerError, InvalidDraftCountError
        If ``value`` is not an integer (``1.5``, ``3.0``, ``True``) or is below ``minimum`` (the
        class ``error`` when given).
    """
    try:
        return as_int_in_range(value, name, minimum=minimum)
    except OtspecInputError as exc:
        if error is None and not fix:
            raise
        raise (error or type(exc))(f"{exc}{'; ' + fix if fix else ''}") from None


def check_models(target: Any, draft: Any, error: type = OtspecInputError) -> int:
    """Check that ``target`` and ``draft`` are :class:`~otspec_gpu.models.LM` over one vocabulary.

    Parameters
    ----------
    target, draft : otspec_gpu.models.LM
        The two models.
    error : type
        Error class for a non-model argument.

    Returns
    -------
    int
        The shared vocabulary size ``V``.

    Raises
    ------
    OtspecInputError
        If a model is not an ``LM`` (the class ``error``).
    IncompatibleModelsError
        If the vocabularies differ.
    """
    from otspec_gpu.models import LM

    if not isinstance(target, LM) or not isinstance(draft, LM):
        raise error("target and draft must be otspec_gpu.models.LM (load them with otspec_gpu.models.load or wrap)")
    if target.vocab_size != draft.vocab_size:
        raise IncompatibleModelsError(
            f"target and draft vocabularies differ ({target.vocab_size} vs {draft.vocab_size}); pick a draft that shares the target's tokenizer"
        )
    return target.vocab_size


def check_sampling(temperature: Any, error: type = OtspecInputError) -> float:
    """The sampling temperature as a float (top-k / top-p are checked by the transform itself).

    Parameters
    ----------
    temperature : float
        Must be a finite number ``>= 0`` (0 is greedy).
    error : type
        Error class raised.

    Returns
    -------
    float
        The temperature.

    Raises
    ------
    OtspecInputError
        If it is not a finite number ``>= 0`` (the class ``error``).
    """
    ok = isinstance(temperature, numbers.Real) and not isinstance(temperature, bool)
    if not (ok and math.isfinite(temperature) and temperature >= 0):
        raise error(f"temperature must be a finite number >= 0 (got {temperature!r}); 0 is greedy")
    return float(temperature)


class Prompts(list):
    """The token ids of each prompt (a ``list`` of ``list`` of int); ``text`` says whether they came from text."""

    text: bool = False


def _is_id(x: Any) -> bool:
    return isinstance(x, (numbers.Integral, np.integer)) and not isinstance(x, (bool, np.bool_))


def _parse(encode, prompt: Any, error: type) -> tuple[list, bool]:
    if isinstance(prompt, torch.Tensor):
        prompt = prompt.tolist()
    if isinstance(prompt, str):
        return [encode(prompt)], True
    if not (isinstance(prompt, (list, tuple)) and prompt):
        return [], False
    if all(isinstance(x, str) for x in prompt):
        return [encode(s) for s in prompt], True
    if all(_is_id(x) for x in prompt):
        return [[int(x) for x in prompt]], False
    if all(isinstance(x, (list, tuple)) and x and all(_is_id(t) for t in x) for x in prompt):
        return [[int(t) for t in x] for x in prompt], False
    return [], False


def as_prompts(target: Any, prompt: Any, *, chat: bool = False, error: type = OtspecInputError) -> Prompts:
    """Token ids of one prompt or a batch, checked against the target's vocabulary.

    Parameters
    ----------
    target : otspec_gpu.models.LM
        The target (its tokenizer encodes text prompts; its vocabulary bounds the ids).
    prompt : str, list of str, list of int or list of list of int
        One prompt or a batch (a tensor of ids is read as its list). Token ids are integers (not
        booleans); nesting stops at two levels.
    chat : bool
        Encode text prompts inside the target's chat template (:meth:`~otspec_gpu.models.LM.encode_chat`).
    error : type
        Error class raised.

    Returns
    -------
    Prompts
        One list of token ids per prompt; ``.text`` is True when the prompts were text.

    Raises
    ------
    OtspecInputError
        If ``prompt`` has another shape or type, a text prompt tokenizes to no ids, or an id lies
        outside ``[0, V)`` (the class ``error``).
    """
    V = target.vocab_size
    ids, text = _parse(target.encode_chat if chat else target.encode, prompt, error)
    if not ids:
        raise error(
            "prompt must be a string, a list of strings, a list of token ids or a list of such lists "
            f"(got {type(prompt).__name__} {str(prompt)[:60]!r}); pass e.g. 'Hello' or [1, 2, 3]"
        )
    for i, pr in enumerate(ids):
        if not pr:
            raise error(
                f"prompt {i} tokenizes to no token ids (got {prompt if isinstance(prompt, str) else prompt[i]!r}); pass a non-empty text"
            )
        if min(pr) < 0 or max(pr) >= V:
            raise error(f"prompt token ids must lie in [0, {V}) (got {min(pr)}..{max(pr)}); tokenize with the target's tokenizer")
    out = Prompts(ids)
    out.text = text
    return out


def generators(seed: int, n: int, device: Any = "cpu") -> tuple[torch.Generator, ...]:
    """``n`` independent ``torch.Generator`` streams spawned from one seed (numpy ``SeedSequence``).

    Parameters
    ----------
    seed : int
        The seed (``>= 0``).
    n : int
        Number of streams.
    device : str or torch.device
        Device of the generators.

    Returns
    -------
    tuple of torch.Generator
        The streams, in spawn order.
    """
    out = []
    for s in np.random.SeedSequence(int(seed)).spawn(n):
        g = torch.Generator(device=device)
        g.manual_seed(int(s.generate_state(1, dtype=np.uint64)[0] >> np.uint64(1)))
        out.append(g)
    return tuple(out)
