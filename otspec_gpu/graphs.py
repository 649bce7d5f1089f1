r"""CUDA-graph capture of a verify step: one graph per (rule, shapes, dtype, device, generator),
replayed with the caller's tensors copied into its static inputs.

A verify step with ``validate=False`` makes no host synchronisation (see ``docs/gpu.rst``), so the
whole ``sample`` call -- the ``torch.rand`` draws of its uniforms included -- can be captured once
and replayed: a replay launches one graph instead of the step's tens of small kernels.

Randomness: the caller's :class:`torch.Generator` is registered with the graph
(``CUDAGraph.register_generator_state``), so every replay draws fresh uniforms from it and advances
its offset exactly as the eager call does: a replay from a generator state gives the same tokens as
the eager step from that state. Capturing itself runs the step (warm-up and capture); the generator's
state is restored afterwards, so capturing consumes no randomness of the caller's stream.

On CPU (or without CUDA) :class:`VerifyGraphs` simply calls the step.

Decoding (:class:`otspec_gpu.verifying.VerifierStep`) replays its verify step -- chain, single-step
or tree; every rule's step is free of host synchronisation -- from graphs when
``OTSPEC_CUDA_GRAPHS=1`` (:func:`default_graphs`): opt-in until measured never slower on a GPU. The
graphed step runs with ``validate=False`` (the eager decode step checks the rows' values).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch

from otspec_gpu.verifiers.base import StepOutput

__all__ = ["GraphedStep", "VerifyGraphs", "default_graphs"]


class GraphedStep:
    """One captured ``sample(*inputs, generator=generator, **extra)`` call, replayable with new inputs.

    Parameters
    ----------
    sample : callable
        ``sample(*inputs, generator=..., **extra) -> StepOutput`` with no host synchronisation
        (a verifier's ``sample`` with ``validate=False`` in ``extra``).
    inputs : sequence of torch.Tensor
        Example CUDA inputs: their shapes, dtypes and device are those of every replay.
    generator : torch.Generator
        The CUDA generator every replay draws from (registered with the graph).
    warmup : int
        Eager calls on a side stream before the capture (allocations, lazy initialisation, Triton
        compilation).
    **extra
        Keyword arguments of ``sample``.

    Raises
    ------
    ValueError
        If an input is not a CUDA tensor or ``generator`` is not a CUDA generator.
    """

    def __init__(
        self,
        sample: Callable[..., StepOutput],
        inputs: tuple[torch.Tensor, ...],
        generator: torch.Generator,
        *,
        warmup: int = 2,
        **extra: Any,
    ):
        if generator.device.type != "cuda" or any(x.device.type != "cuda" for x in inputs):
            raise ValueError(
                f"GraphedStep captures CUDA work only (got inputs on {[str(x.device) for x in inputs]}, generator on {generator.device}); "
                "call the step directly on other devices"
            )
        self.generator = generator
        self.static = tuple(x.clone() for x in inputs)
        saved = generator.get_state()
        side = torch.cuda.Stream(device=inputs[0].device)
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(warmup):
                sample(*self.static, generator=generator, **extra)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        self.graph.register_generator_state(generator)
        with torch.cuda.graph(self.graph):
            self.out = sample(*self.static, generator=generator, **extra)
            self.packed = _pack(self.out)  # the outputs in one tensor when they stack: one clone per replay
        generator.set_state(saved)  # capturing consumed nothing of the caller's stream

    def __call__(self, *inputs: torch.Tensor) -> StepOutput:
        """Copy ``inputs`` into the static inputs, replay, and return copies of the outputs.

        The copies are one ``torch._foreach_copy_`` call, and an input that *is* its static tensor
        (a caller that writes its next inputs into :attr:`static` in place) is not copied; the
        outputs come back as one clone when they stack (same shape and dtype: every verifier's
        ``StepOutput``), else one clone each.

        Parameters
        ----------
        *inputs : torch.Tensor
            Tensors of the captured shapes, dtypes and device.

        Returns
        -------
        StepOutput
            The step's output for ``inputs`` and the generator's current state (which advances); a
            plain tuple when the captured function returns one.
        """
        pairs = [(d, s) for d, s in zip(self.static, inputs, strict=True) if d.data_ptr() != s.data_ptr()]
        if pairs:
            _copy([d for d, _ in pairs], [s for _, s in pairs])
        self.graph.replay()
        outs = self.packed.clone().unbind(0) if self.packed is not None else tuple(t.clone() for t in self.out)
        return StepOutput(*outs) if isinstance(self.out, StepOutput) else tuple(outs)


def _pack(out: tuple) -> torch.Tensor | None:
    """``torch.stack(out)`` when the outputs are tensors of one shape and dtype, else ``None``."""
    ts = tuple(out)
    if len(ts) > 1 and all(isinstance(t, torch.Tensor) and t.shape == ts[0].shape and t.dtype == ts[0].dtype for t in ts):
        return torch.stack(ts)
    return None


def _copy(dst: list[torch.Tensor], src: list[torch.Tensor]) -> None:
    """``dst[i].copy_(src[i])`` for every ``i``, in one ``torch._foreach_copy_`` call where torch has it."""
    foreach = getattr(torch, "_foreach_copy_", None)
    if foreach is not None:
        foreach(dst, src)
    else:
        for d, s in zip(dst, src, strict=True):
            d.copy_(s)


class VerifyGraphs:
    """A cache of :class:`GraphedStep` by (key, shapes, dtypes, device, generator): the first call of
    a shape captures, later calls replay. On non-CUDA inputs it calls ``sample`` eagerly.

    Parameters
    ----------
    enabled : bool
        False: always call ``sample`` eagerly (the cache stays empty).

    Examples
    --------
    >>> import torch
    >>> from otspec_gpu.verifiers.chain import token_sample
    >>> graphs = VerifyGraphs()
    >>> p = torch.full((2, 3, 4), 0.25); d = torch.zeros(2, 2, dtype=torch.long)
    >>> graphs("token", token_sample, p, p[:, :2], d, generator=torch.Generator().manual_seed(0)).accepted.tolist()
    [2, 2]
    """

    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self.steps: dict[tuple, GraphedStep] = {}

    def __call__(
        self, key: str, sample: Callable[..., StepOutput], *inputs: torch.Tensor, generator: torch.Generator, **extra: Any
    ) -> StepOutput:
        """Run ``sample(*inputs, generator=generator, validate=False, **extra)``, replayed from a graph on CUDA.

        Parameters
        ----------
        key : str
            The step's name (one graph per key and shape).
        sample : callable
            The verifier's ``sample``.
        *inputs : torch.Tensor
            Its tensor arguments (``p, q, drafts``).
        generator : torch.Generator
            Source of its uniforms.
        **extra
            Further keyword arguments of ``sample`` (hashable values).

        Returns
        -------
        StepOutput
            What ``sample`` returns.
        """
        extra = {"validate": False, **extra}
        if not self.enabled or generator.device.type != "cuda" or inputs[0].device.type != "cuda":
            return sample(*inputs, generator=generator, **extra)
        sig = (key, tuple((tuple(x.shape), x.dtype, str(x.device)) for x in inputs), id(generator), tuple(sorted(extra.items())))
        step = self.steps.get(sig)
        if step is None:
            step = self.steps[sig] = GraphedStep(sample, inputs, generator, **extra)
        return step(*inputs)


def default_graphs() -> VerifyGraphs | None:
    """The graph cache decoding uses by default: a :class:`VerifyGraphs` when the environment sets
    ``OTSPEC_CUDA_GRAPHS=1``, else ``None`` (eager verify steps).

    Returns
    -------
    VerifyGraphs or None
        A fresh cache, or ``None``.
    """
    return VerifyGraphs() if os.environ.get("OTSPEC_CUDA_GRAPHS", "0") == "1" else None
