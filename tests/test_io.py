"""otspec.io trace files: written and read back with numpy only (torch is never imported)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from otspec.errors import InputFileError, InvalidTraceError
from otspec.io import TRACE_FORMAT_VERSION, TRACE_METADATA_KEY, TRACE_PHASES, TRACE_VERSION_KEY, Trace, load_trace, save_trace


def _columns(n: int = 3, k: int = 2, gamma: int = 3, K: int = 2, rounds: int = 2) -> dict:
    rng = np.random.default_rng(0)
    cols = {name: rng.integers(0, 4, size=n).astype(np.int64) for name in ("round", "prompt", "tau", "n_emit", "next_token", "path")}
    cols["drafts"] = rng.integers(0, 7, size=(n, k, gamma)).astype(np.int64)
    for side, rows in (("p", gamma + 1), ("q", gamma)):
        cols[f"{side}_top_ids"] = rng.integers(0, 7, size=(n, rows, K)).astype(np.int64)
        cols[f"{side}_top"] = rng.random((n, rows, K))
        cols[f"{side}_tail"] = rng.random((n, rows))
    cols["th_expected"] = rng.random(n)
    cols.update({f"round_t_{p}": rng.random(rounds) for p in TRACE_PHASES})
    return cols


def _trace() -> Trace:
    return Trace(_columns(), {"mode": "tree", "k": np.int64(2), "gamma": 3, "temperature": np.float64(0.5)})


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
    from otspec_gpu.decoding import mode_for

    built = trace.TraceBuilder(mode=mode_for("token"), B=1, V=4).build({"seed": 3, "mode": "single"})
    assert type(built) is Trace and built.config == {"seed": 3, "mode": "single"}


def test_a_trace_with_no_record_saves_and_loads_like_one_with_records(tmp_path):
    """No round with a live prompt: the record columns exist with 0 rows, with the dtypes and
    trailing shapes a recorded round gives them, and the file reads back."""
    pytest.importorskip("torch")
    import torch

    from otspec_gpu.decoding import mode_for
    from otspec_gpu.trace import TraceBuilder

    plan, B, V = mode_for("kseq", drafts=2, gamma=3), 2, 5
    empty = TraceBuilder(mode=plan, B=B, V=V, top_k=8).build({"seed": 1, "mode": plan.mode})
    back = load_trace(save_trace(empty, tmp_path / "empty.safetensors"))
    assert back.n_records == 0
    full = TraceBuilder(mode=plan, B=B, V=V, top_k=8)
    R, g = B * plan.k, plan.gamma
    P = torch.softmax(torch.randn(R, g + 1, V, generator=torch.Generator().manual_seed(0)), -1)
    full.add_round(
        0, [0, 1], P=P, Q=P[:, :g], X=torch.zeros(R, g, dtype=torch.long), chosen=torch.tensor([0, 3]),
        tau=torch.tensor([1, 3]), next_token=torch.tensor([2, 4]), n_emit=[2, 4], times={}, theory=None,
    )  # fmt: skip
    rec = full.build({"seed": 1, "mode": plan.mode}).columns
    assert set(back.columns) == set(rec)
    for name, arr in rec.items():
        assert back[name].dtype == arr.dtype and back[name].shape[1:] == arr.shape[1:], name
        if not name.startswith("round_t_"):
            assert back[name].shape[0] == 0, name


# ------------------------------------------------------------------------------------------------
# The format: a version, a schema checked on save and on load, exact JSON config


def _raw(path, cols, meta):
    """A file written without save_trace's checks (a damaged or hand-made trace)."""
    from safetensors.numpy import save_file

    save_file({k: np.ascontiguousarray(v) for k, v in cols.items()}, str(path), metadata=meta)
    return path


def _meta(config=None, **extra):
    return {TRACE_METADATA_KEY: json.dumps({"mode": "chain"} if config is None else config), **extra}


def test_saved_traces_record_the_format_version(tmp_path):
    from safetensors import safe_open

    path = save_trace(_trace(), tmp_path / "run.safetensors")
    with safe_open(str(path), framework="numpy") as f:
        assert f.metadata()[TRACE_VERSION_KEY] == TRACE_FORMAT_VERSION == "1.0"


def test_traces_written_before_versions_existed_still_load(tmp_path):
    """The writer before the format version: no version key, numpy scalars already converted."""
    path = _raw(tmp_path / "old.safetensors", _columns(), _meta({"mode": "single", "k": 2}))
    back = load_trace(path)
    assert back.config == {"mode": "single", "k": 2} and back.n_records == 3


def test_a_newer_minor_version_loads_and_a_newer_major_is_refused(tmp_path):
    assert load_trace(_raw(tmp_path / "a.safetensors", _columns(), _meta(**{TRACE_VERSION_KEY: "1.7"}))).n_records == 3
    with pytest.raises(InvalidTraceError, match=r"trace format 2\.0, newer .* upgrade otspec"):
        load_trace(_raw(tmp_path / "b.safetensors", _columns(), _meta(**{TRACE_VERSION_KEY: "2.0"})))
    with pytest.raises(InvalidTraceError, match="not MAJOR.MINOR"):
        load_trace(_raw(tmp_path / "c.safetensors", _columns(), _meta(**{TRACE_VERSION_KEY: "one"})))


