r"""Drafts without replacement at the i.i.d. optimum in torch (twin of ``otspec.verifiers.wor_iid``).

The drafts are the first k distinct tokens of an i.i.d. stream of draws from q, in drawing order.
From them the rule resamples the first k hits of that stream (hit i repeats draft l with
probability :math:`q(d_l)` for each draft l already found, else it is the next new draft; one
uniform per hit), which are k i.i.d. draws from q, all of them drafts; the optimal i.i.d. rule
(:mod:`otspec_gpu.verifiers.step.optimal_iid`) then selects one of them and runs the accept /
residual step against :math:`r^*_{iid}`. Lossless; the kept selections accept exactly
:math:`\alpha^*_{iid}` and the membership acceptance lies between :math:`\alpha^*_{iid}` and
:math:`\alpha^*_{WOR}` (``docs/wor_iid.rst``).

Uniforms of one :func:`sample` call (:func:`uniforms`), in order: the hit stream ``[B, k - 1]``
(one ``rand`` call), then the level, choice, accept coin and residual draw of the optimal i.i.d.
rule (its order, four ``rand`` calls of ``[B]``). :func:`step` is the pure rule on them: the hits
(:func:`rebuild_hits`), then the i.i.d. rule's tree-free draw
(:func:`~otspec_gpu.verifiers.step._iid_bridge.bridge_step`) on the hits, all on ``p.device`` with no
host synchronisation. ``sample(method="auto")`` is exactly that for per-row laws (decoding) and small
batches; one law shared by more than :data:`~otspec_gpu.verifiers.step.optimal_iid.BRIDGE_ROWS` rows
takes the i.i.d. rule's host-built threshold tree instead (the same uniforms, the same tokens up to
rounding at a block boundary).

:func:`conditional` sums the i.i.d. rule's exact selection law over the Bell(k) hit patterns
(4 140 at k = 8), one batched pass per pattern: an exact reference for tests, not a decoding path.
"""

from __future__ import annotations

import torch

from otspec.verifiers.step.wor_iid import hit_strings
from otspec_gpu.sampling import sample_weights
from otspec_gpu.verifiers._docs import fill_doc
from otspec_gpu.verifiers.base import StepOutput, TorchVerifier, check_step, step_output
from otspec_gpu.verifiers.step import optimal_iid as iid
from otspec_gpu.verifiers.step._iid_bridge import bridge_step

__all__ = ["conditional", "rebuild_hits", "sample", "step", "uniforms", "wor_iid"]

NAME = "wor_iid"


