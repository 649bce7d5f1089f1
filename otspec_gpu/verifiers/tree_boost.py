r"""K-SEQ's BV boost over a drafted tree in torch (``rule="kseq_bv"``): the deployable select-then-BV rule.

Torch twin of ``"kseq_bv"`` in :mod:`otspec.verifiers.tree_deployable`. Per row: K-SEQ walks the
drafted tree top-down (the node twin :data:`otspec_gpu.verifiers.VERIFIERS` ``["kseq"]`` with
:math:`\rho^*` for the node's number of alive drafts), one sequence through its accepted prefix is
chosen uniformly, and block verification (:func:`otspec_gpu.verifiers.chain.block_sample`) runs on
it with the selection law's conditionals :math:`\mu(\cdot \mid x^i)` as the draft model. The
conditionals come from the count recursion along the chosen path (:func:`mu_conditionals`):
:math:`O(kV)` per depth, no enumeration. Lossless because the chosen sequence has law :math:`\mu`
exactly and block verification is lossless for the chain law it is told.

Shapes as in :mod:`otspec_gpu.verifiers.tree` (``B`` rows, ``k`` sequences, length ``gamma``)::

    drafts  [B, k, gamma]          long
    p       [B, k, gamma + 1, V]   p[b, j, i] = M_b(. | context, drafts[b, j, :i])
    q       [B, k, gamma, V]       q[b, j, i] = M_s(. | context, drafts[b, j, :i])

References
----------
Sun, Suresh, Ro, Beirami, Jain, Yu, "SpecTr" (NeurIPS 2023), Algorithm 2; Sun et al., "Block
Verification Accelerates Speculative Decoding" (ICLR 2025), Algorithm 2.
"""

from __future__ import annotations

import torch

from otspec.errors import InvalidDraftsError, ShapeMismatchError, UnsupportedMethodError
from otspec_gpu._validation import check_rows, check_same_device, check_tensor_types
from otspec_gpu.verifiers.base import StepOutput
from otspec_gpu.verifiers.chain import block_sample
from otspec_gpu.verifiers.registry import VERIFIERS
from otspec_gpu.verifiers.step.kseq import rho_star

__all__ = ["RULES", "mu_conditionals", "sample"]

#: The rules of this module.
RULES = ("kseq_bv",)


def _check(p, q, drafts, validate: bool):
    check_tensor_types(p, q, drafts)
    if drafts.ndim != 3 or drafts.shape[1] < 1 or drafts.shape[2] < 1:
        raise ShapeMismatchError(
            f"drafts must have shape [B, k, gamma] with k, gamma >= 1 (got {list(drafts.shape)}); k drafted sequences per row"
        )
    B, k, g = drafts.shape
    if q.ndim != 4 or tuple(q.shape[:3]) != (B, k, g) or p.ndim != 4 or tuple(p.shape) != (B, k, g + 1, q.shape[3]):
        raise ShapeMismatchError(
            f"p must have shape [B, k, gamma + 1, V] and q [B, k, gamma, V] for drafts {list(drafts.shape)} "
            f"(got {list(p.shape)} and {list(q.shape)}); pass the conditionals at every node of every sequence"
        )
    check_same_device(p, q, drafts)
    drafts = drafts.long()
    if validate:
        check_rows(p, "p")
        check_rows(q, "q")
        V = q.shape[3]
        if bool(((drafts < 0) | (drafts >= V)).any()):
            raise InvalidDraftsError(
                f"drafts must be token ids in [0, {V}) (got {int(drafts.min())}..{int(drafts.max())}); pass ids of the vocabulary"
            )
        if bool((q.gather(3, drafts.unsqueeze(-1)) <= 0).any()):
            raise InvalidDraftsError("a drafted token has draft probability 0 after its prefix; draw the sequences from the q passed here")
    return p, q, drafts


