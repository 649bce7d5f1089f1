"""Pure verify steps compiled by ``torch.compile`` (Inductor), for the rules made of many small torch
operations.

The tree-free draw of ``optimal_iid`` / ``khisti`` / ``wor_iid``
(:mod:`otspec_gpu.verifiers.step._iid_bridge`) is about 1 100 torch operations per step, most of
them elementwise passes and reductions over ``[B, V + 1]`` in its 12 tangent rounds: on a GPU an
eager step waits on that many launches, and even a CUDA-graph replay runs that many small kernels.
Inductor fuses them into far fewer kernels. The rules whose steps dispatch to the hand-written Triton
kernels (:mod:`otspec_gpu.kernels`) are not compiled: they are already fused.

:func:`compiled_sample` returns a ``sample``-shaped function: the uniforms are drawn eagerly from
the caller's generator (:attr:`~otspec_gpu.verifiers.base.TorchVerifier.uniforms`, the same draws
as ``sample``), then the compiled pure step runs on them, so the output equals the eager
``sample``'s for the same generator state up to the compiled arithmetic's rounding (Inductor may
reorder a reduction; a draw then differs only where a uniform falls within rounding of a
boundary). Compilation happens on the first call of each shape (tens of seconds); a failure to
compile warns once and the eager step runs from then on, with the uniforms already drawn.

Decoding compiles these steps when the environment sets ``OTSPEC_COMPILE=1``
(:func:`default_compile`; opt-in until a GPU run shows it pays), alone or under CUDA-graph replay
(``OTSPEC_CUDA_GRAPHS=1``, :mod:`otspec_gpu.graphs`), which then captures the compiled kernels.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch

from otspec_gpu._fallback import first_failure, give_up
from otspec_gpu.verifiers.base import StepOutput, TorchVerifier, check_step

__all__ = ["COMPILABLE", "backend", "compiled_sample", "default_compile", "failure"]

#: Rules whose pure step is plain torch made of many small operations (the tree-free draw).
COMPILABLE = frozenset({"optimal_iid", "khisti", "wor_iid"})

_STEPS: dict[tuple[Callable, str], Callable] = {}
_FAILURE: list[str] = []


def default_compile() -> bool:
    """Whether decoding compiles the :data:`COMPILABLE` steps: the environment sets ``OTSPEC_COMPILE=1``.

    Returns
    -------
    bool
        True to compile.
    """
    return os.environ.get("OTSPEC_COMPILE", "0") == "1"


def failure() -> str | None:
    """The first compilation failure of this process (then every step runs eagerly), or ``None``.

    Returns
    -------
    str or None
        ``"<exception type>: <message>"`` of the failure.
    """
    return first_failure(_FAILURE)


def backend() -> str:
    """The ``torch.compile`` backend: ``OTSPEC_COMPILE_BACKEND`` or ``"inductor"`` (the tests of the
    wiring use ``"eager"``, which traces without generating code).

    Returns
    -------
    str
        A backend name.
    """
    return os.environ.get("OTSPEC_COMPILE_BACKEND", "inductor")


def _compiled(step: Callable) -> Callable:
    key = (step, backend())
    fn = _STEPS.get(key)
    if fn is None:
        fn = _STEPS[key] = torch.compile(step, fullgraph=True, dynamic=False, backend=key[1])
    return fn


def compiled_sample(v: TorchVerifier) -> Callable[..., StepOutput]:
    """``sample(p, q, drafts, *, generator, validate=True)`` of rule ``v`` with its pure step compiled.

    Parameters
    ----------
    v : TorchVerifier
        A rule of :data:`COMPILABLE` (its ``uniforms`` and ``step``).

    Returns
    -------
    callable
        Checks (as ``v.sample``), eager uniforms, then the compiled step (the eager step after a
        compilation failure).

    Raises
    ------
    ValueError
        If ``v`` is not in :data:`COMPILABLE`.
    """
    if v.name not in COMPILABLE or v.step is None or v.uniforms is None:
        raise ValueError(f"compiled_sample: rule {v.name!r} is not compiled (compilable: {sorted(COMPILABLE)}); call its sample")

    def sample(
        p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, *, generator: torch.Generator, validate: bool = True, **extra: Any
    ) -> StepOutput:
        p, q, drafts = check_step(p, q, drafts, k_min=v.k_min, k_max=v.k_max, validate=validate, name=v.name)
        uni = v.uniforms(p, q, drafts, generator)
        if not _FAILURE:
            try:
                return _compiled(v.step)(p, q, drafts, *uni)
            except Exception as e:  # noqa: BLE001 - any compile failure falls back to the eager step
                give_up(
                    _FAILURE,
                    e,
                    f"otspec_gpu.compiled: compiling {v.name}'s step failed ({{failure}}); the eager steps run "
                    "from now on (unset OTSPEC_COMPILE to skip compiling)",
                )
        return v.step(p, q, drafts, *uni)

    sample.__name__ = f"compiled_{v.name}_sample"
    return sample
