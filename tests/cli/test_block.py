"""`otspec block` end to end: table, JSON agreeing with the library, refusals exit 2 with one line."""

import json
import os
import subprocess
import sys

import pytest

from otspec import models
from otspec._tolerances import EXACT_ATOL, FLOAT64_ATOL
from otspec.bounds.block import block_optimum
from otspec.bounds.tree import tree_optimum
from otspec.cli import main
from otspec.verifiers import block as bv
from otspec.verifiers import exact_match_chain, tree, typical_chain
from otspec.verifiers import token_chain as tc


def _pair(V, seed=0):
    p = models.dirichlet(V, seed=seed)
    return p, models.close_draft(p, seed=seed)


def test_json_matches_library(capsys):
    rc = main(["block", "--vocab", "3", "--gamma", "2", "--drafts", "2", "--seed", "5", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    p, q = _pair(3, 5)
    by = {(r["verifier"], r["how"]): r for r in out["results"]}
    names = [r["verifier"] for r in out["results"]]
    assert names[:2] == ["token", "block"]
    assert by[("token", "closed form (product of mins)")]["expected_accepted"] == pytest.approx(
        tc.expected_accepted(p, q, 2), abs=FLOAT64_ATOL
    )
    assert by[("block", "closed form (sum of W)")]["expected_accepted"] == pytest.approx(bv.expected_accepted(p, q, 2), abs=FLOAT64_ATOL)
    lp = by[("block optimum", "block LP (HiGHS, certified)")]
    assert lp["status"] == "optimal" and lp["expected_accepted"] == pytest.approx(block_optimum(p, q, 2).value, abs=EXACT_ATOL)
    assert by[("K-SEQ sequence (k=2)", "exact enumeration of draft trees")]["expected_accepted"] == pytest.approx(
        tree.expected_accepted(p, q, 2, 2, verifier="kseq"), abs=FLOAT64_ATOL
    )
    t = [r for r in out["results"] if r["verifier"].startswith("tree optimum (k=2, iid)")][0]
    assert t["expected_accepted"] == pytest.approx(tree_optimum(p, q, 2, 2).value, abs=EXACT_ATOL)
    for r in out["results"]:
        assert r["block_efficiency"] == pytest.approx(r["expected_accepted"] + 1)
    assert out["params"]["vocab"] == 3 and out["params"]["drafts"] == 2 and out["skipped"] == []


def test_defaults_match_library(capsys):
    assert main(["block", "--vocab", "2", "--gamma", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    p, q = _pair(2, 0)  # library defaults: seed 0, concentration 1, noise 0.3, temperature 1
    assert out["results"][1]["expected_accepted"] == pytest.approx(bv.expected_accepted(p, q, 2), abs=FLOAT64_ATOL)
    # token, block, optimum (W), block LP, joint-coupling bound, the engines' chain rules: no tree rows at k = 1
    assert len(out["results"]) == 7
    by = {r["verifier"]: r["expected_accepted"] for r in out["results"]}
    assert by["exact match (chain)"] == pytest.approx(exact_match_chain.expected_accepted(p, q, 2, method="kernel"), abs=FLOAT64_ATOL)
    assert by["typical (chain)"] == pytest.approx(typical_chain.expected_accepted(p, q, 2, method="kernel"), abs=FLOAT64_ATOL)


def test_table(capsys):
    assert main(["block", "--vocab", "3", "--gamma", "2", "--lp", "no"]) == 0
    out = capsys.readouterr().out
    assert "otspec block: V=3, gamma=2, k=1" in out and "joint-coupling bound" in out
    assert "block LP" in out  # listed among the skipped computations


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--vocab", "x", "--gamma", "2"], "--vocab must be an integer"),
        (["--vocab", "3", "--gamma", "0"], "--gamma must be >= 1"),
        (["--vocab", "3", "--gamma", "2.5"], "--gamma must be an integer"),
        (["--vocab", "3", "--gamma", "2", "--concentration", "-1"], "concentration must be finite and > 0"),
        (["--vocab", "3", "--gamma", "2", "--noise", "2"], "noise must lie in [0, 1]"),
        (["--vocab", "262144", "--gamma", "8"], "prefixes, above the cap"),
        (["--vocab", "4", "--gamma", "3", "--drafts", "6"], "draft trees, above the cap"),
        (["--vocab", "3", "--gamma", "3", "--lp", "yes", "--memory-cap", "1e-6"], "memory cap"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(argv, needle, capsys):
    assert main(["block", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("otspec: error: ")
    assert needle in err


def test_subprocess():
    env = dict(os.environ, COLUMNS="200")
    r = subprocess.run(
        [sys.executable, "-m", "otspec", "block", "--vocab", "2", "--gamma", "2", "--json"], capture_output=True, text=True, env=env
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["params"]["gamma"] == 2
    r = subprocess.run(
        [sys.executable, "-m", "otspec", "block", "--vocab", "100000", "--gamma", "3"], capture_output=True, text=True, env=env
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "1,000,010,000,100,001 prefixes" in r.stderr
