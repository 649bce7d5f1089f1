"""The decoder on a real LLM: SmolLM2-135M-Instruct target, its int8 dynamic-quantized draft.

* temperature 0: every verifier reproduces the target's own greedy decoding token for token (two
  prompts decoded as one left-padded batch, so the masked-cache path runs on a real model);
* temperature 1: the realized accepted count agrees with the exact per-round expectation of the
  otspec core; the test's interval is z = 4.89 standard errors (two-sided false alarm 1e-6, normal
  approximation over the rounds; the report itself prints 99% intervals);
* the trace survives a save / load round trip and the report recomputes identically from it;
* the ``otspec decode`` command.

SpecHub is absent from the greedy test: it verifies exactly two drafts of the greedy law (top-1
plus one sampled from the rest), which a one-hot draft distribution cannot produce.
"""

import json
import math

import numpy as np
import pytest
import torch

from otspec.cli import main
from otspec.io import load_trace as load
from otspec_gpu import models
from otspec_gpu.decoding import decode
from otspec_gpu.report import Z99, summarize
from otspec_gpu.verifiers import SINGLE_STEP
from tests.gpu._tolerances import EXACT_ATOL, Z_FALSE_ALARM

PROMPTS = ["The capital of France is", "def fibonacci(n):"]
Z_TEST = Z_FALSE_ALARM  # two-sided normal quantile for 1e-6
N_GREEDY = 8


pytestmark = pytest.mark.usefixtures("one_thread")  # conftest: one intra-op thread per module


@pytest.fixture(scope="module")
def pair():
    return models.smollm2(), models.smollm2_int8()


def greedy_reference(target, prompt: str, n: int) -> list:
    from transformers import DynamicCache

    ids = target.encode(prompt)
    cache = DynamicCache()
    logits = target.logits(torch.tensor([ids]), cache=cache)[0, -1]
    out = []
    for _ in range(n):
        tok = int(torch.argmax(logits))  # ties -> lowest index, as probs_from_logits(temperature=0)
        out.append(tok)
        logits = target.logits(torch.tensor([[tok]]), cache=cache)[0, -1]
    return out


def greedy_cases():
    cases = [("token", 1, 3), ("block", 1, 3)]
    for name, v in SINGLE_STEP.items():
        if not v.lossless:
            continue
        # A one-hot draft law has one token of positive probability: drafts without replacement or
        # greedy top-(k-1) drafts need k distinct tokens, so those laws run with k = 1 at temperature 0.
        # SpecHub takes exactly 2 drafts from the greedy law, which a one-hot q cannot produce, so it
        # has no temperature-0 run.
        k = 2 if v.draft_law == "iid" else 1
        if v.k_max is not None:  # a rule with a fixed number of drafts (gumbel: exactly 1)
            k = min(max(k, v.k_min), v.k_max)
        if name in ("token", "spechub"):
            continue
        cases.append((name, k, 1))
    return cases


@pytest.fixture(scope="module")
def references(pair):
    return [greedy_reference(pair[0], p, N_GREEDY) for p in PROMPTS]


@pytest.mark.parametrize("verifier,k,gamma", greedy_cases())
def test_temperature_zero_equals_target_greedy(pair, references, verifier, k, gamma):
    res = decode(
        *pair,
        PROMPTS,
        verifier=verifier,
        drafts=k,
        gamma=gamma,
        temperature=0.0,
        max_new_tokens=N_GREEDY,
        seed=0,
        theory=False,
        stop_at_eos=False,
    )
    assert res.tokens == references


def test_tree_temperature_zero_equals_target_greedy(pair, references):
    for verifier in ("kseq", "rrs"):
        res = decode(
            *pair,
            PROMPTS,
            verifier=verifier,
            drafts=2,
            gamma=3,
            temperature=0.0,
            max_new_tokens=N_GREEDY,
            seed=0,
            theory=False,
            stop_at_eos=False,
        )
        assert res.tokens == references, verifier


def assert_agrees(rep):
    assert rep.agreement
    for a in rep.agreement:
        se = (a.ci_high - a.ci_low) / (2 * Z99)
        assert a.n >= 8
        assert abs(a.diff) <= Z_TEST * se + EXACT_ATOL, a


@pytest.fixture(scope="module")
def block_run(pair):
    return decode(
        *pair, "Write a short poem about rivers.", verifier="block", gamma=4, temperature=1.0, max_new_tokens=40, seed=3, stop_at_eos=False
    )


def test_block_realized_matches_expected(block_run):
    rep = block_run.report()
    assert_agrees(rep)
    assert rep.tokens == 40 and math.isclose(rep.target_calls_per_token, rep.records / 40)


