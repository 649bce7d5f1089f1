r"""Multi-draft sequence (tree) verifiers in torch: SpecTr / RRS over ``k`` draft sequences.

Batched twin of :mod:`otspec.verifiers.tree`: ``k`` drafted sequences of length ``gamma`` per row
form a tree (the trie of their prefixes), verified top-down. At depth ``t`` the sequences that agree
with the emitted prefix :math:`y^t` (the *alive* ones, in index order) propose their next tokens; the
single-step rule of the node maps them to :math:`Y_{t+1} \sim M_b(\cdot \mid y^t)`; the sequences
with :math:`X_{t+1} = Y_{t+1}` stay alive. The block stops when none stays alive (:math:`Y_{t+1}` is
then the correction token), or after ``gamma`` matched positions with a bonus token
:math:`\sim M_b(\cdot \mid y^\gamma)`. Every step is a lossless single-step coupling of the alive
drafts' next-token law with the target conditional, so the decoded stream has the target law.

Rules (``rule=``, the numpy tree module's names, :data:`otspec.verifiers.tree.VERIFIERS`) and the
per-node single-step verifier each uses (from :data:`otspec_gpu.verifiers.VERIFIERS`, the same
code as the single-step twins; with one alive draft each is token verification):

* ``"kseq"`` -- K-SEQ (``kseq``, SpecTr Algorithm 2 with :math:`\rho^*` for the node's number of
  alive drafts); sequences drafted i.i.d.;
* ``"rrs"`` -- recursive rejection sampling with replacement (``rrs``, SpecInfer); i.i.d. sequences;
* ``"rrs_wor"`` -- recursive rejection without replacement (``rrs_wor``, RSD); the ``k`` first
  tokens drawn without replacement, each sequence then continued as its own chain, so below the
  root every node has one alive draft.

:func:`sample` also runs ``"kseq_bv"``, K-SEQ's BV boost (:mod:`otspec_gpu.verifiers.tree_boost`:
K-SEQ's accepted prefix, a uniform sequence through it, block verification with the selection
law's conditionals); its rows are not shared (``p.shape[0] == B``).

:func:`draft_sequences` draws sequences with exactly the law each rule assumes.

Shapes (``B`` rows, ``k`` sequences, length ``gamma``, vocabulary ``V``)::

    drafts       [B, k, gamma]          long
    p            [B, k, gamma + 1, V]   p[b, j, i] = M_b(. | context, drafts[b, j, :i])
    q            [B, k, gamma, V]       q[b, j, i] = M_s(. | context, drafts[b, j, :i])
    conditional  [B, k, gamma + 1, V]   see :func:`conditional`

Rows of sequences that share a prefix are equal (the same conditional); the verifier reads the row
of the lowest-index sequence through each node.

``p`` and ``q`` may instead have a leading dimension of 1 (``[1, k, gamma + 1, V]`` and
``[1, k, gamma, V]``): one set of conditionals shared by every row of ``drafts``, for rows whose
drafted sequences meet the same conditionals (``B`` copies of one drafted tree, or rows grouped by
what their model conditions on). :func:`sample` then runs each node's single-step rule on the shared
``[1, V]`` row with all the node's draft rows at once, so the rules whose residuals do not depend on
the drafted tokens (``kseq``, ``rrs``, and token verification below the root) build them once and
cost :math:`O(k \log V)` per row instead of :math:`O(V)`; the law is the same as with the rows
repeated (only the order in which uniforms are drawn differs).

References
----------
Sun, Suresh, Ro, Beirami, Jain, Yu, "SpecTr: Fast Speculative Decoding via Optimal Transport"
(NeurIPS 2023); Miao et al., "SpecInfer" (ASPLOS 2024); Jeon et al., "Recursive Speculative
Decoding" (arXiv 2402.14160).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from otspec.errors import (
    InvalidDraftsError,
    ShapeMismatchError,
    UnsupportedMethodError,
)
from otspec_gpu._scratch import host_shortcuts
from otspec_gpu._validation import check_rows, check_same_device, check_tensor_types
from otspec_gpu.kernels import try_kernel, use_kernels
from otspec_gpu.sampling import categorical, sample_weights
from otspec_gpu.verifiers._docs import fill_doc
from otspec_gpu.verifiers.base import StepOutput, TorchVerifier
from otspec_gpu.verifiers.registry import TREE, VERIFIERS

__all__ = [
    "conditional",
    "draft_sequences",
    "expected_accepted",
    "expected_accepted_given_drafts",
    "sample",
    "step",
    "uniforms",
]

#: Tree rules with a pure masked step (no host synchronisation): every tree rule (the registry's
#: :data:`~otspec_gpu.verifiers.registry.TREE`).
MASKED = TREE


def _node_verifier(rule: str) -> TorchVerifier:
    """The single-step verifier run at every node of tree rule ``rule`` (the torch table's entry)."""
    entry = VERIFIERS.get(rule) if isinstance(rule, str) else None
    if entry is None or not entry.tree:
        raise UnsupportedMethodError(f"rule must be one of {TREE} (got {rule!r}); they are the numpy tree module's names")
    return entry.single_step


def _check(p, q, drafts, rule: str, validate: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, TorchVerifier]:
    ver = _node_verifier(rule)
    check_tensor_types(p, q, drafts)
    if drafts.ndim != 3 or drafts.shape[1] < 1 or drafts.shape[2] < 1:
        raise ShapeMismatchError(
            f"drafts must have shape [B, k, gamma] with k, gamma >= 1 (got {list(drafts.shape)}); k drafted sequences per row"
        )
    B, k, g = drafts.shape
    if q.ndim != 4 or q.shape[0] not in (B, 1) or tuple(q.shape[1:3]) != (k, g) or q.shape[3] < 1:
        raise ShapeMismatchError(
            f"q must have shape [B, k, gamma, V] = [{B}, {k}, {g}, V], or [1, {k}, {g}, V] shared by every row "
            f"(got {list(q.shape)}); q[b, j, i] = M_s(. | drafts[b, j, :i])"
        )
    V = q.shape[3]
    if p.ndim != 4 or tuple(p.shape) != (q.shape[0], k, g + 1, V):
        raise ShapeMismatchError(
            f"p must have shape [{q.shape[0]}, k, gamma + 1, V] = [{q.shape[0]}, {k}, {g + 1}, {V}] like q (got {list(p.shape)}); "
            "p[b, j, i] = M_b(. | drafts[b, j, :i])"
        )
    check_same_device(p, q, drafts)
    drafts = drafts.long()
    if validate:
        check_rows(p, "p")
        check_rows(q, "q")
        if bool(((drafts < 0) | (drafts >= V)).any()):
            raise InvalidDraftsError(
                f"drafts must be token ids in [0, {V}) (got {int(drafts.min())}..{int(drafts.max())}); pass ids of the vocabulary"
            )
        qx = q.expand(B, -1, -1, -1).gather(3, drafts.unsqueeze(-1)).squeeze(-1)  # [B, k, g]
        if bool((qx <= 0).any()):
            b, j, i = (int(v) for v in (qx <= 0).nonzero()[0])
            raise InvalidDraftsError(
                f"drafts[{b}, {j}, {i}] = {int(drafts[b, j, i])} has draft probability 0 after its prefix; "
                "draw the sequences from the same processed q that is passed here (see draft_sequences)"
            )
        if rule == "rrs_wor" and k > 1:
            first = torch.sort(drafts[:, :, 0], dim=1).values
            if bool((first[:, 1:] == first[:, :-1]).any()):
                raise InvalidDraftsError(
                    "rule 'rrs_wor' needs distinct first tokens in every row (got a repeat); draft them without replacement (draft_sequences(..., replacement=False))"
                )
    return p, q, drafts, ver


def _prefix_structure(drafts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(same, canon)``: ``same[b, j, l, t]`` = sequences j and l share their first t tokens
    ``[B, k, k, gamma + 1]``; ``canon[b, j, t]`` = the lowest such l ``[B, k, gamma + 1]``."""
    eq = drafts[:, :, None, :] == drafts[:, None, :, :]  # [B, k, k, g]
    same = torch.cat([torch.ones_like(eq[..., :1]), torch.cumprod(eq.to(torch.uint8), dim=-1).bool()], dim=-1)
    canon = torch.argmax(same.to(torch.uint8), dim=2)  # first True over l
    return same, canon


def _alive_tokens(alive: torch.Tensor, tokens: torch.Tensor, m: int) -> torch.Tensor:
    """The tokens ``[n, m]`` of the ``m`` alive sequences of each row, in sequence-index order."""
    order = torch.sort((~alive).to(torch.uint8), dim=1, stable=True).indices[:, :m]
    return tokens.gather(1, order)


def _walk(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, ver: TorchVerifier, want_law: bool):
    """Exact top-down walk: ``(reach [B, k, gamma + 1] float64, law or None)``; ``reach[b, j, t]`` is
    the probability that the emitted prefix reaches ``drafts[b, j, :t]`` (at canonical j only)."""
    B, k, g = drafts.shape
    V = p.shape[-1]
    dev = p.device
    p, q = p.expand(B, -1, -1, -1), q.expand(B, -1, -1, -1)  # shared [1, ...] rows: views, no copy
    same, canon = _prefix_structure(drafts)
    is_canon = canon == torch.arange(k, device=dev)[None, :, None]  # [B, k, g+1]
    reach = torch.zeros((B, k, g + 1), dtype=torch.float64, device=dev)
    reach[:, 0, 0] = 1.0
    law = torch.zeros((B, k, g + 1, V), dtype=torch.float64, device=dev) if want_law else None
    for t in range(g):  # loop over depth
        alive = same[:, :, :, t]  # [B, j, l]: sequence l passes through node (j, t)
        count = alive.sum(-1)  # [B, k]
        node = is_canon[:, :, t] & (reach[:, :, t] > 0)
        at_draft = torch.zeros((B, k), dtype=torch.float64, device=dev)  # law of node canon(l) at drafts[l, t]
        for m in range(1, k + 1):  # loop over the number of alive drafts
            nb, nj = torch.nonzero(node & (count == m), as_tuple=True)
            if nb.numel() == 0:
                continue
            toks = _alive_tokens(alive[nb, nj], drafts[nb, :, t], m)  # [n, m]
            pi = ver.conditional(p[nb, nj, t], q[nb, nj, t], toks, validate=False).double()  # [n, V]
            if want_law:
                law[nb, nj, t] = reach[nb, nj, t, None] * pi.scatter(1, toks, 0.0)  # stops: y matches no alive draft
            vals = pi.gather(1, drafts[nb, :, t])  # [n, k]: node law at every sequence's next token
            # each sequence passes through exactly one node per depth, so the sum has one term
            at_draft.index_put_((nb,), torch.where(alive[nb, nj], vals, torch.zeros_like(vals)), accumulate=True)
        parent = canon[:, :, t]  # [B, k]
        child = is_canon[:, :, t + 1]
        reach[:, :, t + 1] = torch.where(child, reach[:, :, t].gather(1, parent) * at_draft, torch.zeros_like(at_draft))
    if want_law:
        law[:, :, g] = reach[:, :, g, None] * p[:, :, g].double()
    return reach, law


@fill_doc
def conditional(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, *, rule: str, validate: bool = True) -> torch.Tensor:
    r"""Exact law of the emitted continuation given the drafted sequences: ``[B, k, gamma + 1, V]``.

    ``law[b, j, t, y]`` is the probability that the block emits the first ``t`` tokens of sequence
    ``j``, with ``j`` the lowest index of a sequence carrying that prefix, followed by ``y``:
    :math:`P(\tau = t, Y^t = x^{(j)}_{1..t}, Y_{t+1} = y \mid \text{drafts})`. Entries at a
    non-lowest index ``j`` are 0; the whole tensor sums to 1 per row. For ``t < gamma``, ``y`` is never
    the next token of an alive sequence (that would continue the block).

    This is :func:`otspec.verifiers.tree.kernel`'s per-tree law ``{O: P(O)}`` with
    :math:`O = (x^{(j)}_{1..t}, y)`, computed by an exact top-down walk: a loop over depth and over
    the number of alive drafts, each node's output law from the node verifier's ``conditional``.

    {tree_params}

    Returns
    -------
    torch.Tensor
        ``[B, k, gamma + 1, V]`` in ``p``'s dtype (accumulated in float64).

    {tree_raises_section}

    Examples
    --------
    >>> import torch
    >>> p = torch.full((1, 2, 2, 2), 0.5, dtype=torch.float64)
    >>> law = conditional(p, p[:, :, :1], torch.tensor([[[0], [1]]]), rule="rrs")
    >>> law.sum().item(), law[0, :, 1].sum().item()
    (1.0, 1.0)
    """
    p, q, drafts, ver = _check(p, q, drafts, rule, validate)
    return _walk(p, q, drafts, ver, True)[1].to(p.dtype)


def expected_accepted(conditional: torch.Tensor) -> torch.Tensor:
    r""":math:`E[\tau \mid \text{drafts}]` per row ``[B]`` from a :func:`conditional` law ``[B, k, gamma + 1, V]``.

    Parameters
    ----------
    conditional : torch.Tensor
        ``[B, k, gamma + 1, V]`` law from :func:`conditional`.

    Returns
    -------
    torch.Tensor
        ``[B]`` :math:`E[\tau \mid \text{drafts}]`.

    Examples
    --------
    >>> import torch
    >>> law = torch.zeros(1, 2, 3, 2); law[0, 1, 2, 0] = 1.0
    >>> expected_accepted(law).tolist()
    [2.0]
    """
    tau = conditional.sum(dim=(1, 3))  # [B, gamma + 1]
    return tau @ torch.arange(tau.shape[-1], dtype=tau.dtype, device=tau.device)


@fill_doc
def expected_accepted_given_drafts(
    p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, *, rule: str, validate: bool = True
) -> torch.Tensor:
    r""":math:`E[\tau \mid \text{drafts}] = \sum_{t=1}^{\gamma} P(\tau \ge t \mid \text{drafts})` per row
    ``[B]`` (float64), without building the ``[B, k, gamma + 1, V]`` law.

    :math:`P(\tau \ge t)` is the total probability of reaching depth ``t`` in the walk of
    :func:`conditional`. Averaged over real drafted trees it estimates :math:`E[\tau]` with less
    variance than counting accepted tokens (the coins are integrated out).

    {tree_params}

    Returns
    -------
    torch.Tensor
        ``[B]`` float64 :math:`E[\tau \mid \text{drafts}]`.

    {tree_raises_section}

    Examples
    --------
    >>> import torch
    >>> p = torch.full((1, 2, 3, 2), 0.5, dtype=torch.float64)
    >>> expected_accepted_given_drafts(p, p[:, :, :2], torch.tensor([[[0, 1], [1, 1]]]), rule="kseq").tolist()
    [2.0]
    """
    p, q, drafts, ver = _check(p, q, drafts, rule, validate)
    reach, _ = _walk(p, q, drafts, ver, False)
    return reach[:, :, 1:].sum(dim=(1, 2))


def _walk_start(B: int, k: int, g: int, dev: torch.device) -> tuple[torch.Tensor, ...]:
    """The state of a sampled tree walk before depth 0: ``alive`` ``[B, k]`` (every sequence), ``done``
    ``[B]`` (no row stopped), ``tau`` ``[B]`` (``g``: all accepted), then ``y`` and ``path`` ``[B]`` (0)."""
    alive = torch.ones((B, k), dtype=torch.bool, device=dev)
    done = torch.zeros(B, dtype=torch.bool, device=dev)
    tau = torch.full((B,), g, dtype=torch.long, device=dev)
    y = torch.zeros(B, dtype=torch.long, device=dev)
    path = torch.zeros(B, dtype=torch.long, device=dev)
    return alive, done, tau, y, path


def _walk_advance(
    t: int,
    tok: torch.Tensor,
    drafts: torch.Tensor,
    j: torch.Tensor,
    alive: torch.Tensor,
    done: torch.Tensor,
    tau: torch.Tensor,
    y: torch.Tensor,
    path: torch.Tensor,
) -> tuple[torch.Tensor, ...]:
    """The walk state after depth ``t`` emitted ``tok`` ``[B]`` at the node of lowest alive sequence
    ``j``: rows whose alive sequences all miss ``tok`` stop there (``tau = t``, ``y = tok``,
    ``path = j``); the others keep the sequences that match."""
    match = alive & (drafts[:, :, t] == tok[:, None])
    stop = ~done & ~match.any(1)
    tau = torch.where(stop, t, tau)
    y = torch.where(stop, tok, y)
    path = torch.where(stop, j, path)
    alive = torch.where(done[:, None], alive, match)
    done = done | stop
    return alive, done, tau, y, path


def _node_sample(ver: TorchVerifier, p: torch.Tensor, q: torch.Tensor, toks: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One output token per node row (the node verifier's sampler, fresh uniforms from ``generator``)."""
    return ver.sample(p, q, toks, generator=generator, validate=False).token


@fill_doc
def sample(
    p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, *, rule: str, generator: torch.Generator, validate: bool = True
) -> StepOutput:
    r"""Verify ``k`` drafted sequences per row once (top-down walk; see the module docstring).

    At each depth the rows are grouped by their number ``m`` of alive drafts and each group goes
    through the node verifier's ``sample`` (its accept coins and residual draws are separate
    ``torch.rand`` calls on ``generator``); the bonus token is a further inverse-CDF draw. No
    uniform is used twice. Shapes as in :func:`conditional`. With shared rows (``p.shape[0] == 1 <
    B``) each group is split further by its lowest alive sequence (at most ``k`` calls) and the node
    rule gets that sequence's shared ``[1, V]`` row.

    {tree_params_sample}

    Returns
    -------
    StepOutput
        ``accepted`` [B] in ``0..gamma``, ``token`` [B] (correction or bonus) and ``index`` [B]: the
        lowest index ``j`` of a sequence whose first ``accepted`` tokens are the emitted prefix
        (``drafts[b, index[b], :accepted[b]]``).

    {tree_raises_section}

    Examples
    --------
    >>> import torch
    >>> p = torch.full((3, 2, 3, 2), 0.5)
    >>> x = torch.tensor([[[0, 1], [1, 1]]] * 3)
    >>> out = sample(p, p[:, :, :2], x, rule="rrs", generator=torch.Generator().manual_seed(0))
    >>> out.accepted.tolist()
    [2, 2, 2]
    """
    if rule == "kseq_bv":  # select-then-BV: K-SEQ's accepted prefix, then block verification (its own module)
        from otspec_gpu.verifiers import tree_boost

        return tree_boost.sample(p, q, drafts, rule=rule, generator=generator, validate=validate)
    p, q, drafts, ver = _check(p, q, drafts, rule, validate)
    if rule in MASKED and not host_shortcuts(p):  # CUDA: the masked walk, no host synchronisation
        return step(p, q, drafts, *uniforms(p, q, drafts, generator), rule=rule)
    B, k, g = drafts.shape
    dev = p.device
    shared = p.shape[0] == 1 and B > 1
    alive, done, tau, y, path = _walk_start(B, k, g, dev)
    for t in range(g):  # loop over depth
        j = torch.argmax(alive.to(torch.uint8), dim=1)  # lowest alive sequence: the node's rows
        count = alive.sum(1)
        tok = torch.zeros(B, dtype=torch.long, device=dev)
        for m in range(1, k + 1):  # loop over the number of alive drafts
            rows = torch.nonzero(~done & (count == m), as_tuple=True)[0]
            if rows.numel() == 0:
                continue
            toks = _alive_tokens(alive[rows], drafts[rows, :, t], m)
            if not shared:
                tok[rows] = _node_sample(ver, p[rows, j[rows], t], q[rows, j[rows], t], toks, generator)
                continue
            for jj, sel in _by_sequence(j[rows], k):  # one shared [1, V] node law per lowest alive sequence
                tok[rows[sel]] = _node_sample(ver, p[0, jj, t][None], q[0, jj, t][None], toks[sel], generator)
        alive, done, tau, y, path = _walk_advance(t, tok, drafts, j, alive, done, tau, y, path)
    rows = torch.nonzero(~done, as_tuple=True)[0]
    if rows.numel():
        jr = torch.argmax(alive[rows].to(torch.uint8), dim=1)
        path[rows] = jr
        if not shared:
            y[rows] = categorical(p[rows, jr, g], generator)  # bonus token
        else:
            for jj, sel in _by_sequence(jr, k):
                y[rows[sel]] = categorical(p[0, jj, g][None], generator, n=int(sel.numel()))
    return StepOutput(accepted=tau, token=y, index=path)


def uniforms(
    p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The uniforms of the masked walk (:func:`step`), three ``rand`` calls on ``generator``: accept
    coins ``[gamma, B, k]``, node residual uniforms ``[gamma, B]``, bonus uniforms ``[B]`` (float64).

    Parameters
    ----------
    p, q : torch.Tensor
        As in :func:`sample` (their device is used).
    drafts : torch.Tensor
        ``[B, k, gamma]`` drafted sequences.
    generator : torch.Generator
        Source of the uniforms.

    Returns
    -------
    tuple of torch.Tensor
        ``(coins, u, u_bonus)``.
    """
    B, k, g = drafts.shape
    f64 = {"dtype": torch.float64, "device": p.device, "generator": generator}
    return torch.rand((g, B, k), **f64), torch.rand((g, B), **f64), torch.rand(B, **f64)


def step(
    p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, coins: torch.Tensor, u: torch.Tensor, u_bonus: torch.Tensor, *, rule: str
) -> StepOutput:
    r"""The tree walk of any tree rule as a pure step of its uniforms, with masks instead of row
    groups: no host synchronisation, fixed shapes (what :func:`sample` runs on CUDA).

    At depth ``t`` every row runs one node of its rule over its alive drafts, left-aligned with a
    validity mask (RRS: :func:`~otspec_gpu.verifiers.step._recursive.sample_recursive` with
    ``valid``; K-SEQ: :func:`~otspec_gpu.verifiers.step.kseq.node_step`, :math:`\rho^*` for the
    row's number of alive drafts), on the row of its lowest alive sequence; rows already stopped
    compute and discard. The law is that of
    :func:`sample`'s grouped walk (the same node rule at the same node); the uniforms are drawn in a
    different order (fixed ``[gamma, B, k]`` coins, see :func:`uniforms`), so the seeded tokens
    differ from the CPU walk's.

    Parameters
    ----------
    p, q : torch.Tensor
        ``[B or 1, k, gamma + 1, V]`` and ``[B or 1, k, gamma, V]`` (checked by the caller).
    drafts : torch.Tensor
        ``[B, k, gamma]`` long drafted sequences.
    coins, u, u_bonus : torch.Tensor
        The output of :func:`uniforms`.
    rule : str
        ``"kseq"``, ``"rrs"`` or ``"rrs_wor"``.

    Returns
    -------
    StepOutput
        As :func:`sample`.
    """
    from otspec_gpu.verifiers.recursive import sample_recursive
    from otspec_gpu.verifiers.step.kseq import node_step

    B, k, g = drafts.shape
    dev = p.device
    p, q = p.expand(B, -1, -1, -1), q.expand(B, -1, -1, -1)
    rows = torch.arange(B, device=dev)
    slots = torch.arange(k, device=dev)[None, :]
    alive, done, tau, y, path = _walk_start(B, k, g, dev)
    for t in range(g):  # loop over depth
        j = torch.argmax(alive.to(torch.uint8), dim=1)  # lowest alive sequence: the node's rows
        order = torch.sort((~alive).to(torch.uint8), dim=1, stable=True).indices  # alive first, in index order
        toks = drafts[:, :, t].gather(1, order)
        count = alive.sum(1)
        tok = None
        if rule == "kseq":  # K-SEQ over each row's alive drafts (rho* per row for its count)
            tok = node_step(p[rows, j, t], q[rows, j, t], toks, count, coins[t], u[t])
        elif use_kernels(p):  # one fused launch per depth (otspec_gpu.kernels.chain.rrs_single_step)
            from otspec_gpu.kernels.chain import rrs_single_step

            tok = try_kernel(rrs_single_step, p[rows, j, t], q[rows, j, t], toks, coins[t], u[t], rule == "rrs_wor", count)
        if tok is None:
            valid = slots < count[:, None]
            tok = sample_recursive(p[rows, j, t], q[rows, j, t], toks, coins[t], u[t], wor=rule == "rrs_wor", valid=valid)
        alive, done, tau, y, path = _walk_advance(t, tok, drafts, j, alive, done, tau, y, path)
    jr = torch.argmax(alive.to(torch.uint8), dim=1)
    bonus = sample_weights(p[rows, jr, g], u_bonus)
    return StepOutput(accepted=tau, token=torch.where(done, y, bonus), index=torch.where(done, path, jr))


def _by_sequence(j: torch.Tensor, k: int):
    """``(jj, positions of j == jj)`` for each sequence index ``jj`` present in ``j`` (loop over k)."""
    for jj in range(k):
        sel = torch.nonzero(j == jj, as_tuple=True)[0]
        if sel.numel():
            yield jj, sel


def draft_sequences(
    next_q: Callable[[torch.Tensor], torch.Tensor], B: int, k: int, gamma: int, *, replacement: bool = True, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Draft ``k`` sequences of length ``gamma`` per row with the law the tree rules assume.

    * ``replacement=True`` (``"kseq"``, ``"rrs"``): the ``k`` sequences are i.i.d.
      :math:`\sim M_s`: every token of every sequence is an independent draw from its own prefix's
      conditional (so the next tokens of the sequences alive at a node are i.i.d. given the past).
    * ``replacement=False`` (``"rrs_wor"``): the ``k`` first tokens are drawn without replacement
      (successive sampling proportional to :math:`M_s(\cdot)`,
      :func:`otspec_gpu.drafting.sample_drafts` with ``"without_replacement"``), and each sequence is
      then continued independently, :math:`\sim M_s(\cdot \mid x_1)`.

    These are the laws of :func:`otspec.trees.draft_trees`. Sharing the draft model's
    outputs across sequences with equal prefixes is allowed (their rows are equal); what must not
    happen is drafting a node's children by anything else (e.g. top-k, or deduplicated children
    under ``replacement=True``), or passing :func:`sample` a ``q`` other than the one drafted from.

    Parameters
    ----------
    next_q : callable
        ``next_q(prefix)`` with ``prefix`` a ``[B * k, t]`` long tensor (row ``b * k + j`` is
        sequence ``j`` of row ``b``; ``t = 0`` at the root) returns the processed draft conditionals
        ``[B * k, V]`` after the row's context and ``prefix``.
    B, k, gamma : int
    replacement : bool
    generator : torch.Generator

    Returns
    -------
    (drafts [B, k, gamma] long, q [B, k, gamma, V])
        ``q`` is exactly what :func:`sample` and :func:`conditional` need.

    Examples
    --------
    >>> import torch
    >>> q0 = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    >>> x, q = draft_sequences(lambda pre: q0.expand(pre.shape[0], -1), 2, 3, 2, replacement=False, generator=torch.Generator().manual_seed(0))
    >>> x.shape, q.shape, sorted(x[0, :, 0].tolist())
    (torch.Size([2, 3, 2]), torch.Size([2, 3, 2, 3]), [0, 1, 2])
    """
    from otspec_gpu.drafting import sample_drafts

    n = B * k
    prefix = torch.zeros((n, 0), dtype=torch.long)
    xs, qs = [], []
    for t in range(gamma):
        qt = next_q(prefix)  # [B * k, V]
        if t == 0:
            prefix = prefix.to(qt.device)
        if t == 0 and not replacement:
            x = sample_drafts(qt.reshape(B, k, -1)[:, 0], k, "without_replacement", generator=generator).reshape(n)
        else:
            x = categorical(qt, generator)
        xs.append(x)
        qs.append(qt)
        prefix = torch.cat([prefix, x[:, None]], dim=1)
    V = qs[0].shape[-1]
    return torch.stack(xs, 1).view(B, k, gamma), torch.stack(qs, 1).view(B, k, gamma, V)
