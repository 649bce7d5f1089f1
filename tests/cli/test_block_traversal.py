"""Traversal Verification in ``otspec block`` / :func:`otspec.report.block_report`: its rows (with
and without replacement) are the library's exact E[tau], between RRS over the same tree and the
tree optimum T*."""

import json

import pytest

from otspec import models
from otspec._tolerances import EXACT_ATOL, FLOAT64_ATOL
from otspec.cli import main
from otspec.verifiers import traversal, tree


def test_traversal_rows_are_the_library_values(capsys):
    assert main(["block", "--vocab", "3", "--gamma", "2", "--drafts", "2", "--seed", "5", "--json"]) == 0
    rows = {r["verifier"]: r["expected_accepted"] for r in json.loads(capsys.readouterr().out)["results"]}
    p = models.dirichlet(3, seed=5)
    q = models.close_draft(p, seed=5)
    with_rep = rows["Traversal Verification (k=2)"]
    wor = rows["Traversal Verification w/o replacement (k=2)"]
    assert with_rep == pytest.approx(traversal.expected_accepted(p, q, 2, 2, replacement=True), abs=FLOAT64_ATOL)
    assert wor == pytest.approx(traversal.expected_accepted(p, q, 2, 2, replacement=False), abs=FLOAT64_ATOL)
    # never below recursive rejection over the same tree, never above the optimum
    assert with_rep >= tree.expected_accepted(p, q, 2, 2, verifier="rrs") - FLOAT64_ATOL
    assert wor >= tree.expected_accepted(p, q, 2, 2, verifier="rrs_wor") - FLOAT64_ATOL
    assert with_rep <= rows["tree optimum (k=2, iid)"] + EXACT_ATOL
