"""``otspec speedup``: the best configuration of every verifier from a JSON acceptance file and from
an otspec corpus run's columns, the same numbers as the library, and bad input exits 2 with one
line."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from otspec.cli import main
from otspec.speedup import CostModel, affine_verify, best_configurations, constant_acceptance_tokens, measured_verify

COST = ["--verify-cost", "0.05,0.01", "--draft-cost", "0.002"]


@pytest.fixture
def acceptance(tmp_path):
    rng = np.random.default_rng(0)
    acc = {
        "optimum": {"1": rng.uniform(0.5, 1, 40).tolist(), "2": rng.uniform(0.6, 1, 40).tolist()},
        "kseq": {"2": rng.uniform(0.5, 1, 40).tolist()},
    }
    path = tmp_path / "acc.json"
    path.write_text(json.dumps({**acc, "lengths": [25, 15]}))
    return path, acc


def test_json_matches_the_library(acceptance, capsys):
    path, acc = acceptance
    assert main(["speedup", "--acceptance", str(path), *COST, "--gammas", "1,2,3,5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    lib = best_configurations(
        {n: {int(k): v for k, v in by_k.items()} for n, by_k in acc.items()},
        CostModel(0.002, affine_verify(0.05, 0.01)),
        gammas=[1, 2, 3, 5],
        lengths=[25, 15],
    )
    assert out["autoregressive_tokens_per_s"] == pytest.approx(1 / 0.06, rel=1e-14)
    for name, preds in lib.items():
        assert out["best"][name]["tokens_per_s"] == preds[0].tokens_per_s
        assert (out["best"][name]["gamma"], out["best"][name]["k"]) == (preds[0].gamma, preds[0].k)
        rows = out["configurations"][name]
        assert len(rows) == 4 * len(acc[name])
        for r in rows:
            m = float(np.mean(acc[name][str(r["k"])]))
            assert r["constant_formula_tokens_per_round"] == constant_acceptance_tokens(m, r["gamma"])


def test_table_names_every_verifier(acceptance):
    path, _ = acceptance
    # a subprocess: the table is printed by rich, and the command must not need torch
    code = "import sys; from otspec.cli import main; sys.exit(main(sys.argv[1:]))"
    res = subprocess.run(
        [sys.executable, "-c", code, "speedup", "--acceptance", str(path), *COST], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    assert "optimum" in res.stdout and "kseq" in res.stdout and "const. formula" in res.stdout


def test_corpus_columns_become_verifiers():
    pa = pytest.importorskip("pyarrow")
    from otspec.cli.speedup import acceptance_of_corpus

    t = pa.table(
        {
            "doc_index": [0, 0, 0, 1, 1],
            "one_minus_tv": [0.5, 0.6, 0.7, 0.8, 0.9],
            "opt_iid_k2": [0.6, 0.7, 0.8, 0.9, 1.0],
            "kseq_iid_k2": [0.55, 0.6, 0.7, 0.8, 0.9],
            "kseq_iid_k2_lo": [0.5] * 5,
            "kseq_iid_k2_hi": [0.6] * 5,
            "opt_greedy_k3": [0.5, np.nan, 0.5, 0.5, 0.5],
            "opt_wor_k2_err": [0.0] * 5,
            "opt_iid_k3_lo": [0.4] * 5,
            "opt_iid_k3_hi": [0.9] * 5,
        }
    )
    acc, lengths = acceptance_of_corpus(t)
    assert lengths.tolist() == [3, 2]
    assert set(acc) == {"one_minus_tv", "opt_iid", "kseq_iid", "opt_iid_lo"}
    assert set(acc["opt_iid"]) == {2} and set(acc["one_minus_tv"]) == {1} and set(acc["opt_iid_lo"]) == {3}
    np.testing.assert_array_equal(acc["kseq_iid"][2], [0.55, 0.6, 0.7, 0.8, 0.9])


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["--verify-cost", "0.05"], "--verify-cost must be A,B"),
        (["--verify-points", "1:0.05"], ">= 2 points"),
        (["--verify-points", "1-0.05,2:0.06"], "N:S pairs"),
        (["--verify-cost", "0.05,0.01", "--batch", "0"], "--batch must be >= 1"),
        (["--verify-cost", "0.05,0.01", "--gammas", "0"], "--gammas must be >= 1"),
        (["--verify-cost", "0.05,0.01", "--draft-cost", "-1"], "--draft-cost must be >= 0"),
        (["--verify-cost=-0.05,0.01"], "a, b >= 0"),
        (["--verify-cost", "0.05,0.01", "BAD"], "is not a probability"),
        (["--verify-cost", "0.05,0.01", "LEN"], "lengths must be positive integers"),
        (["--verify-cost", "0.05,0.01", "NOTJSON"], "cannot read it as JSON"),
    ],
)
def test_bad_input_exits_2_with_one_line(tmp_path, capsys, argv, fragment):
    path = tmp_path / "a.json"
    path.write_text(json.dumps({"opt": {"1": [0.5, 0.7]}}))
    if "BAD" in argv:
        path.write_text(json.dumps({"opt": {"1": [0.5, 1.7]}}))
    if "LEN" in argv:
        path.write_text(json.dumps({"opt": {"1": [0.5, 0.7]}, "lengths": [3]}))
    if "NOTJSON" in argv:
        path.write_text("{nope")
    argv = [a for a in argv if a not in ("BAD", "LEN", "NOTJSON")]
    assert main(["speedup", "--acceptance", str(path), *argv]) == 2
    err = capsys.readouterr().err
    assert fragment in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err


def _trace(path, gamma, target_s):
    """A decode trace of len(target_s) rounds (one prompt, one draft; K = 2 logged entries)."""
    from otspec.io import Trace, save_trace

    n = len(target_s)
    z = np.zeros
    cols = {
        "round": np.arange(n),
        "prompt": z(n, np.int64),
        "tau": z(n, np.int64),
        "n_emit": np.ones(n, np.int64),
        "next_token": z(n, np.int64),
        "path": z(n, np.int64),
        "drafts": z((n, 1, gamma), np.int64),
        "p_top_ids": z((n, gamma + 1, 2), np.int64),
        "q_top_ids": z((n, gamma, 2), np.int64),
        "p_top": np.full((n, gamma + 1, 2), 0.5),
        "p_tail": z((n, gamma + 1)),
        "q_top": np.full((n, gamma, 2), 0.5),
        "q_tail": z((n, gamma)),
        "round_t_draft": np.full(n, 1.0),  # the draft is not part of the verify cost
        "round_t_target": np.asarray(target_s, dtype=np.float64),
        "round_t_verify": np.full(n, 0.002),
        "round_t_rollback": np.full(n, 0.001),
        "round_t_theory": np.full(n, 9.0),
    }
    return save_trace(Trace(cols, {"mode": "chain", "gamma": gamma, "drafts": 1, "batch": 1}), path)


def test_verify_cost_from_decode_traces(acceptance, tmp_path, capsys):
    path, acc = acceptance
    # medians of target + verify + rollback: 0.05 + 0.003 at 2 positions (gamma 1), 0.08 + 0.003 at 5
    t1 = _trace(tmp_path / "g1.safetensors", 1, [0.05, 0.04, 0.9])
    t4 = _trace(tmp_path / "g4.safetensors", 4, [0.08, 0.07, 0.08, 2.0])
    assert main(["speedup", "--acceptance", str(path), "--verify-traces", f"{t1},{t4}", "--gammas", "1,2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    verify = measured_verify([2, 5], [0.053, 0.083])
    lib = best_configurations(
        {n: {int(k): v for k, v in by_k.items()} for n, by_k in acc.items()}, CostModel(0.0, verify), gammas=[1, 2], lengths=[25, 15]
    )
    assert out["autoregressive_tokens_per_s"] == pytest.approx(1 / 0.053, rel=1e-12)  # below 2 positions: the cost at 2
    for name, preds in lib.items():
        assert out["best"][name]["tokens_per_s"] == pytest.approx(preds[0].tokens_per_s, rel=1e-12)
