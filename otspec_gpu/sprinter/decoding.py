r"""Sequential approximate decoding (SPRINTER) with exact fidelity accounting.

One **round** for one sequence:

1. the draft proposes :math:`x_1, x_2, \dots` one at a time from :math:`q_j = q(\cdot \mid
   \text{prefix}, x^{j-1})`; after each token a cheap pass rule (:mod:`otspec_gpu.sprinter.rules`)
   passes it with probability :math:`a_j(x_j)`; the run stops at the first token that is not
   passed, or when it reaches ``cap`` tokens, or when it reaches the length budget (the token at
   which the run stops is never passed: :math:`a \equiv 0` there);
2. **one** target forward over prefix + :math:`x^L` gives :math:`p_1, \dots, p_{L+1}`;
3. only :math:`x_L` is checked, with the exact rule: kept with probability
   :math:`\min(1, p_L(x_L)/q_L(x_L))`, then a bonus token from :math:`p_{L+1}`; otherwise it is
   replaced by a draw from :math:`\mathrm{norm}((p_L - q_L)_+)`. Tokens :math:`x_1..x_{L-1}` are
   kept without any check.

**Exact per-token law.** Given the emitted prefix and the position :math:`j` in the run, the next
emitted token has the law

.. math:: P_j(x) = q_j a_j + q_j (1-a_j)\min(1, p_j/q_j) + R_j\,\mathrm{norm}((p_j-q_j)_+),
          \quad R_j = \sum_y (1-a_j(y))(q_j(y)-p_j(y))_+ ,

whose distance to the target's conditional is exactly :math:`\delta_j = d_{TV}(P_j, p_j) =
\sum_x a_j(x)(q_j(x)-p_j(x))_+`; a bonus token has the target's law (:math:`\delta = 0`).

**Certified bound.** Couple the generated sequence with a target sample token by token (a maximal
coupling of :math:`P_t` and :math:`p_t` given the common history); the two differ only if some step
fails to couple, so

.. math:: d_{TV}(\text{law of } Y^n, p^n) \le \mathbb{E}\Big[\sum_{t=1}^n \delta_t\Big].

Each round computes its :math:`\delta_j` exactly from its real :math:`p_j, q_j` (float64) and the
pass rule's :math:`a_j` over the whole vocabulary. The per-sequence sum :math:`\sum_t \delta_t`
is an unbiased estimate of the right-hand side (its mean over sequences estimates the bound; with
a deterministic threshold rule and one prompt it is the exact conditional contribution of the
path taken). The verifier never passes the EOS token, so a sequence ends only after a target check.

Randomness: ``seed`` spawns five independent ``torch.Generator`` streams: drafting, the pass rule's
coins, the exact rule's accept coins, residual draws and bonus draws.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from otspec_gpu.sprinter._common import (
    Scorer,
    SprinterInputError,
    generators,
    multinomial,
    probs,
)
from otspec_gpu.sprinter.rules import Features, PassRule, entropy

__all__ = ["DEFAULT_CAP", "SprinterResult", "decode"]

#: SPRINTER's cap on the number of drafted tokens per target call.
DEFAULT_CAP = 20


@dataclass(frozen=True, eq=False)
class SprinterResult:
    """What :func:`decode` returns.

    Attributes
    ----------
    tokens : list of list of int
        Generated tokens per sequence.
    text : list of str or None
        Decoded text (``None`` without a tokenizer).
    certified_tv : list of float
        Per sequence, :math:`\\sum_t \\delta_t` over its emitted tokens (see the module docstring);
        a TV distance is at most 1, so only values below 1 are informative.
    target_calls : list of int
        Per sequence, target forwards (one per round; the oracle rule's look-ups are not counted).
    loglik : list of float
        Per sequence, :math:`\\sum_t \\log p(y_t \\mid y^{t-1})` under the target (with the sampling
        transform), from the rounds' own target forwards.
    rounds : list of dict
        One record per (sequence, round): ``row``, ``round``, ``start``, ``L``, ``stop``
        (``"flag"``, ``"cap"``, ``"budget"``), ``accepted``, ``n_emit``, ``delta`` (per emitted
        drafted position), ``tv_pq`` (:math:`d_{TV}(p_j, q_j)` per position), ``pass_mass``.
    config : dict
    """

    tokens: list
    text: list | None
    certified_tv: list
    target_calls: list
    loglik: list
    rounds: list
    config: dict = field(default_factory=dict)

    def summary(self) -> dict:
        """Totals: tokens, target calls per token, mean certified bound, mean log-likelihood per token.

        Returns
        -------
        dict
            ``sequences``, ``tokens``, ``target_calls``, ``target_calls_per_token``,
            ``tokens_per_call``, ``certified_tv_mean`` and ``certified_tv_max`` (over sequences),
            ``loglik_per_token`` (target log-likelihood) and ``mean_run_length``.
        """
        n_tok = sum(len(t) for t in self.tokens)
        calls = sum(self.target_calls)
        return {
            "sequences": len(self.tokens),
            "tokens": n_tok,
            "target_calls": calls,
            "target_calls_per_token": calls / n_tok if n_tok else float("nan"),
            "tokens_per_call": n_tok / calls if calls else float("nan"),
            "certified_tv_mean": sum(self.certified_tv) / len(self.certified_tv),
            "certified_tv_max": max(self.certified_tv),
            "loglik_per_token": sum(self.loglik) / n_tok if n_tok else float("nan"),
            "mean_run_length": sum(r["L"] for r in self.rounds) / max(1, len(self.rounds)),
        }


def _prompts(target: Any, prompt: Any) -> tuple[list[list[int]], bool]:
    if isinstance(prompt, str):
        return [target.encode(prompt)], True
    if isinstance(prompt, (list, tuple)) and prompt and all(isinstance(s, str) for s in prompt):
        return [target.encode(s) for s in prompt], True
    if isinstance(prompt, (list, tuple)) and prompt and all(isinstance(t, int) for t in prompt):
        return [list(prompt)], False
    if isinstance(prompt, (list, tuple)) and prompt and all(isinstance(s, (list, tuple)) and s for s in prompt):
        return [[int(t) for t in s] for s in prompt], False
    raise SprinterInputError(
        f"prompt must be a string, a list of strings, token ids or a list of token-id lists (got {type(prompt).__name__}); pass e.g. 'Hello'"
    )


def decode(
    target: Any,
    draft: Any,
    prompt: Any,
    *,
    verifier: PassRule,
    cap: int = DEFAULT_CAP,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    max_new_tokens: int = 64,
    seed: int = 0,
    stop_at_eos: bool = True,
    cached: bool | None = None,
) -> SprinterResult:
    r"""SPRINTER decoding of ``prompt`` (see the module docstring) with exact fidelity accounting.

    Parameters
    ----------
    target, draft : otspec_gpu.models.LM
        Models sharing a vocabulary.
    prompt : str, list of str, list of int or list of list of int
        One prompt or a batch; a batch of ``B`` prompts is ``B`` independent decodings.
    verifier : otspec_gpu.sprinter.rules.PassRule
        The pass rule (:class:`~otspec_gpu.sprinter.rules.ConstantPass`,
        :class:`~otspec_gpu.sprinter.rules.OraclePass`, or a trained
        :class:`~otspec_gpu.sprinter.classifier.ClassifierVerifier`).
    cap : int
        Most drafted tokens per target call (SPRINTER uses 20).
    temperature, top_k, top_p :
        Sampling transform applied identically to target and draft.
    max_new_tokens : int
    seed : int
    stop_at_eos : bool
        End a sequence at the tokenizer's EOS (the pass rule never passes EOS).
    cached : bool or None
        KV-cached forwards (one sequence at a time) or cache-free batched forwards; ``None`` picks
        cached for real models and batched for the tiny test models (no tokenizer).

    Returns
    -------
    SprinterResult

    Examples
    --------
    >>> from otspec_gpu.models import tiny, self_draft
    >>> from otspec_gpu.sprinter.rules import OraclePass
    >>> t = tiny(seed=0); res = decode(t, self_draft(t, 1.5), [1, 2], verifier=OraclePass(), max_new_tokens=4)
    >>> len(res.tokens[0]), res.certified_tv
    (4, [0.0])
    """
    if not isinstance(verifier, PassRule):
        raise SprinterInputError(
            f"verifier must be a pass rule from otspec_gpu.sprinter (got {type(verifier).__name__}); e.g. ConstantPass(0.5) or load_verifier(path)"
        )
    if target.vocab_size != draft.vocab_size:
        raise SprinterInputError(
            f"target and draft vocabularies differ ({target.vocab_size} vs {draft.vocab_size}); pick a draft that shares the target's tokenizer"
        )
    if not (isinstance(cap, int) and cap >= 1):
        raise SprinterInputError(f"cap must be an integer >= 1 (got {cap!r}); SPRINTER uses 20")
    if not (isinstance(max_new_tokens, int) and max_new_tokens >= 1):
        raise SprinterInputError(f"max_new_tokens must be an integer >= 1 (got {max_new_tokens!r})")
    if not (isinstance(temperature, (int, float)) and math.isfinite(temperature) and temperature >= 0):
        raise SprinterInputError(f"temperature must be a finite number >= 0 (got {temperature!r}); 0 is greedy")
    prompts, has_text = _prompts(target, prompt)
    V = target.vocab_size
    for pr in prompts:
        if min(pr) < 0 or max(pr) >= V:
            raise SprinterInputError(f"prompt token ids must lie in [0, {V}) (got {min(pr)}..{max(pr)})")
    if cached is None:
        cached = target.tokenizer is not None
    B, n_new = len(prompts), max_new_tokens
    sampling = {"temperature": float(temperature), "top_k": top_k, "top_p": top_p}
    g_draft, g_pass, g_accept, g_resid, g_bonus = generators(seed, 5)
    eos = getattr(target.tokenizer, "eos_token_id", None) if (stop_at_eos and target.tokenizer is not None) else None
    if cached:
        d_sc = [Scorer(draft, cached=True, hidden=True) for _ in range(B)]
        t_sc = [Scorer(target, cached=True) for _ in range(B)]
        o_sc = [Scorer(target, cached=True) for _ in range(B)] if verifier.needs_target else None
    else:
        d_sc, t_sc = Scorer(draft, cached=False, hidden=True), Scorer(target, cached=False)
        o_sc = Scorer(target, cached=False) if verifier.needs_target else None

    def call(sc, rows, seqs, n_last):
        if not cached:
            return sc(seqs, n_last)
        lg, hd = [], []
        for r, s, n in zip(rows, seqs, n_last, strict=False):
            a, b = sc[r]([s], [n])
            lg += a
            hd += b
        return lg, hd

    ctx = [list(p) for p in prompts]  # prompt + emitted
    out: list[list[int]] = [[] for _ in range(B)]
    run: list[list[int]] = [[] for _ in range(B)]
    run_q: list[list[torch.Tensor]] = [[] for _ in range(B)]
    run_a: list[list[torch.Tensor]] = [[] for _ in range(B)]
    verify = [False] * B
    done = [False] * B
    calls = [0] * B
    cert = [0.0] * B
    loglik = [0.0] * B
    n_round = [0] * B
    rounds: list[dict] = []
    stop_why: list[str] = [""] * B
    t0 = time.perf_counter()
    while not all(done):
        # ---- draft one token for every sequence in its drafting phase --------------------------
        D = [r for r in range(B) if not done[r] and not verify[r]]
        if D:
            seqs = [ctx[r] + run[r] for r in D]
            lg, hd = call(d_sc, D, seqs, [1] * len(D))
            q = probs(torch.stack([x[-1] for x in lg]), **sampling)  # [R, V]
            hid = torch.stack([h[-1] for h in hd])  # [R, H]
            x = multinomial(q, g_draft)  # [R]
            pos = torch.tensor([float(len(out[r]) + len(run[r])) for r in D], dtype=torch.float64)
            p_or = None
            if verifier.needs_target:
                lo, _ = call(o_sc, D, seqs, [1] * len(D))
                p_or = probs(torch.stack([z[-1] for z in lo]), **sampling)
            f = Features(hidden=hid, q=q, entropy=entropy(q), position=pos, p=p_or)
            a = verifier.pass_prob(f).double()  # [R, V]
            if a.shape != q.shape:
                raise SprinterInputError(f"the pass rule returned shape {tuple(a.shape)}, expected {tuple(q.shape)}")
            if eos is not None:
                a[:, eos] = 0.0
            forced = torch.tensor([len(run[r]) + 1 >= cap or len(out[r]) + len(run[r]) + 1 >= n_new for r in D])
            a[forced] = 0.0
            u = torch.rand(len(D), dtype=torch.float64, generator=g_pass)
            passed = (u < a.gather(1, x[:, None]).squeeze(1)).tolist()
            xl = x.tolist()
            for i, r in enumerate(D):
                run[r].append(xl[i])
                run_q[r].append(q[i])
                run_a[r].append(a[i])
                if not passed[i]:
                    verify[r] = True
                    stop_why[r] = "flag" if not bool(forced[i]) else ("cap" if len(run[r]) >= cap else "budget")
        # ---- one target forward per finished run; exact check of its last token ------------------
        Vr = [r for r in range(B) if verify[r]]
        if not Vr:
            continue
        Ls = [len(run[r]) for r in Vr]
        lg, _ = call(t_sc, Vr, [ctx[r] + run[r] for r in Vr], [L + 1 for L in Ls])
        P_all = probs(torch.cat(lg), **sampling)  # [sum(L+1), V], rows of each sequence consecutive
        off = torch.tensor([0] + Ls[:-1]).add(1).cumsum(0) - 1  # index of each sequence's first row
        Lt = torch.tensor(Ls)
        first = torch.cat([off[i] + torch.arange(L) for i, L in enumerate(Ls)])  # rows of p_1..p_L
        Q_all = torch.stack([q for r in Vr for q in run_q[r]])  # [sum L, V]
        A_all = torch.stack([a for r in Vr for a in run_a[r]])  # [sum L, V]
        P_run = P_all[first]
        diff = Q_all - P_run
        delta_all = (A_all * diff.clamp_min(0.0)).sum(-1).tolist()  # [sum L]
        tv_all = (0.5 * diff.abs().sum(-1)).tolist()
        mass_all = (A_all * Q_all).sum(-1).tolist()
        last_row = off + Lt - 1  # row of p_L per sequence
        last_p = P_all[last_row]
        last_q = Q_all[torch.tensor(Ls).cumsum(0) - 1]
        xl = torch.tensor([run[r][-1] for r in Vr])
        px, qx = last_p.gather(1, xl[:, None]).squeeze(1), last_q.gather(1, xl[:, None]).squeeze(1)
        u = torch.rand(len(Vr), dtype=torch.float64, generator=g_accept)
        acc = (u * qx < px).tolist()  # u < min(1, p/q) without dividing
        res = (last_p - last_q).clamp_min(0.0)
        s = res.sum(-1, keepdim=True)
        res = torch.where(s > 0, res / s.clamp_min(1e-300), last_p)  # 0/0 only on a probability-0 event
        y_res = multinomial(res, g_resid).tolist()
        y_bon = multinomial(P_all[last_row + 1], g_bonus).tolist()
        emitted = []
        for i, r in enumerate(Vr):
            toks = run[r] + [y_bon[i]] if acc[i] else run[r][:-1] + [y_res[i]]
            toks = toks[: n_new - len(out[r])]
            if eos is not None and eos in toks:
                toks = toks[: toks.index(eos) + 1]
            emitted.append(toks)
        rows_ll = torch.tensor([int(off[i]) + j for i, t in enumerate(emitted) for j in range(len(t))], dtype=torch.long)
        cols_ll = torch.tensor([x for t in emitted for x in t], dtype=torch.long)
        ll_all = torch.log(P_all[rows_ll, cols_ll].clamp_min(1e-300)).tolist()
        k_run, k_ll = 0, 0
        for i, r in enumerate(Vr):
            L, toks = Ls[i], emitted[i]
            n_emit = len(toks)
            m = min(n_emit, L)
            dl = delta_all[k_run : k_run + m]
            cert[r] += sum(dl)
            loglik[r] += sum(ll_all[k_ll : k_ll + n_emit])
            calls[r] += 1
            rounds.append(
                {
                    "row": r,
                    "round": n_round[r],
                    "start": len(out[r]),
                    "L": L,
                    "stop": stop_why[r],
                    "accepted": bool(acc[i]),
                    "n_emit": n_emit,
                    "delta": dl,
                    "tv_pq": tv_all[k_run : k_run + m],
                    "pass_mass": mass_all[k_run : k_run + m],
                }
            )
            k_run += L
            k_ll += n_emit
            n_round[r] += 1
            out[r].extend(toks)
            ctx[r].extend(toks)
            run[r], run_q[r], run_a[r], verify[r] = [], [], [], False
            if len(out[r]) >= n_new or (eos is not None and toks and toks[-1] == eos):
                done[r] = True
    wall = time.perf_counter() - t0
    config = {
        "target": target.name,
        "draft": draft.name,
        "verifier": verifier.name,
        "cap": cap,
        "temperature": float(temperature),
        "top_k": top_k,
        "top_p": top_p,
        "max_new_tokens": n_new,
        "seed": int(seed),
        "batch": B,
        "cached": bool(cached),
        "wall_s": wall,
        "vocab_size": V,
    }
    text = [target.decode_text(o) for o in out] if (has_text and target.tokenizer is not None) else None
    return SprinterResult(tokens=out, text=text, certified_tv=cert, target_calls=calls, loglik=loglik, rounds=rounds, config=config)
