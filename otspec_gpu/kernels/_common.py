"""What the Triton kernel modules share: the chunked layout of a row of ``V``, the launch options and
powers of two (host-side helpers; no kernel lives here).

A row of ``V`` tokens is split into ``n_chunks`` chunks of ``chunk`` tokens, one program per
``(row, chunk)``, each walking its chunk in vector steps of ``block`` tokens: ``block`` is the power
of two at or above ``V``, at most ``BLOCK_V``; ``chunk`` is the power of two at or above
``ceil(V / MAX_CHUNKS)``, at least ``block``; so a row takes at most ``MAX_CHUNKS`` programs
(V 49 152: 48 chunks of 1 024; V 262 144: 128 chunks of 2 048). The tests shrink ``BLOCK_V`` and
``MAX_CHUNKS`` here (every kernel module reads them through :func:`layout`) to cross chunks and
blocks with few programs.
"""

from __future__ import annotations

import os

import torch

__all__ = ["BLOCK_V", "MAX_CHUNKS", "layout", "no_fma", "pow2", "row_stride"]  # shared by the kernel modules

BLOCK_V = 1024  # elements per vector step (and per block scan) of a program
MAX_CHUNKS = 128  # chunks (programs) per row at most


def no_fma() -> dict:
    """Launch options that keep ``a * b - c`` two roundings, as torch computes it (the compiler
    would otherwise contract it into one fused multiply-add); the interpreter takes none."""
    return {} if os.environ.get("TRITON_INTERPRET", "0") == "1" else {"enable_fp_fusion": False}


def pow2(n: int) -> int:
    """The power of two at or above ``n`` (1 for ``n <= 1``): a ``tl.arange`` length."""
    return 1 << max(int(n) - 1, 0).bit_length()


def layout(V: int) -> tuple[int, int, int]:
    """``(block, chunk, n_chunks)`` of a row of ``V``: the chunk a power-of-two multiple of the block,
    at most ``MAX_CHUNKS`` chunks."""
    block = min(BLOCK_V, pow2(V))
    chunk = max(block, pow2(-(-V // MAX_CHUNKS)))
    return block, chunk, -(-V // chunk)


def row_stride(x: torch.Tensor) -> int:
    """The row stride of ``x`` ``[B, V]``, 0 for one row shared by every row."""
    return x.stride(0) if x.shape[0] > 1 else 0
