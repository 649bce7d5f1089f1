"""The corpus's tree mode on the tiny models (V = 6): drafted rows equal cache-free forwards, the
certified interval holds the exact tree optimum (full exploration closes it), and ``otspec corpus
--tree-drafts`` adds its columns without changing a run that does not ask for them."""

import json

import numpy as np
import pyarrow  # noqa: F401  (the corpus extra)
import pytest

from otspec import tree_interval
from otspec_gpu.corpus import Processing, SolverSpec, columns_for, read_results, run_corpus
from otspec_gpu.corpus.shards import HEAD_COLUMNS
from otspec_gpu.corpus.trees import TREE_COLUMNS, NodeScorer, TreeSpec, draft_tree
from otspec_gpu.models import tiny

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def pair():
    return tiny(seed=0, name="tiny"), tiny(seed=1, name="tiny-draft")


def _forward(lm, ids, proc):
    import torch

    from otspec_gpu.processing import probs_from_logits

    x = torch.tensor([list(ids)])
    return probs_from_logits(lm.logits(x)[0, -1].double(), temperature=proc.temperature, dtype=torch.float64).numpy()


def test_drafted_and_expanded_rows_are_the_models_rows(pair):
    """The cached, batched, right-padded passes give each node's next-token law (float32 forwards)."""
    import torch

    target, draft = pair
    proc = Processing(temperature=0.9)
    ctx = [1, 4, 2]
    X, P, Q = draft_tree(target, draft, ctx, 3, 2, proc, torch.Generator().manual_seed(0))
    assert X.shape == (3, 2) and P.shape == (3, 3, 6) and Q.shape == (3, 2, 6)
    for t in range(3):
        for d in range(3):
            np.testing.assert_allclose(P[t, d], _forward(target, ctx + X[t, :d].tolist(), proc), atol=1e-6)
            if d < 2:
                np.testing.assert_allclose(Q[t, d], _forward(draft, ctx + X[t, :d].tolist(), proc), atol=1e-6)
    scorer = NodeScorer(target, draft, ctx, proc)
    nodes = [(3,), (0, 5), (2,)]
    pr, qr = scorer(nodes)
    for j, u in enumerate(nodes):
        np.testing.assert_allclose(pr[j], _forward(target, ctx + list(u), proc), atol=1e-6)
        np.testing.assert_allclose(qr[j], _forward(draft, ctx + list(u), proc), atol=1e-6)
    scorer(nodes[:2])
    assert scorer.passes == 1 and scorer.scored == 3  # memoised


def test_interval_holds_the_exact_optimum_at_a_real_context(pair):
    import torch

    target, draft = pair
    proc = Processing()
    ctx = [3, 0, 5, 1]
    X, P, Q = draft_tree(target, draft, ctx, 2, 2, proc, torch.Generator().manual_seed(3))
    scorer = NodeScorer(target, draft, ctx, proc)
    full = tree_interval(X, P, Q, top_k=6, levels=2, expand=scorer)  # every prefix explored: T* itself
    assert full.gap < 1e-7
    for K, L in ((1, 0), (2, 0), (2, 1)):
        r = tree_interval(X, P, Q, top_k=K, levels=L, expand=scorer)
        assert r.lower <= full.upper + 1e-9 and full.lower <= r.upper + 1e-9


def _corpus(path, n=3, seed=0):
    rng = np.random.default_rng(seed)
    with open(path, "w") as fh:
        for _ in range(n):
            fh.write(json.dumps({"ids": rng.integers(0, 6, int(rng.integers(4, 7))).tolist()}) + "\n")
    return str(path)


def test_corpus_tree_mode_adds_interval_columns(tmp_path, pair):
    target, draft = pair
    src = _corpus(tmp_path / "c.jsonl", n=2)
    spec = SolverSpec(laws=("iid",), ks=(2,), verifiers=())
    plain = run_corpus([src], target=target, draft=draft, out=tmp_path / "plain", field="ids", spec=spec)
    assert read_results(plain.out).column_names == [*HEAD_COLUMNS, *columns_for(spec)]  # no tree columns unless asked
    tree = TreeSpec(k=2, gamma=2, top_k=2, levels=1, stride=2)
    res = run_corpus([src], target=target, draft=draft, out=tmp_path / "tree", field="ids", spec=spec, tree=tree)
    cols = read_results(res.out).to_pydict()
    assert all(c in cols for c in TREE_COLUMNS)
    pos = np.array(cols["position"])
    lo, up = np.array(cols["tree_lower"]), np.array(cols["tree_upper"])
    assert np.all(np.isnan(lo[pos % 2 == 1])) and np.all(np.isfinite(lo[pos % 2 == 0]))
    ok = pos % 2 == 0
    assert np.all(lo[ok] <= up[ok]) and np.all((lo[ok] >= 0) & (up[ok] <= 2 + 1e-9))
    assert np.array_equal(np.array(cols["opt_iid_k2"]), np.array(read_results(plain.out).to_pydict()["opt_iid_k2"]))
    assert "tree" in (tmp_path / "tree" / "corpus.json").read_text() and "tree" not in (tmp_path / "plain" / "corpus.json").read_text()


def test_cli_tree_mode_and_its_errors(tmp_path, capsys):
    from otspec.cli import main

    src = _corpus(tmp_path / "c.jsonl", n=1)
    base = ["corpus", src, "--field", "ids", "--target", "tiny", "--draft", "tiny-draft", "--ks", "2", "--verifiers", "none"]
    argv = base + ["--out", str(tmp_path / "o"), "--tree-drafts", "2", "--tree-gamma", "2", "--tree-top-k", "2", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert "tree_lower" in out["domains"]["all"] and "tree_upper" in out["domains"]["all"]
    assert main(base + ["--out", str(tmp_path / "p"), "--tree-gamma", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--tree-drafts" in err[0]
    assert main(base + ["--out", str(tmp_path / "q"), "--tree-drafts", "0"]) == 2
    assert "--tree-drafts" in capsys.readouterr().err


def test_cli_tree_defaults_are_the_library_defaults():
    import argparse

    from otspec_gpu.cli.corpus import _tree

    ns = argparse.Namespace(tree_drafts="2", tree_gamma=None, tree_top_k=None, tree_levels=None, tree_stride=None, seed="0")
    d = TreeSpec()
    assert _tree(ns) == TreeSpec(k=2, gamma=d.gamma, top_k=d.top_k, levels=d.levels, stride=d.stride, seed=0)
