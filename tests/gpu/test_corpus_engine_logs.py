"""``otspec corpus --logged TARGET --draft-log DRAFT``: engine logs (vLLM JSON / Parquet, OpenAI-style,
SGLang) paired and bounded, rows bit-identical to a run on the paired steps written by
otspec.logs.write_steps; options that do not apply to a mode are refused with exit 2, never
ignored (--ray-address without --engine ray, --workers with --logged included)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from otspec.cli import main
from otspec.logs import pair_logs, write_steps
from tests import _engine_logs as gen

pytest.importorskip("pyarrow")

FIX = gen.FIXTURES
FLAGS = ["--laws", "iid,greedy", "--ks", "2,3", "--verifiers", "none", "--json", "--no-progress"]


def _rows(out):
    from otspec_gpu.corpus import read_results

    return read_results(out)


@pytest.mark.parametrize(
    "target, draft",
    [
        ("vllm_target.jsonl", "vllm_draft.jsonl"),
        ("vllm_target.parquet", "vllm_draft.parquet"),
        ("openai_target.json", "openai_draft.json"),
        ("sglang_target.jsonl", "sglang_draft.jsonl"),
    ],
)
def test_engine_logs_run_like_their_paired_steps(tmp_path, capsys, target, draft):
    assert main(["corpus", "--logged", str(FIX / target), "--draft-log", str(FIX / draft), "--out", str(tmp_path / "a"), *FLAGS]) == 0
    info = json.loads(capsys.readouterr().out)["run"]
    assert info["positions"] == len(gen.DOCS) * gen.POSITIONS and info["engine"] == "logged"
    steps = write_steps(pair_logs(FIX / target, FIX / draft), tmp_path / "steps.jsonl")
    assert main(["corpus", "--logged", str(steps), "--out", str(tmp_path / "b"), *FLAGS]) == 0
    a, b = _rows(tmp_path / "a"), _rows(tmp_path / "b")
    assert a.column_names == b.column_names
    for c in a.column_names:
        x, y = a.column(c).to_numpy(zero_copy_only=False), b.column(c).to_numpy(zero_copy_only=False)
        if x.dtype.kind == "f":
            np.testing.assert_array_equal(x, y)  # bit for bit (nan where both are nan)
        else:
            assert (x == y).all(), c


def test_full_logs_at_a_declared_temperature(tmp_path, capsys):
    V = 6
    p = np.array([0.4, 0.25, 0.15, 0.1, 0.06, 0.04])
    q = p[::-1].copy()

    def rec(d):
        return {
            "request_id": "r",
            "prompt_token_ids": [0, 0],
            "prompt_logprobs": [None, {str(i): {"logprob": float(np.log(d[i]))} for i in range(V)}],
        }

    (tmp_path / "t.jsonl").write_text(json.dumps(rec(p)))
    (tmp_path / "d.jsonl").write_text(json.dumps(rec(q)))
    args = ["corpus", "--logged", str(tmp_path / "t.jsonl"), "--draft-log", str(tmp_path / "d.jsonl"), "--out", str(tmp_path / "o")]
    assert main([*args, "--temperature", "0.5", "--laws", "iid", "--ks", "2", "--verifiers", "none", "--json"]) == 0
    import otspec

    pt, qt = p**2 / (p**2).sum(), q**2 / (q**2).sum()
    row = _rows(tmp_path / "o").to_pylist()[0]
    exact = otspec.optimal_acceptance(pt, otspec.iid(qt, 2)).value
    assert row["opt_iid_k2_lo"] - 1e-12 <= exact <= row["opt_iid_k2_hi"] + 1e-12
    assert row["opt_iid_k2_hi"] - row["opt_iid_k2_lo"] < 1e-9  # a full log: the interval is a point


@pytest.mark.parametrize(
    "extra, fragment",
    [
        (["--ray-address", "auto"], "--ray-address applies to --logged only with --engine ray"),
        (["--target", "tiny"], "--target do not apply to --logged"),
        (["--max-tokens", "5"], "--max-tokens do not apply to --logged"),
        (["--workers", "2"], "--workers do not apply to --logged"),
        (["--temperature", "0.7", "--no-draft"], "--temperature apply to --logged only with --draft-log"),
        (["--log-format", "vllm", "--no-draft"], "--log-format apply to --logged only with --draft-log"),
        (["--no-draft"], "a vllm log of one model, not paired steps; pass the draft model's log with --draft-log"),
        (["--draft-log", str(FIX / "vllm_draft.jsonl")], "1 target logs but 2 draft logs"),
        (["--temperature", "0.7"], "temperature 0.7 needs the whole distribution"),
        (["--no-logged"], "--draft-log apply only to --logged runs"),
    ],
)
def test_options_that_do_not_apply_exit_2(tmp_path, capsys, extra, fragment):
    argv = [
        "corpus",
        "--logged",
        str(FIX / "vllm_target.jsonl"),
        "--draft-log",
        str(FIX / "vllm_draft.jsonl"),
        "--out",
        str(tmp_path / "o"),
    ]
    if "--no-draft" in extra:
        argv = argv[:3] + argv[5:]
        extra = [e for e in extra if e != "--no-draft"]
    if "--no-logged" in extra:
        argv.remove("--logged")
        extra = []
    assert main([*argv, *extra]) == 2
    cap = capsys.readouterr()
    assert fragment in cap.err and len(cap.err.strip().splitlines()) == 1 and cap.err.startswith("otspec: error: "), cap.err
    assert "Traceback" not in cap.err and cap.out == ""
