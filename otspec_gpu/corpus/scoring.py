r"""Teacher-forced scoring: p and q at every position of a document, one forward per model.

A document of token ids :math:`x_0 \dots x_{L-1}` is run through the target and the draft once
each (``[1, L]``, no cache); position :math:`t \in [0, L-2]` gets the two next-token laws given
:math:`x_{\le t}`, after the decoder's own processing (:func:`otspec_gpu.processing.probs_from_logits`
with the same temperature / top-k / top-p on both, computed in float64 from the float32 logits, so
that every row sums to 1 within 1e-15). One document per forward: no padding, so a position's
numbers do not depend on which other documents were scored with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from otspec.errors import CorpusInputError, IncompatibleModelsError, InvalidOptionError

__all__ = ["Processing", "check_pair", "load_model", "tokenize", "score_document"]


@dataclass(frozen=True)
class Processing:
    """The decoder's logits processing, applied identically to target and draft.

    Attributes
    ----------
    temperature : float
        Sampling temperature (> 0; greedy decoding, T = 0, has no multi-draft question).
    top_k : int or None
        Keep the k most likely tokens.
    top_p : float or None
        Nucleus threshold in (0, 1].
    """

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None

    def __post_init__(self) -> None:
        if not (float(self.temperature) > 0):
            raise InvalidOptionError(f"temperature must be > 0 (got {self.temperature!r}); at T = 0 every draft is the argmax")


def load_model(model: Any) -> Any:
    """A model by name (:func:`otspec_gpu.models.load`), or the loaded model itself.

    Parameters
    ----------
    model : str or otspec_gpu.models.LM
        A name such as ``"smollm2"`` or a loaded model.

    Returns
    -------
    otspec_gpu.models.LM
        The model.
    """
    if isinstance(model, str):
        from otspec_gpu.models import load

        return load(model)
    return model


def check_pair(target: Any, draft: Any) -> None:
    """Refuse a target/draft pair whose vocabularies differ.

    Parameters
    ----------
    target, draft : otspec_gpu.models.LM
        The models.

    Raises
    ------
    IncompatibleModelsError
        If ``vocab_size`` differs (the message names both models).
    """
    if int(target.vocab_size) != int(draft.vocab_size):
        raise IncompatibleModelsError(
            f"vocabulary mismatch: target {target.name!r} has V = {target.vocab_size} and draft {draft.name!r} has V = {draft.vocab_size}; "
            "pick a draft built on the target's tokenizer"
        )


def tokenize(doc: Any, target: Any) -> list[int]:
    """Token ids of a document (its text through the target's tokenizer, or its given ids).

    Parameters
    ----------
    doc : otspec_gpu.corpus.inputs.Document
        The document.
    target : otspec_gpu.models.LM
        The target model (its tokenizer and vocabulary).

    Returns
    -------
    list of int
        At least 2 ids, each below the vocabulary size.

    Raises
    ------
    CorpusInputError
        If the document has fewer than 2 tokens, holds ids outside the vocabulary, or is text for a
        model without a tokenizer (the message names the file and line).
    """
    if doc.ids is not None:
        ids = list(doc.ids)
    elif target.tokenizer is None:
        raise CorpusInputError(f"{doc.where()}: model {target.name!r} has no tokenizer; give the document as a list of token ids")
    else:
        ids = target.encode(doc.text)
    if len(ids) < 2:
        raise CorpusInputError(
            f"{doc.where()}: document {doc.doc_id!r} has {len(ids)} token(s); scoring needs at least 2 (a context and a next token)"
        )
    if max(ids) >= target.vocab_size:
        raise CorpusInputError(f"{doc.where()}: token id {max(ids)} is outside the vocabulary of {target.name!r} (V = {target.vocab_size})")
    return ids


def score_document(target: Any, draft: Any, ids: list[int], processing: Processing) -> tuple[np.ndarray, np.ndarray]:
    """Teacher-forced p and q at every position of one document.

    Parameters
    ----------
    target, draft : otspec_gpu.models.LM
        The pair (same vocabulary).
    ids : list of int
        The document's tokens (``L >= 2``).
    processing : Processing
        Temperature / top-k / top-p, applied to both.

    Returns
    -------
    P, Q : ndarray, shape (L - 1, V)
        Float64 next-token laws of target and draft at positions 0..L-2.
    """
    import torch

    from otspec_gpu.processing import probs_from_logits

    out = []
    for lm in (target, draft):
        param = next(iter(lm.model.parameters()), None)
        device = param.device if param is not None else torch.device("cpu")
        x = torch.tensor([ids], dtype=torch.long, device=device)
        logits = lm.logits(x)[0, :-1].to("cpu", torch.float64)  # [L-1, V]
        probs = probs_from_logits(
            logits, temperature=processing.temperature, top_k=processing.top_k, top_p=processing.top_p, dtype=torch.float64
        )
        out.append(probs.numpy())
    return out[0], out[1]
