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
