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

**Pipeline.** :func:`decode` is a loop over four parts, one module each: the **drafter** (the
protocol :class:`otspec_gpu.drafters.Drafter`), the **scorer** (:class:`otspec_gpu.scoring.DecodeCaches`:
both models' KV caches, the target forward and the rollback), the **verifier step**
(:class:`otspec_gpu.verifying.VerifierStep`) and the **recorder**
(:class:`otspec_gpu.recording.Recorder`: trace, theory and phase timings).

**Drafters.** ``draft`` is a draft model, a drafter name or a
:class:`otspec_gpu.drafters.DraftSource` (:mod:`otspec_gpu.drafters`): a draft model feeds every mode
(:class:`otspec_gpu.drafters.ModelDraft`); ``PromptLookup(max_ngram)`` (or ``"prompt-lookup"``)
drafts without a model, copying the continuation of the most recent earlier match of the context's
last n-gram with one-hot draft rows, for the chain rules (:mod:`otspec_gpu.prompt_lookup`);
``"smollm2-medusa"`` and ``"smollm2-eagle"`` draft with trained heads on the target's own last
hidden layer (:mod:`otspec_gpu.head_drafters`). The loop asks the source which modes it feeds,
which model the scorer caches and whether it reads the target's feature (``needs_target_hidden``:
the scorer then keeps it and the drafter's ``see_target`` gets it at every round's start), and the
run's drafter for ``draft``, ``observe`` and ``record``; it never branches on which drafter it has.

**KV caches.** Each model keeps one ``transformers`` ``DynamicCache`` with ``B * k`` rows and a
boolean *validity mask* over cache positions (:mod:`otspec_gpu.scoring`). With one prompt every
rollback is a plain crop.

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

import torch

from otspec.errors import IncompatibleModelsError, InvalidDraftCountError, UnsupportedMethodError
from otspec.plugin import as_int_in_range

__all__ = ["DRAFT_TREES", "DecodeMode", "DecodeResult", "DecodeSettings", "IncompatibleModelsError", "decode", "mode_for"]


