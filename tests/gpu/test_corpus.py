"""otspec_gpu.corpus: solvers against the library's exact optima, teacher-forced scoring, shards,
resumption, bad inputs, logged traces, and the ``otspec corpus`` command (local engine, tiny models)."""

import inspect
import json

import numpy as np
import pyarrow  # noqa: F401  (the corpus extra, installed by the test command: fail loudly without it)
import pytest

import otspec
from otspec.errors import CorpusInputError, IncompatibleModelsError
from otspec.io import Trace, save_trace
from otspec_gpu.corpus import (
    Processing,
    SolverSpec,
    columns_for,
    read_logged,
    read_results,
    run_corpus,
    run_logged,
    score_document,
    solve_rows,
    summarize,
)
from otspec_gpu.models import tiny

pytestmark = pytest.mark.usefixtures("one_thread")

#: the solvers' optima (otspec.bounds.batched) and the library's sorted prefix sum the same terms in
#: another order: a few hundred ulps at V <= 3000 (tests/bounds/test_batched.py)
SOLVER_ATOL = 1e-12


def test_rows_do_not_depend_on_the_batch():
    """A position's numbers are the same alone or in any batch (the engines batch differently)."""
    rng = np.random.default_rng(1)
    P = rng.dirichlet(np.ones(40), size=7)
    Q = rng.dirichlet(np.ones(40), size=7)
    spec = SolverSpec(laws=("iid", "without_replacement", "greedy"), ks=(2, 3), verifiers=("kseq", "rrs", "rrs_wor"))
    whole = solve_rows(P, Q, spec, docs=np.arange(7), positions=np.arange(7))
    assert list(whole) == columns_for(spec)
    for i in (0, 3, 6):
        one = solve_rows(P[i : i + 1], Q[i : i + 1], spec, docs=[i], positions=[i])
        for c in whole:
            assert one[c][0] == whole[c][i] or (np.isnan(one[c][0]) and np.isnan(whole[c][i])), c


def test_rows_match_the_public_api():
    rng = np.random.default_rng(2)
    p, q = rng.dirichlet(np.ones(12)), rng.dirichlet(np.ones(12))
    spec = SolverSpec(laws=("iid", "without_replacement", "greedy"), ks=(2, 4), verifiers=("kseq", "rrs"))
    row = {c: v[0] for c, v in solve_rows(p[None], q[None], spec).items()}
    assert row["one_minus_tv"] == pytest.approx(otspec.single_draft(p, q).value, abs=SOLVER_ATOL)
    from otspec.verifiers import kseq, rrs

    for k in (2, 4):
        r = otspec.optimal_acceptance(p, otspec.without_replacement(q, k), method="prefix")
        assert row[f"opt_wor_k{k}"] == r.value and row[f"opt_wor_k{k}_err"] == r.error_bound
        assert row[f"kseq_iid_k{k}"] == kseq.acceptance(p, otspec.iid(q, k)).value
        assert row[f"rrs_iid_k{k}"] == rrs.acceptance(p, otspec.iid(q, k)).value


def test_greedy_and_wor_beyond_the_support_are_undefined():
    p = np.array([0.5, 0.5, 0.0, 0.0])
    q = np.array([0.6, 0.4, 0.0, 0.0])
    row = solve_rows(p[None], q[None], SolverSpec(laws=("iid", "greedy", "without_replacement"), ks=(2, 3), verifiers=()))
    assert row["opt_greedy_k2"][0] == pytest.approx(1.0) and np.isnan(row["opt_greedy_k3"][0]) and np.isnan(row["opt_wor_k3"][0])
    assert row["opt_iid_k3"][0] == pytest.approx(otspec.optimal_acceptance(p, otspec.iid(q, 3)).value)