def test_single_step_realized_matches_expected(pair):
    res = decode(
        *pair,
        "Explain why the sky is blue.",
        verifier="rrs",
        drafts=3,
        gamma=1,
        temperature=1.0,
        max_new_tokens=40,
        seed=5,
        stop_at_eos=False,
    )
    rep = res.report()
    assert_agrees(rep)
    c = res.trace.columns
    # the exact optimum bounds every verifier's expected acceptance, round by round
    for name in ("rrs", "kseq", "nss", "naive"):
        assert np.all(c[f"th_exp_{name}"] <= c["th_optimum"] + EXACT_ATOL), name


def test_tree_realized_matches_expected(pair):
    res = decode(
        *pair,
        "List three facts about the moon.",
        verifier="kseq",
        drafts=2,
        gamma=3,
        temperature=1.0,
        max_new_tokens=32,  # a round emits at most gamma + 1 = 4 tokens: >= 8 rounds on any path
        seed=2,
        stop_at_eos=False,
    )
    assert res.config["mode"] == "tree"
    assert_agrees(res.report())


def test_trace_round_trip_and_report_recomputes(block_run, tmp_path):
    path = block_run.trace.save(tmp_path / "run.safetensors")
    back = load(path)
    assert back.config == json.loads(json.dumps(block_run.trace.config))
    assert set(back.columns) == set(block_run.trace.columns)
    for name, arr in block_run.trace.columns.items():
        np.testing.assert_array_equal(back.columns[name], arr, err_msg=name)
    assert summarize(back).to_dict() == block_run.report().to_dict()
    # the kept top-K probabilities plus tail mass are the full mass of each row
    np.testing.assert_allclose(back["p_top"].sum(-1) + back["p_tail"], 1.0, atol=EXACT_ATOL)
    # the records reproduce the generated text: drafted prefix then the next token
    toks = []
    for r in range(back.n_records):
        toks += back["drafts"][r, back["path"][r], : back["tau"][r]].tolist() + [int(back["next_token"][r])]
    assert toks[:40] == block_run.tokens[0]


def test_cli_decode_json(capsys):
    rc = main(
        ["decode", "--verifier", "block", "--gamma", "2", "--prompt", "Hello", "-n", "4", "--json", "--no-theory", "--temperature", "0"]
    )
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and len(out["tokens"][0]) == 4 and out["report"]["tokens"] == 4


def test_cli_errors_exit_2(capsys):
    assert main(["decode", "--verifier", "nss", "--gamma", "4", "--prompt", "x"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "single-step verifiers need gamma = 1" in err
    assert main(["decode", "--gamma", "zero", "--prompt", "x"]) == 2


def test_cli_defaults_are_the_library_defaults():
    from otspec_gpu.cli.decode import DEFAULTS

    kw = decode.__kwdefaults__
    assert {key: kw[key] for key in DEFAULTS} == DEFAULTS


def test_readme_example_prints_an_answer(capsys):
    """The README's command (shortened to 8 tokens): the instruct model gets its chat template and
    answers, instead of ending at once on the raw question."""
    argv = ["decode", "--target", "smollm2", "--draft", "smollm2-int8", "--verifier", "block", "--gamma", "4"]
    assert main([*argv, "--prompt", "Why is the sky blue?", "-n", "8", "--no-theory"]) == 0
    lines = capsys.readouterr().out.splitlines()
    answer = lines[lines.index("--- prompt 0: Why is the sky blue?") + 1]
    assert answer.strip(), lines


def test_raw_prompt_that_ends_at_eos_is_said(pair, capsys):
    """--raw-prompt feeds the bare question; the instruct model ends at once, and the output says so."""
    res = decode(*pair, "Why is the sky blue?", verifier="block", gamma=4, max_new_tokens=8, seed=0, theory=False)
    assert res.stopped_at_eos == [True] and res.tokens[0][-1] == pair[0].eos_token_id
    argv = ["decode", "--verifier", "block", "--gamma", "4", "--prompt", "Why is the sky blue?", "-n", "8", "--no-theory"]
    assert main([*argv, "--raw-prompt"]) == 0
    assert "[stopped at the end-of-sequence token after 1 token]" in capsys.readouterr().out


def test_chat_template_wraps_text_prompts(pair):
    target = pair[0]
    ids = target.encode_chat("Hi")
    assert target.has_chat_template and len(ids) > len(target.encode("Hi"))
    assert "Hi" in target.tokenizer.decode(ids) and "assistant" in target.tokenizer.decode(ids)
    res = decode(*pair, "Hi", chat=True, max_new_tokens=2, theory=False)
    assert res.config["prompt_tokens"] == [len(ids)]
