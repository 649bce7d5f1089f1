"""``otspec corpus --logged --engine ray``: the engine logs paired, their steps a Ray dataset and the
certified intervals solved in ``map_batches`` on a local Ray (one CPU); rows bit-identical to the
local engine, and a logged run killed under one engine resumes under the other."""

from __future__ import annotations

import json

import numpy as np
import pytest

from otspec.cli import main
from tests import _engine_logs as gen

pytest.importorskip("pyarrow")
ray = pytest.importorskip("ray")

LOGS = [str(gen.FIXTURES / "vllm_target.jsonl"), "--draft-log", str(gen.FIXTURES / "vllm_draft.jsonl")]
#: Two steps per shard, so the run has several shards and the Ray batches straddle them.
FLAGS = ["--laws", "iid,greedy", "--ks", "2,3", "--verifiers", "none", "--shard-steps", "2", "--json", "--no-progress"]


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def _rows(out):
    from otspec_gpu.corpus import read_results

    return read_results(out)


def _same(a, b):
    assert a.column_names == b.column_names and a.num_rows == b.num_rows
    for c in a.column_names:
        x, y = a.column(c).to_numpy(zero_copy_only=False), b.column(c).to_numpy(zero_copy_only=False)
        if x.dtype.kind == "f":
            np.testing.assert_array_equal(x, y)  # bit for bit (nan where both are nan)
        else:
            assert (x == y).all(), c


def test_logged_ray_rows_equal_local_rows_bit_for_bit(tmp_path, capsys, local_ray):
    assert main(["corpus", "--logged", *LOGS, "--out", str(tmp_path / "local"), *FLAGS]) == 0
    local = json.loads(capsys.readouterr().out)["run"]
    assert main(["corpus", "--logged", *LOGS, "--out", str(tmp_path / "ray"), *FLAGS, "--engine", "ray"]) == 0
    viaray = json.loads(capsys.readouterr().out)["run"]
    assert viaray["engine"] == "logged-ray" and local["engine"] == "logged"
    assert viaray["shards_computed"] == local["shards"] == viaray["shards"] >= 3
    assert viaray["positions"] == len(gen.DOCS) * gen.POSITIONS
    _same(_rows(tmp_path / "ray"), _rows(tmp_path / "local"))


def test_killed_local_logged_run_resumes_on_ray(tmp_path, local_ray, monkeypatch):
    import importlib

    from otspec_gpu.corpus import run_logged
    from otspec_gpu.corpus.inputs import write_engine_steps

    run_mod = importlib.import_module("otspec_gpu.corpus.run")
    steps = write_engine_steps([LOGS[0]], [LOGS[2]], tmp_path / "steps.jsonl")
    full = run_logged([steps], out=tmp_path / "full", shard_steps=2)
    calls = []
    real = run_mod.write_shard

    def kill_after_first(out, s, cols):
        if calls:
            raise KeyboardInterrupt
        calls.append(s)
        real(out, s, cols)

    monkeypatch.setattr(run_mod, "write_shard", kill_after_first)
    with pytest.raises(KeyboardInterrupt):
        run_logged([steps], out=tmp_path / "part", shard_steps=2)
    monkeypatch.setattr(run_mod, "write_shard", real)
    res = run_logged([steps], out=tmp_path / "part", shard_steps=2, engine="ray")
    assert res.shards_computed == full.n_shards - 1 and res.engine == "logged-ray"
    _same(_rows(res.out), _rows(full.out))
