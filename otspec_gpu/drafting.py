r"""Draft laws in torch: the sampler twins of ``otspec.iid``, ``otspec.without_replacement`` and
``otspec.greedy``.

:func:`sample_drafts` draws ``[B, k]`` drafts from ``q`` ``[B, V]`` under one of these laws, so that
the exact numpy law of a row is ``getattr(otspec, law)(q_row_float64, k)``:

* ``"iid"``: k independent draws from q (inverse CDF in float64);
* ``"without_replacement"``: successive sampling proportional to q, in drawing order (Gumbel-top-k
  on ``log q`` in float64, which has exactly the successive-sampling law);
* ``"greedy"``: the top-(k-1) tokens of q (larger q first, ties to the lower id), then one token
  from q restricted to the other tokens.

With ``q`` of shape ``[1, V]`` and ``n`` given, ``n`` rows are drawn from that one law in
O(V + n k^2 log V) work: each successive (or greedy) draw is an inverse-CDF draw on the shared
cumulative sum that skips the tokens already drawn in its row.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

import torch

from otspec.errors import InvalidDraftCountError, InvalidDraftsError, UnsupportedMethodError
from otspec.laws import ALL as ALL_LAWS
from otspec.laws import by_kind
from otspec_gpu._validation import check_probs
from otspec_gpu.sampling import categorical, invert_cdf, search_cdf

__all__ = ["LAWS", "ModelDrafter", "draw_greedy", "draw_iid", "draw_without_replacement", "greedy_top", "sample_drafts"]

#: Names of the draft laws decoding can draw: every registered law with a torch sampler hook
#: (:attr:`otspec.laws.DraftLaw.torch_sampler`), in the registry's order.
LAWS = tuple(cls.kind for cls in ALL_LAWS if cls.torch_sampler is not None)


def greedy_top(q: torch.Tensor, m: int) -> torch.Tensor:
    """The top-``m`` tokens of each row of ``q`` ``[B, m]``, ordered by larger q first, then lower
    token id (the tie rule of ``otspec.greedy``).

    Parameters
    ----------
    q : torch.Tensor
        ``[B, V]`` draft rows.
    m : int
        Number of tokens, ``0 <= m <= V``.

    Returns
    -------
    torch.Tensor
        ``[B, m]`` long token ids.
    """
    B = q.shape[0]
    if m == 0:
        return torch.zeros((B, 0), dtype=torch.long, device=q.device)
    vals = torch.topk(q, m, dim=1).values
    v = vals[:, -1:]
    gt = q > v
    eq = q == v
    need = m - gt.sum(dim=1, keepdim=True)
    chosen = gt | (eq & (torch.cumsum(eq.to(torch.long), dim=1) <= need))
    idx = torch.nonzero(chosen)[:, 1].view(B, m)  # row-major: ascending token id within a row
    order = torch.sort(q.gather(1, idx), dim=1, descending=True, stable=True).indices
    return idx.gather(1, order)


def _skip_draw(cdf: torch.Tensor, q64: torch.Tensor, taken: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One draw per row from the shared law ``q64`` ``[V]`` with the tokens ``taken`` ``[n, j]``
    (distinct, positive q) removed: a uniform on the remaining mass, mapped past every removed token
    that lies below it (in increasing token order), then through the shared CDF ``cdf`` ``[V]`` by
    :func:`otspec_gpu.sampling.invert_cdf` (its zero-weight guard)."""
    n, j = taken.shape
    removed = q64[taken].sum(1) if j else torch.zeros(n, dtype=torch.float64, device=cdf.device)
    t = torch.rand(n, dtype=torch.float64, device=cdf.device, generator=generator) * (cdf[-1] - removed)
    if j:
        srt = torch.sort(taken, dim=1).values
        below = torch.where(srt > 0, cdf[torch.clamp(srt - 1, min=0)], torch.zeros_like(srt, dtype=torch.float64))
        gap = cdf[srt] - below  # the removed token's own slice of the CDF
        for c in range(j):  # loop over the few drawn tokens only
            t = torch.where(t >= below[:, c], t + gap[:, c], t)
    return invert_cdf(cdf[None], t)


