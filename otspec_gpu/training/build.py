r"""Build one trained draft end to end: a fresh seeded head, trained on cached features, saved.

:func:`build_draft` is what ``otspec train-draft <name>`` runs after the training set exists
(:mod:`otspec_gpu.training.dataset`): it makes the head of the draft's kind from the target's sizes
(initial weights from a ``torch.Generator`` seeded with ``seed``), trains it
(:func:`~otspec_gpu.training.train.train_head`) and writes the weights and the JSON sidecar
(``name``, ``architecture``, ``target``, ``layers``, ``seed``, the training record and the
training data's description) into ``otspec_gpu.models.cache_dir() / "drafts"``.

Examples
--------
>>> import tempfile
>>> from otspec_gpu.models import tiny
>>> from otspec_gpu.training.features import extract
>>> from otspec_gpu.training.build import build_draft
>>> lm = tiny(seed=0, vocab_size=9, layers=2)
>>> with tempfile.TemporaryDirectory() as d:
...     _ = extract(lm, [[1, 2, 3, 4, 5, 6]] * 21, layers=(1,), out_dir=d + "/f")
...     info = build_draft("tiny-exit1", lm, d + "/f", steps=2, batch=4, directory=d)
>>> info["architecture"]["kind"], info["layers"]
('exit', 1)
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from otspec_gpu.training.train import DEFAULTS, parse_draft_name, train_head

__all__ = ["build_draft", "make_head"]


def make_head(kind: str, target, *, seed: int, n_heads: int | None = None):
    """A fresh head of ``kind`` sized for ``target`` (initial weights from ``seed``).

    Parameters
    ----------
    kind : {"exit", "medusa", "eagle"}
        The draft kind.
    target : otspec_gpu.models.LM
        The target (its hidden size, norm epsilon and final-norm weight).
    seed : int
        Seed of the initial weights.
    n_heads : int, optional
        Medusa heads (default :data:`~otspec_gpu.training.train.DEFAULTS`).

    Returns
    -------
    torch.nn.Module
    """
    from otspec_gpu.models.early_exit import ExitHead
    from otspec_gpu.models.heads import EagleHead, MedusaHeads

    cfg = target.model.config
    gen = torch.Generator().manual_seed(int(seed))
    if kind == "exit":
        return ExitHead(cfg.hidden_size, eps=float(cfg.rms_norm_eps), norm_weight=target.model.model.norm.weight, generator=gen)
    if kind == "medusa":
        return MedusaHeads(cfg.hidden_size, n_heads or DEFAULTS["medusa"]["n_heads"], generator=gen)
    return EagleHead(cfg.hidden_size, generator=gen)


def build_draft(
    name: str,
    target,
    features_dir,
    *,
    seed: int = 0,
    steps: int | None = None,
    batch: int | None = None,
    lr: float | None = None,
    directory=None,
    log=None,
) -> dict:
    """Train the draft ``name`` on the features in ``features_dir`` and save it.

    Parameters
    ----------
    name : str
        ``"<target>-exit<L>"``, ``"<target>-medusa"`` or ``"<target>-eagle"``.
    target : otspec_gpu.models.LM
        The target whose features were stored.
    features_dir : str or pathlib.Path
        A folder written by :func:`~otspec_gpu.training.features.extract`.
    seed : int
        Seed of the initial weights and of the position draws.
    steps, batch : int, optional
        Optimiser steps and positions per step (default per kind).
    lr : float, optional
        Peak learning rate (default per kind).
    directory : str or pathlib.Path, optional
        Where the weights go (default ``cache_dir() / "drafts"``).
    log : callable, optional
        Progress lines.

    Returns
    -------
    dict
        The sidecar's entries.
    """
    from otspec_gpu.models.heads import save_head
    from otspec_gpu.training.features import load_features

    _, kind, layers = parse_draft_name(name)
    d = DEFAULTS[kind]
    keys = ("tokens", "seq", "h_last") + ((f"h_{layers}",) if kind == "exit" else ())
    feats = {k: torch.from_numpy(v) for k, v in load_features(features_dir, keys=keys).items()}
    head = make_head(kind, target, seed=seed)
    model = target.model
    lm_head = model.get_output_embeddings()
    embedding = model.get_input_embeddings()
    for m in (lm_head, embedding):
        m.requires_grad_(False)
    record = train_head(
        kind,
        head,
        feats,
        lm_head=lm_head,
        embedding=embedding,
        layers=layers,
        steps=steps or d["steps"],
        batch=batch or d["batch"],
        lr=lr or d["lr"],
        seed=seed,
        log=log,
    )
    manifest = json.loads((Path(features_dir) / "manifest.json").read_text())
    meta = {
        "target": target.name,
        "kind": kind,
        "layers": layers,
        "seed": int(seed),
        "training": record,
        "training_data": {"folder": Path(features_dir).name, "tokens": manifest.get("tokens"), **manifest.get("meta", {})},
    }
    head.requires_grad_(False)
    _, sidecar = save_head(head, name, meta, directory)
    return json.loads(sidecar.read_text())
