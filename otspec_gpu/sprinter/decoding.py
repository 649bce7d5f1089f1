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

import time
from dataclasses import dataclass, field
from typing import Any

import torch

from otspec.errors import SprinterInputError
from otspec_gpu.drafting import ModelDrafter
from otspec_gpu.inputs import as_prompts, check_models, check_sampling, generators, whole
from otspec_gpu.processing import probs_from_logits
from otspec_gpu.scoring import SequenceScorer
from otspec_gpu.sprinter.rules import Features, PassRule, entropy
from otspec_gpu.verifying import last_token_rule

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


class _Scorers:
    """The draft's, the target's and (for rules that need it) the oracle's scorers, per sequence when cached."""

    def __init__(self, target: Any, draft: Any, B: int, cached: bool, needs_target: bool):
        self.cached = cached

        def make(lm, hidden=False):
            if cached:
                return [SequenceScorer(lm, cached=True, hidden=hidden) for _ in range(B)]
            return SequenceScorer(lm, cached=False, hidden=hidden)

        self.draft, self.target = make(draft, hidden=True), make(target)
        self.oracle = make(target) if needs_target else None

    def __call__(self, which: str, rows: list, seqs: list, n_last: list):
        sc = getattr(self, which)
        if not self.cached:
            return sc(seqs, n_last)
        lg, hd = [], []
        for r, s, n in zip(rows, seqs, n_last, strict=True):
            a, b = sc[r]([s], [n])
            lg += a
            hd += b
        return lg, hd


class _State:
    """Every sequence's context, output, current drafted run and running totals."""

    def __init__(self, prompts: list):
        B = len(prompts)
        self.ctx = [list(p) for p in prompts]  # prompt + emitted
        self.out: list[list[int]] = [[] for _ in range(B)]
        self.run: list[list[int]] = [[] for _ in range(B)]
        self.run_q: list[list[torch.Tensor]] = [[] for _ in range(B)]
        self.run_a: list[list[torch.Tensor]] = [[] for _ in range(B)]
        self.verify, self.done = [False] * B, [False] * B
        self.calls, self.cert, self.loglik, self.n_round = [0] * B, [0.0] * B, [0.0] * B, [0] * B
        self.stop_why = [""] * B
        self.rounds: list[dict] = []