def _shared_cdf(q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    q64 = q[0].double()
    return q64, torch.cumsum(q64, 0)


def draw_iid(q: torch.Tensor, k: int, *, generator: torch.Generator, n: int | None = None, validate: bool = True) -> torch.Tensor:
    """The torch sampler of :class:`otspec.laws.iid.IIDLaw` (its ``torch_sampler`` hook): ``k``
    independent inverse-CDF draws in float64 per row of the checked ``q`` ``[B, V]`` (``[n, k]`` from
    one shared ``[1, V]`` row when ``n`` is given). Any ``k`` works: i.i.d. drafts may repeat.

    Parameters
    ----------
    q : torch.Tensor
        ``[B, V]`` draft rows, already checked by :func:`sample_drafts` (``[1, V]`` with ``n``).
    k : int
        Number of drafts per row (``>= 1``).
    generator : torch.Generator
        The only source of randomness.
    n : int, optional
        Rows to draw from the one shared row of ``q``.
    validate : bool
        Check that every row can produce ``k`` drafts (a synchronising check on CUDA).

    Returns
    -------
    torch.Tensor
        ``[B, k]`` (or ``[n, k]``) long token ids.
    """
    if n is not None:
        _, cdf = _shared_cdf(q)
        u = torch.rand((n, k), dtype=torch.float64, device=q.device, generator=generator)
        return search_cdf(cdf[None], u.reshape(-1)).view(n, k)
    u = torch.rand((q.shape[0], k), dtype=torch.float64, device=q.device, generator=generator)
    return search_cdf(torch.cumsum(q.double(), dim=-1), u)  # [B, k]


def draw_without_replacement(
    q: torch.Tensor, k: int, *, generator: torch.Generator, n: int | None = None, validate: bool = True
) -> torch.Tensor:
    """The torch sampler of :class:`otspec.laws.without_replacement.WithoutReplacementLaw`:
    successive sampling proportional to q, in drawing order (Gumbel-top-k on ``log q`` in float64 per
    row; successive skip draws on one shared CDF when ``n`` is given). Needs ``k`` tokens of positive
    q in every row (checked when ``validate``).

    Parameters
    ----------
    q : torch.Tensor
        ``[B, V]`` draft rows, already checked by :func:`sample_drafts` (``[1, V]`` with ``n``).
    k : int
        Number of drafts per row (``>= 1``).
    generator : torch.Generator
        The only source of randomness.
    n : int, optional
        Rows to draw from the one shared row of ``q``.
    validate : bool
        Check that every row can produce ``k`` drafts (a synchronising check on CUDA).

    Returns
    -------
    torch.Tensor
        ``[B, k]`` (or ``[n, k]``) long token ids.

    Raises
    ------
    InvalidDraftsError
        If (``validate``) a row has fewer than ``k`` tokens of positive q.
    """
    if validate and bool(((q > 0).sum(dim=1) < k).any()):
        raise InvalidDraftsError(f"k = {k} drafts without replacement need at least k tokens of positive q in every row; lower k")
    if n is not None:
        q64, cdf = _shared_cdf(q)
        out = torch.zeros((n, 0), dtype=torch.long, device=q.device)
        for _ in range(k):  # successive sampling: one draw per slot
            out = torch.cat([out, _skip_draw(cdf, q64, out, generator)[:, None]], dim=1)
        return out
    u = torch.rand(q.shape, dtype=torch.float64, device=q.device, generator=generator)
    # Gumbel keys log q - log(-log U); U = 0 gives -inf (never chosen), q = 0 gives -inf too
    keys = torch.log(q.double()) - torch.log(-torch.log(u))
    return torch.topk(keys, k, dim=1).indices


def draw_greedy(q: torch.Tensor, k: int, *, generator: torch.Generator, n: int | None = None, validate: bool = True) -> torch.Tensor:
    """The torch sampler of :class:`otspec.laws.greedy.GreedyLaw`: the top-(k-1) tokens of q
    (:func:`greedy_top`), then one token from q restricted to the other tokens. Needs ``k <= V`` and
    positive q off the top-(k-1) in every row (checked when ``validate``).

    Parameters
    ----------
    q : torch.Tensor
        ``[B, V]`` draft rows, already checked by :func:`sample_drafts` (``[1, V]`` with ``n``).
    k : int
        Number of drafts per row (``>= 1``).
    generator : torch.Generator
        The only source of randomness.
    n : int, optional
        Rows to draw from the one shared row of ``q``.
    validate : bool
        Check that every row can produce ``k`` drafts (a synchronising check on CUDA).

    Returns
    -------
    torch.Tensor
        ``[B, k]`` (or ``[n, k]``) long token ids.

    Raises
    ------
    InvalidDraftCountError
        If ``k > V``.
    InvalidDraftsError
        If (``validate``) a row has no positive q off its top-(k-1) tokens.
    """
    V = q.shape[1]
    if k > V:
        raise InvalidDraftCountError(f"greedy drafts need k <= V (got k = {k}, V = {V}); lower k")
    if validate and bool((q.double().scatter(1, greedy_top(q, k - 1), 0.0).sum(dim=1) <= 0).any()):
        raise InvalidDraftsError(f"greedy drafts need positive q outside the top-{k - 1} tokens in every row; lower k")
    if n is not None:
        q64, cdf = _shared_cdf(q)
        top = greedy_top(q, k - 1).expand(n, -1)
        return torch.cat([top, _skip_draw(cdf, q64, top, generator)[:, None]], dim=1)
    top = greedy_top(q, k - 1)
    rest = q.double().scatter(1, top, 0.0)
    return torch.cat([top, categorical(rest, generator)[:, None]], dim=1)


def _torch_sampler(law: str) -> Callable[..., torch.Tensor]:
    """The law's ``torch_sampler`` hook (``"module:function"``), imported on first use."""
    target = by_kind(law).torch_sampler
    module, name = target.split(":")
    return getattr(importlib.import_module(module), name)


def sample_drafts(
    q: torch.Tensor, k: int, law: str, *, generator: torch.Generator, n: int | None = None, validate: bool = True
) -> torch.Tensor:
    r"""Draw ``k`` drafts per row of ``q`` under the draft law ``law``, through the law's own torch
    sampler (its ``torch_sampler`` hook: :func:`draw_iid`, :func:`draw_without_replacement`,
    :func:`draw_greedy`; a new law with a hook is drawn here without an edit to this function).

    Parameters
    ----------
    q : Tensor, shape (B, V), float32 or float64 probability rows
    k : int >= 1
    law : str
        A registered draft law with a torch sampler (:data:`LAWS`).
    generator : torch.Generator
        The only source of randomness (one ``torch.rand`` call per law draw).
    n : int, optional
        Only with ``q`` of shape ``[1, V]``: the number of rows to draw from that shared law
        (default: one row per row of q).
    validate : bool
        Check q's values and that the law can produce k drafts (a synchronising check on CUDA).

    Returns
    -------
    LongTensor, shape (B, k) (or (n, k))

    Raises
    ------
    InvalidDraftCountError
        If ``k`` is not an integer ``>= 1``, greedy drafts ask for ``k > V``, or ``n`` is given
        with more than one row of ``q``.
    UnsupportedMethodError
        If ``law`` is unknown or has no torch sampler.
    InvalidDraftsError
        If (``validate``) a row cannot produce ``k`` drafts under the law.
    InvalidDistributionError, ShapeMismatchError
        If ``q`` is not a float tensor of shape ``[B, V]``, or (``validate``) a row is not a
        distribution.

    Examples
    --------
    >>> import torch
    >>> g = torch.Generator().manual_seed(0)
    >>> q = torch.tensor([[0.5, 0.3, 0.2]], dtype=torch.float64)
    >>> sample_drafts(q, 2, "greedy", generator=g)[0, 0].item()
    0
    >>> sorted(set(sample_drafts(q, 3, "without_replacement", generator=g)[0].tolist()))
    [0, 1, 2]
    """
    q = check_probs(q, "q", validate=validate)
    if int(k) != k or k < 1:
        raise InvalidDraftCountError(f"k must be an integer >= 1 (got {k}); draft at least one token")
    if law not in LAWS:
        raise UnsupportedMethodError(f"law must be one of {list(LAWS)} (got {law!r}); pick one of those")
    if n is not None and q.shape[0] != 1:
        raise InvalidDraftCountError(
            f"n is only for a shared law q of shape [1, V] (got {q.shape[0]} rows); drop n to draw one row per row of q"
        )
    return _torch_sampler(law)(q, int(k), generator=generator, n=None if n is None else int(n), validate=validate)


# ------------------------------------------------------------------------------------------------
# The decoder's drafter of a draft model: chains, k single-token drafts and trees


class ModelDrafter:
    r"""The drafter of a draft model (a :class:`otspec_gpu.drafters.Drafter`, made by
    :class:`otspec_gpu.drafters.ModelDraft`): ``k`` drafts of ``gamma`` tokens per prompt and round.

    The draft model is reached only through ``next_q(ids, valid) -> q`` (feed ``ids`` ``[R, n]``,
    ``valid`` marking real tokens, to the draft's cache and return the processed conditionals
    ``[R, V]`` after the last one): :meth:`otspec_gpu.scoring.DecodeCaches.next_q`. Rows
    ``b k .. b k + k - 1`` are prompt ``b``'s drafts; position ``t >= 1`` of every row is one draw
    from that row's own conditional, and the first position is drawn by :meth:`first_tokens`:

    * ``"chain"`` (``k = 1``): one draw;
    * ``"single"`` (``gamma = 1``): ``k`` drafts from the verifier's draft law (:func:`sample_drafts`);
    * ``"tree"``: ``k`` sequences with the law the tree rules assume (the law of
      :func:`otspec_gpu.verifiers.tree.draft_sequences`): first tokens i.i.d. (``kseq``, ``rrs``) or
      without replacement (``rrs_wor``), each sequence then continued independently.

    **Short supports.** The laws ``without_replacement`` and ``greedy`` need ``k`` tokens of
    positive draft probability. A prompt whose first-position ``q`` has only ``s < k`` of them
    (temperature 0, ``top_k < k``, a small ``top_p`` nucleus, or more drafts than the vocabulary,
    ``k > V``) gets ``min(k, s) = s`` drafts from the same law with ``s`` drafts (every token of the
    support, in the law's order); its other ``k - s`` rows repeat its first draft and are ignored by
    the verifier (``n_drafts`` says how many are real). The i.i.d. law needs no such rule (its
    drafts may repeat), which is why ``kseq`` and ``optimal_iid`` take any ``k``.

    Parameters
    ----------
    mode : {"chain", "single", "tree"}
        How to draft.
    B : int
        Prompts in the batch (``R = B k`` rows).
    k : int
        Drafts per prompt.
    gamma : int
        Tokens per draft.
    law : str
        Draft law of the first position (``"iid"``, ``"without_replacement"``, ``"greedy"``).
    branching : tuple of int, optional
        A deterministic tree's children per depth (``"tree"`` mode): every node's top-:math:`b_d`
        children, nothing sampled (:func:`otspec_gpu.deterministic.top_k_tree_drafts`).
    """

    def __init__(self, mode: str, B: int, k: int, gamma: int, law: str, branching: tuple = ()):
        self.mode, self.B, self.k, self.gamma, self.law = mode, B, k, gamma, law
        self.branching = tuple(branching)

    def draft(self, next_q, first: torch.Tensor, first_valid: torch.Tensor, generator: torch.Generator):
        """Draft one round.

        Parameters
        ----------
        next_q : callable
            ``next_q(ids [R, n], valid [R, n]) -> [R, V]`` processed draft conditionals.
        first : torch.Tensor
            ``[R, w]`` tokens the draft model has not seen yet (fed first).
        first_valid : torch.Tensor
            ``[R, w]`` bool, which of them are real.
        generator : torch.Generator
            The drafting stream.

        Returns
        -------
        (torch.Tensor, torch.Tensor, torch.Tensor)
            Drafts ``X`` ``[R, gamma]``, their conditionals ``Q`` ``[R, gamma, V]`` and the number
            of real drafts per prompt ``[B]`` (``k`` but for short supports).
        """
        if self.branching:  # a deterministic tree: top children at every node
            from otspec_gpu.deterministic import top_k_tree_drafts

            return top_k_tree_drafts(next_q, first, first_valid, self.branching)
        q_t = next_q(first, first_valid)  # [R, V]
        x_t, n_drafts = self.first_tokens(q_t, generator)
        qs, xs = [q_t], [x_t]
        for _ in range(1, self.gamma):
            q_t = next_q(x_t.unsqueeze(1), torch.ones_like(x_t, dtype=torch.bool).unsqueeze(1))
            x_t = categorical(q_t, generator)
            qs.append(q_t)
            xs.append(x_t)
        return torch.stack(xs, 1), torch.stack(qs, 1), n_drafts  # [R, gamma], [R, gamma, V], [B]

    def observe(self, emitted) -> None:
        """Take note of the tokens a round emitted (nothing to do: the draft model's cache already
        follows them; :class:`otspec_gpu.prompt_lookup.PromptLookupDrafter` keeps its contexts here).

        Parameters
        ----------
        emitted : sequence of sequence of int
            Per prompt, the round's emitted tokens.
        """

    def record(self) -> dict:
        """What the run's config records about the drafting (nothing beyond the draft's name).

        Returns
        -------
        dict
            ``{}``.
        """
        return {}

    def first_tokens(self, q: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """The drafts at the first position from the draft conditionals ``q`` ``[R, V]``.

        Parameters
        ----------
        q : torch.Tensor
            ``[R, V]`` processed draft conditionals (the ``k`` rows of a prompt are equal).
        generator : torch.Generator
            The drafting stream.

        Returns
        -------
        (torch.Tensor, torch.Tensor)
            ``[R]`` long drafts (``k`` per prompt from the draft law for ``"single"`` and the first
            tokens of ``rrs_wor`` trees, else one independent draw per row) and ``[B]`` the number
            of real drafts per prompt.
        """
        k = self.k
        full = torch.full((q.shape[0] // k,), k, dtype=torch.long, device=q.device)
        if self.mode == "chain" or (self.mode == "tree" and self.law == "iid"):
            return categorical(q, generator), full
        q0 = q[::k]  # [B, V] one row per prompt
        if self.law == "iid" or k == 1:
            return sample_drafts(q0, k, self.law, generator=generator).reshape(-1), full
        n_drafts = torch.clamp((q0 > 0).sum(1), max=k)  # [B] min(k, support)
        short = bool((n_drafts < k).any())
        m = min(k, q.shape[1])  # more drafts than tokens: the support is short in every row
        x = sample_drafts(q0, m, self.law, generator=generator, validate=not short)  # [B, m]
        if m < k:
            x = torch.cat([x, x[:, :1].expand(-1, k - m)], dim=1)  # [B, k]
        if short:  # slots past a prompt's support repeat its first draft (ignored by the verifier)
            pad = torch.arange(k, device=q.device).unsqueeze(0) >= n_drafts.unsqueeze(1)
            x = torch.where(pad, x[:, :1], x)
        return x.reshape(-1), n_drafts