def test_lossy_verifiers_get_an_exact_tv_column():
    """Each lossy rule's acceptance column is followed by the exact TV of its output law to p (the
    library's), NaN where the draft law needs more distinct tokens than q has; lossless rules get none."""
    from otspec.verifiers import typical

    spec = SolverSpec(laws=("iid", "without_replacement", "greedy"), ks=(2, 3), verifiers=("kseq", "typical"))
    cols = columns_for(spec)
    assert "kseq_iid_k2_tv" not in cols
    for law in ("iid", "wor", "greedy"):
        for k in (2, 3):
            base = f"typical_{law}_k{k}"
            mc = [f"{base}_lo", f"{base}_hi"] if law == "wor" else []  # a Monte Carlo acceptance's interval
            i = cols.index(base)
            assert cols[i : i + 2 + len(mc)] == [base, *mc, f"{base}_tv"]
    rng = np.random.default_rng(4)
    p, q = rng.dirichlet(np.ones(8)), rng.dirichlet(np.ones(8))
    q[:6] = 0.0  # two tokens: greedy and without replacement are undefined at k = 3
    q /= q.sum()
    row = {c: v[0] for c, v in solve_rows(p[None], q[None], spec).items()}
    assert list(row) == cols
    for law, make in (("iid", otspec.iid), ("wor", otspec.without_replacement), ("greedy", otspec.greedy)):
        tv = typical.tv_to_target(p, make(q, 2))
        assert row[f"typical_{law}_k2_tv"] == tv > 0.0
    assert row["typical_iid_k3_tv"] == typical.tv_to_target(p, otspec.iid(q, 3))
    assert np.isnan(row["typical_wor_k3_tv"]) and np.isnan(row["typical_greedy_k3_tv"])


# -- scoring ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pair():
    return tiny(seed=0, name="tiny"), tiny(seed=1, name="tiny-draft")


def test_teacher_forcing_equals_prefix_forwards(pair):
    """Row t of one forward over the document is the next-token law given the first t + 1 tokens."""
    import torch

    from otspec_gpu.processing import probs_from_logits

    target, draft = pair
    ids = [1, 4, 2, 2, 5, 0, 3]
    proc = Processing(temperature=0.8, top_k=4)
    P, Q = score_document(target, draft, ids, proc)
    assert P.shape == (6, 6) and P.dtype == np.float64
    for t in range(6):
        x = torch.tensor([ids[: t + 1]])
        for lm, rows in ((target, P), (draft, Q)):
            ref = probs_from_logits(lm.logits(x)[0, -1].double(), temperature=0.8, top_k=4, dtype=torch.float64).numpy()
            np.testing.assert_allclose(rows[t], ref, atol=1e-6)  # float32 forwards over different lengths
    assert np.all(np.count_nonzero(P, axis=1) <= 4) and np.all(np.count_nonzero(Q, axis=1) <= 4)
    np.testing.assert_allclose(P.sum(1), 1.0, atol=1e-14)


# -- runs -------------------------------------------------------------------------------------


def _corpus(path, n=7, seed=0):
    rng = np.random.default_rng(seed)
    with open(path, "w") as fh:
        for i in range(n):
            ids = rng.integers(0, 6, int(rng.integers(3, 10))).tolist()
            fh.write(json.dumps({"ids": ids, "domain": "even" if i % 2 == 0 else "odd"}) + "\n")
    return str(path)


SPEC = SolverSpec(laws=("iid", "greedy"), ks=(2, 3), verifiers=("kseq", "rrs"))


def _run(src, out, pair, **kw):
    target, draft = pair
    return run_corpus([src], target=target, draft=draft, out=out, field="ids", spec=SPEC, shard_docs=2, **kw)


def test_run_writes_one_row_per_position(tmp_path, pair):
    src = _corpus(tmp_path / "c.jsonl")
    res = _run(src, tmp_path / "out", pair)
    docs = [json.loads(line)["ids"] for line in (tmp_path / "c.jsonl").read_text().splitlines()]
    lens = [len(d) for d in docs]
    tab = read_results(res.out)
    assert res.n_positions == tab.num_rows == sum(n - 1 for n in lens)
    assert res.n_shards == 4 and res.shards_computed == 4
    cols = tab.to_pydict()
    assert cols["position"][: lens[0] - 1] == list(range(lens[0] - 1))
    assert cols["token"][: lens[0] - 1] == docs[0][1:]
    opt = np.array(cols["opt_iid_k3"])
    assert np.all(np.array(cols["kseq_iid_k3"]) <= opt + 1e-12) and np.all(np.array(cols["one_minus_tv"]) <= opt + 1e-12)
    s = summarize(tab, n_resamples=200)
    assert s.domains() == ["even", "odd", "all"]
    assert s.get("all", "opt_iid_k2").n == tab.num_rows and s.get("all", "opt_iid_k2").n_docs == 7
    assert 0 < s.get("all", "kseq_iid_k2/opt_iid_k2").value <= 1
    gap = s.get("all", "opt_iid_k2-kseq_iid_k2")
    assert gap.value == pytest.approx(s.get("all", "opt_iid_k2").value - s.get("all", "kseq_iid_k2").value, abs=1e-12)
    assert 0 <= gap.low <= gap.value <= gap.high