@pytest.mark.parametrize(
    "metadata, match",
    [
        ("{not json", "not valid JSON"),  # was a raw JSONDecodeError
        ("[1, 2]", "must be a JSON object"),  # was loaded, and repr raised AttributeError
        ('{"gamma": 3}', "config mode is None"),
        ('{"mode": "beam"}', "config mode is 'beam'"),
    ],
)
def test_bad_metadata_raises_invalid_trace_error(tmp_path, metadata, match):
    path = _raw(tmp_path / "t.safetensors", _columns(), {TRACE_METADATA_KEY: metadata})
    with pytest.raises(InvalidTraceError, match=match):
        load_trace(path)


def _without(name):
    cols = _columns()
    del cols[name]
    return cols


def _with(**changes):
    cols = _columns()
    cols.update(changes)
    return cols


@pytest.mark.parametrize(
    "cols, match",
    [
        ({"tau": np.array([0, 1])}, r"lacks the column\(s\) \['round', 'prompt', 'n_emit'"),  # only tau: summarize raised KeyError
        (_without("n_emit"), r"lacks the column\(s\) \['n_emit'\]"),
        (_with(n_emit=np.array([1, 2], dtype=np.int64)), "'n_emit' has 2 records but 'tau' has 3"),  # silently wrong summary before
        (_with(tau=np.zeros((2, 3), dtype=np.int64)), "'tau' has dtype int64 and shape \\(2, 3\\)"),
        (_with(tau=np.array([0.0, np.nan, 1.0])), "'tau' has dtype float64"),
        (_with(tau=np.array([0, -1, 1], dtype=np.int64)), "'tau' has a negative entry"),
        (_with(p_top=np.zeros((3, 2, 2))), "p_top .* do not match drafts"),
        (_with(th_expected=np.zeros(2)), "theory column 'th_expected'"),
        (_with(round_t_verify=np.zeros(5)), "'round_t_verify' has dtype float64 and shape \\(5,\\)"),
        (_with(n_drafts=np.zeros(2, dtype=np.int64)), "'n_drafts' has dtype int64 and shape \\(2,\\)"),
    ],
    ids=[
        "only-tau",
        "no-n_emit",
        "short-n_emit",
        "tau-2x3",
        "tau-nan",
        "tau-negative",
        "p_top-shape",
        "theory-length",
        "round-length",
        "n_drafts-length",
    ],
)
def test_schema_defects_raise_invalid_trace_error_on_load_and_on_save(tmp_path, cols, match):
    with pytest.raises(InvalidTraceError, match=match):
        load_trace(_raw(tmp_path / "t.safetensors", cols, _meta()))
    with pytest.raises(InvalidTraceError, match=match):
        save_trace(Trace(cols, {"mode": "chain"}), tmp_path / "u.safetensors")
    assert not (tmp_path / "u.safetensors").exists()


def test_a_missing_tau_is_not_reported_as_missing_metadata(tmp_path):
    with pytest.raises(InvalidTraceError, match=r"lacks the column\(s\) \['tau'\]") as info:
        load_trace(_raw(tmp_path / "t.safetensors", _without("tau"), _meta()))
    assert "metadata" not in str(info.value)


def test_save_converts_numpy_scalars_exactly_and_refuses_other_values(tmp_path):
    config = {"mode": "tree", "flag": np.bool_(True), "k": np.int64(3), "t": np.float64(0.1), "f32": np.float32(0.1), "ids": np.arange(2)}
    back = load_trace(save_trace(Trace(_columns(), config), tmp_path / "run.safetensors")).config
    assert back == {"mode": "tree", "flag": True, "k": 3, "t": 0.1, "f32": float(np.float32(0.1)), "ids": [0, 1]}
    assert type(back["flag"]) is bool and type(back["k"]) is int  # was the string 'True'
    with pytest.raises(InvalidTraceError, match="config value 'when' .* is not JSON"):
        save_trace(Trace(_columns(), {"mode": "tree", "when": object()}), tmp_path / "bad.safetensors")
    with pytest.raises(InvalidTraceError, match="config must be a dict"):
        save_trace(Trace(_columns(), ["mode", "tree"]), tmp_path / "bad.safetensors")


def test_save_refuses_a_missing_folder_and_object_columns_with_clear_errors(tmp_path):
    with pytest.raises(InputFileError, match="folder .* does not exist; create it first"):  # was a raw SafetensorError
        save_trace(_trace(), tmp_path / "no" / "such" / "run.safetensors")
    with pytest.raises(InvalidTraceError, match="column 'note' holds object"):
        save_trace(Trace(_with(note=np.array(["a", None], dtype=object)), {"mode": "chain"}), tmp_path / "run.safetensors")
    with pytest.raises(InputFileError, match="cannot write trace"):
        save_trace(_trace(), tmp_path)  # a folder, not a file


def test_the_optional_n_drafts_column_round_trips(tmp_path):
    cols = _with(n_drafts=np.array([2, 1, 2], dtype=np.int64))
    back = load_trace(save_trace(Trace(cols, {"mode": "tree"}), tmp_path / "run.safetensors"))
    assert back["n_drafts"].tolist() == [2, 1, 2]


def test_repr_of_a_partial_in_memory_trace_does_not_raise():
    assert repr(Trace({"x": np.zeros(2)}, {})) == "Trace(records=?, mode=None, verifier=None, columns=1)"