class _Run:
    """One SPRINTER decoding: the settings, the streams, and the two phases of a step."""

    def __init__(self, scorers, verifier, sampling, gens, eos, cap, n_new):
        self.sc, self.verifier, self.sampling = scorers, verifier, sampling
        self.g_draft, self.g_pass, self.g_accept, self.g_resid, self.g_bonus = gens
        self.eos, self.cap, self.n_new = eos, cap, n_new
        self.drafter = ModelDrafter("chain", 1, 1, 1, "iid")

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        return probs_from_logits(logits, **self.sampling, dtype=torch.float64)

    def draft(self, st: _State, D: list) -> None:
        """Draft one token for every sequence of ``D`` (in its drafting phase) and flip its pass coin."""
        seqs = [st.ctx[r] + st.run[r] for r in D]
        lg, hd = self.sc("draft", D, seqs, [1] * len(D))
        q = self.probs(torch.stack([x[-1] for x in lg]))  # [R, V]
        hid = torch.stack([h[-1] for h in hd])  # [R, H]
        x, _ = self.drafter.first_tokens(q, self.g_draft)  # [R]
        pos = torch.tensor([float(len(st.out[r]) + len(st.run[r])) for r in D], dtype=torch.float64)
        p_or = None
        if self.verifier.needs_target:
            lo, _ = self.sc("oracle", D, seqs, [1] * len(D))
            p_or = self.probs(torch.stack([z[-1] for z in lo]))
        a = self.verifier.pass_prob(Features(hidden=hid, q=q, entropy=entropy(q), position=pos, p=p_or)).double()  # [R, V]
        if a.shape != q.shape:
            raise SprinterInputError(f"the pass rule returned shape {tuple(a.shape)}, expected {tuple(q.shape)}")
        if self.eos is not None:
            a[:, self.eos] = 0.0
        forced = torch.tensor([len(st.run[r]) + 1 >= self.cap or len(st.out[r]) + len(st.run[r]) + 1 >= self.n_new for r in D])
        a[forced] = 0.0
        u = torch.rand(len(D), dtype=torch.float64, generator=self.g_pass)
        passed = (u < a.gather(1, x[:, None]).squeeze(1)).tolist()
        xl = x.tolist()
        for i, r in enumerate(D):
            st.run[r].append(xl[i])
            st.run_q[r].append(q[i])
            st.run_a[r].append(a[i])
            if not passed[i]:
                st.verify[r] = True
                st.stop_why[r] = "flag" if not bool(forced[i]) else ("cap" if len(st.run[r]) >= self.cap else "budget")

    def check(self, st: _State, Vr: list) -> None:
        """One target forward per finished run of ``Vr``; the exact rule on its last token; emit and account."""
        Ls = [len(st.run[r]) for r in Vr]
        lg, _ = self.sc("target", Vr, [st.ctx[r] + st.run[r] for r in Vr], [L + 1 for L in Ls])
        P_all = self.probs(torch.cat(lg))  # [sum(L+1), V], rows of each sequence consecutive
        off = torch.tensor([0] + Ls[:-1]).add(1).cumsum(0) - 1  # index of each sequence's first row
        first = torch.cat([off[i] + torch.arange(L) for i, L in enumerate(Ls)])  # rows of p_1..p_L
        Q_all = torch.stack([q for r in Vr for q in st.run_q[r]])  # [sum L, V]
        A_all = torch.stack([a for r in Vr for a in st.run_a[r]])  # [sum L, V]
        diff = Q_all - P_all[first]
        delta_all = (A_all * diff.clamp_min(0.0)).sum(-1).tolist()  # [sum L]
        tv_all = (0.5 * diff.abs().sum(-1)).tolist()
        mass_all = (A_all * Q_all).sum(-1).tolist()
        last_row = off + torch.tensor(Ls) - 1  # row of p_L per sequence
        xl = torch.tensor([st.run[r][-1] for r in Vr])
        acc, y_res = last_token_rule(P_all[last_row], Q_all[torch.tensor(Ls).cumsum(0) - 1], xl, self.g_accept, self.g_resid)
        y_bon = self.drafter.first_tokens(P_all[last_row + 1], self.g_bonus)[0].tolist()
        emitted = []
        for i, r in enumerate(Vr):
            toks = st.run[r] + [y_bon[i]] if acc[i] else st.run[r][:-1] + [y_res[i]]
            toks = toks[: self.n_new - len(st.out[r])]
            if self.eos is not None and self.eos in toks:
                toks = toks[: toks.index(self.eos) + 1]
            emitted.append(toks)
        rows_ll = torch.tensor([int(off[i]) + j for i, t in enumerate(emitted) for j in range(len(t))], dtype=torch.long)
        cols_ll = torch.tensor([x for t in emitted for x in t], dtype=torch.long)
        ll_all = torch.log(P_all[rows_ll, cols_ll].clamp_min(1e-300)).tolist()
        self.account(st, Vr, Ls, emitted, acc, delta_all, tv_all, mass_all, ll_all)

    def account(self, st: _State, Vr, Ls, emitted, acc, delta_all, tv_all, mass_all, ll_all) -> None:
        """Add each checked run's exact terms to its sequence and start its next run."""
        k_run, k_ll = 0, 0
        for i, r in enumerate(Vr):
            L, toks = Ls[i], emitted[i]
            n_emit = len(toks)
            m = min(n_emit, L)
            dl = delta_all[k_run : k_run + m]
            st.cert[r] += sum(dl)
            st.loglik[r] += sum(ll_all[k_ll : k_ll + n_emit])
            st.calls[r] += 1
            st.rounds.append(
                {
                    "row": r,
                    "round": st.n_round[r],
                    "start": len(st.out[r]),
                    "L": L,
                    "stop": st.stop_why[r],
                    "accepted": bool(acc[i]),
                    "n_emit": n_emit,
                    "delta": dl,
                    "tv_pq": tv_all[k_run : k_run + m],
                    "pass_mass": mass_all[k_run : k_run + m],
                }
            )
            k_run += L
            k_ll += n_emit
            st.n_round[r] += 1
            st.out[r].extend(toks)
            st.ctx[r].extend(toks)
            st.run[r], st.run_q[r], st.run_a[r], st.verify[r] = [], [], [], False
            if len(st.out[r]) >= self.n_new or (self.eos is not None and toks and toks[-1] == self.eos):
                st.done[r] = True