def test_run_reports_typical_tv_at_every_position(tmp_path, pair):
    """``--verifiers typical``: the written ``_tv`` column is the library's TV on the scored pair."""
    from otspec.verifiers import typical

    target, draft = pair
    ids = [1, 4, 2, 2, 5, 0, 3]
    (tmp_path / "c.jsonl").write_text(json.dumps({"ids": ids}) + "\n")
    spec = SolverSpec(laws=("iid", "greedy"), ks=(2,), verifiers=("typical",))
    res = run_corpus([str(tmp_path / "c.jsonl")], target=target, draft=draft, out=tmp_path / "out", field="ids", spec=spec)
    cols = read_results(res.out).to_pydict()
    assert [c for c in cols if c.startswith("typical")] == [
        "typical_iid_k2",
        "typical_iid_k2_tv",
        "typical_greedy_k2",
        "typical_greedy_k2_tv",
    ]
    P, Q = score_document(target, draft, ids, Processing())
    for t in range(len(ids) - 1):
        assert cols["typical_iid_k2_tv"][t] == typical.tv_to_target(P[t], otspec.iid(Q[t], 2))
        assert cols["typical_greedy_k2_tv"][t] == typical.tv_to_target(P[t], otspec.greedy(Q[t], 2))


def test_killed_run_resumes_to_the_same_result(tmp_path, pair):
    src = _corpus(tmp_path / "c.jsonl")
    full = _run(src, tmp_path / "full", pair)

    class Killed(Exception):
        pass

    def kill_after_first(s):
        if s == 1:
            raise Killed

    with pytest.raises(Killed):
        _run(src, tmp_path / "part", pair, after_shard=kill_after_first)
    assert len(list((tmp_path / "part").glob("shard-*.parquet"))) == 2
    res = _run(src, tmp_path / "part", pair)
    assert res.shards_computed == 2
    assert read_results(res.out).equals(read_results(full.out))


def test_other_configuration_is_refused_and_nothing_is_lost(tmp_path, pair):
    src = _corpus(tmp_path / "c.jsonl")
    res = _run(src, tmp_path / "out", pair)
    before = {f.name: f.read_bytes() for f in (tmp_path / "out").glob("shard-*")}
    target, draft = pair
    with pytest.raises(CorpusInputError, match="another configuration"):
        run_corpus([src], target=target, draft=draft, out=res.out, field="ids", spec=SolverSpec(ks=(2,)), shard_docs=2)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"ids": [1, 2, 3]}\n{"text": "x"}\n')
    with pytest.raises(CorpusInputError, match=r"bad.jsonl:2: no 'ids' field"):
        _run(str(bad), res.out, pair)
    assert {f.name: f.read_bytes() for f in (tmp_path / "out").glob("shard-*")} == before


@pytest.mark.parametrize(
    "content, match",
    [
        ("", r"c.jsonl:1: empty file"),
        ('{"ids": [1, 2]}\n\n{"ids": [3]}\n', r"c.jsonl:3: .*1 token"),
        ('{"ids": [1, 2]}\nnot json\n', r"c.jsonl:2: not valid JSON"),
        ('{"ids": [1, 9]}\n', r"c.jsonl:1: token id 9 is outside the vocabulary"),
        ('{"ids": "text"}\n', r"c.jsonl:1: .*no tokenizer"),
    ],
)
def test_bad_corpus_input_names_file_and_line(tmp_path, pair, content, match):
    src = tmp_path / "c.jsonl"
    src.write_text(content)
    with pytest.raises(CorpusInputError, match=match):
        _run(str(src), tmp_path / "out", pair)
    assert not list((tmp_path / "out").glob("shard-*")) if (tmp_path / "out").exists() else True


def test_vocabulary_mismatch_is_refused(tmp_path):
    src = _corpus(tmp_path / "c.jsonl")
    with pytest.raises(IncompatibleModelsError, match="vocabulary mismatch"):
        run_corpus([src], target=tiny(seed=0), draft=tiny(seed=1, vocab_size=7), out=tmp_path / "o", field="ids")


