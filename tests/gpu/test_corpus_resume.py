"""otspec corpus resumption: damaged shards are found and computed again, what cannot belong to the
run is refused before any work, and Ctrl-C says what was kept and how to resume (exit 130).

Runs are logged traces (no model, milliseconds) except where the model path itself is the subject
(the tiny models of ``otspec_gpu.models``)."""

import json
import shlex

import numpy as np
import pyarrow  # noqa: F401  (the corpus extra, installed by the test command: fail loudly without it)
import pyarrow.parquet as pq
import pytest

from otspec.cli import main
from otspec.errors import CorpusInputError
from otspec_gpu.corpus import SolverSpec, read_results, run_corpus, run_logged
from otspec_gpu.corpus.run import CorpusInterrupted
from otspec_gpu.corpus.shards import MANIFEST, DamagedShardWarning, kept_shards, shard_path
from otspec_gpu.models import tiny

pytestmark = pytest.mark.usefixtures("one_thread")

SPEC = SolverSpec(laws=("iid", "greedy"), ks=(2,), verifiers=())


def _log(path, n_docs=5, steps=2, seed=0):
    """A logged-trace file: ``n_docs`` documents of ``steps`` steps, top-3 of random laws on 12 tokens."""
    rng = np.random.default_rng(seed)
    lines = []
    for d in range(n_docs):
        for _ in range(steps):
            p, q = rng.dirichlet(np.ones(12)), rng.dirichlet(np.ones(12))
            tp, tq = np.argsort(-p)[:3], np.argsort(-q)[:3]
            side = lambda ids, x: {"ids": ids.tolist(), "logprobs": np.log(x[ids]).tolist()}  # noqa: E731
            lines.append(json.dumps({"doc": f"d{d}", "target": side(tp, p), "draft": side(tq, q)}))
    path.write_text("\n".join(lines) + "\n")
    return path


def _logged(src, out, **kw):
    return run_logged([src], out=out, spec=SPEC, shard_steps=4, **kw)  # 10 steps: shards of 4, 4, 2


@pytest.fixture
def done(tmp_path):
    """A finished logged run (3 shards) and its rows."""
    src = _log(tmp_path / "log.jsonl")
    res = _logged(src, tmp_path / "out")
    assert res.n_shards == 3
    return src, res.out, read_results(res.out)


# -- item 2: damaged shards are computed again, with a warning ----------------------------------


