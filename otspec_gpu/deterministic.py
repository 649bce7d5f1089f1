r"""Deterministic top-k draft trees in decoding (EAGLE's static tree with :math:`q = 1`), in torch.

Torch twins of :mod:`otspec.laws.deterministic` (the top-k set) and
:mod:`otspec.verifiers.sample_match` (the sample-and-match walk):

* :func:`draw_top_k` -- the torch sampler hook of the deterministic laws: the k most probable
  tokens of each row (larger q first, ties to the lower id), nothing drawn;
* :func:`tree_children_index` and :func:`top_k_tree_drafts` -- a static tree of top-:math:`b_d`
  children as ``k = prod(b)`` drafted sequences (one per leaf, shared prefixes repeated), the shape
  the decoder scores and rolls back;
* :func:`walk_step` -- the walk as a pure function of its uniforms (no host synchronisation):
  :math:`Y_1 \sim p(\cdot \mid \text{context})` by inverse CDF, descend while :math:`Y_i` continues
  a drafted sequence that agrees with :math:`Y^{i-1}`, emit the first token that does not (or a bonus
  after depth :math:`\gamma`). Every emitted token is a draw from the target conditional after the
  tokens emitted before it, so the decoded stream has the target law whatever the drafts;
* :func:`walk_sample` draws the uniforms (one per depth) and runs the step;
* :class:`WalkStep` -- the decoder's verifier step for these trees (the call signature of
  :class:`otspec_gpu.verifying.VerifierStep`).

Shapes (``B`` prompts, ``k`` sequences, length ``gamma``, vocabulary ``V``)::

    drafts   [B, k, gamma]          long
    p        [B, k, gamma + 1, V]   p[b, j, i] = M_b(. | context, drafts[b, j, :i])
    u        [B, gamma + 1]         float64 uniforms, one per depth
"""

from __future__ import annotations

import math

import torch

from otspec.errors import InvalidDraftCountError, InvalidDraftsError
from otspec_gpu.sampling import invert_cdf
from otspec_gpu.verifiers.base import StepOutput

__all__ = ["WalkStep", "draw_top_k", "top_tokens", "top_k_tree_drafts", "tree_children_index", "walk_sample", "walk_step"]


def top_tokens(q: torch.Tensor, m: int) -> torch.Tensor:
    """The ``m`` largest entries of each row of ``q`` ``[B, V]``: larger q first, ties to the lower id
    (a stable descending sort: the tie rule of :func:`otspec.laws.top_k`).

    Parameters
    ----------
    q : torch.Tensor
        ``[B, V]`` rows.
    m : int
        How many, ``0 <= m <= V``.

    Returns
    -------
    torch.Tensor
        ``[B, m]`` long token ids.

    Examples
    --------
    >>> import torch
    >>> top_tokens(torch.tensor([[0.3, 0.4, 0.3]]), 2).tolist()
    [[1, 0]]
    """
    return torch.sort(q, dim=1, descending=True, stable=True).indices[:, :m]


def draw_top_k(
    q: torch.Tensor, k: int, *, generator: torch.Generator | None = None, n: int | None = None, validate: bool = True
) -> torch.Tensor:
    """The torch sampler hook of :class:`otspec.laws.deterministic.TopKLaw` (and the tree laws'
    root): the ``k`` most probable tokens of each row, larger q first, ties to the lower id.

    Parameters
    ----------
    q : torch.Tensor
        ``[B, V]`` draft rows (``[1, V]`` with ``n``), checked by the caller.
    k : int
        Number of drafts, at most the support of every row (checked when ``validate``).
    generator : torch.Generator, optional
        Unused: nothing is drawn (the hook's signature).
    n : int, optional
        Rows to return from the one shared row of ``q``.
    validate : bool
        Check that every row has ``k`` tokens of positive probability (a synchronising check).

    Returns
    -------
    torch.Tensor
        ``[B, k]`` (or ``[n, k]``) long token ids.

    Raises
    ------
    InvalidDraftCountError
        If ``k > V``.
    InvalidDraftsError
        If (``validate``) a row has fewer than ``k`` tokens of positive probability.

    Examples
    --------
    >>> import torch
    >>> draw_top_k(torch.tensor([[0.2, 0.5, 0.3]], dtype=torch.float64), 2).tolist()
    [[1, 2]]
    """
    V = q.shape[1]
    if k > V:
        raise InvalidDraftCountError(f"top-k drafts need k <= V (got k = {k}, V = {V}); lower k")
    if validate and bool(((q > 0).sum(dim=1) < k).any()):
        raise InvalidDraftsError(f"top-k drafts need k = {k} tokens of positive q in every row; lower k")
    top = top_tokens(q, k)
    return top.expand(n, -1) if n is not None else top