def test_empty_text_file(tmp_path, pair):
    f = tmp_path / "empty.txt"
    f.write_text("  \n")
    with pytest.raises(CorpusInputError, match=r"empty.txt:1: empty file"):
        _run(str(f), tmp_path / "out", pair)


# -- logged traces ------------------------------------------------------------------------------


def _step(doc, p_ids, p_lp, q_ids, q_lp, **extra):
    return json.dumps({"doc": doc, "target": {"ids": p_ids, "logprobs": p_lp}, "draft": {"ids": q_ids, "logprobs": q_lp}, **extra})


def test_logged_run_gives_certified_intervals(tmp_path):
    rng = np.random.default_rng(5)
    lines, exact = [], []
    for d in range(6):
        for _ in range(4):
            p, q = rng.dirichlet(np.ones(30) * 0.3), rng.dirichlet(np.ones(30) * 0.3)
            tp, tq = np.argsort(-p)[:5], np.argsort(-q)[:5]
            lines.append(_step(f"d{d}", tp.tolist(), np.log(p[tp]).tolist(), tq.tolist(), np.log(q[tq]).tolist(), domain="chat"))
            exact.append(otspec.optimal_acceptance(p, otspec.iid(q, 2)).value)
    f = tmp_path / "log.jsonl"
    f.write_text("\n".join(lines) + "\n")
    res = run_logged([f], out=tmp_path / "out", spec=SolverSpec(laws=("iid", "greedy"), ks=(2,), verifiers=()), shard_steps=10)
    tab = read_results(res.out).to_pydict()
    assert res.n_shards == 3 and res.n_documents == 6
    lo, hi = np.array(tab["opt_iid_k2_lo"]), np.array(tab["opt_iid_k2_hi"])
    assert np.all(lo <= np.array(exact) + 1e-12) and np.all(np.array(exact) <= hi + 1e-12)
    assert tab["position"][:4] == [0, 1, 2, 3]
    s = summarize(read_results(res.out), n_resamples=200)
    assert s.get("all", "opt_iid_k2_lo").value <= s.get("all", "opt_iid_k2_hi").value


@pytest.mark.parametrize(
    "line, match",
    [
        (_step("a", [0, 1], [-0.1, -0.2], [0], [0.0]), r"log.jsonl:2: .*sum to"),
        (_step("a", [0, 0], [-1.0, -2.0], [0], [0.0]), r"log.jsonl:2: .*distinct"),
        (_step("a", [0, 1], [-1.0], [0], [0.0]), r"log.jsonl:2: .*same length"),
        (json.dumps({"doc": "a", "target": {"ids": [0], "logprobs": [0.0]}}), r"log.jsonl:2: no 'draft' field"),
        (json.dumps({"doc": "a", "target": {"ids": [0]}, "draft": {"ids": [0], "logprobs": [0.0]}}), r"log.jsonl:2: 'target' must be"),
        (_step("a", [0], ["x"], [0], [0.0]), r"log.jsonl:2: .*numbers"),
        # the lenient schema of the former reader: each was accepted silently
        (_step("a", [0], ["-0.1"], [0], [0.0]), r"log.jsonl:2: target.logprobs\[0\] must be a JSON number \(got '-0.1'\)"),
        (_step("a", [0], [-0.1], [0, 1], [-0.5, True]), r"log.jsonl:2: draft.logprobs\[1\] must be a JSON number \(got True\)"),
        (_step("a", [0], [-0.1], ["0"], [0.0]), r"log.jsonl:2: draft.ids\[0\] must be an integer token id"),
        (_step(None, [0], [-0.1], [0], [0.0]), r"log.jsonl:2: 'doc' must be a string or an integer \(got NoneType None\)"),
        (_step(["a"], [0], [-0.1], [0], [0.0]), r"log.jsonl:2: 'doc' must be a string or an integer \(got list"),
        (_step(True, [0], [-0.1], [0], [0.0]), r"log.jsonl:2: 'doc' must be a string or an integer \(got bool"),
        (_step("b", [0], [-0.1], [0], [0.0], domain=None), r"log.jsonl:2: 'domain' must be a string \(got NoneType"),
        (_step("b", [0], [-0.1], [0], [0.0], position=None), r"log.jsonl:2: 'position' must be a non-negative integer \(got None\)"),
        (_step("a", [0], [-0.1], [0], [0.0], position=0), r"log.jsonl:2: step \(doc 'a', 'position' 0\) is also at .*log.jsonl:1;"),
    ],
)
def test_malformed_logged_records(tmp_path, line, match):
    f = tmp_path / "log.jsonl"
    f.write_text(_step("a", [0], [-0.1], [0], [-0.2]) + "\n" + line + "\n")
    with pytest.raises(CorpusInputError, match=match):
        read_logged(f)


