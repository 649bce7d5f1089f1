r"""The optimal verifier for k i.i.d. drafts in torch (twin of ``otspec.verifiers.optimal_iid``).

The rule is the canonical two-step form with the closed-form optimal selection law :math:`r^*`
(see ``docs/optimal_verifier.rst``): tokens are grouped into *super-tokens* (1-based, sorted by
density :math:`r^*/q` descending; 0 for tokens with q = 0), boundary i between super-tokens i and
i+1 carries a threshold :math:`\kappa_i` (the ends :math:`\kappa_0 = \kappa_m = -\infty` are
always active). One draw, per row:

1. a level :math:`s \sim U(0, 1)`;
2. with :math:`st_{(1)}` the smallest super-token among the drafts, the block end
   :math:`e(s) = \min\{i \ge st_{(1)} : \kappa_i \le s\}` (binary lifting over a range-minimum
   table of :math:`\kappa`, :math:`O(\log m)`); the *eligible* drafts are those with super-token
   :math:`\le e(s)`;
3. a uniformly chosen eligible draft (by draft index) is the selected token y;
4. keep y with probability :math:`\min(1, p(y)/r^*(y))`, else draw from
   :math:`\mathrm{norm}((p - r^*)_+)`.

Each of the four draws (level, choice, accept coin, residual) is one separate ``torch.rand`` call
of one uniform per row.

**Exact conditional law.** Sort the drafts' super-tokens :math:`st_{(1)} \le \dots \le st_{(k)}`
and let :math:`M_j = \min\{\kappa_i : st_{(1)} \le i < st_{(j)}\}` (:math:`M_j = +\infty` on an
empty range), non-increasing in j. At level s the eligible drafts are exactly the first j sorted
drafts with :math:`M_{j+1} \le s < M_j`, so with :math:`\bar M_j = \mathrm{clip}(M_j, 0, 1)`
(:math:`\bar M_{k+1} = 0`) the selection law integrated over s is the finite sum

.. math:: \beta(\cdot \mid \bar x) = \sum_{j=1}^{k} (\bar M_j - \bar M_{j+1})
          \frac{1}{j} \sum_{l \le j} \delta_{x_{(l)}},

and :math:`\pi = \beta \cdot a + (1 - \sum_y \beta(y) a(y))\, \mathrm{norm}((p - r^*)_+)` with
:math:`a = \min(1, p/r^*)`.

**Sampling without the host.** :func:`uniforms` draws the four uniforms of one row (level,
choice, accept coin, residual: four ``torch.rand`` calls of ``[B]`` float64, in that order) and
:func:`step` is the tree-free draw of :mod:`otspec_gpu.verifiers.step._iid_bridge` on them: a pure
function of (p, q, drafts, uniforms), entirely on ``p.device``, with no host synchronisation (it
traces whole under ``torch.compile(fullgraph=True)``). ``sample(method="auto")`` (the default) is
exactly ``step(p, q, drafts, *uniforms(...))`` for per-row laws (decoding: a fresh law per row) and
for small batches; :func:`uses_bridge` says when.

**The host build.** :func:`conditional`, and ``sample`` for one law shared by more than
:data:`BRIDGE_ROWS` rows (Monte Carlo on one pair), use the threshold tree instead: the per-law
state (:math:`r^*`, super-tokens, the threshold tree, accept ratios, the residual) is built by
:func:`otspec.verifiers.step.optimal_iid.prepare` in numpy, once per *distinct* (p, q) row (the
threshold-tree build is a sequential algorithm with no batched counterpart; ``[B, V]`` rows are
deduplicated first with :func:`torch.unique` over the rows of ``[p, q]``). The build runs on the
CPU in float64 (the inputs are renormalised in float64 first); everything per draft is batched
torch on ``p.device``. The range-minimum table takes :math:`O(m \log m)` float64 per distinct law
(m super-tokens). Both paths read the same four uniforms and give the same tokens (up to rounding
at a block boundary: a level within rounding of a threshold).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np
import torch

from otspec.errors import UnsupportedMethodError
from otspec_gpu.sampling import sample_weights
from otspec_gpu.verifiers._docs import fill_doc
from otspec_gpu.verifiers.base import StepOutput, TorchVerifier, check_step, step_output
from otspec_gpu.verifiers.step._iid_bridge import bridge_step

__all__ = [
    "BRIDGE_ROWS",
    "OptimalState",
    "conditional",
    "named",
    "optimal_iid",
    "prepare",
    "sample",
    "sample_with_uniforms",
    "selection_rows",
    "step",
    "uniforms",
    "uses_bridge",
]


#: With ``method="auto"``, one law shared by more rows than this is sampled with the threshold
#: tree (built once on the host); otherwise every row takes the tree-free device step.
BRIDGE_ROWS = 64


class OptimalState(NamedTuple):
    """Per-law state of the torch optimal verifier for ``U`` distinct laws.

    ``row`` ``[B]`` long: law index of each row (``None``: one law shared by every row);
    ``super_token`` ``[U, V]`` long; ``tables`` list of ``[U, m_max + 2 - 2**b]`` float64, the
    range minima ``tables[b][u, i] = min(kappa[u, i : i + 2**b])`` (kappa padded with
    :math:`-\\infty` beyond each law's last boundary); ``accept`` ``[U, V]`` float64
    :math:`\\min(1, p/r^*)`; ``residual`` ``[U, V]`` float64 weights :math:`(p - r^*)_+` (rows of
    mass 0 hold p: never reached); ``residual_law`` ``[U, V]`` the same rows normalised.
    """

    row: torch.Tensor | None
    super_token: torch.Tensor
    tables: list
    accept: torch.Tensor
    residual: torch.Tensor
    residual_law: torch.Tensor


def _numpy_state(p: np.ndarray, q: np.ndarray, k: int):
    from otspec.verifiers.step.optimal_iid import prepare as np_prepare

    st = np_prepare(p, q, k)
    cdf = np.asarray(st.residual_cdf, dtype=np.float64)
    res = np.diff(cdf, prepend=0.0)  # the numpy kernel's residual weights
    if not cdf[-1] > 0:
        res = p.copy()
    return np.asarray(st.super_token, dtype=np.int64), np.asarray(st.tree.kappa, dtype=np.float64), np.asarray(st.accept), res


@fill_doc
def prepare(p: torch.Tensor, q: torch.Tensor, k: int) -> OptimalState:
    r"""The state for probability rows ``p``, ``q`` ``[B, V]`` (or ``[1, V]``) and k drafts.

    Rows are renormalised in float64 and deduplicated; the numpy core builds one state per
    distinct row (the only loop; see the module docstring).

    Parameters
    ----------
    {p_q}
    k : int
        Number of i.i.d. drafts.

    Returns
    -------
    OptimalState
        Per distinct law: super-tokens, range-minimum tables of :math:`\kappa`, accept ratios and residuals.
    """
    dev = p.device
    # The whole state is built on the host from the host's float64 copy of p and q: the build is
    # discontinuous in (p, q) (a super-token boundary moves when a ratio crosses a threshold), so
    # renormalising on the device, whose reduction order differs (CUDA sums the row in another
    # order), could move q by one ulp and an entry of the law by ~1e-11. Built here, the state is
    # bitwise the same on every device.
    p64 = p.detach().to("cpu", torch.float64)
    q64 = q.detach().to("cpu", torch.float64)
    p64 = p64 / p64.sum(-1, keepdim=True)
    q64 = q64 / q64.sum(-1, keepdim=True)
    row = None
    if p.shape[0] > 1:
        uniq, inv = torch.unique(torch.cat([p64, q64], dim=1), dim=0, return_inverse=True)
        V = p.shape[1]
        p64, q64 = uniq[:, :V], uniq[:, V:]
        row = None if uniq.shape[0] == 1 else inv.to(dev)
    pn = p64.numpy()
    qn = q64.numpy()
    parts = [_numpy_state(pn[u], qn[u], int(k)) for u in range(pn.shape[0])]
    n_b = max(kap.size for _, kap, _, _ in parts)  # m_max + 1 boundaries
    kap = np.full((len(parts), n_b), -np.inf)
    for u, (_, kp, _, _) in enumerate(parts):
        kap[u, : kp.size] = kp
    tables = [torch.as_tensor(kap)]
    span = 1
    while 2 * span <= n_b:
        prev = tables[-1]
        tables.append(torch.minimum(prev[:, :-span], prev[:, span:]))
        span *= 2
    stt = torch.as_tensor(np.stack([s for s, _, _, _ in parts]), device=dev)
    acc = torch.as_tensor(np.stack([a for _, _, a, _ in parts]), device=dev)
    res = torch.as_tensor(np.stack([r for _, _, _, r in parts]))
    law = (res / res.sum(-1, keepdim=True)).to(dev)
    tables = [t.to(dev) for t in tables]
    res = res.to(dev)
    return OptimalState(row, stt, tables, acc, res, law)


def _rows_of(state: OptimalState, x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """``x[law of row b, idx[b, ...]]`` for a per-law table ``x`` ``[U, n]`` and ``idx`` ``[B, ...]``."""
    if state.row is None:
        return x[0][idx]
    r = state.row.view(-1, *([1] * (idx.ndim - 1)))
    return x[r.expand_as(idx), idx]


def _block_end(state: OptimalState, first: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """Smallest boundary :math:`i \\ge` ``first`` with :math:`\\kappa_i \\le s`, per row (binary lifting)."""
    pos = first.clone()
    last = state.tables[0].shape[1] - 1
    for b in range(len(state.tables) - 1, -1, -1):
        span = 1 << b
        ok = pos + span <= last
        cand = torch.where(ok, pos, torch.zeros_like(pos))
        skip = ok & (_rows_of(state, state.tables[b], cand) > s)
        pos = torch.where(skip, pos + span, pos)
    return pos


def _range_min(state: OptimalState, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    r""":math:`\min \kappa[a:b]` per entry (``+inf`` where ``b <= a``), two table look-ups each."""
    n = torch.clamp(b - a, min=1)
    lvl = torch.floor(torch.log2(n.double())).long()
    # log2 of a power of two is exact; guard against an off-by-one anyway
    lvl = torch.where((1 << (lvl + 1)) <= n, lvl + 1, lvl)
    lvl = torch.where((1 << lvl) > n, lvl - 1, lvl)
    out = torch.full(a.shape, float("inf"), dtype=torch.float64, device=a.device)
    for lv in range(len(state.tables)):
        sel = lvl == lv
        if not bool(sel.any()):
            continue
        tab = state.tables[lv]
        lo = torch.where(sel, a, torch.zeros_like(a))
        hi = torch.where(sel, b - (1 << lv), torch.zeros_like(b))
        m = torch.minimum(_rows_of(state, tab, lo), _rows_of(state, tab, hi))
        out = torch.where(sel, m, out)
    return torch.where(b > a, out, torch.full_like(out, float("inf")))


@fill_doc
def selection_rows(state: OptimalState, drafts: torch.Tensor, V: int) -> torch.Tensor:
    r"""Exact selection law :math:`\beta(\cdot \mid \bar x)` ``[B, V]`` float64, integrated over s.

    Parameters
    ----------
    state : OptimalState
        From :func:`prepare`.
    {drafts_iid}
    V : int
        Vocabulary size.

    Returns
    -------
    torch.Tensor
        ``[B, V]`` float64; each row sums to 1 over the row's drafts.
    """
    B, k = drafts.shape
    st = _rows_of(state, state.super_token, drafts)
    sts, order = torch.sort(st, dim=1, stable=True)
    xs = drafts.gather(1, order)
    first = sts[:, :1].expand(-1, k)
    M = torch.clamp(_range_min(state, first, sts), 0.0, 1.0)  # M[:, 0] = clip(+inf) = 1
    nxt = torch.cat([M[:, 1:], torch.zeros((B, 1), dtype=torch.float64, device=M.device)], dim=1)
    j = torch.arange(1, k + 1, dtype=torch.float64, device=M.device)
    d = (M - nxt) / j  # probability that exactly the first j sorted drafts are eligible, / j
    w = torch.flip(torch.cumsum(torch.flip(d, [1]), 1), [1])  # weight of sorted draft l: sum_{j >= l} d_j
    beta = torch.zeros((B, V), dtype=torch.float64, device=drafts.device)
    return beta.scatter_add_(1, xs, w)


def _law_rows(state: OptimalState, x: torch.Tensor, B: int) -> torch.Tensor:
    return x if state.row is None else x[state.row]


@fill_doc
def conditional(
    p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, *, validate: bool = True, _name: str = "optimal_iid"
) -> torch.Tensor:
    r"""Exact output law ``[B, V]`` (dtype of ``p``) of the optimal i.i.d. verifier.

    {params_iid}

    {returns_law_raises}

    Examples
    --------
    >>> import torch
    >>> p = torch.tensor([[0.5, 0.3, 0.2]], dtype=torch.float64); q = torch.tensor([[0.2, 0.3, 0.5]], dtype=torch.float64)
    >>> T = torch.tensor([[a, b] for a in range(3) for b in range(3)])
    >>> W = (q[0][T[:, 0]] * q[0][T[:, 1]])[:, None]
    >>> [round(v, 12) for v in (W * conditional(p, q, T)).sum(0).tolist()]  # lossless
    [0.5, 0.3, 0.2]
    """
    p, q, drafts = check_step(p, q, drafts, validate=validate, name=_name)
    B, V = drafts.shape[0], p.shape[1]
    if B == 0:  # no rows: nothing to prepare (the per-law state needs at least one law)
        return p.new_zeros((0, V))
    state = prepare(p, q, drafts.shape[1])
    acc = selection_rows(state, drafts, V) * _law_rows(state, state.accept, B)
    kept = acc.sum(-1, keepdim=True)
    return (acc + (1.0 - kept) * _law_rows(state, state.residual_law, B)).to(p.dtype)


@fill_doc
def sample_with_uniforms(
    state: OptimalState, drafts: torch.Tensor, s: torch.Tensor, u: torch.Tensor, coin: torch.Tensor, residual_token: torch.Tensor
) -> torch.Tensor:
    """The rule with caller-supplied uniforms ``[B]`` (level, choice, coin) and residual tokens ``[B]``.

    Parameters
    ----------
    state : OptimalState
        From :func:`prepare`.
    {drafts_iid}
    s : torch.Tensor
        ``[B]`` levels on ``[0, 1)``.
    u : torch.Tensor
        ``[B]`` uniforms for the choice within the block.
    coin : torch.Tensor
        ``[B]`` accept uniforms.
    residual_token : torch.Tensor
        ``[B]`` tokens drawn from the residual, used where the coin rejects.

    Returns
    -------
    torch.Tensor
        ``[B]`` long output tokens.
    """
    st = _rows_of(state, state.super_token, drafts)
    end = _block_end(state, st.min(dim=1).values, s)
    elig = st <= end[:, None]
    cnt = elig.sum(dim=1)
    rank = torch.minimum((u * cnt).long(), cnt - 1)
    col = torch.argmax((torch.cumsum(elig.long(), dim=1) > rank[:, None]).to(torch.uint8), dim=1)
    y = drafts.gather(1, col[:, None]).squeeze(1)
    keep = coin < _rows_of(state, state.accept, y[:, None]).squeeze(1)
    return torch.where(keep, y, residual_token)


def uses_bridge(method: str, p: torch.Tensor, B: int, name: str = "optimal_iid") -> bool:
    """Whether ``sample(method=...)`` takes the tree-free device step (else the host-built tree).

    ``"bridge"``: always; ``"tree"``: never; ``"auto"``: unless one law ``p`` ``[1, V]`` is shared
    by more than :data:`BRIDGE_ROWS` rows. Reads shapes only (no host synchronisation).

    Parameters
    ----------
    method : str
        ``"auto"``, ``"bridge"`` or ``"tree"``.
    p : torch.Tensor
        ``[B, V]`` or ``[1, V]`` target rows (only the shape is read).
    B : int
        Number of rows of drafts.
    name : str
        The verifier's name, for the message.

    Returns
    -------
    bool
        True for the tree-free step.

    Raises
    ------
    UnsupportedMethodError
        If ``method`` is not one of the three.

    Examples
    --------
    >>> import torch
    >>> uses_bridge("auto", torch.ones(1, 4) / 4, 1000), uses_bridge("auto", torch.ones(8, 4) / 4, 8)
    (False, True)
    """
    if method not in ("auto", "bridge", "tree"):
        raise UnsupportedMethodError(f"{name} sample: method must be 'auto', 'bridge' or 'tree' (got {method!r}); pick one of those")
    return method == "bridge" or (method == "auto" and not (p.shape[0] == 1 and B > BRIDGE_ROWS))


@fill_doc
def sample(
    p: torch.Tensor,
    q: torch.Tensor,
    drafts: torch.Tensor,
    *,
    generator: torch.Generator,
    validate: bool = True,
    _name: str = "optimal_iid",
    method: str = "auto",
) -> StepOutput:
    """One output token per row: level, choice, accept coin and residual draw from four separate ``rand`` calls.

    ``method="bridge"`` is :func:`step` on :func:`uniforms`: the whole step on ``p.device`` with no
    threshold tree and no host round trip (:mod:`otspec_gpu.verifiers.step._iid_bridge`; O(V) per
    row); ``method="tree"`` builds the numpy state and its threshold tree on the host once per
    distinct law, then O(log V) per row. ``"auto"`` (the default): the tree for one law shared by
    more than :data:`BRIDGE_ROWS` rows (Monte Carlo on one pair), else the bridge (decoding: a
    fresh law per row); see :func:`uses_bridge`. Both read the same uniforms and give the same
    tokens (up to rounding at a block boundary).

    {params_iid_sample}
    method : str
        ``"auto"``, ``"bridge"`` or ``"tree"`` (above).

    {returns_step_raises}
    UnsupportedMethodError
        If ``method`` is not one of those three.
    """
    p, q, drafts = check_step(p, q, drafts, validate=validate, name=_name)
    bridge = uses_bridge(method, p, drafts.shape[0], _name)
    if drafts.shape[0] == 0:  # no rows: no uniforms drawn, nothing to prepare
        return step_output(drafts.new_zeros(0), drafts)
    uni = uniforms(p, q, drafts, generator)
    if bridge:
        return step(p, q, drafts, *uni)
    s, u, coin, v = uni
    state = prepare(p, q, drafts.shape[1])
    res_tok = sample_weights(_law_rows(state, state.residual, drafts.shape[0]), v)  # [1, V] rows: one draw per u
    return step_output(sample_with_uniforms(state, drafts, s, u, coin, res_tok), drafts)


@fill_doc
def uniforms(
    p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The uniforms :func:`sample` consumes, drawn from ``generator`` in its order: ``[B]`` float64
    levels, choices, accept coins and residual uniforms (four ``rand`` calls).

    {uniforms_doc}
    """
    B = drafts.shape[0]
    return tuple(torch.rand(B, dtype=torch.float64, device=drafts.device, generator=generator) for _ in range(4))


def step(
    p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, s: torch.Tensor, u: torch.Tensor, coin: torch.Tensor, v: torch.Tensor
) -> StepOutput:
    r"""The optimal i.i.d. verifier as a pure step of its uniforms: the tree-free draw
    (:func:`~otspec_gpu.verifiers.step._iid_bridge.bridge_step`) wrapped as a :class:`StepOutput`.

    No generator, no validation, no host synchronisation on CUDA: :func:`sample` (bridge path) is
    the checks, :func:`uniforms`, then this.

    Parameters
    ----------
    p, q : torch.Tensor
        ``[B, V]`` (or ``[1, V]``) target and draft rows.
    drafts : torch.Tensor
        ``[B, k]`` long i.i.d. drafts.
    s, u, coin, v : torch.Tensor
        ``[B]`` float64 uniforms from :func:`uniforms`: level (:math:`G = 1 - s`), choice within the
        block, accept coin, residual draw.

    Returns
    -------
    StepOutput
        Output token, accepted flag and draft slot per row.
    """
    return step_output(bridge_step(p, q, drafts, s, u, coin, v)["tokens"], drafts)


optimal_iid = TorchVerifier(
    "optimal_iid",
    "iid",
    True,
    conditional,
    sample=sample,
    reference="two-step form with the closed-form optimal selection law and threshold tree (docs: optimal_verifier)",
    uniforms=uniforms,
    step=step,
)


def named(name: str, reference: str) -> TorchVerifier:
    """The same rule registered under another name (validation messages name it).

    Parameters
    ----------
    name : str
        Registry name (e.g. ``"khisti"``, whose optimal selection for i.i.d. drafts is this rule).
    reference : str
        The paper the name refers to.

    Returns
    -------
    TorchVerifier
        The optimal i.i.d. rule under ``name``, with the same ``sample``, ``conditional``,
        ``uniforms`` and ``step``.
    """
    return TorchVerifier(
        name,
        "iid",
        True,
        functools.partial(conditional, _name=name),
        sample=functools.partial(sample, _name=name),
        reference=reference,
        uniforms=uniforms,
        step=step,
    )