def tree_children_index(branching: tuple, device=None) -> torch.Tensor:
    r"""For a static tree of branching :math:`(b_1, \dots, b_\gamma)` drafted as its
    :math:`k = \prod_d b_d` leaves: ``index[j, d]``, the rank of sequence ``j``'s token at depth ``d``
    among its parent's top-:math:`b_d` children (sequences in lexicographic order of their ranks).

    Parameters
    ----------
    branching : tuple of int
        Children per node at each depth.
    device : torch.device, optional
        Where the index lives.

    Returns
    -------
    torch.Tensor
        ``[k, gamma]`` long ranks.

    Raises
    ------
    InvalidDraftCountError
        If a child count is not a positive integer.

    Examples
    --------
    >>> tree_children_index((2, 1, 2)).tolist()
    [[0, 0, 0], [0, 0, 1], [1, 0, 0], [1, 0, 1]]
    """
    b = tuple(int(x) for x in branching)
    if not b or any(x < 1 for x in b):
        raise InvalidDraftCountError(
            f"branching must hold positive child counts, one per depth (got {list(branching)}); pass e.g. (4, 1, 1)"
        )
    k = math.prod(b)
    j = torch.arange(k, device=device)
    strides = [math.prod(b[d + 1 :]) for d in range(len(b))]
    return torch.stack([(j // s) % bd for s, bd in zip(strides, b, strict=True)], dim=1)


def top_k_tree_drafts(
    next_q, first: torch.Tensor, first_valid: torch.Tensor, branching: tuple
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Draft a static top-:math:`b_d` tree as ``k = prod(branching)`` sequences per prompt.

    Rows ``b k .. b k + k - 1`` are prompt ``b``'s leaves; row ``j`` takes, at depth ``d``, the
    child of rank ``tree_children_index(branching)[j, d]`` among the top-:math:`b_d` tokens of its
    own draft conditional (rows with one prefix have one conditional, so siblings agree).

    Parameters
    ----------
    next_q : callable
        ``next_q(ids [R, n], valid [R, n]) -> [R, V]`` processed draft conditionals (the draft
        model's cache follows every fed token).
    first : torch.Tensor
        ``[R, w]`` tokens the draft model has not seen yet.
    first_valid : torch.Tensor
        ``[R, w]`` bool, which of them are real.
    branching : tuple of int
        Children per node at each depth (``gamma = len(branching)``).

    Returns
    -------
    (torch.Tensor, torch.Tensor, torch.Tensor)
        Drafts ``[R, gamma]``, their conditionals ``[R, gamma, V]`` and ``[B]`` the number of real
        sequences per prompt (``k``: a node with fewer tokens of positive q than its branching
        repeats its last one, which the walk never distinguishes from the first).
    """
    index = tree_children_index(branching, device=first.device)  # [k, gamma]
    k = index.shape[0]
    q_t = next_q(first, first_valid)  # [R, V]
    R = q_t.shape[0]
    rank = index.repeat(R // k, 1)  # [R, gamma]
    xs, qs = [], []
    for d, bd in enumerate(branching):
        if d:
            q_t = next_q(xs[-1].unsqueeze(1), torch.ones_like(xs[-1], dtype=torch.bool).unsqueeze(1))
        top = top_tokens(q_t, min(int(bd), q_t.shape[1]))  # [R, b_d]
        support = (q_t > 0).sum(dim=1, keepdim=True).clamp_min(1)
        pick = torch.minimum(rank[:, d : d + 1], support - 1)  # never a token of q = 0
        xs.append(top.gather(1, pick.clamp_max(top.shape[1] - 1)).squeeze(1))
        qs.append(q_t)
    n = torch.full((R // k,), k, dtype=torch.long, device=q_t.device)
    return torch.stack(xs, 1), torch.stack(qs, 1), n


def walk_step(p: torch.Tensor, drafts: torch.Tensor, u: torch.Tensor) -> StepOutput:
    r"""The sample-and-match walk, a pure function of its uniforms (traceable; no host sync).

    At depth ``t`` (``0 .. gamma``) the sequences that agree with the walk so far are *alive*;
    :math:`Y_{t+1}` is the inverse-CDF draw with ``u[:, t]`` from the target row of the first alive
    sequence; the alive set keeps the sequences whose token ``t`` equals it. The walk's length
    :math:`\tau` is the number of depths with a survivor; its next token is the first draw no
    sequence continues (the bonus draw after depth ``gamma``).

    Parameters
    ----------
    p : torch.Tensor
        ``[B, k, gamma + 1, V]`` target conditionals along each sequence.
    drafts : torch.Tensor
        ``[B, k, gamma]`` long drafted sequences.
    u : torch.Tensor
        ``[B, gamma + 1]`` float64 uniforms in ``[0, 1)``.

    Returns
    -------
    otspec_gpu.verifiers.StepOutput
        ``accepted`` ``[B]`` (:math:`\tau`), ``token`` ``[B]`` and ``index`` ``[B]`` (a sequence
        through the accepted prefix).

    Examples
    --------
    >>> import torch
    >>> p = torch.tensor([[[[0.0, 1.0], [1.0, 0.0]]]], dtype=torch.float64)   # B = k = gamma = 1
    >>> out = walk_step(p, torch.tensor([[[1]]]), torch.tensor([[0.5, 0.5]], dtype=torch.float64))
    >>> out.accepted.tolist(), out.token.tolist()
    ([1], [0])
    """
    B, k, g1, _ = p.shape
    ar = torch.arange(B, device=p.device)
    alive = torch.ones(B, k, dtype=torch.bool, device=p.device)
    running = torch.ones(B, dtype=torch.bool, device=p.device)
    tau = torch.zeros(B, dtype=torch.long, device=p.device)
    token = torch.zeros(B, dtype=torch.long, device=p.device)
    row = torch.zeros(B, dtype=torch.long, device=p.device)
    for t in range(g1):
        row = torch.where(running, alive.to(torch.long).argmax(dim=1), row)  # first alive sequence
        cdf = p[ar, row, t].double().cumsum(dim=-1)  # [B, V]
        y = invert_cdf(cdf, u[:, t : t + 1] * cdf[:, -1:])[:, 0]  # [B]
        if t < g1 - 1:
            alive = alive & (drafts[:, :, t] == y[:, None])
            survive = running & alive.any(dim=1)
        else:
            survive = torch.zeros_like(running)
        stop = running & ~survive
        token = torch.where(stop, y, token)
        tau = tau + survive.to(torch.long)
        running = survive
    return StepOutput(accepted=tau, token=token, index=row)


def walk_sample(p: torch.Tensor, drafts: torch.Tensor, *, generator: torch.Generator) -> StepOutput:
    """Draw the walk's uniforms (``[B, gamma + 1]``, one ``torch.rand`` call) and run :func:`walk_step`.

    Parameters
    ----------
    p : torch.Tensor
        ``[B, k, gamma + 1, V]`` target conditionals.
    drafts : torch.Tensor
        ``[B, k, gamma]`` long drafts.
    generator : torch.Generator
        The only source of randomness.

    Returns
    -------
    otspec_gpu.verifiers.StepOutput
        As :func:`walk_step`.
    """
    u = torch.rand((p.shape[0], p.shape[2]), dtype=torch.float64, device=p.device, generator=generator)
    return walk_step(p, drafts, u)


class WalkStep:
    """The decoder's verifier step for deterministic trees (the call signature of
    :class:`otspec_gpu.verifying.VerifierStep`): the sample-and-match walk over each prompt's
    ``k`` sequences, on the verification stream.

    Parameters
    ----------
    B : int
        Prompts in the batch.
    k : int
        Sequences per prompt.
    """

    rule = "sample_match"

    def __init__(self, B: int, k: int):
        self.B, self.k = B, k

    def rule_for(self, n: int) -> str:
        """``"sample_match"``, whatever the number of real sequences.

        Parameters
        ----------
        n : int
            Real sequences of a prompt.

        Returns
        -------
        str
        """
        return self.rule

    def __call__(self, P, Q, X, n_drafts, verify: torch.Generator, bonus: torch.Generator) -> StepOutput:
        """Verify one round (``P`` ``[R, gamma + 1, V]``, ``X`` ``[R, gamma]``; ``Q``, ``n_drafts``
        and ``bonus`` are not used: the walk draws only from the target, one uniform per depth).

        Parameters
        ----------
        P, Q, X : torch.Tensor
            The round's target conditionals, draft conditionals and drafts.
        n_drafts : torch.Tensor
            ``[B]`` real sequences per prompt.
        verify : torch.Generator
            The verification stream.
        bonus : torch.Generator
            The bonus stream (unused).

        Returns
        -------
        otspec_gpu.verifiers.StepOutput
            Per prompt ``accepted``, ``token`` and ``index`` (the row followed).
        """
        B, k, V = self.B, self.k, P.shape[-1]
        g = X.shape[1]
        return walk_sample(P.view(B, k, g + 1, V), X.view(B, k, g), generator=verify)
