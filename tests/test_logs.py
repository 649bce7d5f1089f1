"""otspec.logs: the engine-log readers against the committed fixtures (regenerated here and compared),
each fixture read back to exactly the entries it was cut from, intervals from every format holding
the full-vocabulary optimum of the pairs the logs were cut from, declared temperature / top-p applied
exactly, and paired steps written in otspec's schema read back bit for bit by the corpus reader."""

from __future__ import annotations

import json

import numpy as np
import pytest

import otspec
from otspec import logs
from otspec.errors import EngineLogError
from otspec.truncation import certified_interval
from tests import _engine_logs as gen

FIX = gen.FIXTURES
PAIRS = {
    "vllm": ("vllm_target.jsonl", "vllm_draft.jsonl"),
    "vllm-parquet": ("vllm_target.parquet", "vllm_draft.parquet"),
    "openai": ("openai_target.json", "openai_draft.json"),
    "sglang": ("sglang_target.jsonl", "sglang_draft.jsonl"),
}
#: certified laws and draft counts checked for containment
LAWS = [("iid", 1), ("iid", 2), ("iid", 4), ("greedy", 2), ("greedy", 3)]


def _needs(fmt):
    if fmt == "vllm-parquet":
        pytest.importorskip("pyarrow")


def _full_key(fmt, doc, position):
    return (doc, position + 1) if fmt == "openai" else (doc, position)  # OpenAI counts completion positions from 0


def test_committed_fixtures_are_what_the_generator_writes(tmp_path):
    written = gen.write_fixtures(tmp_path)
    for path in written:
        committed = FIX / path.name
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq

            assert pq.read_table(path).equals(pq.read_table(committed)), path.name
        else:
            assert path.read_bytes() == committed.read_bytes(), path.name


@pytest.mark.parametrize("fmt", list(PAIRS))
def test_each_reader_round_trips_its_fixture(fmt):
    _needs(fmt)
    full = gen.full_pairs()
    for which, name in enumerate(PAIRS[fmt]):
        assert logs.detect_format(FIX / name) == fmt
        sides = logs.read_log(FIX / name)
        assert len(sides) == len(gen.DOCS) * gen.POSITIONS
        for s in sides:
            p, q, tok = full[_full_key(fmt, s.doc, s.position)]
            d = (p, q)[which]
            keys = [int(k[1:]) for k in s.keys] if fmt == "openai" else list(s.keys)
            top = [int(i) for i in np.argsort(-d, kind="stable")[: gen.K]]
            assert keys[: gen.K] == top and set(keys) <= {*top, tok}  # top-K, plus the token when outside it
            assert (int(s.token[1:]) if fmt == "openai" else s.token) == tok
            np.testing.assert_array_equal(s.logprobs, np.log(d[keys]))


@pytest.mark.parametrize("fmt", list(PAIRS))
def test_intervals_of_every_format_contain_the_full_vocabulary_optimum(fmt):
    _needs(fmt)
    full = gen.full_pairs()
    steps = logs.pair_logs(FIX / PAIRS[fmt][0], FIX / PAIRS[fmt][1])
    assert len(steps) == len(gen.DOCS) * gen.POSITIONS
    widths = []
    for s in steps:
        p, q, _ = full[_full_key(fmt, s.doc, s.position)]
        pair = s.pair()
        for law, k in LAWS:
            make = otspec.iid if law == "iid" else otspec.greedy
            exact = otspec.optimal_acceptance(p, make(q, k)).value
            iv = certified_interval(pair, law, k)
            assert iv.low <= exact <= iv.high, (fmt, s.doc, s.position, law, k, iv, exact)
            widths.append(iv.high - iv.low)
    assert 0 < np.median(widths) < 0.6  # informative, not [0, 1]


def test_temperature_and_top_p_applied_offline_match_the_processed_full_pair(tmp_path):
    rng = np.random.default_rng(3)
    V, T, top_p = 12, 0.7, 0.9
    p = rng.dirichlet(np.ones(V) * 0.5)
    q = rng.dirichlet(np.ones(V) * 0.5)

    def rec(d):  # a full log (K = V): temperature is then determined
        return {
            "request_id": "r",
            "prompt_token_ids": [0, 1],
            "prompt_logprobs": [None, {str(i): {"logprob": float(np.log(d[i]))} for i in range(V)}],
        }

    (tmp_path / "t.jsonl").write_text(json.dumps(rec(p)))
    (tmp_path / "d.jsonl").write_text(json.dumps(rec(q)))
    step = logs.pair_logs(tmp_path / "t.jsonl", tmp_path / "d.jsonl", temperature=T, top_p=top_p)[0]

    def processed(d):  # by definition: p^(1/T) normalised, then the smallest top set reaching top_p
        t = d ** (1 / T)
        t /= t.sum()
        order = np.argsort(-t, kind="stable")
        keep = order[: int(np.searchsorted(np.cumsum(t[order]), top_p)) + 1]
        out = np.zeros(V)
        out[keep] = t[keep] / t[keep].sum()
        return out

    pt, qt = processed(p), processed(q)
    np.testing.assert_allclose(np.exp(step.target_logprobs)[np.argsort(step.target_ids)], pt, atol=1e-14)
    for law, k in LAWS:
        make = otspec.iid if law == "iid" else otspec.greedy
        exact = otspec.optimal_acceptance(pt, make(qt, k)).value
        iv = certified_interval(step.pair(), law, k)
        assert iv.low - 1e-12 <= exact <= iv.high + 1e-12 and iv.high - iv.low < 1e-9


def test_temperature_on_a_truncated_record_is_refused():
    with pytest.raises(EngineLogError, match="temperature 0.7 needs the whole distribution"):
        logs.pair_logs(FIX / PAIRS["vllm"][0], FIX / PAIRS["vllm"][1], temperature=0.7)
    with pytest.raises(EngineLogError, match="nucleus reaches into the unlogged tail"):
        logs.pair_logs(FIX / PAIRS["vllm"][0], FIX / PAIRS["vllm"][1], top_p=0.999)


def test_paired_steps_read_back_bit_identical_by_the_corpus(tmp_path):
    from otspec_gpu.corpus import read_logged

    steps = logs.pair_logs(FIX / PAIRS["sglang"][0], FIX / PAIRS["sglang"][1])
    back = read_logged(logs.write_steps(steps, tmp_path / "steps.jsonl"))
    assert [(b.doc_id, b.position) for b in back] == [(s.doc, s.position) for s in steps]
    for s, b in zip(steps, back, strict=True):
        a = s.pair()
        for f in ("p_ids", "p_vals", "q_ids", "q_vals"):
            np.testing.assert_array_equal(getattr(a, f), getattr(b.pair, f))
        for law, k in LAWS:
            assert certified_interval(a, law, k) == certified_interval(b.pair, law, k)
