"""Decoded tree rounds carry the certified interval for the tree optimum of their own context.

Tiny random-weight models (V = 6): the exact T* at each round's context comes from full exploration
(every prefix scored: the interval closes), and every recorded [lower, upper] must hold it.
"""

import numpy as np
import pytest

from otspec import tree_interval
from otspec.errors import OtspecInputError
from otspec.trace_report import summarize
from otspec_gpu import models
from otspec_gpu.decoding import decode

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def pair():
    t = models.tiny(seed=0)
    return t, models.self_draft(t, 1.6)


def test_each_round_interval_holds_the_exact_optimum_of_its_context(pair):
    import torch

    from otspec_gpu.corpus.scoring import Processing
    from otspec_gpu.corpus.trees import NodeScorer, draft_tree

    target, draft = pair
    prompt = [1, 2, 3]
    res = decode(target, draft, [prompt], verifier="kseq", drafts=2, gamma=2, max_new_tokens=5, seed=4, tree_interval=2)
    c = res.trace.columns
    lo, up = c["th_tree_lower"], c["th_tree_upper"]
    assert lo.size == c["tau"].size >= 2 and np.all(lo <= up) and np.all((lo >= 0) & (up <= 2 + 1e-9))
    assert "th_exp_kseq" in c and res.trace.config["tree_interval"] == 2
    tokens = res.tokens[0] if isinstance(res.tokens[0], list) else list(res.tokens[0])
    done = 0
    for r in range(lo.size):
        ctx = prompt + tokens[:done]
        X, P, Q = draft_tree(target, draft, ctx, 2, 2, Processing(), torch.Generator().manual_seed(r))
        exact = tree_interval(X, P, Q, top_k=6, levels=2, expand=NodeScorer(target, draft, ctx, Processing()))
        assert exact.gap < 1e-7
        assert lo[r] <= exact.upper + 1e-5 and exact.lower <= up[r] + 1e-5  # float32 forwards, cached vs not
        done += int(c["n_emit"][r])
    rep = summarize(res.trace)
    assert rep.theory["tree_optimum_lower"] == pytest.approx(float(lo.mean()))


def test_tree_interval_is_refused_outside_trees(pair):
    with pytest.raises(OtspecInputError, match="tree_interval applies to trees"):
        decode(*pair, [[1, 2]], verifier="token", drafts=1, gamma=2, max_new_tokens=2, tree_interval=4)


def test_cli_flag(capsys):
    import json

    from otspec.cli import main

    base = ["decode", "--target", "tiny", "--draft", "tiny-draft", "--prompt-ids", "1,2", "-n", "3", "--json"]
    assert main([*base, "--verifier", "kseq", "-k", "2", "-g", "2", "--tree-interval", "2"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "tree_optimum_lower" in json.dumps(out)
    assert main([*base, "--verifier", "kseq", "-k", "2", "-g", "2", "--tree-interval", "0"]) == 2
    assert "--tree-interval" in capsys.readouterr().err