@pytest.mark.parametrize(
    "damage, why",
    [
        (lambda f: f.write_bytes(f.read_bytes()[: f.stat().st_size // 2]), "SHA-256"),  # truncated
        (lambda f: f.write_bytes(b""), "SHA-256"),  # emptied
        # rewritten: a valid Parquet file, same columns and rows, other numbers
        (lambda f: pq.write_table(pq.read_table(f).set_column(5, "one_minus_tv_lo", pyarrow.array([0.0] * 4)), f), "SHA-256"),
    ],
    ids=["truncated", "empty", "rewritten"],
)
def test_damaged_shard_is_recomputed_with_a_warning(done, damage, why):
    src, out, rows = done
    damage(shard_path(out, 1))
    with pytest.warns(DamagedShardWarning, match=rf"shard-00001.parquet: damaged shard, .*{why}.*computing it again") as rec:
        res = _logged(src, out)
    assert len(rec) == 1 and res.shards_computed == 1
    assert read_results(out).equals(rows)


def _unrecord(out, i):
    """The manifest as if the run had been killed between renaming shard ``i`` and recording it."""
    man = json.loads((out / MANIFEST).read_text())
    del man["shards"]["written"][f"{i:05d}"]
    (out / MANIFEST).write_text(json.dumps(man))


def test_unrecorded_shard_is_checked_by_reading_it(done):
    src, out, rows = done
    _unrecord(out, 2)
    res = _logged(src, out)  # intact: kept (and recorded again)
    assert res.shards_computed == 0 and kept_shards(out) == ([0, 1, 2], 3)
    for i, cut in ((2, lambda t: t.slice(0, 1)), (1, lambda t: t.drop_columns(["opt_iid_k2_hi"]))):
        f = shard_path(out, i)
        pq.write_table(cut(pq.read_table(f)), f)
        _unrecord(out, i)
        with pytest.warns(DamagedShardWarning, match=r"it has 1 rows where this run's shard has 2|columns are not this run's"):
            assert _logged(src, out).shards_computed == 1
    assert read_results(out).equals(rows)
    man = json.loads((out / MANIFEST).read_text())  # a manifest without shard records (an older otspec's)
    del man["shards"]
    (out / MANIFEST).write_text(json.dumps(man))
    assert _logged(src, out).shards_computed == 0 and kept_shards(out) == ([0, 1, 2], 3)


def test_damaged_shard_of_a_model_run_is_recomputed(tmp_path):
    """The model path (local engine) checks its shards the same way."""
    src = tmp_path / "c.jsonl"
    src.write_text("".join(json.dumps({"ids": [1, 2, 3, i % 6, 4]}) + "\n" for i in range(4)))
    pair = tiny(seed=0, name="tiny"), tiny(seed=1, name="tiny-draft")

    def run(out):
        return run_corpus([str(src)], target=pair[0], draft=pair[1], out=out, field="ids", spec=SPEC, shard_docs=2)

    full = run(tmp_path / "full")
    f = shard_path(full.out, 0)
    f.write_bytes(f.read_bytes()[:-10])
    with pytest.warns(DamagedShardWarning, match="shard-00000"):
        assert run(full.out).shards_computed == 1
    assert read_results(full.out).equals(read_results(run(tmp_path / "again").out))


# -- item 2: what cannot belong to the run is refused, before any work --------------------------


def _stray(out):
    (out / "shard-abc.parquet").write_bytes(b"x")


def _beyond(out):
    pq.write_table(pq.read_table(shard_path(out, 0)), shard_path(out, 9))


FOREIGN = [
    ("stray shard name", _stray, r"shard-abc.parquet: not a shard of otspec corpus .*move it out"),
    ("shard index beyond the run", _beyond, r"shard-00009.parquet: shard index 9 is beyond this run's 3 shards .*--overwrite"),
    ("manifest not JSON", lambda o: (o / MANIFEST).write_text('{"kind": "logg'), r"corpus.json: not valid JSON .*--overwrite"),
    ("manifest a list", lambda o: (o / MANIFEST).write_text("[1, 2]"), r"corpus.json: not an otspec corpus manifest .*--overwrite"),
    ("manifest deleted", lambda o: (o / MANIFEST).unlink(), r"holds shards but no corpus.json"),
]


@pytest.mark.parametrize("name, spoil, match", FOREIGN, ids=[c[0] for c in FOREIGN])
def test_foreign_content_is_refused_and_overwrite_replaces_it(done, name, spoil, match):
    src, out, rows = done
    spoil(out)
    before = {f.name: f.read_bytes() for f in out.iterdir()}
    with pytest.raises(CorpusInputError, match=match):
        _logged(src, out)
    assert {f.name: f.read_bytes() for f in out.iterdir()} == before  # nothing touched
    res = _logged(src, out, overwrite=True)  # the fix the message offers
    assert res.shards_computed == 3 and read_results(out).equals(rows)


def test_read_results_refuses_damage_instead_of_a_traceback(done):
    _src, out, _rows = done
    shard_path(out, 1).write_bytes(b"")
    with pytest.raises(CorpusInputError, match=r"shard-00001.parquet: damaged .*run the same otspec corpus command again"):
        read_results(out)
    _stray(out)
    with pytest.raises(CorpusInputError, match="shard-abc.parquet: not a shard"):
        read_results(out)


@pytest.mark.parametrize(
    "where, match",
    [
        (lambda t: t / "file.txt", r"--out '.*file.txt' is a file"),
        (lambda t: t / "file.txt" / "run", r"--out '.*file.txt/run' cannot be created: '.*file.txt' is a file"),
        (lambda t: t / "file.txt" / "a" / "b", r"cannot be created: '.*file.txt' is a file"),
    ],
    ids=["a file", "under a file", "deep under a file"],
)
def test_out_is_checked_before_any_work(tmp_path, where, match):
    (tmp_path / "file.txt").write_text("x")
    src = _log(tmp_path / "log.jsonl")
    with pytest.raises(CorpusInputError, match=match):
        _logged(src, where(tmp_path))
    # before the models load: an unknown model name would fail later, the folder fails first
    with pytest.raises(CorpusInputError, match=match):
        run_corpus([str(src)], target="no-such-model", draft="no-such-model", out=where(tmp_path))


def test_cli_refuses_foreign_content_with_one_line(done, capsys):
    src, out, _rows = done
    _stray(out)
    assert main(["corpus", "--logged", str(src), "--ks", "2", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("otspec: error: ") and "shard-abc.parquet" in err[0]


def test_cli_reports_a_damaged_shard_in_one_line(tmp_path, capsys):
    src = _log(tmp_path / "log.jsonl")
    argv = ["corpus", "--logged", str(src), "--ks", "2", "--out", str(tmp_path / "o"), "--json"]
    assert main(argv) == 0
    first = json.loads(capsys.readouterr().out)
    shard_path(tmp_path / "o", 0).write_bytes(b"")
    assert main(argv) == 0
    cap = capsys.readouterr()
    again = json.loads(cap.out)
    assert again["run"]["shards_computed"] == 1 and again["domains"] == first["domains"]
    lines = [line for line in cap.err.splitlines() if line.strip()]  # warnings only, one line each
    assert lines and all(line.startswith("otspec: warning: ") for line in lines)
    assert sum("shard-00000.parquet: damaged shard" in line for line in lines) == 1


# -- item 5: Ctrl-C -----------------------------------------------------------------------------


def _interrupt_after_first_shard(monkeypatch, module):
    """Make the run's ``write_shard`` raise KeyboardInterrupt right after writing its first shard,
    as a Ctrl-C at that moment would (the interrupt injected in-process: deterministic)."""
    import otspec_gpu.corpus.shards as shards

    def write_then_interrupt(out, i, columns):
        shards.write_shard(out, i, columns)
        raise KeyboardInterrupt

    monkeypatch.setattr(module, "write_shard", write_then_interrupt)


def _main_no_traceback(argv):
    try:
        return main(argv)
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C escaped otspec corpus as a KeyboardInterrupt traceback")


@pytest.mark.parametrize("overwrite", [False, True])
def test_ctrl_c_says_what_was_kept_and_the_resume_command_resumes(tmp_path, capsys, monkeypatch, overwrite):
    import otspec_gpu.corpus.run as run_module

    src = _log(tmp_path / "my log.jsonl")  # a space: the printed command must quote it
    ref = _logged(src, tmp_path / "ref")
    argv = ["corpus", "--logged", str(src), "--ks", "2", "--laws", "iid,greedy", "--verifiers", "none", "--shard-steps", "4"]
    argv += ["--out", str(tmp_path / "o"), "--json"] + (["--overwrite"] if overwrite else [])
    _interrupt_after_first_shard(monkeypatch, run_module)
    assert _main_no_traceback(argv) == 130
    cap = capsys.readouterr()
    assert cap.out == "" and "Traceback" not in cap.err
    head, cmd = cap.err.strip().splitlines()
    assert head == f"otspec corpus: interrupted; kept 1 of 3 shards in {tmp_path / 'o'} (shard-00000.parquet). Resume with:"
    words = shlex.split(cmd)
    assert words[:2] == ["otspec", "corpus"] and str(src) in words and "--overwrite" not in words
    monkeypatch.undo()
    assert main(words[1:]) == 0  # the printed command, as a shell would split it
    assert json.loads(capsys.readouterr().out)["run"]["shards_computed"] == 2  # resumed, not restarted
    assert read_results(tmp_path / "o").equals(read_results(ref.out))


def test_ctrl_c_before_any_shard_keeps_overwrite(tmp_path, capsys, monkeypatch):
    """Stopped while the inputs are read: nothing of this run was written, so the command is repeated as given."""
    import otspec_gpu.corpus.run as run_module

    src = _log(tmp_path / "log.jsonl")

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(run_module, "read_logged_files", interrupted)
    argv = ["corpus", "--logged", str(src), "--out", str(tmp_path / "o"), "--overwrite"]
    assert _main_no_traceback(argv) == 130
    head, cmd = capsys.readouterr().err.strip().splitlines()
    assert "no shard of this run was written yet" in head and "--overwrite" in shlex.split(cmd)


def test_ctrl_c_in_a_model_run_raises_what_was_kept(tmp_path):
    """The library's KeyboardInterrupt carries what the run kept (local engine, tiny models)."""
    src = tmp_path / "c.jsonl"
    src.write_text("".join(json.dumps({"ids": [1, 2, 3, 4]}) + "\n" for _ in range(5)))

    def ctrl_c(s):
        if s == 1:
            raise KeyboardInterrupt

    pair = tiny(seed=0, name="tiny"), tiny(seed=1, name="tiny-draft")
    try:  # not pytest.raises: a bare KeyboardInterrupt escaping it would stop the whole session
        run_corpus([str(src)], target=pair[0], draft=pair[1], out=tmp_path / "o", field="ids", spec=SPEC, shard_docs=2, after_shard=ctrl_c)
    except KeyboardInterrupt as exc:
        stop = exc
    else:
        pytest.fail("the interrupt was swallowed")
    assert isinstance(stop, CorpusInterrupted) and stop.kept == [0, 1] and stop.n_shards == 3
    assert "2 of 3 shards kept" in str(stop)
    res = run_corpus([str(src)], target=pair[0], draft=pair[1], out=tmp_path / "o", field="ids", spec=SPEC, shard_docs=2)
    assert res.shards_computed == 1