@dataclass(frozen=True)
class DecodeMode:
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
        How the drafts are drawn: ``iid``, ``without_replacement``, ``greedy``, or ``top_k_tree``
        (a deterministic tree: nothing is drawn).
    branching : tuple of int
        A deterministic top-k tree's children per depth (``prod = k``, ``len = gamma``); ``()``
        for sampled drafts.
    """

    mode: str
    verifier: str
    k: int
    gamma: int
    rule: str
    draft_law: str
    branching: tuple = ()


#: Deterministic draft trees :func:`decode` can draft (``draft_tree=``): ``"topk"``, the static tree
#: of every node's top-:math:`b_d` children (EAGLE's static tree with q = 1), verified by
#: sample-and-match (:mod:`otspec_gpu.deterministic`).
DRAFT_TREES = ("topk",)


def _deterministic_tree(verifier: str, k: int, g: int, draft_tree: str, branching) -> DecodeMode:
    """The mode of a deterministic top-k tree: ``branching`` (default ``(k, 1, ..., 1)``: the top-k
    first tokens, each continued by the draft's top token) checked against ``k`` and ``gamma``."""
    if draft_tree not in DRAFT_TREES:
        raise UnsupportedMethodError(f"draft_tree must be one of {list(DRAFT_TREES)} (got {draft_tree!r}); e.g. draft_tree='topk'")
    if verifier != "sample_match":
        raise UnsupportedMethodError(
            f"a deterministic top-k tree is verified by sample-and-match (verifier='sample_match'), got {verifier!r}: "
            "its drafts are chosen, not sampled from q, so rules that divide by q do not apply"
        )
    b = (k,) + (1,) * (g - 1) if branching is None else tuple(as_int_in_range(x, "branching") for x in branching)
    if len(b) != g or math.prod(b) != k:
        raise InvalidDraftCountError(
            f"branching {list(b)} must hold gamma = {g} child counts whose product is drafts = {k} (one drafted sequence per leaf); "
            f"pass drafts={math.prod(b)}, gamma={len(b)}"
        )
    return DecodeMode("tree", verifier, k, g, verifier, "top_k_tree", b)


# long-function: every decoding mode and the error for each combination without one, in one place
def mode_for(verifier: str, drafts: int = 1, gamma: int = 4, *, draft_tree: str | None = None, branching=None) -> DecodeMode:
    """Resolve the decoding mode of a request (and reject combinations that have no meaning).

    The modes of each verifier come from the one torch verifier table,
    :data:`otspec_gpu.verifiers.VERIFIERS` (``TorchRule.modes``):

    * ``token`` / ``block`` with ``drafts = 1``: a chain of ``gamma`` drafts;
    * any single-step verifier with ``gamma = 1``: ``drafts`` single-token drafts from the
      verifier's own draft law (plus a bonus token when a draft is accepted);
    * ``kseq`` (SpecTr), ``rrs`` (SpecInfer), ``rrs_wor`` (RSD) with ``gamma > 1``: a tree of
      ``drafts`` sequences of length ``gamma``;
    * ``kseq_bv`` (K-SEQ's BV boost): a tree of ``drafts`` i.i.d. sequences, K-SEQ's accepted
      prefix, then block verification of a sequence through it;
    * ``sample_match`` with ``draft_tree="topk"``: a deterministic tree of top-:math:`b_d` children
      (``branching``), its ``drafts`` leaves as sequences.

    Parameters
    ----------
    verifier : str
        Verifier name.
    drafts : int
        Number of drafts ``k >= 1``.
    gamma : int
        Draft length ``>= 1``.
    draft_tree : {"topk"}, optional
        Draft a deterministic tree (:data:`DRAFT_TREES`) instead of sampling.
    branching : sequence of int, optional
        With ``draft_tree``: children per depth (default ``(drafts, 1, ..., 1)``).

    Returns
    -------
    DecodeMode
        The mode, rule and draft law the decoder will run.

    Raises
    ------
    NotAnIntegerError, InvalidDraftCountError
        If ``drafts`` or ``gamma`` is not an integer ``>= 1``, or ``drafts`` is a number of drafts
        the single-step verifier does not take (``spechub``: exactly 2).
    UnsupportedMethodError
        If the verifier is unknown, lossy (``approximate``), or has no decoding mode for this
        ``drafts`` / ``gamma`` (e.g. ``block`` with several drafts).
    """
    from otspec_gpu.verifiers import VERIFIERS

    k = as_int_in_range(drafts, "drafts")
    g = as_int_in_range(gamma, "gamma")
    if not isinstance(verifier, str):
        raise UnsupportedMethodError(f"verifier must be a name (got {verifier!r}); e.g. 'token', 'block', 'kseq'")
    if draft_tree is not None:
        return _deterministic_tree(verifier, k, g, draft_tree, branching)
    if verifier == "sample_match":
        raise UnsupportedMethodError(
            "verifier 'sample_match' walks a deterministic draft tree; pass draft_tree='topk' (otspec decode --draft-tree topk)"
        )
    if verifier == "approximate":
        raise UnsupportedMethodError(
            "verifier 'approximate' is lossy and needs a per-token predicate; the decoder runs lossless verifiers only"
        )
    if verifier == "kseq_bv":  # K-SEQ's BV boost: a tree of i.i.d. sequences (otspec_gpu.verifiers.tree_boost)
        return DecodeMode("tree", verifier, k, g, verifier, "iid")
    if verifier == "nested":
        raise UnsupportedMethodError(
            "verifier 'nested' (nested optimal selection) runs in the numpy core only (otspec.verifiers.tree_deployable); "
            "decode with kseq_bv, K-SEQ's BV boost"
        )
    if verifier not in VERIFIERS:
        raise UnsupportedMethodError(f"unknown verifier {verifier!r}; pick one of {sorted(VERIFIERS)}")
    rule = VERIFIERS[verifier]
    if "chain" in rule.modes and (k == 1 or "single" not in rule.modes):
        if k != 1:
            raise UnsupportedMethodError(
                f"verifier {verifier!r} verifies one drafted block (got drafts = {k}); use drafts=1, or a tree verifier (kseq, rrs, rrs_wor) for k sequences"
            )
        return DecodeMode("chain", verifier, 1, g, verifier, "iid")
    if g == 1 and "single" in rule.modes:
        v = rule.single_step
        if k < v.k_min or (v.k_max is not None and k > v.k_max):
            span = f"exactly {v.k_min}" if v.k_max == v.k_min else f"at least {v.k_min}" if v.k_max is None else f"{v.k_min}..{v.k_max}"
            raise InvalidDraftCountError(f"verifier {verifier!r} takes {span} drafts (got drafts = {k}); pass drafts={v.k_min}")
        return DecodeMode("single", verifier, k, 1, verifier, v.draft_law)
    if "tree" in rule.modes and g > 1:
        return DecodeMode("tree", verifier, k, g, verifier, rule.single_step.draft_law)
    raise UnsupportedMethodError(
        f"verifier {verifier!r} with drafts = {k}, gamma = {g} has no decoding mode: single-step verifiers need gamma = 1; "
        f"over gamma > 1 use token/block (drafts = 1) or kseq/rrs/rrs_wor (a tree of drafts sequences)"
    )


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
    stopped_at_eos : list of bool
        Per prompt, whether it ended at the tokenizer's EOS token (before ``max_new_tokens``).
    """

    tokens: list
    text: list | None
    trace: Any
    config: dict = field(default_factory=dict)
    stopped_at_eos: list = field(default_factory=list)

    def report(self):
        """The theory-vs-practice summary (:func:`otspec_gpu.report.summarize`).

        Returns
        -------
        otspec_gpu.report.Report
            Measured and exact expected accepted lengths per round, and whether they agree.
        """
        from otspec_gpu.report import summarize

        return summarize(self.trace)


class _Outputs:
    """The tokens generated so far per prompt, cut at ``max_new_tokens`` and at EOS."""

    def __init__(self, B: int, n_new: int, eos: int | None):
        self.tokens: list[list[int]] = [[] for _ in range(B)]
        self.done, self.eos_stop = [False] * B, [False] * B
        self.n_new, self.eos = n_new, eos

    def live(self) -> list[int]:
        return [b for b, d in enumerate(self.done) if not d]

    def add(self, emitted: list[list[int]]) -> list[int]:
        """Append each live prompt's emitted tokens; returns how many each got."""
        n_emit = []
        for b, toks in enumerate(emitted):
            if self.done[b]:
                n_emit.append(0)
                continue
            toks = toks[: self.n_new - len(self.tokens[b])]
            if self.eos is not None and self.eos in toks:
                toks = toks[: toks.index(self.eos) + 1]
                self.done[b] = self.eos_stop[b] = True
            self.tokens[b].extend(toks)
            n_emit.append(len(toks))
            if len(self.tokens[b]) >= self.n_new:
                self.done[b] = True
        return n_emit


@dataclass(frozen=True, eq=False)
class DecodeSettings:
    """The checked arguments of :func:`decode`.

    Attributes
    ----------
    mode : DecodeMode
        The resolved request (:func:`mode_for`).
    source : otspec_gpu.drafters.DraftSource
        What drafts (:func:`otspec_gpu.drafters.as_source` of ``draft``); it feeds ``mode``.
    prompts : list of list of int
        Token ids per prompt (:func:`otspec_gpu.inputs.as_prompts`).
    V : int
        The vocabulary size.
    sampling : dict
        ``temperature`` (checked), ``top_k`` and ``top_p``: the transform of both models' logits.
    n_new : int
        Tokens to generate per prompt.
    seed : int
        Seed of the drafting, verification and bonus streams.
    top_k_trace : int
        Largest probabilities kept per trace row.
    """

    mode: DecodeMode
    source: Any
    prompts: Any
    V: int
    sampling: dict
    n_new: int
    seed: int
    top_k_trace: int

    def config(self, target) -> dict:
        """The run's settings, in the order the trace config lists them (timings and counts follow).

        Parameters
        ----------
        target : otspec_gpu.models.LM
            The target model.

        Returns
        -------
        dict
        """
        mode = self.mode
        return dict(
            target=target.name,
            draft=self.source.name,
            verifier=mode.verifier,
            mode=mode.mode,
            rule=mode.rule,
            draft_law=mode.draft_law,
            drafts=mode.k,
            gamma=mode.gamma,
            **self.sampling,
            max_new_tokens=self.n_new,
            seed=self.seed,
            batch=len(self.prompts),
            vocab_size=self.V,
        )


def _settings(
    target, draft, prompt, verifier, drafts, gamma, sampling: dict, max_new_tokens, seed, top_k_trace, chat, tree: dict
) -> DecodeSettings:
    """Checked arguments of :func:`decode`."""
    from otspec_gpu import drafters, inputs

    source = drafters.as_source(draft)
    V = inputs.check_models(target, target if source.model is None else source.model)
    mode = mode_for(verifier, drafts, gamma, **tree)
    drafters.check_supports(source, mode)
    n_new = inputs.whole(max_new_tokens, "max_new_tokens")
    seed = inputs.whole(seed, "seed", minimum=0)
    top_k_trace = inputs.whole(top_k_trace, "top_k_trace")
    sampling = dict(sampling, temperature=inputs.check_sampling(sampling["temperature"]))
    prompts = inputs.as_prompts(target, prompt, chat=chat)
    return DecodeSettings(mode, source, prompts, V, sampling, n_new, seed, top_k_trace)


def _tree_interval(value: Any, mode: DecodeMode) -> int:
    """``tree_interval`` checked: a positive integer, for a tree run."""
    from otspec.errors import InvalidOptionError
    from otspec_gpu import inputs

    value = inputs.whole(value, "tree_interval")
    if mode.mode != "tree":
        raise InvalidOptionError(
            f"tree_interval applies to trees of drafted sequences (got a {mode.mode} run); use drafts >= 2, gamma >= 2 and a "
            "tree verifier, or drop it"
        )
    return value


# long-function: the public entry: the decode loop over the four pipeline stages, with its docstring
def decode(
    target: Any,
    draft: Any,
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
    chat: bool = False,
    progress: Callable[[int], None] | None = None,
    draft_tree: str | None = None,
    branching: Any = None,
    tree_interval: int | None = None,
) -> DecodeResult:
    r"""Speculative decoding of ``prompt`` with ``target`` and ``draft`` (see the module docstring).

    Parameters
    ----------
    target : otspec_gpu.models.LM
        The target model (:func:`otspec_gpu.models.load` / ``wrap``).
    draft : otspec_gpu.models.LM, str or otspec_gpu.drafters.DraftSource
        A draft model sharing the target's vocabulary, a drafter name
        (:func:`otspec_gpu.drafters.by_name`: ``"prompt-lookup"``, i.e. ``PromptLookup()`` with
        ``max_ngram = 3``, or a model name), or a draft source such as
        :class:`otspec_gpu.prompt_lookup.PromptLookup` (no draft model: the continuation of the most
        recent earlier match of the context's last n-gram, with one-hot draft rows; chain verifiers
        ``token`` and ``block`` only).
    prompt : str, list of str, list of int or list of list of int
        One prompt or a batch (token ids need no tokenizer). A batch of ``B`` prompts runs as
        ``B`` independent decodings in one batched forward per round.
    verifier : str
        ``token`` / ``block`` (chains), any single-step verifier of
        :data:`otspec_gpu.verifiers.SINGLE_STEP` (with ``gamma = 1``), or ``kseq`` / ``rrs`` /
        ``rrs_wor`` over trees of ``drafts`` sequences (``gamma > 1``). See :func:`mode_for`.
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
        Seeds the drafting, verification and bonus streams (an integer ``>= 0``).
    theory : bool
        Compute each record's exact expectations (costs numpy time, reported apart from decoding).
    stop_at_eos : bool
        Stop a prompt at the tokenizer's EOS token.
    top_k_trace : int
        How many of the largest probabilities of each p and q row the trace keeps (plus tail mass),
        an integer ``>= 1``.
    chat : bool
        Wrap each text prompt in the target's chat template as one user turn (ignored for models
        without a chat template and for token-id prompts).
    progress : callable, optional
        Called with the number of tokens generated so far by the slowest prompt after each round.
    draft_tree : {"topk"}, optional
        Draft a deterministic tree instead of sampling (with ``verifier="sample_match"``): every
        node's top-:math:`b_d` children under the draft model, nothing sampled, the ``drafts``
        leaves scored as sequences and verified by sample-and-match (lossless; its exact
        :math:`E[\tau] = \sum_u M_b(u)` over the drafted nodes is the record's ``expected``).
    branching : sequence of int, optional
        With ``draft_tree``: children per depth, product ``drafts``, length ``gamma`` (default
        ``(drafts, 1, ..., 1)``: the top-``drafts`` first tokens, each continued greedily).
    tree_interval : int, optional
        Trees of i.i.d. drafts: record with each round the certified interval for the tree optimum
        :math:`T^*` from the drafted trie plus this many top children per drafted node
        (``th_tree_lower``, ``th_tree_upper``; :func:`otspec.tree_interval`), next to the verifier's
        own :math:`E[\tau]`; NaN for other draft laws. Its time counts in the ``theory`` phase.

    Returns
    -------
    DecodeResult
        Tokens and text per prompt, whether each stopped at EOS, and the per-round trace.

    Raises
    ------
    OtspecInputError
        If ``target`` is not an :class:`~otspec_gpu.models.LM`, ``draft`` is not a model, a
        drafter name or a draft source (an unknown name: ``UnknownModelError``), ``temperature``
        is negative or not finite, a prompt is not text or token ids (two levels of nesting at most), tokenizes to
        nothing, or holds an id outside the vocabulary.
    IncompatibleModelsError
        If the two models' vocabularies differ.
    UnsupportedMethodError
        If ``verifier``, ``drafts`` and ``gamma`` do not combine (:func:`mode_for`), or the drafter
        does not feed that mode (:func:`otspec_gpu.drafters.check_supports`; prompt lookup: chains).
    NotAnIntegerError, InvalidDraftCountError
        If ``drafts``, ``gamma``, ``max_new_tokens`` or ``top_k_trace`` is not a positive integer,
        or ``seed`` is not an integer ``>= 0``.
    """
    # Over 80 lines only through this docstring: the code is the four-part loop below.
    from otspec_gpu import drafters
    from otspec_gpu.deterministic import WalkStep
    from otspec_gpu.inputs import generators
    from otspec_gpu.processing import probs_from_logits
    from otspec_gpu.recording import PhaseClock, Recorder
    from otspec_gpu.scoring import DecodeCaches
    from otspec_gpu.verifying import VerifierStep

    sampling = dict(temperature=temperature, top_k=top_k, top_p=top_p)
    tree = dict(draft_tree=draft_tree, branching=branching)
    s = _settings(target, draft, prompt, verifier, drafts, gamma, sampling, max_new_tokens, seed, top_k_trace, chat, tree)
    mode, prompts, V = s.mode, s.prompts, s.V
    if tree_interval is not None:
        tree_interval = _tree_interval(tree_interval, mode)
    device = next(target.model.parameters()).device
    B, k = len(prompts), mode.k
    g_draft, g_verify, g_bonus = generators(s.seed, 3, device)

    def transform(logits: torch.Tensor) -> torch.Tensor:
        return probs_from_logits(logits, **s.sampling, dtype=torch.float64)

    clock = PhaseClock(device)
    t_start = clock.now()
    needs_hidden = drafters.needs_target_hidden(s.source)  # a head on the target's feature
    caches = DecodeCaches(target, s.source.model, prompts, k, transform, device, hidden=needs_hidden)
    t_prefill = clock.now() - t_start
    drafter = s.source.drafter(mode, prompts, V, device)
    step = WalkStep(B, k) if mode.branching else VerifierStep(mode.mode, mode.rule, B, k)
    recorder = Recorder(mode, B, V, s.top_k_trace, theory, step.rule_for, tree_interval)
    out = _Outputs(B, s.n_new, target.eos_token_id if stop_at_eos else None)
    rows0 = torch.arange(B, device=device) * k  # first row of each prompt
    rnd = 0
    while not all(out.done):
        clock.start()
        if needs_hidden:
            drafter.see_target(caches.hidden, target, transform)
        X, Q, n_drafts = drafter.draft(caches.next_q, caches.pend, caches.pend_valid, g_draft)  # [R, gamma], [R, gamma, V], [B]
        clock.lap("draft")
        P = caches.score(X)  # [R, gamma + 1, V]
        clock.lap("target")
        outcome = step(P, Q, X, n_drafts, g_verify, g_bonus)
        clock.lap("verify")
        chosen = rows0 + outcome.index  # [B]
        caches.rollback(chosen, outcome.accepted, outcome.token, X)
        Xc, tau_l, y_l = X[chosen].tolist(), outcome.accepted.tolist(), outcome.token.tolist()  # one conversion per round
        live = out.live()
        emitted = [Xc[b][: tau_l[b]] + [y_l[b]] for b in range(B)]
        drafter.observe(emitted)
        n_emit = out.add(emitted)
        clock.lap("rollback")
        recorder.add(rnd, live, clock, P=P, Q=Q, X=X, n_drafts=n_drafts, outcome=outcome, chosen=chosen, n_emit=n_emit)
        rnd += 1
        if progress is not None:
            progress(min(len(o) for o in out.tokens))
    config = s.config(target)
    if mode.branching:
        config["branching"] = list(mode.branching)
    config.update(drafter.record())  # the drafter's own entries (e.g. prompt lookup's matched n-grams)
    t_calls, d_calls = caches.calls()
    config.update(prefill_s=t_prefill, wall_s=time.perf_counter() - t_start, timer=clock.timer, target_calls=t_calls, draft_calls=d_calls)
    if tree_interval is not None:  # only then: other runs keep their configuration
        config["tree_interval"] = tree_interval
    config["prompt_tokens"] = [len(p) for p in prompts]
    text = [target.decode_text(o) for o in out.tokens] if (prompts.text and target.tokenizer is not None) else None
    return DecodeResult(tokens=out.tokens, text=text, trace=recorder.build(config), config=config, stopped_at_eos=list(out.eos_stop))