def _node(p: torch.Tensor, q: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """K-SEQ with ``n`` drafts at each row's node: accept ``[B, V]``, residual ``[B, V]``, beta ``[B]``."""
    if n == 1:
        a = torch.where(q > 0, torch.clamp(p / torch.where(q > 0, q, torch.ones_like(q)), max=1.0), torch.ones_like(q))
        w = torch.clamp(p - q, min=0.0)
        beta = torch.minimum(p, q).sum(-1)
    else:
        rho = rho_star(p, q, n)[:, None]
        m = torch.minimum(p / rho, q)
        beta = m.sum(-1)
        a = torch.where(q > 0, torch.clamp(p / torch.where(q > 0, rho * q, torch.ones_like(q)), max=1.0), torch.ones_like(q))
        gamma = torch.where(
            beta > 0, (1.0 - (1.0 - beta) ** n) / torch.where(beta > 0, beta, torch.ones_like(beta)), torch.zeros_like(beta)
        )
        w = torch.clamp(p - gamma[:, None] * m, min=0.0)
    mass = w.sum(-1, keepdim=True)
    r = torch.where(mass > 0, w / torch.where(mass > 0, mass, torch.ones_like(mass)), p)
    return a, r, beta


def _counts(qy, ay, ry, beta, n: int) -> torch.Tensor:
    """``[B, n + 1]``: K-SEQ with n drafts outputs the row's token y and m drafts equal y."""
    rej_y = qy * (1.0 - ay)
    rej_o = torch.clamp(1.0 - beta - rej_y, min=0.0)

    def times(poly, lo, hi):  # poly * (lo + hi z), coefficients along the last axis
        out = torch.zeros(poly.shape[0], poly.shape[1] + 1, dtype=poly.dtype, device=poly.device)
        out[:, :-1] += poly * lo[:, None]
        out[:, 1:] += poly * hi[:, None]
        return out

    one = torch.ones(qy.shape[0], 1, dtype=qy.dtype, device=qy.device)
    rej_pow, fresh_pow = [one], [one]
    for _ in range(n):
        rej_pow.append(times(rej_pow[-1], rej_o, rej_y))
        fresh_pow.append(times(fresh_pow[-1], 1.0 - qy, qy))
    out = ry[:, None] * rej_pow[n]
    for j in range(1, n + 1):  # first acceptance at draft j
        c = rej_pow[j - 1]
        f = fresh_pow[n - j]
        conv = torch.zeros(qy.shape[0], n, dtype=qy.dtype, device=qy.device)
        for s in range(c.shape[1]):
            conv[:, s : s + f.shape[1]] += c[:, s : s + 1] * f
        out[:, 1:] += (qy * ay)[:, None] * conv
    return out


def mu_conditionals(p: torch.Tensor, q: torch.Tensor, path: torch.Tensor, k: int) -> torch.Tensor:
    r"""The boost's selection-law conditionals along one path per row: ``[B, gamma, V]`` float64.

    Count recursion (:mod:`otspec.verifiers.tree_deployable`): the law ``pi [B, k + 1]`` of the number
    of drafts through the node that K-SEQ's accepted prefix passes, and :math:`\sigma`, the chance that
    the prefix ended above and the chosen draft passes the node.

    Parameters
    ----------
    p : torch.Tensor
        ``[B, gamma + 1, V]`` (or ``[B, gamma, V]``) target conditionals along the path.
    q : torch.Tensor
        ``[B, gamma, V]`` draft conditionals along the path.
    path : torch.Tensor
        ``[B, gamma]`` long, the path.
    k : int
        Number of drafted sequences.

    Returns
    -------
    torch.Tensor
        ``[B, gamma, V]`` float64 rows, each a distribution.

    Examples
    --------
    >>> import torch
    >>> p = torch.full((1, 2, 2), 0.5, dtype=torch.float64)
    >>> mu_conditionals(p, p[:, :1], torch.tensor([[1]]), 2).tolist()
    [[[0.5, 0.5]]]
    """
    p, q = p.double(), q.double()
    B, g, V = q.shape
    pi = torch.zeros(B, k + 1, dtype=torch.float64, device=q.device)
    pi[:, k] = 1.0
    sigma = torch.zeros(B, dtype=torch.float64, device=q.device)
    out = torch.empty(B, g, V, dtype=torch.float64, device=q.device)
    rows = torch.arange(B, device=q.device)
    for i in range(g):  # loop over depth
        pp, qq, y = p[:, i], q[:, i], path[:, i]
        num = sigma[:, None] * qq
        nxt = torch.zeros_like(pi)
        qy = qq[rows, y]
        sig = sigma * qy
        for n in range(1, k + 1):  # loop over the number of drafts through the node
            w = pi[:, n]
            if not bool((w > 0).any()):  # a host check: no row has n drafts through its node (depth 0: only n = k)
                continue
            a, r, beta = _node(pp, qq, n)
            rej_tok = qq * (1.0 - a)
            miss = torch.clamp(1.0 - beta[:, None] - rej_tok, min=0.0)
            A = torch.clamp(pp - r * miss**n, min=0.0)
            surv = miss ** (n - 1)
            J = torch.clamp(rej_tok * ((r * surv).sum(-1, keepdim=True) - r * surv), min=0.0)
            num = num + w[:, None] * (A + J)
            L = _counts(qy, a[rows, y], r[rows, y], beta, n)
            nxt[:, 1 : n + 1] += w[:, None] * L[:, 1:]
            sig = sig + w * J[rows, y]
        tot = num.sum(-1, keepdim=True)
        out[:, i] = torch.where(tot > 0, num / torch.where(tot > 0, tot, torch.ones_like(tot)), qq)
        pi, sigma = nxt, sig
    return out


# long-function: the three stages of one boosted round (K-SEQ walk, uniform choice, block verification) share their tensors
def sample(
    p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, *, rule: str = "kseq_bv", generator: torch.Generator, validate: bool = True
) -> StepOutput:
    r"""Verify ``k`` drafted sequences per row once with K-SEQ's BV boost.

    The K-SEQ walk uses the node twin's sampler (its coins and residual draws on ``generator``), the
    uniform choice of a sequence through the accepted prefix one ``torch.rand`` draw, and block
    verification its own coins; no uniform is used twice.

    Parameters
    ----------
    p, q : torch.Tensor
        ``[B, k, gamma + 1, V]`` and ``[B, k, gamma, V]`` conditionals along each drafted sequence.
    drafts : torch.Tensor
        ``[B, k, gamma]`` long drafted sequences (i.i.d. from ``q``).
    rule : {"kseq_bv"}
        The rule.
    generator : torch.Generator
        Source of every uniform.
    validate : bool
        Check shapes, rows and the drafts first.

    Returns
    -------
    StepOutput
        ``accepted`` [B], ``token`` [B] (correction or bonus) and ``index`` [B]: the lowest index of a
        sequence whose first ``accepted`` tokens are the emitted prefix.

    Raises
    ------
    UnsupportedMethodError
        If ``rule`` is not ``"kseq_bv"``.
    ShapeMismatchError, InvalidDraftsError, InvalidDistributionError
        With ``validate``, for malformed inputs.

    Examples
    --------
    >>> import torch
    >>> p = torch.full((2, 2, 3, 2), 0.5, dtype=torch.float64)
    >>> x = torch.tensor([[[0, 1], [1, 1]]] * 2)
    >>> sample(p, p[:, :, :2], x, generator=torch.Generator().manual_seed(0)).accepted.tolist()
    [2, 2]
    """
    if rule not in RULES:
        raise UnsupportedMethodError(f"rule must be one of {RULES} (got {rule!r})")
    p, q, drafts = _check(p, q, drafts, validate)
    B, k, g = drafts.shape
    dev = p.device
    rows = torch.arange(B, device=dev)
    ver = VERIFIERS["kseq"].single_step
    # 1. the K-SEQ walk: the accepted prefix length z and the sequences through it
    alive = torch.ones(B, k, dtype=torch.bool, device=dev)
    done = torch.zeros(B, dtype=torch.bool, device=dev)
    z = torch.full((B,), g, dtype=torch.long, device=dev)
    for t in range(g):  # loop over depth
        j = torch.argmax(alive.to(torch.uint8), dim=1)
        count = alive.sum(1)
        tok = torch.zeros(B, dtype=torch.long, device=dev)
        for m in range(1, k + 1):  # loop over the number of alive drafts
            sel = torch.nonzero(~done & (count == m), as_tuple=True)[0]
            if sel.numel() == 0:
                continue
            order = torch.sort((~alive[sel]).to(torch.uint8), dim=1, stable=True).indices[:, :m]
            toks = drafts[sel, :, t].gather(1, order)
            tok[sel] = ver.sample(p[sel, j[sel], t], q[sel, j[sel], t], toks, generator=generator, validate=False).token
        match = alive & (drafts[:, :, t] == tok[:, None])
        stop = ~done & ~match.any(1)
        z = torch.where(stop, t, z)
        alive = torch.where(done[:, None] | stop[:, None], alive, match)
        done = done | stop
    # 2. a uniform sequence through the accepted prefix
    u = torch.rand(B, dtype=torch.float64, device=dev, generator=generator)
    cnt = alive.sum(1)
    rank = torch.minimum((u * cnt).long(), cnt - 1)
    chosen = torch.argmax((torch.cumsum(alive.long(), 1) > rank[:, None]).to(torch.uint8), dim=1)
    # 3. block verification of the chosen sequence with the selection law's conditionals
    path = drafts[rows, chosen]
    P = p[rows, chosen].double()
    mu = mu_conditionals(P, q[rows, chosen], path, k)
    out = block_sample(P, mu, path, generator=generator, validate=False)
    tau = out.accepted.long()
    same = (drafts == path[:, None, :]).long().cumprod(-1)  # [B, k, g]: sequence l shares the first t+1 tokens
    prefix_ok = torch.cat([torch.ones(B, k, 1, dtype=torch.long, device=dev), same], dim=-1).gather(2, tau[:, None, None].expand(B, k, 1))[
        ..., 0
    ]
    index = torch.argmax(prefix_ok.to(torch.uint8), dim=1)
    return StepOutput(accepted=tau, token=out.token.long(), index=index)
