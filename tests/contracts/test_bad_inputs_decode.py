"""Bad inputs of the decoder: each raises a specific ``otspec.errors`` error from the library, and
``otspec decode`` exits 2 with one line (no traceback, no blank line) -- before any decoding when
the problem is in the arguments."""

import pytest

torch = pytest.importorskip("torch")

from otspec.cli import main  # noqa: E402
from otspec.errors import (  # noqa: E402
    IncompatibleModelsError,
    InvalidDraftCountError,
    NotAnIntegerError,
    OtspecInputError,
    UnsupportedMethodError,
)
from otspec_gpu import models  # noqa: E402
from otspec_gpu.decoding import decode  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread_module")


@pytest.fixture(scope="module")
def one_thread_module():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture(scope="module")
def pair():
    t = models.tiny(seed=0)
    return t, models.self_draft(t, 1.5)


@pytest.fixture(scope="module")
def smol():
    pytest.importorskip("transformers")
    try:
        return models.smollm2(), models.smollm2_int8()
    except OtspecInputError as exc:  # the weights package is not installed
        pytest.skip(str(exc))


LIBRARY = [
    # (name, decode kwargs, error class, message fragment)
    ("prompt nested 3 levels", dict(prompt=[[[1, 2]]]), OtspecInputError, "prompt must be"),
    ("prompt of booleans", dict(prompt=[True, False]), OtspecInputError, "prompt must be"),
    ("prompt of mixed ids and lists", dict(prompt=[1, [2]]), OtspecInputError, "prompt must be"),
    ("empty prompt list", dict(prompt=[]), OtspecInputError, "prompt must be"),
    ("prompt id out of range", dict(prompt=[1, 6]), OtspecInputError, "must lie in [0, 6)"),
    ("seed negative", dict(seed=-1), InvalidDraftCountError, "seed"),
    ("seed not whole", dict(seed=1.5), NotAnIntegerError, "seed"),
    ("seed whole float", dict(seed=2.0), NotAnIntegerError, "seed"),  # the rule of max_new_tokens too
    ("max_new_tokens whole float", dict(max_new_tokens=3.0), NotAnIntegerError, "max_new_tokens"),
    ("max_new_tokens zero", dict(max_new_tokens=0), InvalidDraftCountError, "max_new_tokens"),
    ("top_k_trace zero", dict(top_k_trace=0), InvalidDraftCountError, "top_k_trace"),
    ("top_k_trace negative", dict(top_k_trace=-1), InvalidDraftCountError, "top_k_trace"),
    ("temperature negative", dict(temperature=-1.0), OtspecInputError, "temperature"),
    ("temperature boolean", dict(temperature=True), OtspecInputError, "temperature"),
    ("spechub with 3 drafts", dict(verifier="spechub", drafts=3, gamma=1), InvalidDraftCountError, "exactly 2"),
    ("block with 2 drafts", dict(verifier="block", drafts=2), UnsupportedMethodError, "one drafted block"),
    ("unknown verifier", dict(verifier="nope"), UnsupportedMethodError, "unknown verifier"),
    ("text prompt without a tokenizer", dict(prompt="hello"), OtspecInputError, "no tokenizer"),
]


@pytest.mark.parametrize("name,kwargs,exc,fragment", LIBRARY, ids=[c[0] for c in LIBRARY])
def test_library_rejects(pair, name, kwargs, exc, fragment):
    kw = dict(prompt=[1, 2, 3], max_new_tokens=2)
    kw.update(kwargs)
    prompt = kw.pop("prompt")
    with pytest.raises(exc) as info:
        decode(*pair, prompt, **kw)
    assert fragment in str(info.value)
    assert isinstance(info.value, OtspecInputError)


DRAFTS = [
    # (name, draft, decode kwargs, error class, message fragment)
    ("draft neither model nor name nor source", 3, {}, OtspecInputError, "draft must be an otspec_gpu.models.LM, a drafter name"),
    ("unknown drafter name", "nope", {}, OtspecInputError, "unknown drafter 'nope'"),
    (
        "prompt lookup with single-token drafts",
        "prompt-lookup",
        dict(verifier="kseq", drafts=2, gamma=1),
        UnsupportedMethodError,
        "proposes one drafted sequence",
    ),
    (
        "prompt lookup with a tree",
        "prompt-lookup",
        dict(verifier="rrs_wor", drafts=2, gamma=3),
        UnsupportedMethodError,
        "proposes one drafted sequence",
    ),
]


