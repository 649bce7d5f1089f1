"""Reusable CPU work buffers for the torch verifiers and samplers.

With glibc's allocator a fresh ``[1, 262 144]`` float64 temporary is usually returned to the system
when freed and page-faults back in on the next step (512 faults, about 1.5 ms on the project
machine, ten times the arithmetic). The single-step samplers keep their ``[B, V]`` intermediates
here; a buffer never leaves the function that took it (nothing returned to a caller aliases one),
and two live buffers of one function have distinct names.
"""

from __future__ import annotations

import math
import threading

import torch

__all__ = ["SCRATCH_MAX", "host_shortcuts", "scratch", "to_float64"]

#: Largest temporary (in elements) :func:`scratch` keeps for reuse: 2**19 values (4 MB of float64),
#: e.g. one ``[1, 262 144]`` or ``[8, 49 152]`` row block; larger ones are fresh allocations (their
#: page faults are then small beside the arithmetic). About 15 named buffers exist, so a thread keeps
#: at most ~60 MB.
SCRATCH_MAX = 1 << 19

_SCRATCH = threading.local()


def scratch(name: str, shape: tuple[int, ...], device: torch.device, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """An uninitialised CPU work buffer of ``shape``, reused across calls (one per ``name``, dtype and
    thread); a fresh ``torch.empty`` on other devices or above :data:`SCRATCH_MAX` elements.

    Parameters
    ----------
    name : str
        The buffer's name (one live use per name at a time).
    shape : tuple of int
        Shape of the view returned.
    device : torch.device
        Device of the computation (buffers are kept for CPU only).
    dtype : torch.dtype
        Element type (default float64).

    Returns
    -------
    torch.Tensor
        A contiguous tensor of ``shape``, contents undefined.
    """
    n = math.prod(shape)
    if torch.device(device).type != "cpu" or n > SCRATCH_MAX or torch.compiler.is_compiling():
        return torch.empty(shape, dtype=dtype, device=device)
    bufs = _SCRATCH.__dict__.setdefault("bufs", {})
    buf = bufs.get((name, dtype))
    if buf is None or buf.numel() < n:
        buf = bufs[(name, dtype)] = torch.empty(max(n, 1), dtype=dtype)
    return buf[:n].view(shape)


def host_shortcuts(x: torch.Tensor) -> bool:
    """Whether a step may read a tensor value on the host to skip work (an early exit that does
    not change its result): only for CPU tensors and outside ``torch.compile`` tracing. On CUDA
    such a read is a device synchronisation, so every step then computes the full masked form.

    Parameters
    ----------
    x : torch.Tensor
        A tensor of the computation (its device decides).

    Returns
    -------
    bool
        True on CPU in eager mode, False on other devices and while tracing.
    """
    return x.device.type == "cpu" and not torch.compiler.is_compiling()


def to_float64(x: torch.Tensor, name: str) -> torch.Tensor:
    """``x`` copied into the float64 :func:`scratch` buffer ``name`` (never ``x`` itself).

    Parameters
    ----------
    x : torch.Tensor
        The tensor to copy (any real dtype).
    name : str
        Scratch buffer name.

    Returns
    -------
    torch.Tensor
        A float64 work copy of ``x``, safe to modify in place.
    """
    return scratch(name, tuple(x.shape), x.device).copy_(x)