def test_logged_doc_ids_of_two_types_are_not_merged(tmp_path):
    """``doc`` 1 and ``"1"`` would be one cluster after str(); refused, naming both lines."""
    f = tmp_path / "log.jsonl"
    f.write_text(_step(1, [0], [-0.1], [0], [-0.2]) + "\n" + _step("1", [0], [-0.1], [0], [-0.2]) + "\n")
    with pytest.raises(CorpusInputError, match=r"log.jsonl:2: 'doc' is '1' \(str\) but .*log.jsonl:1 has 1 \(int\)"):
        read_logged(f)
    f.write_text(_step(1, [0], [-0.1], [0], [-0.2]) + "\n" + _step(2, [0], [-0.1], [0], [-0.2]) + "\n")
    assert [s.doc_id for s in read_logged(f)] == ["1", "2"]  # integers alone are fine


def test_logged_files_are_checked_together(tmp_path):
    """Two files of one run: a document's positions are distinct across them, its id has one type."""
    from otspec_gpu.corpus.inputs import read_logged_files

    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text(_step("x", [0], [-0.1], [0], [-0.2]) + "\n")
    b.write_text(_step("x", [0], [-0.1], [0], [-0.2], position=0) + "\n")  # position 0 of doc x again
    with pytest.raises(CorpusInputError, match=r"b.jsonl:1: step \(doc 'x', 'position' 0\) is also at .*a.jsonl:1"):
        read_logged_files([a, b])
    with pytest.raises(CorpusInputError, match=r"b.jsonl:1: step \(doc 'x'"):
        run_logged([a, b], out=tmp_path / "out")
    assert not (tmp_path / "out").exists()
    b.write_text(_step("x", [0], [-0.1], [0], [-0.2]) + "\n")  # no position: the document's next rank, across files
    assert [(s.doc_id, s.position) for s in read_logged_files([a, b])] == [("x", 0), ("x", 1)]
    b.write_text(_step(7, [0], [-0.1], [0], [-0.2]) + "\n" + _step("7", [0], [-0.1], [0], [-0.2]) + "\n")
    with pytest.raises(CorpusInputError, match=r"b.jsonl:2: 'doc' is '7' \(str\) but .*b.jsonl:1 has 7 \(int\)"):
        read_logged_files([a, b])


def test_logged_mass_within_tolerance_is_accepted(tmp_path):
    f = tmp_path / "log.jsonl"
    f.write_text(_step("a", [0, 1], [np.log(0.6), np.log(0.4 + 5e-6)], [0], [0.0]) + "\n")
    assert read_logged(f)[0].pair.p_excess == pytest.approx(5e-6, rel=1e-3)


def test_otspec_decoding_trace_is_read_as_logged_steps(tmp_path):
    rng = np.random.default_rng(0)
    n, g, K, V = 3, 2, 4, 20
    z = np.zeros(n, dtype=np.int64)
    cols = {"round": np.array([0, 0, 1]), "prompt": np.array([0, 1, 0]), "tau": z, "n_emit": z + 1, "next_token": z, "path": z}
    cols["drafts"] = np.zeros((n, 1, g), dtype=np.int64)
    for side, rows in (("p", g + 1), ("q", g)):
        dist = rng.dirichlet(np.ones(V), size=(n, rows))
        ids = np.argsort(-dist, axis=-1)[..., :K]
        cols[f"{side}_top_ids"] = ids.astype(np.int64)
        cols[f"{side}_top"] = np.take_along_axis(dist, ids, -1)
        cols[f"{side}_tail"] = 1.0 - cols[f"{side}_top"].sum(-1)
    for phase in ("draft", "target", "verify", "rollback", "theory"):
        cols[f"round_t_{phase}"] = np.zeros(2)
    path = save_trace(Trace(cols, {"mode": "chain"}), tmp_path / "run.safetensors")
    steps = read_logged(path)
    assert len(steps) == n * g
    assert [s.position for s in steps if s.doc_id.endswith("prompt0")] == [0, 1, 2, 3]
    res = run_logged([path], out=tmp_path / "out", spec=SolverSpec(laws=("iid",), ks=(2,), verifiers=()))
    assert read_results(res.out).num_rows == n * g


