r"""Per-round decoding records and their safetensors file format.

A :class:`Trace` is columnar: one **record** per (round, prompt) and a few per-round columns.
It is written with ``safetensors.numpy`` (no torch needed to read it back) as one file whose
metadata holds the run's configuration as JSON (key ``"otspec_trace"``).

Record columns (``n`` records; ``k`` drafts, ``gamma`` block length, ``K`` kept probabilities):

============================  ====================  ==============================================
name                          shape / dtype         meaning
============================  ====================  ==============================================
``round``, ``prompt``         (n,) int64            round index, prompt index in the batch
``tau``                       (n,) int64            accepted draft tokens (single-step: 0 or 1)
``n_emit``                    (n,) int64            tokens this record added to the output
``next_token``                (n,) int64            correction or bonus token
``path``                      (n,) int64            the draft row that was followed (0 for chains)
``drafts``                    (n, k, gamma) int64   every drafted token
``p_top_ids``, ``p_top``      (n, gamma+1, K)       the K largest target probabilities along the path
``p_tail``                    (n, gamma+1) float64  target mass outside them
``q_top_ids``, ``q_top``      (n, gamma, K)         the same for the draft
``q_tail``                    (n, gamma) float64
``th_<name>``                 (n,) float64          exact theory (:mod:`otspec_gpu.theory`)
``round_t_<phase>``           (rounds,) float64     seconds of each phase of each round: draft,
                                                    target, verify, rollback, theory
============================  ====================  ==============================================

Examples
--------
>>> import numpy as np
>>> t = Trace({"tau": np.array([1, 2])}, {"mode": "chain"})
>>> t.n_records
2
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from otspec.errors import InputFileError

__all__ = ["METADATA_KEY", "PHASES", "Trace", "TraceBuilder", "load", "save"]

METADATA_KEY = "otspec_trace"
PHASES = ("draft", "target", "verify", "rollback", "theory")


@dataclass(frozen=True, eq=False)
class Trace:
    """Columns (``name -> ndarray``) and the run configuration (a JSON-able dict)."""

    columns: dict
    config: dict = field(default_factory=dict)

    @property
    def n_records(self) -> int:
        return int(self.columns["tau"].shape[0])

    def theory_columns(self) -> list[str]:
        return sorted(c[3:] for c in self.columns if c.startswith("th_"))

    def __getitem__(self, name: str) -> np.ndarray:
        return self.columns[name]

    def save(self, path: str | Path) -> Path:
        return save(self, path)

    def __repr__(self) -> str:
        return f"Trace(records={self.n_records}, mode={self.config.get('mode')!r}, verifier={self.config.get('verifier')!r}, columns={len(self.columns)})"


def save(trace: Trace, path: str | Path) -> Path:
    """Write ``trace`` as one safetensors file (arrays made contiguous; config as JSON metadata)."""
    from safetensors.numpy import save_file

    path = Path(path)
    arrays = {k: np.ascontiguousarray(v) for k, v in trace.columns.items()}
    save_file(arrays, str(path), metadata={METADATA_KEY: json.dumps(trace.config, default=_jsonable)})
    return path


def _jsonable(x: Any):
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating,)):
        return float(x)
    if isinstance(x, np.ndarray):
        return x.tolist()
    return str(x)


def load(path: str | Path) -> Trace:
    """Read a trace written by :func:`save` (raises :class:`~otspec._validation.InputFileError`)."""
    from safetensors import safe_open

    path = Path(path)
    if not path.exists():
        raise InputFileError(f"trace file {str(path)!r} does not exist; write one with `otspec decode --trace FILE`")
    try:
        with safe_open(str(path), framework="numpy") as f:
            meta = f.metadata() or {}
            cols = {k: f.get_tensor(k) for k in f.keys()}
    except Exception as exc:  # safetensors raises its own error types
        raise InputFileError(f"cannot read trace {str(path)!r} ({exc}); pass a file written by otspec decode --trace") from None
    if METADATA_KEY not in meta or "tau" not in cols:
        raise InputFileError(f"{str(path)!r} is a safetensors file but not an otspec decoding trace (no {METADATA_KEY!r} metadata)")
    return Trace(cols, json.loads(meta[METADATA_KEY]))


def _top(rows: np.ndarray, K: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(ids, probs, tail)`` of the K largest entries of each row of ``rows`` [..., V] (descending)."""
    K = min(K, rows.shape[-1])
    idx = np.argpartition(-rows, K - 1, axis=-1)[..., :K]
    vals = np.take_along_axis(rows, idx, -1)
    order = np.argsort(-vals, axis=-1, kind="stable")
    idx, vals = np.take_along_axis(idx, order, -1), np.take_along_axis(vals, order, -1)
    tail = np.clip(1.0 - vals.sum(-1), 0.0, 1.0)
    return idx.astype(np.int64), vals, tail


class TraceBuilder:
    """Accumulates records round by round (used by :func:`otspec_gpu.decode`)."""

    def __init__(self, *, plan: Any, B: int, V: int, top_k: int = 8):
        self.plan, self.B, self.V, self.K = plan, B, V, max(1, int(top_k))
        self.rec: dict[str, list] = {}
        self.rounds: dict[str, list] = {f"round_t_{p}": [] for p in PHASES}

    def _push(self, name: str, value: Any) -> None:
        self.rec.setdefault(name, []).append(value)

    def add_round(self, rnd: int, live, *, P, Q, X, chosen, tau, next_token, n_emit, times: dict, theory: dict | None) -> None:
        k, g = self.plan.k, self.plan.gamma
        if not live:
            return
        lv = np.asarray(live, dtype=np.int64)
        ch = chosen.cpu().numpy()[lv]
        Pn = P[chosen[lv]].detach().cpu().double().numpy()  # [n, gamma+1, V] along the followed path
        Qn = Q[chosen[lv]].detach().cpu().double().numpy()
        Xall = X.detach().cpu().numpy().reshape(self.B, k, g)[lv]
        pid, ptop, ptail = _top(Pn, self.K)
        qid, qtop, qtail = _top(Qn, self.K)
        self._push("round", np.full(lv.shape, rnd, dtype=np.int64))
        self._push("prompt", lv)
        self._push("tau", tau.cpu().numpy()[lv].astype(np.int64))
        self._push("n_emit", np.asarray(n_emit, dtype=np.int64)[lv])
        self._push("next_token", next_token.cpu().numpy()[lv].astype(np.int64))
        self._push("path", (ch - lv * k).astype(np.int64))
        self._push("drafts", Xall.astype(np.int64))
        for name, arr in (("p_top_ids", pid), ("p_top", ptop), ("p_tail", ptail), ("q_top_ids", qid), ("q_top", qtop), ("q_tail", qtail)):
            self._push(name, arr)
        if theory is not None:
            for key, vals in theory.items():
                self._push(f"th_{key}", np.asarray(vals, dtype=np.float64))
        for p in PHASES:
            self.rounds[f"round_t_{p}"].append(float(times.get(p, 0.0)))

    def build(self, config: dict) -> Trace:
        cols = {}
        for name, parts in self.rec.items():
            cols[name] = np.concatenate(parts, 0)
        for name, vals in self.rounds.items():
            cols[name] = np.asarray(vals, dtype=np.float64)
        return Trace(cols, dict(config))