def rebuild_hits(q_drafts: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Draft positions ``[B, k]`` of the first k hits of the stream, from uniforms ``u`` ``[B, k - 1]``.

    Hit ``i >= 1``: with ``j`` drafts found and ``C`` the cumulative q of the ordered drafts, it
    repeats draft ``#{l : C_l <= u}`` when that is below ``j``, else it is the new draft ``j`` (the
    numpy core's :func:`~otspec.verifiers.step.wor_iid.rebuild_hits`).

    Parameters
    ----------
    q_drafts : torch.Tensor
        ``[B, k]`` float64 q of each row's ordered drafts.
    u : torch.Tensor
        ``[B, k - 1]`` float64 uniforms on ``[0, 1)``.

    Returns
    -------
    torch.Tensor
        ``[B, k]`` long positions; column 0 is 0.
    """
    k = q_drafts.shape[1]
    cum = torch.cumsum(q_drafts, dim=1)
    cols = [torch.zeros(q_drafts.shape[0], dtype=torch.long, device=q_drafts.device)]
    found = torch.ones_like(cols[0])
    for i in range(1, k):  # a static loop over the k - 1 later hits: no data-dependent control flow
        idx = (cum <= u[:, i - 1 : i]).sum(dim=1)
        rep = idx < found
        cols.append(torch.where(rep, idx, found))
        found = found + (~rep).long()
    return torch.stack(cols, dim=1)


def _pattern_weights(q_drafts: torch.Tensor, patterns: torch.Tensor) -> torch.Tensor:
    """``[B, H]`` law of each hit pattern given the ordered drafts (repeat hits: q of the draft; new
    hits after the first: the mass outside the drafts found)."""
    B, k = q_drafts.shape
    zero = torch.zeros((B, 1), dtype=q_drafts.dtype, device=q_drafts.device)
    outside = torch.clamp(1.0 - torch.cat([zero, torch.cumsum(q_drafts, dim=1)], dim=1), 0.0, 1.0)
    w = torch.ones((B, patterns.shape[0]), dtype=q_drafts.dtype, device=q_drafts.device)
    seen = torch.ones(patterns.shape[0], dtype=torch.long, device=q_drafts.device)
    for i in range(1, k):
        h = patterns[:, i]
        new = h == seen
        w = w * torch.where(new[None, :], outside[:, h], q_drafts[:, h])
        seen = seen + new.long()
    return w


def _law_rows(x: torch.Tensor, state: iid.OptimalState) -> torch.Tensor:
    return x if state.row is None else x[state.row]


def _q_drafts(q: torch.Tensor, drafts: torch.Tensor) -> torch.Tensor:
    q64 = q.double()
    q64 = q64 / q64.sum(-1, keepdim=True)
    return q64.expand(drafts.shape[0], -1).gather(1, drafts)


@fill_doc
def conditional(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, *, validate: bool = True) -> torch.Tensor:
    r"""Exact output law ``[B, V]`` (dtype of ``p``) given the ordered drafts.

    Parameters
    ----------
    {p_q}
    drafts : torch.Tensor
        ``[B, k]`` long distinct drafts in drawing order (successive sampling from q).
    {validate}

    Returns
    -------
    torch.Tensor
        ``[B, V]``: :math:`\beta a + (1 - \sum \beta a)\, \mathrm{norm}((p - r^*)_+)` with
        :math:`\beta` the i.i.d. rule's selection law averaged over the hit patterns.

    Raises
    ------
    {raises}

    Examples
    --------
    >>> import torch
    >>> p = torch.tensor([[0.5, 0.3, 0.2]], dtype=torch.float64); q = torch.tensor([[0.2, 0.3, 0.5]], dtype=torch.float64)
    >>> T = torch.tensor([[a, b] for a in range(3) for b in range(3) if a != b])
    >>> W = (q[0][T[:, 0]] * q[0][T[:, 1]] / (1 - q[0][T[:, 0]]))[:, None]
    >>> [round(v, 12) for v in (W * conditional(p, q, T)).sum(0).tolist()]  # lossless
    [0.5, 0.3, 0.2]
    """
    p, q, drafts = check_step(p, q, drafts, validate=validate, name=NAME)
    B, k = drafts.shape
    V = p.shape[1]
    if B == 0:
        return p.new_zeros((0, V))
    state = iid.prepare(p, q, k)
    pats = torch.as_tensor(hit_strings(k), device=drafts.device)
    w = _pattern_weights(_q_drafts(q, drafts), pats)
    beta = torch.zeros((B, V), dtype=torch.float64, device=drafts.device)
    for h in range(pats.shape[0]):
        beta += w[:, h : h + 1] * iid.selection_rows(state, drafts[:, pats[h]], V)
    acc = beta * _law_rows(state.accept, state)
    kept = acc.sum(-1, keepdim=True)
    return (acc + (1.0 - kept) * _law_rows(state.residual_law, state)).to(p.dtype)


@fill_doc
def sample(
    p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, *, generator: torch.Generator, validate: bool = True, method: str = "auto"
) -> StepOutput:
    """One output token per row: the hit stream, then the optimal i.i.d. rule on the hits.

    ``method="bridge"`` is :func:`step` on :func:`uniforms` (all on ``p.device``, no host round
    trip); ``method="tree"`` runs the i.i.d. rule's host-built threshold tree on the hits;
    ``"auto"`` (the default): the tree only for one law shared by more than
    :data:`~otspec_gpu.verifiers.step.optimal_iid.BRIDGE_ROWS` rows
    (:func:`~otspec_gpu.verifiers.step.optimal_iid.uses_bridge`). Both read the same uniforms and
    give the same tokens (up to rounding at a block boundary).

    Parameters
    ----------
    {p_q}
    drafts : torch.Tensor
        ``[B, k]`` long distinct drafts in drawing order (successive sampling from q).
    {generator}
    {validate}
    method : str
        ``"auto"``, ``"bridge"`` or ``"tree"`` (above).

    Returns
    -------
    {returns_step}

    Raises
    ------
    {raises}
    UnsupportedMethodError
        If ``method`` is not one of those three.
    """
    p, q, drafts = check_step(p, q, drafts, validate=validate, name=NAME)
    bridge = iid.uses_bridge(method, p, drafts.shape[0], NAME)
    if drafts.shape[0] == 0:  # no rows: no uniforms drawn, nothing to prepare
        return step_output(drafts.new_zeros(0), drafts)
    uni = uniforms(p, q, drafts, generator)
    if bridge:
        return step(p, q, drafts, *uni)
    hit_u, s, u, coin, v = uni
    state = iid.prepare(p, q, drafts.shape[1])
    hits = drafts.gather(1, rebuild_hits(_q_drafts(q, drafts), hit_u))
    res_tok = sample_weights(_law_rows(state.residual, state), v)  # [1, V] rows: one draw per u
    return step_output(iid.sample_with_uniforms(state, hits, s, u, coin, res_tok), drafts)


@fill_doc
def uniforms(
    p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The uniforms :func:`sample` consumes, drawn from ``generator`` in its order: ``[B, k - 1]``
    float64 hit-stream uniforms, then ``[B]`` float64 levels, choices, accept coins and residual
    uniforms (five ``rand`` calls).

    {uniforms_doc}
    """
    B, k = drafts.shape

    def rand(*shape):
        return torch.rand(shape, dtype=torch.float64, device=drafts.device, generator=generator)

    return rand(B, k - 1), rand(B), rand(B), rand(B), rand(B)


def step(
    p: torch.Tensor,
    q: torch.Tensor,
    drafts: torch.Tensor,
    hit_u: torch.Tensor,
    s: torch.Tensor,
    u: torch.Tensor,
    coin: torch.Tensor,
    v: torch.Tensor,
) -> StepOutput:
    r"""The rule as a pure step of its uniforms: the hits, then the tree-free i.i.d. draw on them.

    No generator, no validation, no host synchronisation on CUDA: :func:`sample` (bridge path) is
    the checks, :func:`uniforms`, then this.

    Parameters
    ----------
    p, q : torch.Tensor
        ``[B, V]`` (or ``[1, V]``) target and draft rows.
    drafts : torch.Tensor
        ``[B, k]`` long distinct drafts in drawing order.
    hit_u : torch.Tensor
        ``[B, k - 1]`` float64 hit-stream uniforms (:func:`rebuild_hits`).
    s, u, coin, v : torch.Tensor
        ``[B]`` float64 level, choice, accept coin and residual uniforms of the i.i.d. rule.

    Returns
    -------
    StepOutput
        Output token, accepted flag and draft slot per row (against the drafts, not the hits).
    """
    hits = drafts.gather(1, rebuild_hits(_q_drafts(q, drafts), hit_u))  # [B, k] i.i.d. draws from q
    return step_output(bridge_step(p, q, hits, s, u, coin, v)["tokens"], drafts)


wor_iid = TorchVerifier(
    NAME,
    "without_replacement",
    True,
    conditional,
    sample=sample,
    reference="otspec: drafts without replacement at the i.i.d. optimum (docs/wor_iid.rst)",
    uniforms=uniforms,
    step=step,
)
