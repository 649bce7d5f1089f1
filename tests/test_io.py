"""otspec.io trace files: written and read back with numpy only (torch is never imported)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from otspec.errors import InputFileError
from otspec.io import TRACE_METADATA_KEY, Trace, load_trace, save_trace


def _trace() -> Trace:
    rng = np.random.default_rng(0)
    cols = {
        "tau": np.array([0, 2, 1], dtype=np.int64),
        "drafts": rng.integers(0, 7, size=(3, 2, 3)).astype(np.int64),
        "p_top": rng.random((3, 4, 2)),
        "th_expected": np.array([0.25, 1.5, 0.75]),
        "round_t_draft": np.array([0.1, 0.2]),
    }
    return Trace(cols, {"mode": "tree", "k": np.int64(2), "gamma": 3, "temperature": np.float64(0.5)})


def test_round_trip_keeps_every_column_bit_for_bit(tmp_path):
    t = _trace()
    path = save_trace(t, tmp_path / "run.safetensors")
    back = load_trace(path)
    assert set(back.columns) == set(t.columns)
    for name, arr in t.columns.items():
        assert back[name].dtype == arr.dtype, name
        np.testing.assert_array_equal(back[name], arr, err_msg=name)
    # numpy scalars in the config are written as plain JSON numbers
    assert back.config == {"mode": "tree", "k": 2, "gamma": 3, "temperature": 0.5}
    assert back.n_records == 3 and back.theory_columns() == ["expected"]
    assert t.save(tmp_path / "again.safetensors").exists()


def test_reading_a_trace_never_imports_torch(tmp_path):
    path = save_trace(_trace(), tmp_path / "run.safetensors")
    code = (
        "import sys\n"
        "from otspec.io import load_trace\n"
        f"t = load_trace({str(path)!r})\n"
        "assert t.n_records == 3\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_bad_trace_files_raise_input_file_error(tmp_path):
    with pytest.raises(InputFileError, match="does not exist"):
        load_trace(tmp_path / "missing.safetensors")
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"not a safetensors file")
    with pytest.raises(InputFileError, match="cannot read trace"):
        load_trace(junk)
    from safetensors.numpy import save_file

    other = tmp_path / "other.safetensors"
    save_file({"x": np.zeros(2)}, str(other), metadata={"something": json.dumps({})})
    with pytest.raises(InputFileError, match=f"no {TRACE_METADATA_KEY!r} metadata"):
        load_trace(other)


def test_gpu_trace_builder_builds_the_numpy_trace_type():
    trace = pytest.importorskip("otspec_gpu.trace")
    from otspec_gpu.decoding import plan_for

    built = trace.TraceBuilder(plan=plan_for("token"), B=1, V=4).build({"seed": 3})
    assert type(built) is Trace and built.config == {"seed": 3}


def test_a_trace_with_no_record_saves_and_loads_like_one_with_records(tmp_path):
    """No round with a live prompt: the record columns exist with 0 rows, with the dtypes and
    trailing shapes a recorded round gives them, and the file reads back."""
    pytest.importorskip("torch")
    import torch

    from otspec_gpu.decoding import plan_for
    from otspec_gpu.trace import TraceBuilder

    plan, B, V = plan_for("kseq", drafts=2, gamma=3), 2, 5
    empty = TraceBuilder(plan=plan, B=B, V=V, top_k=8).build({"seed": 1})
    back = load_trace(save_trace(empty, tmp_path / "empty.safetensors"))
    assert back.n_records == 0
    full = TraceBuilder(plan=plan, B=B, V=V, top_k=8)
    R, g = B * plan.k, plan.gamma
    P = torch.softmax(torch.randn(R, g + 1, V, generator=torch.Generator().manual_seed(0)), -1)
    full.add_round(
        0, [0, 1], P=P, Q=P[:, :g], X=torch.zeros(R, g, dtype=torch.long), chosen=torch.tensor([0, 3]),
        tau=torch.tensor([1, 3]), next_token=torch.tensor([2, 4]), n_emit=[2, 4], times={}, theory=None,
    )  # fmt: skip
    rec = full.build({"seed": 1}).columns
    assert set(back.columns) == set(rec)
    for name, arr in rec.items():
        assert back[name].dtype == arr.dtype and back[name].shape[1:] == arr.shape[1:], name
        if not name.startswith("round_t_"):
            assert back[name].shape[0] == 0, name