# long-function: the public entry: the SPRINTER loop over the shared pipeline stages, with its docstring
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
    chat: bool = False,
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
    chat : bool
        Wrap each text prompt in the target's chat template as one user turn (ignored for models
        without a chat template).

    Returns
    -------
    SprinterResult
        Tokens, text, the certified bound, target calls, log-likelihood and per-round records.

    Raises
    ------
    SprinterInputError
        If ``verifier`` is not a pass rule, ``cap``, ``max_new_tokens`` or ``seed`` is not a
        whole number in range, ``temperature`` is negative, a prompt is malformed, or the pass rule
        returns a wrong shape.
    IncompatibleModelsError
        If the two models' vocabularies differ.

    Examples
    --------
    >>> from otspec_gpu.models import tiny, self_draft
    >>> from otspec_gpu.sprinter.rules import OraclePass
    >>> t = tiny(seed=0); res = decode(t, self_draft(t, 1.5), [1, 2], verifier=OraclePass(), max_new_tokens=4)
    >>> len(res.tokens[0]), res.certified_tv
    (4, [0.0])
    """
    # Over 80 lines only through this docstring: the code checks the arguments and loops over
    # the two phases of :class:`_Run`.
    if not isinstance(verifier, PassRule):
        raise SprinterInputError(
            f"verifier must be a pass rule from otspec_gpu.sprinter (got {type(verifier).__name__}); e.g. ConstantPass(0.5) or load_verifier(path)"
        )
    V = check_models(target, draft, SprinterInputError)
    cap = whole(cap, "cap", error=SprinterInputError, fix="SPRINTER uses 20")
    n_new = whole(max_new_tokens, "max_new_tokens", error=SprinterInputError)
    seed = whole(seed, "seed", minimum=0, error=SprinterInputError)
    temperature = check_sampling(temperature, SprinterInputError)
    prompts = as_prompts(target, prompt, chat=chat, error=SprinterInputError)
    if cached is None:
        cached = target.tokenizer is not None
    B = len(prompts)
    sampling = {"temperature": temperature, "top_k": top_k, "top_p": top_p}
    eos = target.eos_token_id if stop_at_eos else None
    run = _Run(_Scorers(target, draft, B, cached, verifier.needs_target), verifier, sampling, generators(seed, 5), eos, cap, n_new)
    st = _State(prompts)
    t0 = time.perf_counter()
    while not all(st.done):
        D = [r for r in range(B) if not st.done[r] and not st.verify[r]]
        if D:
            run.draft(st, D)
        Vr = [r for r in range(B) if st.verify[r]]
        if Vr:
            run.check(st, Vr)
    config = {"target": target.name, "draft": draft.name, "verifier": verifier.name, "cap": cap, **sampling}
    config.update(max_new_tokens=n_new, seed=seed, batch=B, cached=bool(cached), wall_s=time.perf_counter() - t0, vocab_size=V)
    text = [target.decode_text(o) for o in st.out] if (prompts.text and target.tokenizer is not None) else None
    return SprinterResult(
        tokens=st.out, text=text, certified_tv=st.cert, target_calls=st.calls, loglik=st.loglik, rounds=st.rounds, config=config
    )
