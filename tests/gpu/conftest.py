"""Configuration of the torch tests: skipped as a whole when torch is absent; a ``device`` fixture
that runs a test on CPU and, when one is present, on CUDA."""

import importlib.util

import pytest

if importlib.util.find_spec("torch") is None:  # pragma: no cover - CI installs torch
    collect_ignore_glob = ["*.py"]
    DEVICES = []
else:
    import torch

    DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(params=DEVICES)
def device(request):
    """Every available torch device (``cpu``, plus ``cuda`` when present)."""
    return request.param


@pytest.fixture(scope="module")
def one_thread():
    """One intra-op torch thread for a whole test module, restored afterwards.

    The torch tests run small tensors and tiny models on a shared 2-core machine, where two threads
    per process make every small matmul spin-wait for the other thread (measured 10-20x slower
    under load). A module opts in with ``pytestmark = pytest.mark.usefixtures("one_thread")``.
    """
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
