"""What the Triton kernel modules share: the chunked layout of a row of ``V``, the launch options and
powers of two (host-side helpers; no kernel lives here).

A row of ``V`` tokens is split into ``n_chunks`` chunks of ``chunk`` tokens, one program per
``(row, chunk)``, each walking its chunk in vector steps of ``block`` tokens: ``block`` is the power
of two at or above ``V``, at most ``_BLOCK_V``; ``chunk`` is the power of two at or above
``ceil(V / _MAX_CHUNKS)``, at least ``block``; so a row takes at most ``_MAX_CHUNKS`` programs
(V 49 152: 48 chunks of 1 024; V 262 144: 128 chunks of 2 048). The tests shrink ``_BLOCK_V`` and
``_MAX_CHUNKS`` here (every kernel module reads them through :func:`_layout`) to cross chunks and
blocks with few programs.
"""

from __future__ import annotations

import os

import torch

__all__: list[str] = []  # private helpers of otspec_gpu.kernels.chain and otspec_gpu.kernels.kseq

_BLOCK_V = 1024  # elements per vector step (and per block scan) of a program
_MAX_CHUNKS = 128  # chunks (programs) per row at most


def _no_fma() -> dict:
    """Launch options that keep ``a * b - c`` two roundings, as torch computes it (the compiler
    would otherwise contract it into one fused multiply-add); the interpreter takes none."""
    return {} if os.environ.get("TRITON_INTERPRET", "0") == "1" else {"enable_fp_fusion": False}


def _pow2(n: int) -> int:
    """The power of two at or above ``n`` (1 for ``n <= 1``): a ``tl.arange`` length."""
    return 1 << max(int(n) - 1, 0).bit_length()


def _layout(V: int) -> tuple[int, int, int]:
    """``(block, chunk, n_chunks)`` of a row of ``V``: the chunk a power-of-two multiple of the block,
    at most ``_MAX_CHUNKS`` chunks."""
    block = min(_BLOCK_V, _pow2(V))
    chunk = max(block, _pow2(-(-V // _MAX_CHUNKS)))
    return block, chunk, -(-V // chunk)


def _row_stride(x: torch.Tensor) -> int:
    """The row stride of ``x`` ``[B, V]``, 0 for one row shared by every row."""
    return x.stride(0) if x.shape[0] > 1 else 0