@pytest.mark.parametrize("name,draft,kwargs,exc,fragment", DRAFTS, ids=[c[0] for c in DRAFTS])
def test_library_rejects_drafters(pair, name, draft, kwargs, exc, fragment):
    with pytest.raises(exc) as info:
        decode(pair[0], draft, [1, 2, 3], max_new_tokens=2, **kwargs)
    assert fragment in str(info.value)
    assert isinstance(info.value, OtspecInputError)


def test_vocabularies_must_match(pair):
    with pytest.raises(IncompatibleModelsError, match="vocabularies differ"):
        decode(pair[0], models.tiny(vocab_size=7), [1, 2], max_new_tokens=2)


def test_text_prompt_with_no_ids(smol):
    with pytest.raises(OtspecInputError, match="tokenizes to no token ids"):
        decode(*smol, "", max_new_tokens=1)
    with pytest.raises(OtspecInputError, match="tokenizes to no token ids"):
        decode(*smol, ["Hi", ""], max_new_tokens=1)


TINY = ["decode", "--target", "tiny", "--draft", "tiny-draft", "-n", "2"]
CLI = [
    # (name, argv, message fragment)
    ("text prompt for a model without a tokenizer", [*TINY, "--prompt", "hello"], "--prompt-ids"),
    ("prompt ids not integers", [*TINY, "--prompt-ids", "1,x"], "--prompt-ids must be token ids"),
    ("prompt ids empty", [*TINY, "--prompt-ids", ","], "at least one token id"),
    ("prompt id out of range", [*TINY, "--prompt-ids", "1,99"], "must lie in [0, 6)"),
    ("seed negative", [*TINY, "--prompt-ids", "1", "--seed", "-1"], "--seed must be >= 0"),
    ("seed not whole", [*TINY, "--prompt-ids", "1", "--seed", "1.5"], "--seed must be an integer"),
    ("max-new-tokens not whole", [*TINY, "--prompt-ids", "1", "--max-new-tokens", "2.5"], "--max-new-tokens must be an integer"),
    ("top-p above 1", [*TINY, "--prompt-ids", "1", "--top-p", "1.5"], "--top-p must be <= 1"),
    ("spechub with 3 drafts", [*TINY, "--prompt-ids", "1", "--verifier", "spechub", "-k", "3", "-g", "1"], "exactly 2"),
    ("trace folder missing", [*TINY, "--prompt-ids", "1", "--trace", "/nonexistent-otspec/t.safetensors"], "does not exist"),
    ("both prompt kinds", [*TINY, "--prompt", "a", "--prompt-ids", "1"], "not allowed with argument"),
    ("unknown drafter", [*TINY, "--prompt-ids", "1", "--draft", "nope"], "unknown drafter 'nope'"),
    ("--ngram with a draft model", [*TINY, "--prompt-ids", "1", "--ngram", "2"], "applies to --draft prompt-lookup only"),
    (
        "prompt lookup with a tree",
        [*TINY, "--prompt-ids", "1", "--draft", "prompt-lookup", "--verifier", "kseq", "-k", "2"],
        "proposes one drafted sequence",
    ),
]


@pytest.mark.parametrize("name,argv,fragment", CLI, ids=[c[0] for c in CLI])
def test_cli_exits_2_with_one_line(capsys, name, argv, fragment):
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and err.startswith("otspec: error:") and fragment in err, err
    assert "--- prompt" not in out  # refused before decoding


def test_cli_text_prompt_with_no_ids(smol, capsys):
    assert main(["decode", "--prompt", "", "--raw-prompt", "-n", "1", "--no-theory"]) == 2
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and "tokenizes to no token ids" in err and "--- prompt" not in out


def test_cli_tiny_models_run_with_prompt_ids(capsys):
    assert main([*TINY, "--prompt-ids", "1,2,3", "--prompt-ids", "4,5"]) == 0
    out = capsys.readouterr().out
    assert "--- prompt 0: 1,2,3" in out and "--- prompt 1: 4,5" in out


def test_cli_trace_that_fails_after_decoding_keeps_the_text(monkeypatch, tmp_path, capsys):
    """A trace write that fails after the decode (disk full, say) still prints the generated text."""
    from otspec.io import Trace

    def fail(self, path):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Trace, "save", fail)
    assert main([*TINY, "--prompt-ids", "1,2,3", "--trace", str(tmp_path / "t.safetensors")]) == 2
    out, err = capsys.readouterr()
    assert "--- prompt 0: 1,2,3" in out and len(out.splitlines()[1].split()) == 2  # the two tokens
    assert err.count("\n") == 1 and "could not be written" in err
