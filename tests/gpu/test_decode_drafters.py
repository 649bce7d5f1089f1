"""The drafter protocol of the decoder (``otspec_gpu.drafters``): the registry, the one
supports-check, a drafter the decoder has never heard of, and every draft draw through the one
inverse-CDF sampler."""

import dataclasses

import pytest
import torch

from otspec.errors import OtspecInputError, UnknownModelError, UnsupportedMethodError
from otspec_gpu import drafters, models
from otspec_gpu.decoding import decode, mode_for
from otspec_gpu.drafters import DRAFTERS, DraftSource, ModelDraft, as_source, by_name, check_supports, options_of
from otspec_gpu.drafting import ModelDrafter, sample_drafts
from otspec_gpu.models.heads import EagleHead, MedusaHeads
from otspec_gpu.prompt_lookup import PromptLookup, PromptLookupDrafter

pytestmark = pytest.mark.usefixtures("one_thread")  # conftest: one intra-op thread per module

ALL_MODES = [mode_for("token", 1, 3), mode_for("kseq", 3, 1), mode_for("rrs_wor", 2, 3)]  # chain, single, tree

#: Options that build the registered heads without trained weights (an untrained head of the tiny width).
HEAD_OPTIONS = {"smollm2-medusa": lambda: {"head": MedusaHeads(16, 3)}, "smollm2-eagle": lambda: {"head": EagleHead(16)}}


@pytest.fixture(scope="module")
def target():
    return models.tiny(seed=0)


def test_registry_builds_drafters_by_name(target):
    assert by_name("prompt-lookup") == PromptLookup()
    assert by_name("prompt-lookup", max_ngram=2).name == "prompt-lookup-n2"
    assert options_of("prompt-lookup") == ("max_ngram",) and options_of("tiny-draft") == ()
    src = by_name("tiny-draft")
    assert isinstance(src, ModelDraft) and src.name == src.model.name
    with pytest.raises(UnsupportedMethodError, match=r"takes the options \['max_ngram'\] \(got \['depth'\]\)"):
        by_name("prompt-lookup", depth=2)
    with pytest.raises(UnsupportedMethodError, match="is a draft model, which takes no options"):
        by_name("tiny-draft", max_ngram=2)
    with pytest.raises(
        UnknownModelError,
        match=r"unknown drafter 'nope': neither one of \['prompt-lookup', 'smollm2-eagle', 'smollm2-medusa'\] nor a model",
    ):
        by_name("nope")


@pytest.mark.parametrize("name", sorted(DRAFTERS) + ["tiny-draft"])
def test_every_drafter_follows_the_protocol(target, name):
    """Each source has a name, its modes and a model (or None), and makes a run drafter with
    ``draft``, ``observe`` and ``record`` for every mode it feeds."""
    src = by_name(name, **HEAD_OPTIONS.get(name, dict)())
    assert isinstance(src, DraftSource) and src.modes and set(src.modes) <= {"chain", "single", "tree"}
    for mode in ALL_MODES:
        if mode.mode in src.modes:
            check_supports(src, mode)
            assert isinstance(src.drafter(mode, [[1, 2]], target.vocab_size, "cpu"), drafters.Drafter)
        else:
            with pytest.raises(UnsupportedMethodError, match=f"needs .* per prompt \\({mode.mode}\\)"):
                check_supports(src, mode)


def test_as_source_of_decodes_draft_argument(target):
    draft = models.self_draft(target, 1.5)
    assert as_source(draft) == ModelDraft(draft) and ModelDraft(draft).modes == ("chain", "single", "tree")
    pl = PromptLookup(2)
    assert as_source(pl) is pl and as_source("prompt-lookup") == PromptLookup()
    assert isinstance(ModelDraft(draft).drafter(ALL_MODES[2], [[1], [2]], 6, "cpu"), ModelDrafter)
    assert isinstance(pl.drafter(ALL_MODES[0], [[1], [2]], 6, "cpu"), PromptLookupDrafter)
    with pytest.raises(OtspecInputError, match="draft must be an otspec_gpu.models.LM, a drafter name"):
        as_source(3)


def test_prompt_lookup_feeds_chains_only_with_one_message(target):
    for mode in ALL_MODES[1:]:
        with pytest.raises(
            UnsupportedMethodError, match=r"proposes one drafted sequence per prompt \(chain\).*\['block', 'token'\] with drafts=1"
        ):
            check_supports(PromptLookup(), mode)


@dataclasses.dataclass(frozen=True)
class _EchoSource:
    """A drafter the decoder does not know: it proposes the prompt's last emitted token ``gamma``
    times (one-hot rows) and records every ``observe`` call."""

    name = "echo"
    modes = ("chain",)
    model = None

    def drafter(self, mode, prompts, V, device):
        return _Echo([list(p) for p in prompts], mode.gamma, V)


class _Echo:
    def __init__(self, contexts, gamma, V):
        self.contexts, self.gamma, self.V, self.seen = contexts, gamma, V, [[] for _ in contexts]

    def draft(self, next_q, first, first_valid, generator):
        X = torch.tensor([[c[-1]] * self.gamma for c in self.contexts])
        Q = torch.zeros(*X.shape, self.V, dtype=torch.float64).scatter_(2, X.unsqueeze(2), 1.0)
        return X, Q, torch.ones(len(self.contexts), dtype=torch.long)

    def observe(self, emitted):
        for c, s, toks in zip(self.contexts, self.seen, emitted, strict=True):
            c.extend(toks)
            s.extend(toks)

    def record(self):
        return {"echo_seen": [list(s) for s in self.seen]}


@pytest.mark.parametrize("verifier", ["token", "block"])
def test_a_new_drafter_plugs_in_without_touching_the_decoder(target, verifier):
    """The decoder runs a drafter it has never heard of through the protocol alone: its name goes to
    the config, every emitted token reaches ``observe``, ``record`` lands in the config right after
    the settings, no draft model is called, and a mode it does not feed is refused."""
    res = decode(target, _EchoSource(), [[1, 2, 3], [4]], verifier=verifier, gamma=3, max_new_tokens=9, seed=2, theory=False)
    assert res.config["draft"] == "echo" and res.config["draft_calls"] == 0
    assert [s[: len(t)] for s, t in zip(res.config["echo_seen"], res.tokens, strict=True)] == res.tokens
    assert list(res.config).index("echo_seen") == list(res.config).index("vocab_size") + 1
    with pytest.raises(UnsupportedMethodError, match="drafter 'echo' proposes one drafted sequence"):
        decode(target, _EchoSource(), [1, 2], verifier="kseq", drafts=2, gamma=1, max_new_tokens=2)


def test_every_draft_law_draws_through_the_zero_weight_guard(monkeypatch):
    """A uniform at the very top (u S reaching S) draws the last token of positive weight under the
    i.i.d. law, per row and from a shared law (the former searchsorted draws clamped by hand)."""
    q = torch.tensor([[0.3, 0.7, 0.0, 0.0]], dtype=torch.float64)
    monkeypatch.setattr(torch, "rand", lambda *shape, **kw: torch.ones(*shape, dtype=torch.float64))
    g = torch.Generator()
    assert sample_drafts(q, 3, "iid", generator=g).tolist() == [[1, 1, 1]]
    assert sample_drafts(q.expand(2, -1), 2, "iid", generator=g).tolist() == [[1, 1], [1, 1]]
    assert sample_drafts(q, 2, "iid", generator=g, n=3).tolist() == [[1, 1]] * 3
