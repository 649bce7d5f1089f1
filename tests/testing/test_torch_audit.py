"""``otspec audit`` and ``otspec.testing`` on batched torch verifiers (the otspec_gpu protocol),
through the ``otspec.adapters`` entry point: the same battery on CPU, and on CUDA when present.

Every check below is exact (kernel) except ``sampler``, a chi-square test at false-alarm 1e-6 per
audit (seeded: the verdicts are reproducible)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import otspec  # noqa: E402
from otspec.cli import main  # noqa: E402
from otspec.errors import InvalidVerifierError  # noqa: E402
from otspec.testing import as_verifier, assert_lossless, audit  # noqa: E402

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])

RULES = '''
import torch


def _residual(p, q):
    r = (p - q).clamp_min(0)  # [B, V]
    s = r.sum(-1, keepdim=True)
    return torch.where(s > 0, r / s.clamp_min(1e-300), p)


class SpeculativeSampling:
    """Single-draft speculative sampling on tensors: keep x w.p. min(1, p(x)/q(x)), else residual."""

    name = "my_token"
    draft_law = "iid"
    lossless = True
    k_min = k_max = 1

    def conditional(self, p, q, drafts):
        x = drafts[:, :1]  # [B, 1]
        B = drafts.shape[0]
        p, q = p.expand(B, -1), q.expand(B, -1)
        a = (p.gather(1, x) / q.gather(1, x)).clamp(max=1.0)  # [B, 1]
        out = (1 - a) * _residual(p, q)
        return out.scatter_add(1, x, a)

    def sample(self, p, q, drafts, *, generator):
        law = self.conditional(p, q, drafts)  # [B, V]
        return torch.multinomial(law, 1, generator=generator)[:, 0]


class StaleResidual(SpeculativeSampling):
    """Broken: the residual ignores q (it resamples from p), so tokens q favours are over-produced."""

    name = "stale_residual"

    def conditional(self, p, q, drafts):
        x = drafts[:, :1]
        B = drafts.shape[0]
        p, q = p.expand(B, -1), q.expand(B, -1)
        a = (p.gather(1, x) / q.gather(1, x)).clamp(max=1.0)
        return ((1 - a) * p).scatter_add(1, x, a)


class BadSampler(SpeculativeSampling):
    """Broken sampler, exact conditional: it draws from p and ignores the drafts."""

    name = "bad_sampler"

    def sample(self, p, q, drafts, *, generator):
        return torch.multinomial(p.expand(drafts.shape[0], -1), 1, generator=generator)[:, 0]


good = SpeculativeSampling()
stale = StaleResidual()
bad_sampler = BadSampler()
'''


@pytest.fixture(scope="module")
def rules(tmp_path_factory):
    path = tmp_path_factory.mktemp("torch_rules") / "torch_rules.py"
    path.write_text(RULES)
    from otspec.testing import load_object

    return path, {name: load_object(f"{path}:{name}") for name in ("good", "stale", "bad_sampler")}


@pytest.mark.parametrize("device", DEVICES)
def test_a_correct_torch_verifier_passes_the_whole_battery(rules, device):
    report = audit(as_verifier(rules[1]["good"], device=device), problems=30, draws=20_000)
    verdicts = {r.name: r.verdict for r in report.properties}
    assert report.ok and report.form == f"torch ({device})", report
    assert verdicts["kernel"] == verdicts["lossless"] == verdicts["sampler"] == verdicts["bad_inputs"] == "pass"


@pytest.mark.parametrize("device", DEVICES)
def test_a_broken_torch_verifier_is_caught_with_a_counterexample(rules, device):
    report = audit(as_verifier(rules[1]["stale"], device=device), problems=30, draws=20_000)
    row = report["lossless"]
    assert row.verdict == "fail" and report.exit_code == 1
    assert "not lossless" in row.counterexample.message and "law = otspec.iid(" in row.counterexample.problem


def test_a_torch_sampler_that_disagrees_with_its_conditional_fails_the_sampler_property(rules):
    report = audit(rules[1]["bad_sampler"], problems=30, draws=20_000)
    assert report["lossless"].verdict == "pass" and report["sampler"].verdict == "fail"


@pytest.mark.parametrize("device", DEVICES)
def test_every_registered_torch_verifier_passes(device):
    from otspec_gpu.verifiers import SINGLE_STEP

    for name, tv in SINGLE_STEP.items():
        report = audit(as_verifier(tv, device=device), problems=20, draws=10_000)
        assert report.ok, (name, [r for r in report.properties if r.verdict == "fail"])
        assert report["lossless"].verdict == ("pass" if tv.lossless else "info"), name


def test_the_assertions_take_torch_verifiers_too(rules):
    assert_lossless(rules[1]["good"], [0.5, 0.3, 0.2], otspec.iid([0.2, 0.3, 0.5], 1))
    with pytest.raises(AssertionError, match="not lossless"):
        assert_lossless(rules[1]["stale"], [0.5, 0.3, 0.2], otspec.iid([0.2, 0.3, 0.5], 1))


def test_the_adapter_refuses_bad_options_with_clear_errors(rules):
    with pytest.raises(InvalidVerifierError, match="is not an available torch device"):
        as_verifier(rules[1]["good"], device="no_such_device")
    with pytest.raises(InvalidVerifierError, match="kinds must be among"):
        as_verifier(rules[1]["good"], kinds="product")
    with pytest.raises(InvalidVerifierError, match=r"options \['second'\] do not apply to a torch verifier"):
        as_verifier(rules[1]["good"], second="q")


def test_cli_audits_a_torch_verifier_file(rules, tmp_path, capsys):
    path = rules[0]
    common = ["--problems", "20", "--draws", "10000", "--json", "--out", str(tmp_path)]
    assert main(["audit", f"{path}:good", *common]) == 0
    ok = json.loads(capsys.readouterr().out)
    assert ok["form"] == "torch (cpu)" and ok["verifier"] == "my_token"
    assert main(["audit", f"{path}:stale", *common]) == 1
    failed = json.loads(capsys.readouterr().out)
    snippet = next(p["counterexample"]["path"] for p in failed["properties"] if p["verdict"] == "fail")
    assert f"{path}:stale" in Path(snippet).read_text()


def test_cli_device_that_is_not_there_exits_2(rules, capsys):
    if torch.cuda.is_available():
        pytest.skip("CUDA is present")
    assert main(["audit", f"{rules[0]}:good", "--device", "cuda"]) == 2
    err = capsys.readouterr().err
    assert "is not an available torch device" in err and err.count("\n") == 1


def test_a_numpy_object_never_reaches_the_torch_adapter():
    from otspec_gpu.testing import adapt, is_torch_verifier

    def pi(p, q, drafts):
        return p

    assert adapt(pi) is None and not is_torch_verifier(otspec.verifiers.kseq) and is_torch_verifier(np) is False
