r"""Speculative decoding with a real target and draft model, every otspec_gpu verifier, and exact theory.

One **round** drafts, verifies and emits tokens for every prompt of the batch:

1. the draft proposes ``k`` sequences of ``gamma`` tokens per prompt (``k = 1``: a chain;
   ``gamma = 1``: ``k`` single-token drafts; both > 1: a tree of ``k`` sequences);
2. **one** target forward scores every drafted token: the ``k`` sequences of a prompt are ``k``
   batch rows over the same cached prefix, each fed ``[last, x_1, ..., x_gamma]``, which gives
   :math:`p(\cdot \mid \text{context}, x_1..x_i)` for ``i = 0..gamma``;
3. the verifier maps (p, q, drafts) to ``tau`` accepted tokens and one next token (correction or
   bonus); single-step verifiers output one token :math:`Y \sim p(\cdot \mid \text{context})`, and
   when :math:`Y` equals a draft the target row of that draft already holds
   :math:`p(\cdot \mid \text{context}, Y)`, from which a bonus token is drawn;
4. both KV caches are rolled back exactly to the emitted prefix.

**KV caches.** Each model keeps one ``transformers`` ``DynamicCache`` with ``B * k`` rows and a
boolean *validity mask* over cache positions. Rolled-back positions that every row rejected are
cropped (``cache.crop(-n)``); with several prompts, positions rejected by some rows only stay in the
cache with validity 0 and are masked out of attention, and each row's position ids count its valid
tokens only. With one prompt every rollback is a plain crop. The draft is one token behind after a
fully accepted block (it never saw ``x_gamma``); it then feeds two tokens next round.

**Losslessness.** Every emitted token is drawn from the target's conditional law given the emitted
prefix (the verifiers are lossless couplings; the bonus token is drawn from the target row of the
accepted draft), so the generated sequence has exactly the law of sampling from the target with the
same temperature / top-k / top-p transform (tested end to end on a small model against the exact
joint law, in ``tests/gpu/test_decode_lossless.py``).

**Theory.** With ``theory=True`` each (round, prompt) record carries exact expectations computed by
the numpy otspec core from that round's float64 p and q (:mod:`otspec_gpu.theory`).

Randomness: ``seed`` spawns three independent ``torch.Generator`` streams: drafting, verification
(the verifier's accept coins and residual draws) and bonus tokens.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from otspec._validation import as_int_in_range
from otspec.errors import IncompatibleModelsError, OtspecInputError, UnsupportedMethodError
from otspec_gpu.models import LM

__all__ = ["CHAIN_VERIFIERS", "TREE_VERIFIERS", "DecodePlan", "DecodeResult", "IncompatibleModelsError", "decode", "plan_for"]

#: Chain verifiers (one drafted block per prompt).
CHAIN_VERIFIERS = ("token", "block")
#: Tree verifiers over k drafted sequences: user-facing name -> rule name of the tree module.
TREE_VERIFIERS = {"kseq": "kseq", "rrs": "rrs", "rrs_wor": "rrs_wor"}


@dataclass(frozen=True)
class DecodePlan:
    """How a (verifier, drafts, gamma) request is run: ``mode`` is ``"chain"``, ``"single"`` or ``"tree"``.

    Attributes
    ----------
    mode : str
        ``"chain"`` (one drafted block), ``"single"`` (k single-token drafts) or ``"tree"`` (k
        drafted sequences).
    verifier : str
        The verifier name as requested.
    k : int
        Number of drafts (1 for chains).
    gamma : int
        Draft length (1 for single-step verifiers).
    rule : str
        The rule that runs: ``token``/``block`` (chain), the single-step name, or
        ``kseq``/``rrs``/``rrs_wor`` (tree).
    draft_law : str
        How the drafts are drawn: ``iid``, ``without_replacement`` or ``greedy``.
    """

    mode: str
    verifier: str
    k: int
    gamma: int
    rule: str  # chain: token/block; single: single-step name; tree: kseq/rrs/rrs_wor
    draft_law: str  # iid / without_replacement / greedy


def _single_step():
    from otspec_gpu.verifiers import SINGLE_STEP

    return SINGLE_STEP


def plan_for(verifier: str, drafts: int = 1, gamma: int = 4) -> DecodePlan:
    """Resolve the decoding mode of a request (and reject combinations that have no meaning).

    * ``token`` / ``block`` with ``drafts = 1``: a chain of ``gamma`` drafts;
    * any single-step verifier with ``gamma = 1``: ``drafts`` single-token drafts from the
      verifier's own draft law (plus a bonus token when a draft is accepted);
    * ``kseq`` (SpecTr), ``rrs`` (SpecInfer), ``rrs_wor`` (RSD) with ``gamma > 1``: a tree of
      ``drafts`` sequences of length ``gamma``.

    Parameters
    ----------
    verifier : str
        Verifier name.
    drafts : int
        Number of drafts ``k >= 1``.
    gamma : int
        Draft length ``>= 1``.

    Returns
    -------
    DecodePlan
        The mode, rule and draft law the decoder will run.

    Raises
    ------
    NotAnIntegerError, InvalidDraftCountError
        If ``drafts`` or ``gamma`` is not an integer ``>= 1``.
    UnsupportedMethodError
        If the verifier is unknown, lossy (``approximate``), or has no decoding mode for this
        ``drafts`` / ``gamma`` (e.g. ``block`` with several drafts).
    """
    k = as_int_in_range(drafts, "drafts")
    g = as_int_in_range(gamma, "gamma")
    if not isinstance(verifier, str):
        raise UnsupportedMethodError(f"verifier must be a name (got {verifier!r}); e.g. 'token', 'block', 'kseq'")
    if verifier in CHAIN_VERIFIERS and (k == 1 or verifier == "block"):
        if k != 1:
            raise UnsupportedMethodError(
                f"verifier 'block' verifies one drafted block (got drafts = {k}); use drafts=1, or a tree verifier (kseq, rrs, rrs_wor) for k sequences"
            )
        return DecodePlan("chain", verifier, 1, g, verifier, "iid")
    single = _single_step()
    if verifier == "approximate":
        raise UnsupportedMethodError(
            "verifier 'approximate' is lossy and needs a per-token predicate; the decoder runs lossless verifiers only"
        )
    if g == 1 and verifier in single:
        v = single[verifier]
        return DecodePlan("single", verifier, k, 1, verifier, v.draft_law)
    if verifier in TREE_VERIFIERS and g > 1:
        rule = TREE_VERIFIERS[verifier]
        return DecodePlan("tree", verifier, k, g, rule, "without_replacement" if rule == "rrs_wor" else "iid")
    names = sorted(set(CHAIN_VERIFIERS) | set(single) | set(TREE_VERIFIERS))
    if verifier not in names:
        raise UnsupportedMethodError(f"unknown verifier {verifier!r}; pick one of {names}")
    raise UnsupportedMethodError(
        f"verifier {verifier!r} with drafts = {k}, gamma = {g} has no decoding mode: single-step verifiers need gamma = 1; "
        f"over gamma > 1 use token/block (drafts = 1) or kseq/rrs/rrs_wor (a tree of drafts sequences)"
    )


# ------------------------------------------------------------------------------------------------
# KV cache with a validity mask


class _KV:
    """One model's cache over ``R`` rows, a validity mask over cache positions, and the rollback."""

    def __init__(self, lm: LM, rows: int, device: torch.device):
        from transformers import DynamicCache

        self.lm = lm
        self.cache = DynamicCache()
        self.mask = torch.zeros(rows, 0, dtype=torch.bool, device=device)
        self.calls = 0

    def feed(self, ids: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """Feed ``ids`` [R, n] (``valid`` [R, n] marks real tokens); returns logits [R, n, V]."""
        pos = self.mask.sum(1, keepdim=True)  # [R, 1] valid tokens so far
        position_ids = (pos + torch.cumsum(valid.long(), 1) - 1).clamp_min(0)
        self.mask = torch.cat([self.mask, valid], 1)
        attn = None if bool(self.mask.all()) else self.mask.long()
        self.calls += 1
        return self.lm.logits(ids, attention_mask=attn, position_ids=position_ids, cache=self.cache)

    def select(self, rows: torch.Tensor) -> None:
        """Reorder / duplicate rows: row ``r`` becomes old row ``rows[r]``."""
        self.cache.reorder_cache(rows)
        self.mask = self.mask.index_select(0, rows)

    def keep(self, n_fed: int, keep: torch.Tensor) -> None:
        """Roll back: of the last ``n_fed`` cache positions, row ``r`` keeps the first ``keep[r]``."""
        L = self.mask.shape[1]
        col = torch.arange(n_fed, device=self.mask.device)
        tail = self.mask[:, L - n_fed :] & (col.unsqueeze(0) < keep.unsqueeze(1))
        self.mask = torch.cat([self.mask[:, : L - n_fed], tail], 1)
        drop = n_fed - int(keep.max())
        if drop > 0:
            self.cache.crop(-drop)
            self.mask = self.mask[:, : L - drop]


# ------------------------------------------------------------------------------------------------
# Results


@dataclass(frozen=True, eq=False)
class DecodeResult:
    """What :func:`decode` returns.

    Attributes
    ----------
    tokens : list of list of int
        Generated token ids per prompt (``max_new_tokens`` of them, fewer after an EOS).
    text : list of str or None
        Decoded text per prompt (``None`` without a tokenizer).
    trace : otspec.io.Trace
        One record per (round, prompt) with drafts, outcome, timings and theory.
    config : dict
        The decoding settings (models, verifier, k, gamma, sampling options, seed).
    """

    tokens: list
    text: list | None
    trace: Any
    config: dict = field(default_factory=dict)

    def report(self):
        """The theory-vs-practice summary (:func:`otspec_gpu.report.summarize`).

        Returns
        -------
        otspec_gpu.report.Report
            Measured and exact expected accepted lengths per round, and whether they agree.
        """
        from otspec_gpu.report import summarize

        return summarize(self.trace)


def _as_prompts(target: LM, prompt: Any) -> tuple[list[list[int]], bool]:
    if isinstance(prompt, str):
        return [target.encode(prompt)], True
    if isinstance(prompt, torch.Tensor):
        prompt = prompt.tolist()
    if isinstance(prompt, (list, tuple)) and prompt and all(isinstance(x, str) for x in prompt):
        return [target.encode(s) for s in prompt], True
    if isinstance(prompt, (list, tuple)) and prompt and all(isinstance(x, (int, np.integer)) for x in prompt):
        return [[int(x) for x in prompt]], False
    if isinstance(prompt, (list, tuple)) and prompt and all(isinstance(x, (list, tuple)) and x for x in prompt):
        return [[int(t) for t in x] for x in prompt], False
    raise OtspecInputError(
        f"prompt must be a string, a list of strings, a list of token ids or a list of such lists (got {type(prompt).__name__}); pass e.g. 'Hello'"
    )


def _probs(logits: torch.Tensor, temperature: float, top_k, top_p) -> torch.Tensor:
    from otspec_gpu.processing import probs_from_logits

    return probs_from_logits(logits, temperature=temperature, top_k=top_k, top_p=top_p, dtype=torch.float64)


def _multinomial(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One token per row of ``probs`` [R, V] (float64, rows sum to 1 up to rounding) from ``generator``,
    by inverse CDF (one uniform per row). Also the sampler of :mod:`otspec_gpu.sprinter`."""
    u = torch.rand(probs.shape[0], dtype=torch.float64, generator=generator, device=probs.device)
    cdf = torch.cumsum(probs, -1)
    idx = torch.searchsorted(cdf, (u * cdf[:, -1]).unsqueeze(-1), right=True).squeeze(-1)
    return idx.clamp_max(probs.shape[-1] - 1)


def _generators(seed: int, device) -> tuple[torch.Generator, ...]:
    seqs = np.random.SeedSequence(int(seed)).spawn(3)
    gens = []
    for s in seqs:
        g = torch.Generator(device=device)
        g.manual_seed(int(s.generate_state(1, dtype=np.uint64)[0] >> np.uint64(1)))
        gens.append(g)
    return tuple(gens)


def decode(
    target: LM,
    draft: LM,
    prompt: Any,
    *,
    verifier: str = "token",
    drafts: int = 1,
    gamma: int = 4,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    max_new_tokens: int = 64,
    seed: int = 0,
    theory: bool = True,
    stop_at_eos: bool = True,
    top_k_trace: int = 8,
    progress: Callable[[int], None] | None = None,
    _fault: str | None = None,
) -> DecodeResult:
    r"""Speculative decoding of ``prompt`` with ``target`` and ``draft`` (see the module docstring).

    Parameters
    ----------
    target, draft : otspec_gpu.models.LM
        Models sharing a vocabulary (:func:`otspec_gpu.models.load` / ``wrap``).
    prompt : str, list of str, list of int or list of list of int
        One prompt or a batch (token ids need no tokenizer). A batch of ``B`` prompts runs as
        ``B`` independent decodings in one batched forward per round.
    verifier : str
        ``token`` / ``block`` (chains), any single-step verifier of
        :data:`otspec_gpu.verifiers.SINGLE_STEP` (with ``gamma = 1``), or ``kseq`` / ``rrs`` /
        ``rrs_wor`` over trees of ``drafts`` sequences (``gamma > 1``). See :func:`plan_for`.
    drafts : int
        ``k``, the number of drafts (single-token drafts, or sequences of a tree).
    gamma : int
        Draft block length.
    temperature, top_k, top_p :
        The transform applied identically to target and draft logits
        (:func:`otspec_gpu.processing.probs_from_logits`); ``temperature = 0`` is greedy.
    max_new_tokens : int
        Tokens generated per prompt (the last round's surplus is dropped).
    seed : int
        Seeds the drafting, verification and bonus streams.
    theory : bool
        Compute each record's exact expectations (costs numpy time, reported apart from decoding).
    stop_at_eos : bool
        Stop a prompt at the tokenizer's EOS token.
    top_k_trace : int
        How many of the largest probabilities of each p and q row the trace keeps (plus tail mass).
    progress : callable, optional
        Called with the number of tokens generated so far by the slowest prompt after each round.

    Returns
    -------
    DecodeResult
        Tokens and text per prompt, and the per-round trace.

    Raises
    ------
    OtspecInputError
        If a model is not an :class:`~otspec_gpu.models.LM`, ``temperature`` is negative or not
        finite, or a prompt token id is outside the vocabulary.
    IncompatibleModelsError
        If the two models' vocabularies differ.
    UnsupportedMethodError
        If ``verifier``, ``drafts`` and ``gamma`` do not combine (:func:`plan_for`).
    NotAnIntegerError, InvalidDraftCountError
        If ``drafts``, ``gamma`` or ``max_new_tokens`` is not a positive integer.
    """
    from otspec_gpu import theory as _theory
    from otspec_gpu.trace import TraceBuilder

    if not isinstance(target, LM) or not isinstance(draft, LM):
        raise OtspecInputError("target and draft must be otspec_gpu.models.LM (load them with otspec_gpu.models.load or wrap)")
    if target.vocab_size != draft.vocab_size:
        raise IncompatibleModelsError(
            f"target and draft vocabularies differ ({target.vocab_size} vs {draft.vocab_size}); pick a draft that shares the target's tokenizer"
        )
    plan = plan_for(verifier, drafts, gamma)
    n_new = as_int_in_range(max_new_tokens, "max_new_tokens")
    if not (isinstance(temperature, (int, float)) and math.isfinite(temperature) and temperature >= 0):
        raise OtspecInputError(f"temperature must be a finite number >= 0 (got {temperature!r}); 0 is greedy")
    prompts, has_text = _as_prompts(target, prompt)
    V = target.vocab_size
    for pr in prompts:
        if min(pr) < 0 or max(pr) >= V:
            raise OtspecInputError(
                f"prompt token ids must lie in [0, {V}) (got {min(pr)}..{max(pr)}); tokenize with the target's tokenizer"
            )
    device = next(target.model.parameters()).device
    B, k, g = len(prompts), plan.k, plan.gamma
    R = B * k
    g_draft, g_verify, g_bonus = _generators(seed, device)
    single = _single_step()[plan.rule] if plan.mode == "single" else None
    if plan.mode == "single":
        from otspec_gpu.drafting import sample_drafts
    if plan.mode == "chain":
        from otspec_gpu.verifiers import chain as _chain
    if plan.mode == "tree":
        from otspec_gpu.verifiers import tree as _tree
    eos = None
    if stop_at_eos and target.tokenizer is not None:
        eos = getattr(target.tokenizer, "eos_token_id", None)

    # Prompts left-padded to one width; every prompt is repeated k times (its k draft rows).
    width = max(len(p) for p in prompts)
    ids_np = np.zeros((B, width), dtype=np.int64)
    valid_np = np.zeros((B, width), dtype=bool)
    for b, pr in enumerate(prompts):
        ids_np[b, width - len(pr) :] = pr
        valid_np[b, width - len(pr) :] = True
    ids, valid = torch.from_numpy(ids_np), torch.from_numpy(valid_np)
    ids, valid = ids.repeat_interleave(k, 0).to(device), valid.repeat_interleave(k, 0).to(device)
    tgt, drf = _KV(target, R, device), _KV(draft, R, device)
    t_start = time.perf_counter()
    if width > 1:
        tgt.feed(ids[:, :-1], valid[:, :-1])
        drf.feed(ids[:, :-1], valid[:, :-1])
    t_prefill = time.perf_counter() - t_start
    last = ids[:, -1]  # [R] the last emitted token, not yet fed to the target
    pend = last.unsqueeze(1)  # [R, w] tokens not yet fed to the draft
    pend_valid = torch.ones_like(pend, dtype=torch.bool)
    out: list[list[int]] = [[] for _ in range(B)]
    done = [False] * B
    rows0 = torch.arange(B, device=device) * k  # first row of each prompt
    builder = TraceBuilder(plan=plan, B=B, V=V, top_k=top_k_trace)
    rnd = 0
    sampling = dict(temperature=float(temperature), top_k=top_k, top_p=top_p)
    while not all(done):
        # ---- draft ---------------------------------------------------------------------------
        t0 = time.perf_counter()
        n_draft_fed = pend.shape[1]
        if plan.mode == "tree":
            # The tree module's drafting: i.i.d. sequences, or first tokens without replacement.
            fed = [0]

            def next_q(prefix: torch.Tensor) -> torch.Tensor:
                if prefix.shape[1] == 0:
                    return _probs(drf.feed(pend, pend_valid)[:, -1], **sampling)
                fed[0] += 1
                return _probs(drf.feed(prefix[:, -1:], torch.ones(R, 1, dtype=torch.bool, device=device))[:, -1], **sampling)

            Xt, Qt = _tree.draft_sequences(next_q, B, k, g, replacement=plan.draft_law == "iid", generator=g_draft)
            X, Q = Xt.reshape(R, g), Qt.reshape(R, g, V)
            n_draft_fed += fed[0]
        else:
            q_list, x_list = [], []
            q_t = _probs(drf.feed(pend, pend_valid)[:, -1], **sampling)  # [R, V]
            if plan.mode == "single":
                x = sample_drafts(q_t[rows0], k, plan.draft_law, generator=g_draft)  # [B, k]
                x_t = x.reshape(R)
            else:
                x_t = _multinomial(q_t, g_draft)
            q_list.append(q_t)
            x_list.append(x_t)
            for _ in range(1, g):
                q_t = _probs(drf.feed(x_t.unsqueeze(1), torch.ones(R, 1, dtype=torch.bool, device=device))[:, -1], **sampling)
                n_draft_fed += 1
                x_t = _multinomial(q_t, g_draft)
                q_list.append(q_t)
                x_list.append(x_t)
            Q = torch.stack(q_list, 1)  # [R, gamma, V]
            X = torch.stack(x_list, 1)  # [R, gamma]
        t1 = time.perf_counter()
        # ---- target: one forward scoring every drafted token ------------------------------------
        P = _probs(
            tgt.feed(torch.cat([last.unsqueeze(1), X], 1), torch.ones(R, g + 1, dtype=torch.bool, device=device)), **sampling
        )  # [R, gamma+1, V]
        t2 = time.perf_counter()
        # ---- verify ------------------------------------------------------------------------------
        extra_cond = None
        if plan.mode == "chain":
            fn = _chain.token_sample if plan.rule == "token" else _chain.block_sample
            res = fn(P, Q, X, generator=g_verify)
            tau, y, path = res.accepted.long(), res.next_token.long(), torch.zeros(B, dtype=torch.long, device=device)
        elif plan.mode == "single":
            so = single.sample(P[rows0, 0], Q[rows0, 0], x, generator=g_verify)
            tau = so.accepted.long()
            path = so.index.clamp_min(0).long()
            bonus = _multinomial(P[rows0 + path, 1], g_bonus)
            y = torch.where(so.accepted, bonus, so.token.long())
            extra_cond = so
        else:
            res = _tree.sample(P.view(B, k, g + 1, V), Q.view(B, k, g, V), X.view(B, k, g), rule=plan.rule, generator=g_verify)
            tau, y, path = res.accepted.long(), res.next_token.long(), res.path.long()
        t3 = time.perf_counter()
        # ---- emit and roll back ------------------------------------------------------------------
        chosen = rows0 + path  # [B]
        Xc, tau_l, y_l = X[chosen].tolist(), tau.tolist(), y.tolist()  # python lists: one conversion per round
        emitted = [Xc[b][: tau_l[b]] + [y_l[b]] for b in range(B)]
        sel = chosen.repeat_interleave(k)
        if k > 1:
            tgt.select(sel)
            drf.select(sel)
        tau_r = tau.repeat_interleave(k)
        keep_t = 1 + tau_r
        if _fault == "rollback":  # negative control for the tests: keep one rejected draft in the target cache
            keep_t = torch.clamp(keep_t + 1, max=g + 1)
        tgt.keep(g + 1, keep_t)
        drf.keep(n_draft_fed, pend.shape[1] + torch.clamp(tau_r, max=g - 1))
        y_r = y.repeat_interleave(k)
        full = tau_r == g
        if bool(full.any()):
            pend = torch.stack([X[sel, g - 1], y_r], 1)
            pend_valid = torch.stack([full, torch.ones_like(full)], 1)
        else:
            pend = y_r.unsqueeze(1)
            pend_valid = torch.ones_like(pend, dtype=torch.bool)
        last = y_r
        t4 = time.perf_counter()
        # ---- record --------------------------------------------------------------------------
        live = [b for b in range(B) if not done[b]]
        th = None
        t_th = 0.0
        if theory:
            th0 = time.perf_counter()
            th = _theory.round_theory(plan, P, Q, X, rows0, path, tau, live, single_output=extra_cond)
            t_th = time.perf_counter() - th0
        n_emit = []
        for b in range(B):
            if done[b]:
                n_emit.append(0)
                continue
            room = n_new - len(out[b])
            toks = emitted[b][:room]
            if eos is not None and eos in toks:
                toks = toks[: toks.index(eos) + 1]
                done[b] = True
            out[b].extend(toks)
            n_emit.append(len(toks))
            if len(out[b]) >= n_new:
                done[b] = True
        builder.add_round(
            rnd,
            live,
            P=P,
            Q=Q,
            X=X,
            chosen=chosen,
            tau=tau,
            next_token=y,
            n_emit=n_emit,
            times=dict(draft=t1 - t0, target=t2 - t1, verify=t3 - t2, rollback=t4 - t3, theory=t_th),
            theory=th,
        )
        rnd += 1
        if progress is not None:
            progress(min(len(o) for o in out))
    wall = time.perf_counter() - t_start
    config = dict(
        target=target.name,
        draft=draft.name,
        verifier=plan.verifier,
        mode=plan.mode,
        rule=plan.rule,
        draft_law=plan.draft_law,
        drafts=k,
        gamma=g,
        temperature=float(temperature),
        top_k=top_k,
        top_p=top_p,
        max_new_tokens=n_new,
        seed=int(seed),
        batch=B,
        vocab_size=V,
        prefill_s=t_prefill,
        wall_s=wall,
        target_calls=tgt.calls - (1 if width > 1 else 0),
        draft_calls=drf.calls - (1 if width > 1 else 0),
        prompt_tokens=[len(p) for p in prompts],
    )
    trace = builder.build(config)
    text = [target.decode_text(o) for o in out] if (has_text and target.tokenizer is not None) else None
    return DecodeResult(tokens=out, text=text, trace=trace, config=config)
