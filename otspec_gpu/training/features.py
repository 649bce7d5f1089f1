r"""The target's features on the training text, computed once and cached as shards on disk.

For every token sequence (target answers to the training prompts, then the chunks of local text of
:mod:`otspec_gpu.training.corpus`) one forward of the target stores, per position :math:`t`:

* the token :math:`x_t` (``tokens``, int32) and the sequence it belongs to (``seq``, int32);
* the last hidden layer :math:`h_t` (``h_last``, float16): ``hidden_states[-1]`` of ``transformers``,
  which for Llama models is *after* the final RMSNorm, so the target's logits are exactly
  :math:`z_t = W_{\mathrm{emb}} h_t` (tied embedding) and :math:`p(x_{t+1} \mid x_{\le t}) =
  \mathrm{softmax}(z_t)`;
* the residual stream after layer :math:`L` for each early-exit depth ``L`` (``h_<L>``, float16):
  ``hidden_states[L]`` (before any norm).

The target distributions are not stored (49 152 floats per position); the trainers recompute them
from :math:`h_t` through the frozen output layer. Shards of about 8 192 tokens are written as they
complete, with a manifest, so a long extraction can be inspected while it runs.

Examples
--------
>>> import tempfile, numpy as np
>>> from otspec_gpu.models import tiny
>>> from otspec_gpu.training.features import extract, load_features
>>> lm = tiny(seed=0, vocab_size=11, layers=2)
>>> with tempfile.TemporaryDirectory() as d:
...     _ = extract(lm, [[1, 2, 3, 4], [5, 6, 7]], layers=(1,), out_dir=d)
...     f = load_features(d)
>>> f["tokens"].shape, f["h_last"].shape, f["h_1"].dtype
((7,), (7, 16), dtype('float16'))
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import torch

__all__ = ["extract", "generate_answers", "load_features"]

_SHARD_TOKENS = 8192


@torch.no_grad()
def generate_answers(lm, prompts: list[str], *, max_new_tokens: int, batch: int, log=print) -> list[list[int]]:
    r"""The target's own answers to chat ``prompts``: ancestral sampling at temperature 1, full vocabulary.

    Uses ``transformers``' ``generate`` (left-padded batches, ``top_k = 0``, ``top_p = 1``), which
    draws from torch's global generator: seed it once before calling.

    Parameters
    ----------
    lm : otspec_gpu.models.LM
        The target (with a tokenizer and chat template).
    prompts : list of str
        User messages.
    max_new_tokens : int
        Length cap of an answer.
    batch : int
        Prompts per ``generate`` call.
    log : callable
        Progress lines.

    Returns
    -------
    list of list of int
        Per prompt: the templated prompt's ids followed by the answer up to and including the
        first end-of-sequence token.
    """
    eos = lm.eos_token_id
    pad = eos if eos is not None else 0
    out = []
    for b0 in range(0, len(prompts), batch):
        t0 = time.time()
        encs = [lm.encode_chat(p) for p in prompts[b0 : b0 + batch]]
        width = max(len(e) for e in encs)
        ids = torch.full((len(encs), width), pad, dtype=torch.long)
        mask = torch.zeros((len(encs), width), dtype=torch.long)
        for r, e in enumerate(encs):
            ids[r, width - len(e) :] = torch.tensor(e)
            mask[r, width - len(e) :] = 1
        gen = lm.model.generate(
            input_ids=ids,
            attention_mask=mask,
            do_sample=True,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            max_new_tokens=max_new_tokens,
            pad_token_id=pad,
            eos_token_id=eos,
        )
        for r, e in enumerate(encs):
            new = gen[r, width:].tolist()
            if eos in new:
                new = new[: new.index(eos) + 1]
            out.append(list(e) + new)
        log(f"answers {b0 + len(encs)}/{len(prompts)}: {sum(len(s) for s in out)} tokens, {time.time() - t0:.1f} s")
    return out


def _write_shard(out: Path, index: int, parts: dict) -> int:
    arrays = {k: np.concatenate(v) for k, v in parts.items()}
    np.savez(out / f"shard_{index:04d}.npz", **arrays)
    return int(arrays["tokens"].shape[0])


@torch.no_grad()
def extract(lm, seqs: list[list[int]], *, layers: tuple[int, ...], out_dir, batch: int = 4, meta: dict | None = None, log=None) -> dict:
    r"""Run the target over ``seqs`` and write its features as shards under ``out_dir``.

    Sequences of equal length are batched ``batch`` at a time (the text chunks); the others run
    one at a time (no padding, so every feature is exactly the unpadded forward's).

    Parameters
    ----------
    lm : otspec_gpu.models.LM
        The target (logit temperature 1).
    seqs : list of list of int
        Token sequences (at least 2 tokens each).
    layers : tuple of int
        Early-exit depths :math:`L` whose residual stream is stored (``1 <= L <`` layers).
    out_dir : str or pathlib.Path
        Folder of the shards and ``manifest.json`` (created).
    batch : int
        Sequences per forward when their lengths agree.
    meta : dict, optional
        Extra entries of the manifest (the corpus description).
    log : callable, optional
        Progress lines.

    Returns
    -------
    dict
        The manifest: ``tokens``, ``sequences``, ``shards``, ``layers``, ``hidden``, ``seconds`` and
        ``meta``.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.time()
    parts: dict = {k: [] for k in ("tokens", "seq", "h_last", *(f"h_{L}" for L in layers))}
    n_buf = n_tok = shards = 0
    manifest = {"layers": list(layers), "hidden": None, "tokens": 0, "sequences": len(seqs), "shards": 0, "meta": meta or {}}
    i = 0
    while i < len(seqs):
        j = i + 1
        while j < len(seqs) and j - i < batch and len(seqs[j]) == len(seqs[i]):
            j += 1
        ids = torch.tensor(seqs[i:j], dtype=torch.long)
        res = lm.model(input_ids=ids, output_hidden_states=True)
        hs = res.hidden_states
        manifest["hidden"] = int(hs[-1].shape[-1])
        for r in range(j - i):
            parts["tokens"].append(ids[r].numpy().astype(np.int32))
            parts["seq"].append(np.full(ids.shape[1], i + r, dtype=np.int32))
            parts["h_last"].append(hs[-1][r].numpy().astype(np.float16))
            for L in layers:
                parts[f"h_{L}"].append(hs[L][r].numpy().astype(np.float16))
        n_buf += ids.numel()
        i = j
        if n_buf >= _SHARD_TOKENS or i == len(seqs):
            n_tok += _write_shard(out, shards, parts)
            shards += 1
            parts = {k: [] for k in parts}
            n_buf = 0
            manifest.update(tokens=n_tok, shards=shards, seconds=round(time.time() - t_start, 1), done=i == len(seqs))
            (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
            if log is not None:
                log(f"features: {i}/{len(seqs)} sequences, {n_tok} tokens, {time.time() - t_start:.0f} s")
    return manifest


def load_features(out_dir, *, keys: tuple[str, ...] | None = None) -> dict:
    """All shards of ``out_dir`` concatenated (``tokens``, ``seq``, ``h_last``, ``h_<L>``...).

    Parameters
    ----------
    out_dir : str or pathlib.Path
        A folder written by :func:`extract`.
    keys : tuple of str, optional
        Arrays to load (default all).

    Returns
    -------
    dict of numpy.ndarray
        One array per key, in sequence order.
    """
    shards = sorted(Path(out_dir).glob("shard_*.npz"))
    got: dict = {}
    for s in shards:
        with np.load(s) as z:
            for k in z.files if keys is None else keys:
                got.setdefault(k, []).append(z[k])
    return {k: np.concatenate(v) for k, v in got.items()}
