r"""Prompt-lookup (n-gram) drafts: the draft copies what followed an earlier match of the context's end.

No draft model runs. Each round, for every prompt, the draft looks at its **context** ``c`` (the
prompt and every token generated so far, length ``L``) and proposes ``gamma`` tokens:

1. for ``n = max_ngram, max_ngram - 1, ..., 1`` (the longest match first), find the **most recent
   earlier occurrence** of the last ``n`` tokens: the largest start ``i <= L - n - 1`` with
   ``c[i : i + n] == c[L - n : L]`` (the occurrence may overlap the suffix, but not be the suffix
   itself: at least one token must follow it);
2. the draft is the continuation of that occurrence, copied token by token as in LZ77:
   :math:`d_j = e_{i + n + j}` for :math:`j = 0..\gamma - 1`, where :math:`e = c \, d` is the context
   extended by the drafts themselves, so a continuation that runs into the end of the context keeps
   copying (the context then repeats with period :math:`L - n - i`) and every draft has ``gamma``
   tokens;
3. **no match** (the last token never occurred before): the draft is the last token repeated
   ``gamma`` times. The round still costs one target forward and emits at least one token.

The draft law is a point mass: :math:`q(\cdot \mid \text{context}, d_{<j})` is one-hot at
:math:`d_j`. A point mass is a legitimate draft distribution, so the chain verifiers (``token``,
``block``) stay exactly lossless whatever is proposed: token verification keeps :math:`d_j` with
probability :math:`\min(1, p(d_j) / 1) = p(d_j)` and otherwise draws from :math:`p` with
:math:`d_j` removed (the normalised residual :math:`(p - q)_+`). The per-round exact theory of
:mod:`otspec_gpu.theory` applies unchanged with these one-hot rows: for token verification
:math:`E[\tau \mid d] = \sum_{i=1}^{\gamma} \prod_{j \le i} p_j(d_j)`.

Serving engines differ in details: ``transformers`` (``prompt_lookup_num_tokens``) takes the
*earliest* match of the longest n-gram, proposes at most ``gamma`` tokens that already exist in the
context (fewer near the end) and proposes nothing without a match; this module takes the most recent
match, copies through the end, and falls back to repeating the last token, so that every round has
the same shape ``[R, gamma]`` (one target forward of ``gamma + 1`` positions).

The drafts are a deterministic function of the context: drafting consumes no random numbers. The
index of each context is kept incrementally (one dictionary per ``n`` mapping an n-gram to its most
recent start with a continuation), so a round costs O(``max_ngram ** 2 + gamma``) host work per prompt
and new token, independent of the context length. The one-hot rows handed to the verifier are dense
(``[B, gamma, V]`` float64, as for a draft model).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from otspec.errors import InvalidDraftsError
from otspec.plugin import as_int_in_range

__all__ = ["DEFAULT_MAX_NGRAM", "NgramIndex", "PromptLookup", "PromptLookupDrafter", "lookup"]

#: Longest n-gram matched by default (``transformers`` and vLLM use 2-5; 3 is a common choice).
DEFAULT_MAX_NGRAM = 3


@dataclass(frozen=True)
class PromptLookup:
    """Prompt-lookup drafts, passed as the ``draft`` of :func:`otspec_gpu.decoding.decode` (a
    :class:`otspec_gpu.drafters.DraftSource`, registered as ``"prompt-lookup"``).

    It proposes one sequence per prompt, so it feeds the chain mode only (``modes``: the verifiers
    ``token`` and ``block`` with ``drafts=1``), and needs no draft model (``model`` is ``None``).

    Parameters
    ----------
    max_ngram : int
        Longest suffix matched (an integer ``>= 1``); shorter suffixes are tried down to 1.

    Raises
    ------
    NotAnIntegerError, InvalidDraftCountError
        If ``max_ngram`` is not an integer ``>= 1``.

    Examples
    --------
    >>> PromptLookup(max_ngram=2).name
    'prompt-lookup-n2'
    """

    max_ngram: int = DEFAULT_MAX_NGRAM
    modes: ClassVar[tuple[str, ...]] = ("chain",)
    model: ClassVar[Any] = None

    def __post_init__(self):
        object.__setattr__(self, "max_ngram", as_int_in_range(self.max_ngram, "max_ngram"))

    @property
    def name(self) -> str:
        """The draft's name in traces and reports, e.g. ``"prompt-lookup-n3"``.

        Returns
        -------
        str
            ``"prompt-lookup-n<max_ngram>"``.
        """
        return f"prompt-lookup-n{self.max_ngram}"

    def drafter(self, mode, prompts: Sequence[Sequence[int]], V: int, device) -> PromptLookupDrafter:
        """The run's :class:`PromptLookupDrafter`.

        Parameters
        ----------
        mode : otspec_gpu.decoding.DecodeMode
            The run's mode (a chain: ``gamma`` tokens per draft).
        prompts : list of list of int
            Token ids per prompt (the initial contexts).
        V : int
            Vocabulary size (width of the one-hot draft rows).
        device : torch.device
            Where the drafts and their rows are put.

        Returns
        -------
        PromptLookupDrafter
        """
        return PromptLookupDrafter(prompts, mode.gamma, self.max_ngram, V, device)


def _copy(context: Sequence[int], start: int, gamma: int) -> list[int]:
    """``gamma`` tokens copied from ``start`` on, reading the drafts themselves past the end (LZ77)."""
    L, out = len(context), []
    for j in range(gamma):
        s = start + j
        out.append(int(context[s]) if s < L else out[s - L])
    return out


def lookup(context: Sequence[int], gamma: int, max_ngram: int = DEFAULT_MAX_NGRAM) -> tuple[list[int], int]:
    """The prompt-lookup draft of one context (the reference rule of the module docstring).

    Parameters
    ----------
    context : sequence of int
        The prompt and the tokens generated so far (at least one token).
    gamma : int
        Tokens to propose (an integer ``>= 1``).
    max_ngram : int
        Longest suffix matched (an integer ``>= 1``).

    Returns
    -------
    (list of int, int)
        The ``gamma`` drafted tokens and the length ``n`` of the matched suffix (0: no match, the
        last token repeated).

    Raises
    ------
    NotAnIntegerError, InvalidDraftCountError
        If ``gamma`` or ``max_ngram`` is not an integer ``>= 1``.
    InvalidDraftsError
        If the context is empty.

    Examples
    --------
    >>> lookup([5, 6, 7, 1, 5, 6], 3)
    ([7, 1, 5], 2)
    >>> lookup([1, 2, 3], 2)
    ([3, 3], 0)
    """
    gamma = as_int_in_range(gamma, "gamma")
    max_ngram = as_int_in_range(max_ngram, "max_ngram")
    c = [int(t) for t in context]
    if not c:
        raise InvalidDraftsError("context must hold at least one token (got none); pass the prompt's token ids")
    L = len(c)
    for n in range(min(max_ngram, L - 1), 0, -1):
        suffix = c[L - n :]
        for i in range(L - n - 1, -1, -1):  # most recent first
            if c[i : i + n] == suffix:
                return _copy(c, i + n, gamma), n
    return [c[-1]] * gamma, 0


class NgramIndex:
    """Incremental index of one context: the most recent start of every n-gram (``n <= max_ngram``)
    that has at least one following token; :meth:`propose` equals :func:`lookup` on the context.

    Parameters
    ----------
    tokens : sequence of int
        The initial context (the prompt, at least one token).
    max_ngram : int
        Longest suffix matched.
    """

    def __init__(self, tokens: Sequence[int], max_ngram: int):
        self.max_ngram = int(max_ngram)
        self.tokens: list[int] = []
        self.last: list[dict] = [{} for _ in range(self.max_ngram + 1)]  # last[n][ngram] = start
        self.extend(tokens)

    def extend(self, tokens: Sequence[int]) -> None:
        """Append ``tokens`` to the context and index the n-grams they complete.

        Parameters
        ----------
        tokens : sequence of int
            New tokens, in order.
        """
        c, last = self.tokens, self.last
        for t in tokens:
            c.append(int(t))
            t_end = len(c) - 1  # the new token is the continuation of the n-grams ending just before it
            for n in range(1, min(self.max_ngram, t_end) + 1):
                last[n][tuple(c[t_end - n : t_end])] = t_end - n

    def propose(self, gamma: int) -> tuple[list[int], int]:
        """The draft of the current context (see :func:`lookup`).

        Parameters
        ----------
        gamma : int
            Tokens to propose.

        Returns
        -------
        (list of int, int)
            The drafts and the matched suffix length (0: no match).
        """
        c, L = self.tokens, len(self.tokens)
        for n in range(min(self.max_ngram, L - 1), 0, -1):
            i = self.last[n].get(tuple(c[L - n :]))
            if i is not None:
                return _copy(c, i + n, gamma), n
        return [c[-1]] * gamma, 0


class PromptLookupDrafter:
    r"""The decoder's drafter for prompt-lookup drafts (a :class:`otspec_gpu.drafters.Drafter`, with
    no draft model).

    Parameters
    ----------
    prompts : list of list of int
        Token ids per prompt (the initial contexts).
    gamma : int
        Tokens per draft.
    max_ngram : int
        Longest suffix matched.
    V : int
        Vocabulary size (width of the one-hot draft rows).
    device : torch.device
        Where the drafts and their rows are put.

    Attributes
    ----------
    matched : list of list of int
        Per prompt, the matched suffix length of every round (0: no match).
    """

    def __init__(self, prompts: Sequence[Sequence[int]], gamma: int, max_ngram: int, V: int, device):
        self.index = [NgramIndex(p, max_ngram) for p in prompts]
        self.gamma, self.V, self.device = int(gamma), int(V), device
        self.matched: list[list[int]] = [[] for _ in prompts]

    def draft(self, next_q=None, first=None, first_valid=None, generator=None):
        """Draft one round for every prompt (the arguments of the protocol's ``draft`` are not used).

        Parameters
        ----------
        next_q, first, first_valid, generator : optional
            Ignored (no draft model, no randomness).

        Returns
        -------
        (torch.Tensor, torch.Tensor, torch.Tensor)
            Drafts ``X`` ``[B, gamma]`` long, their one-hot conditionals ``Q`` ``[B, gamma, V]``
            float64, and ``[B]`` ones (one draft sequence per prompt).
        """
        rows = []
        for b, ix in enumerate(self.index):
            d, n = ix.propose(self.gamma)
            rows.append(d)
            self.matched[b].append(n)
        X = torch.tensor(rows, dtype=torch.long, device=self.device)  # [B, gamma]
        Q = torch.zeros((*X.shape, self.V), dtype=torch.float64, device=self.device)
        Q.scatter_(2, X.unsqueeze(2), 1.0)  # [B, gamma, V] point masses
        return X, Q, torch.ones(X.shape[0], dtype=torch.long, device=self.device)

    def observe(self, emitted: Sequence[Sequence[int]]) -> None:
        """Extend every context by the tokens the round emitted (accepted drafts and the next token).

        Parameters
        ----------
        emitted : sequence of sequence of int
            Per prompt, the round's emitted tokens (all of them, also past ``max_new_tokens``: the
            context is what the target's cache holds).
        """
        for ix, toks in zip(self.index, emitted, strict=True):
            ix.extend(toks)

    def record(self) -> dict:
        """The run's config entry: per prompt, the matched suffix length of every round.

        Returns
        -------
        dict
            ``{"lookup_matched": matched}`` (0: no match).
        """
        return {"lookup_matched": self.matched}
