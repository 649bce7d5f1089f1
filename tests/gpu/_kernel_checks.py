"""What the Triton kernel test files share: the device of the kernel cases, the interpreter child run,
the kernels' layout for the tests, and the ahead-of-time sm_90 compile.

Triton reads ``TRITON_INTERPRET`` when it is imported, so a normal run checks a file's CPU cases in one
child pytest process of that file with the variable set (:func:`run_under_interpreter`); on CUDA they
run compiled, in the test process. The interpreter does not lower the kernels, so each file also
compiles them for sm_90 with Triton's bundled ptxas (:func:`compile_sm90`; no GPU needed).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
KERNEL_DEVICES = (
    ["cpu"]
    if INTERPRET
    else [
        pytest.param(
            "cuda",
            marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (the CPU cases run in the interpreter child run)"),
        )
    ]
)


def run_under_interpreter(test_file: str) -> None:
    """Run every test of ``test_file`` on CPU tensors in a child pytest with ``TRITON_INTERPRET=1``;
    fails with the tail of its output unless the child passes."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    root = Path(__file__).resolve().parents[2]
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(Path(test_file).resolve())]
    run = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]


def set_layout(monkeypatch: pytest.MonkeyPatch, block: int, max_chunks: int) -> None:
    """Every kernel module's layout (``otspec_gpu.kernels._common``) with vector steps of ``block``
    and at most ``max_chunks`` chunks per row, for the test's duration."""
    from otspec_gpu.kernels import _common

    monkeypatch.setattr(_common, "BLOCK_V", block)
    monkeypatch.setattr(_common, "MAX_CHUNKS", max_chunks)


def ptxas_available() -> bool:
    """Whether Triton's NVIDIA backend and its bundled ptxas for sm_90 are present."""
    try:
        from triton.backends.nvidia.compiler import get_ptxas

        return get_ptxas(90).path is not None
    except Exception:  # noqa: BLE001 - no NVIDIA backend in this Triton build
        return False


def compile_sm90(fn, signature: dict, constexprs: dict) -> None:
    """Compile the jitted kernel ``fn`` for sm_90 (no fused multiply-add, as the launches ask) and check
    a cubin came out; skips the test when ptxas is not available.

    ``signature`` maps the runtime arguments to Triton types (``"*fp64"``, ``"i32"``, ...);
    ``constexprs`` gives the compile-time ones."""
    if not ptxas_available():
        pytest.skip("Triton's NVIDIA backend (ptxas) is not available")
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    sig = {**signature, **dict.fromkeys(constexprs, "constexpr")}
    compiled = triton.compile(
        ASTSource(fn=fn, signature=sig, constexprs=constexprs), target=GPUTarget("cuda", 90, 32), options={"enable_fp_fusion": False}
    )
    assert "cubin" in compiled.asm