# -- command line --------------------------------------------------------------------------------


def test_cli_runs_and_resumes(tmp_path, capsys):
    from otspec.cli import main

    src = _corpus(tmp_path / "c.jsonl", n=4)
    argv = ["corpus", src, "--field", "ids", "--target", "tiny", "--draft", "tiny-draft", "--ks", "2", "--out", str(tmp_path / "o")]
    assert main(argv + ["--json", "--plot", str(tmp_path / "p.png"), "--markdown", str(tmp_path / "s.md")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["run"]["shards_computed"] == 1 and "opt_iid_k2" in out["domains"]["all"]
    assert (tmp_path / "p.png").stat().st_size > 0 and "| opt_iid_k2 |" in (tmp_path / "s.md").read_text()
    assert json.loads((tmp_path / "o" / "summary.json").read_text())["run"]["positions"] == out["run"]["positions"]
    assert main(argv + ["--json"]) == 0
    assert json.loads(capsys.readouterr().out)["run"]["shards_computed"] == 0


@pytest.mark.parametrize(
    "extra, match",
    [
        ([], "no 'text' field"),
        (["--field", "ids", "--ks", "1"], "--ks must be >= 2"),
        (["--field", "ids", "--laws", "tree"], "laws must be"),
        (["--field", "ids", "--verifiers", "nope"], "unknown verifier"),
    ],
)
def test_cli_bad_input_exits_2_with_one_line(tmp_path, capsys, extra, match):
    from otspec.cli import main

    src = _corpus(tmp_path / "c.jsonl", n=2)
    assert main(["corpus", src, "--target", "tiny", "--draft", "tiny-draft", "--out", str(tmp_path / "o"), *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("otspec: error:") and pytest.importorskip("re").search(match, err[0])


def test_cli_defaults_are_the_library_defaults():
    from otspec_gpu.cli.corpus import DEFAULTS
    from otspec_gpu.corpus.run import DEFAULT_SHARD_DOCS
    from otspec_gpu.corpus.solvers import DEFAULT_KS, DEFAULT_LAWS, DEFAULT_VERIFIERS

    spec = SolverSpec()
    assert DEFAULTS["laws"] == ",".join(DEFAULT_LAWS) and DEFAULTS["ks"] == ",".join(map(str, DEFAULT_KS))
    assert DEFAULTS["verifiers"] == ",".join(DEFAULT_VERIFIERS) and DEFAULTS["mc_samples"] == spec.mc_samples
    assert DEFAULTS["shard_docs"] == DEFAULT_SHARD_DOCS and DEFAULTS["temperature"] == Processing().temperature
    assert DEFAULTS["shard_steps"] == inspect.signature(run_logged).parameters["shard_steps"].default


def test_cli_logged(tmp_path, capsys):
    from otspec.cli import main

    f = tmp_path / "log.jsonl"
    f.write_text(_step("a", [0, 1], [-0.5, -1.5], [1, 2], [-0.4, -1.4]) + "\n" + _step("b", [3], [-0.1], [3], [-0.2], domain="x") + "\n")
    assert main(["corpus", "--logged", str(f), "--ks", "2", "--out", str(tmp_path / "o"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["run"]["engine"] == "logged" and out["run"]["positions"] == 2
    row = out["domains"]["all"]["opt_iid_k2_lo"]
    assert row["value"] <= out["domains"]["all"]["opt_iid_k2_hi"]["value"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(_step("a", [0, 1], [-0.1, -0.2], [0], [0.0]) + "\n")
    assert main(["corpus", "--logged", str(bad), "--out", str(tmp_path / "o2")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bad.jsonl:1" in err[0] and "sum to" in err[0]


def test_packaged_sources():
    from otspec_gpu.corpus import read_sources

    docs = read_sources(["humaneval", "prompts"])
    assert sum(d.domain == "humaneval" for d in docs) == 164 and sum(d.domain == "prompts" for d in docs) == 72
    assert docs[0].doc_id == "HumanEval/0" and docs[0].text.startswith("from typing import List")
    with pytest.raises(CorpusInputError, match="no such file"):
        read_sources(["missing.txt"])
