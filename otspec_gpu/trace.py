"""Accumulating a decoding run's per-round records into a :class:`~otspec.io.Trace`.

The trace type and its file format live in :mod:`otspec.io` (numpy only, so a trace is read
back without torch: :func:`otspec.io.load_trace`, :func:`otspec.io.save_trace`). This module
holds :class:`TraceBuilder`, which the decoder feeds round by round.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from otspec.io import TRACE_PHASES as PHASES
from otspec.io import Trace

__all__ = ["TraceBuilder"]


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
    """Accumulates records round by round (used by :func:`otspec_gpu.decode`).

    Parameters
    ----------
    mode : otspec_gpu.decoding.DecodeMode
        The run's mode (its ``k`` and ``gamma`` shape the ``drafts`` column).
    B : int
        Number of prompts in the batch.
    V : int
        Vocabulary size.
    top_k : int
        How many of the largest probabilities of each p and q row to keep (``K``, at least 1).
    """

    def __init__(self, *, mode: Any, B: int, V: int, top_k: int = 8):
        self.mode, self.B, self.V, self.K = mode, B, V, max(1, int(top_k))
        self.rec: dict[str, list] = {}
        self.rounds: dict[str, list] = {f"round_t_{p}": [] for p in PHASES}

    def _push(self, name: str, value: Any) -> None:
        self.rec.setdefault(name, []).append(value)

    def add_round(
        self, rnd: int, live, *, P, Q, X, chosen, tau, next_token, n_emit, times: dict, theory: dict | None, n_drafts=None
    ) -> None:
        """Append the records of one round (one per live prompt) and its phase timings.

        Parameters
        ----------
        rnd : int
            Round index.
        live : sequence of int
            Prompts still decoding in this round (nothing is recorded when empty).
        P : torch.Tensor
            ``[R, gamma + 1, V]`` target conditionals along every draft row (``R = B k``).
        Q : torch.Tensor
            ``[R, gamma, V]`` draft conditionals.
        X : torch.Tensor
            ``[R, gamma]`` drafted tokens.
        chosen : torch.Tensor
            ``[B]`` draft row followed for each prompt.
        tau : torch.Tensor
            ``[B]`` accepted draft tokens.
        next_token : torch.Tensor
            ``[B]`` correction or bonus token.
        n_emit : sequence of int
            Tokens added to each prompt's output this round.
        times : dict
            Seconds per phase (keys of :data:`otspec.io.TRACE_PHASES`; missing phases count 0).
        theory : dict or None
            Exact per-record expectations (``name -> [n] values``), stored as ``th_<name>``.
        n_drafts : torch.Tensor, optional
            ``[B]`` real drafts per prompt (default ``k``; fewer for a short draft support, whose
            other rows of ``drafts`` repeat its first draft).
        """
        k, g = self.mode.k, self.mode.gamma
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
        nd = np.full(self.B, k, dtype=np.int64) if n_drafts is None else n_drafts.cpu().numpy().astype(np.int64)
        self._push("n_drafts", nd[lv])
        for name, arr in (("p_top_ids", pid), ("p_top", ptop), ("p_tail", ptail), ("q_top_ids", qid), ("q_top", qtop), ("q_tail", qtail)):
            self._push(name, arr)
        if theory is not None:
            for key, vals in theory.items():
                self._push(f"th_{key}", np.asarray(vals, dtype=np.float64))
        for p in PHASES:
            self.rounds[f"round_t_{p}"].append(float(times.get(p, 0.0)))

    def _empty_records(self) -> dict[str, np.ndarray]:
        """Every record column :meth:`add_round` writes (theory columns aside), with 0 rows."""
        g, K = self.mode.gamma, min(self.K, self.V)
        cols = {name: np.zeros(0, dtype=np.int64) for name in ("round", "prompt", "tau", "n_emit", "next_token", "path", "n_drafts")}
        cols["drafts"] = np.zeros((0, self.mode.k, g), dtype=np.int64)
        for side, rows in (("p", g + 1), ("q", g)):
            cols[f"{side}_top_ids"] = np.zeros((0, rows, K), dtype=np.int64)
            cols[f"{side}_top"] = np.zeros((0, rows, K), dtype=np.float64)
            cols[f"{side}_tail"] = np.zeros((0, rows), dtype=np.float64)
        return cols

    def build(self, config: dict) -> Trace:
        """The trace of every round added so far.

        Parameters
        ----------
        config : dict
            The run configuration (stored as the trace's JSON metadata).

        Returns
        -------
        otspec.io.Trace
            Record columns concatenated over rounds, plus the per-round ``round_t_<phase>`` columns.
            With no record (no round had a live prompt) the record columns are present with 0 rows,
            so the trace saves and loads like any other.
        """
        cols = {name: np.concatenate(parts, 0) for name, parts in self.rec.items()} if self.rec else self._empty_records()
        for name, vals in self.rounds.items():
            cols[name] = np.asarray(vals, dtype=np.float64)
        return Trace(cols, dict(config))
