"""Real (target, draft) distributions for the experiments, through ``otspec_gpu.models``.

A *step* is one decoding position: the target's and the draft's full next-token distributions at
that context, both float64 softmaxes of the models' logits at the same sampling temperature (the
draft's own logit temperature, for ``smollm2-t<T>`` drafts, is applied inside the model). Contexts
are produced by the target itself, sampling at the experiment's temperature (on-policy), so the
steps are the ones a speculative decoder at that temperature would verify.

The decoding harness's trace files keep only the top-K probabilities of each row; the optimum and
the verifiers' exact acceptances need full rows, hence this data source. It is a plain function
(:func:`real_steps`) so that a trace reader with full rows can replace it.

``--quick`` runs use the harness's tiny random-weight models (V = 6, no files) instead of SmolLM2.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "PROMPTS",
    "TARGETS",
    "Steps",
    "load_pair",
    "sample_continuations",
    "continuations_ids",
    "real_steps",
    "real_steps_ids",
    "draft_paths",
    "softmax64",
]

#: Short, varied prompts (chat, facts, code, story, list, maths, instructions, dialogue).
PROMPTS = (
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Explain why the sky is blue to a ten-year-old.",
    'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n',
    "List five practical tips for staying focused while working from home.",
    "What is the derivative of x^3 + 2x, and how do you compute it?",
    "Summarise the causes of the French Revolution in a few sentences.",
    "Give me a simple recipe for vegetable soup.",
    "The meeting was moved to Thursday because",
)


@dataclass(frozen=True, eq=False)
class Steps:
    """Per-step distributions: ``p`` and ``q`` are ``(n, V)`` float64 rows; ``prompt`` is ``(n,)``."""

    p: np.ndarray
    q: np.ndarray
    prompt: np.ndarray
    temperature: float
    target: str
    draft: str

    @property
    def n(self) -> int:
        return int(self.p.shape[0])


def softmax64(logits, temperature: float) -> np.ndarray:
    """Float64 softmax of ``logits / temperature`` along the last axis (logits cast first)."""
    z = np.asarray(logits, dtype=np.float64) / float(temperature)
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


TARGETS = ("smollm2", "gemma3-270m")


def load_pair(draft: str, *, quick: bool = False, target: str = "smollm2"):
    """``(target, draft)`` LMs; tiny models if ``quick``.

    ``target`` is ``"smollm2"`` (drafts ``"int8"``, ``"t<T>"`` or a trained early exit ``"exit<L>"``) or ``"gemma3-270m"`` (vocabulary
    262 144; temperature drafts ``"t<T>"`` only: its truncated and quantised copies are useless drafts).
    """
    from otspec_gpu import models

    if quick:
        return models.load("tiny"), models.load("tiny-draft")
    if target not in TARGETS:
        raise ValueError(f"target must be one of {TARGETS} (got {target!r})")
    if draft == "int8" and target == "smollm2":
        return models.load("smollm2"), models.load("smollm2-int8")
    if draft.startswith("exit") and target == "smollm2":  # a trained early-exit draft (otspec train-draft)
        return models.load("smollm2"), models.load(f"smollm2-{draft}")
    if draft.startswith("t"):
        temperature = float(draft[1:])  # ValueError for a malformed 't<T>'
        lm = models.load(target)
        return lm, models.self_draft(lm, temperature)
    raise ValueError(f"draft must be 't<T>' (or 'int8' for smollm2) (got {draft!r} for target {target!r})")


def decoder_prompts(target, n: int, seed: int) -> list[list[int]]:
    """Token ids of the first ``n`` prompts for the decoder (4 random ids each for a tokenizer-less tiny model)."""
    return _text_ids(target, PROMPTS[:n], seed, quick=False)


def _text_ids(lm, prompts, seed: int, quick: bool) -> list[list[int]]:
    """Token ids of text prompts; 4 random ids each (one numpy stream from ``seed``) if ``quick`` or tokenizer-less."""
    rng = np.random.default_rng(seed)
    if quick or lm.tokenizer is None:
        return [[int(x) for x in rng.integers(0, lm.vocab_size, size=4)] for _ in prompts]
    return [lm.encode(text) for text in prompts]


def sample_continuations(target, prompts, n_new: int, temperature: float, seed: int, *, quick: bool = False):
    """:func:`continuations_ids` from text prompts (4 random ids each, from ``seed``, if ``quick`` or tokenizer-less).

    Returns a list of ``(ids, n_prompt)``: the full token sequence and the prompt length.
    """
    return continuations_ids(target, _text_ids(target, prompts, seed, quick), n_new, temperature, seed)


def real_steps(target, draft, prompts, n_new: int, temperature: float, seed: int, *, quick: bool = False) -> Steps:
    """:func:`real_steps_ids` from text prompts: full p and q rows at every generated position."""
    return real_steps_ids(target, draft, _text_ids(target, prompts, seed, quick), n_new, temperature, seed)


def draft_paths(target, draft, contexts, gamma: int, temperature: float, seed: int):
    """For each context, draft a gamma-token path from the draft model and score it with the target.

    Returns a list of ``(p_rows (gamma+1, V), q_rows (gamma, V), path (gamma,))`` in float64: the
    inputs of ``otspec.verifiers.token_chain`` / ``block`` ``expected_accepted_given_path``.
    """
    import torch
    from transformers import DynamicCache

    gen = torch.Generator().manual_seed(seed)
    out = []
    for ids in contexts:
        cache = DynamicCache()
        logits = draft.logits(torch.tensor([list(ids)]), cache=cache)[0, -1]
        path, q_rows = [], []
        for _ in range(gamma):
            q = softmax64(logits.numpy(), temperature)
            tok = int(torch.multinomial(torch.from_numpy(q), 1, generator=gen))
            path.append(tok)
            q_rows.append(q)
            logits = draft.logits(torch.tensor([[tok]]), cache=cache)[0, -1]
        lt = target.logits(torch.tensor([list(ids) + path]))[0, len(ids) - 1 :]
        out.append((softmax64(lt.numpy(), temperature), np.stack(q_rows), np.array(path, dtype=np.int64)))
    return out


def prompt_token_ids(target, prompts, seed: int, *, quick: bool = False) -> list[list[int]]:
    """Token ids of :class:`_prompts.Prompt` objects for the decoder (chat template where the prompt
    asks for it); 4 random ids each for the tokenizer-less tiny models of ``--quick`` runs."""
    import _prompts

    rng = np.random.default_rng(seed)
    if quick or target.tokenizer is None:
        return [[int(x) for x in rng.integers(0, target.vocab_size, 4)] for _ in prompts]
    return [_prompts.encode(target, p) for p in prompts]


def select_prompts(name: str, n: int | None = None, n_humaneval: int | None = None, seed: int = 0):
    """The prompt set ``name`` (``own`` / ``humaneval`` / ``all``) of ``experiments/_prompts.py``;
    with ``n``, a seeded subset of ``n`` prompts stratified by domain (each domain keeps its share,
    prompts in their original order)."""
    import _prompts

    allp = _prompts.prompt_set(name, n_humaneval)
    if n is None or n >= len(allp):
        return allp
    rng = np.random.default_rng(seed)
    domains = list(dict.fromkeys(p.domain for p in allp))
    keep = set()
    for i, d in enumerate(domains):
        idx = [j for j, p in enumerate(allp) if p.domain == d]
        share = n * (i + 1) // len(domains) - n * i // len(domains)
        keep.update(rng.choice(idx, size=min(share, len(idx)), replace=False).tolist())
    return [p for j, p in enumerate(allp) if j in keep]


def real_steps_ids(target, draft, ids: list[list[int]], n_new: int, temperature: float, seed: int) -> Steps:
    """Full p and q rows at the ``n_new`` positions generated after each token-id prompt (e.g.
    :func:`prompt_token_ids`, chat template included) by :func:`continuations_ids`, one forward of
    each model per prompt; ``Steps.prompt`` holds the prompt's index in ``ids``."""
    import torch

    ps, qs, pr = [], [], []
    for j, (seq, n_prompt) in enumerate(continuations_ids(target, ids, n_new, temperature, seed)):
        x = torch.tensor([seq[:-1]])
        lt = target.logits(x)[0, n_prompt - 1 :]  # predicts seq[n_prompt:]
        ld = draft.logits(x)[0, n_prompt - 1 :]
        ps.append(softmax64(lt.numpy(), temperature))
        qs.append(softmax64(ld.numpy(), temperature))
        pr.append(np.full(lt.shape[0], j))
    return Steps(np.concatenate(ps), np.concatenate(qs), np.concatenate(pr), float(temperature), target.name, draft.name)


def continuations_ids(target, ids: list[list[int]], n_new: int, temperature: float, seed: int) -> list[tuple[list[int], int]]:
    """Sample ``n_new`` tokens after each token-id prompt from the target at ``temperature`` (KV cache;
    one ``torch.Generator`` seeded ``seed`` across the prompts): ``(sequence, prompt length)`` per prompt."""
    import torch
    from transformers import DynamicCache

    gen = torch.Generator().manual_seed(seed)
    out = []
    for prompt in ids:
        seq = list(prompt)
        cache = DynamicCache()
        logits = target.logits(torch.tensor([seq]), cache=cache)[0, -1]
        for _ in range(n_new):
            tok = int(torch.multinomial(torch.softmax(logits.double() / temperature, -1), 1, generator=gen))
            seq.append(tok)
            logits = target.logits(torch.tensor([[tok]]), cache=cache)[0, -1]
        out.append((seq, len(prompt)))
    return out
