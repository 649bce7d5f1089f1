"""The recorder of a decoding run: phase timings, exact theory and the trace, round by round.

:class:`PhaseClock` times the phases of a round (``draft``, ``target``, ``verify``, ``rollback``,
``theory``). On CUDA the work of a phase is asynchronous: a host clock read without waiting
charges it to whichever later phase synchronises first. The clock therefore calls
``torch.cuda.synchronize`` at every phase boundary on a CUDA device (which serialises the host and
the device, so the phases add up to the round and none borrows another's time) and says so in the
trace config (``timer``: ``"perf_counter"`` on CPU, ``"perf_counter+cuda_synchronize"`` on CUDA).

:class:`Recorder` turns each round into trace records (:class:`otspec_gpu.trace.TraceBuilder`)
with the exact theory of :func:`otspec_gpu.theory.round_theory`.
"""

from __future__ import annotations

import time
from typing import Any

import torch

__all__ = ["PhaseClock", "Recorder"]


class PhaseClock:
    """Seconds per phase of one round, synchronising a CUDA device at each boundary.

    Parameters
    ----------
    device : torch.device
        The models' device.
    """

    def __init__(self, device: torch.device):
        self.device = device
        self.cuda = getattr(device, "type", str(device)) == "cuda"
        self.timer = "perf_counter+cuda_synchronize" if self.cuda else "perf_counter"
        self.times: dict[str, float] = {}
        self.t = self.now()

    def now(self) -> float:
        """The host clock after the device has finished its queued work.

        Returns
        -------
        float
            ``time.perf_counter()`` (after ``torch.cuda.synchronize`` on CUDA).
        """
        if self.cuda:
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    def start(self) -> None:
        """Start a round (forget the previous round's phases)."""
        self.times = {}
        self.t = self.now()

    def lap(self, phase: str) -> None:
        """End ``phase`` now and start the next one.

        Parameters
        ----------
        phase : str
            The phase that just ended.
        """
        t = self.now()
        self.times[phase] = self.times.get(phase, 0.0) + (t - self.t)
        self.t = t


class Recorder:
    """Trace records and theory of every round of a run.

    Parameters
    ----------
    mode : otspec_gpu.decoding.DecodeMode
        The run's mode (shapes the records; picks the theory).
    B : int
        Prompts in the batch.
    V : int
        Vocabulary size.
    top_k_trace : int
        Largest probabilities kept per p and q row.
    theory : bool
        Compute the exact expectations of each record.
    rule_for : callable, optional
        ``rule_for(n)``: the rule that verified ``n`` real drafts
        (:meth:`otspec_gpu.verifying.VerifierStep.rule_for`; default: the mode's rule).
    tree_interval : int, optional
        Trees: also record the certified interval for the tree optimum of every round from the
        drafted trie plus this many top children per drafted node (``th_tree_lower``,
        ``th_tree_upper``; :func:`otspec_gpu.theory.round_tree_interval`).
    """

    def __init__(self, mode: Any, B: int, V: int, top_k_trace: int, theory: bool, rule_for=None, tree_interval: int | None = None):
        from otspec_gpu.trace import TraceBuilder

        self.mode, self.theory, self.rule_for = mode, theory, rule_for
        self.tree_interval = tree_interval
        self.builder = TraceBuilder(mode=mode, B=B, V=V, top_k=top_k_trace)

    def add(self, rnd: int, live: list, clock: PhaseClock, *, P, Q, X, n_drafts, outcome, chosen, n_emit) -> None:
        """Record one round (theory time goes to the ``theory`` phase).

        Parameters
        ----------
        rnd : int
            Round index.
        live : list of int
            Prompts that were still decoding in this round.
        clock : PhaseClock
            The round's clock (its phases are recorded).
        P, Q, X : torch.Tensor
            The round's target and draft conditionals and drafts.
        n_drafts : torch.Tensor
            ``[B]`` real drafts per prompt.
        outcome : otspec_gpu.verifiers.StepOutput
            The verifier step's decision.
        chosen : torch.Tensor
            ``[B]`` row followed per prompt.
        n_emit : list of int
            Tokens added to each prompt's output.
        """
        th = None
        if self.theory:
            from otspec_gpu.theory import round_theory

            th = round_theory(self.mode, P, Q, X, live, n_drafts=n_drafts.tolist(), rule_for=self.rule_for)
            clock.lap("theory")
        if self.tree_interval is not None and self.mode.mode == "tree" and live:
            from otspec_gpu.theory import round_tree_interval

            th = {**(th or {}), **round_tree_interval(self.mode, P, Q, X, live, n_drafts=n_drafts.tolist(), top_k=self.tree_interval)}
            clock.lap("theory")
        self.builder.add_round(
            rnd,
            live,
            P=P,
            Q=Q,
            X=X,
            n_drafts=n_drafts,
            chosen=chosen,
            tau=outcome.accepted,
            next_token=outcome.token,
            n_emit=n_emit,
            times=clock.times,
            theory=th,
        )

    def build(self, config: dict):
        """The trace of the run.

        Parameters
        ----------
        config : dict
            The run's configuration.

        Returns
        -------
        otspec.io.Trace
            Every record.
        """
        return self.builder.build(config)
