"""One table of bad inputs: each must raise a specific error whose message names the problem,
from the library, and exit 2 with one line from the CLI."""

import os
import re
import subprocess
import sys

import numpy as np
import pytest

import otspec
from otspec import io as otspec_io
from otspec import models, stats
from otspec.bounds.block import block_optimum
from otspec.bounds.sizing import check_acceptance
from otspec.bounds.tree import tree_optimum
from otspec.cli import main
from otspec.errors import (
    InputFileError,
    InvalidDistributionError,
    InvalidDraftCountError,
    InvalidDraftsError,
    InvalidOptionError,
    NotADraftLawError,
    NotAnIntegerError,
    OtspecInputError,
    ProblemTooLargeError,
    ShapeMismatchError,
    UnsupportedMethodError,
)
from otspec.synthetic import synthetic_pair
from otspec.verifiers import block as block_verifier
from otspec.verifiers import token_chain, tree
from otspec.verifiers.step.kseq import kseq_conditional
from otspec.verifiers.step.rrs import rrs_conditional
from otspec.verifiers.step.rrs_wor import rrs_wor_conditional

P = np.array([0.5, 0.3, 0.2])
Q = np.array([0.2, 0.3, 0.5])


def _all_pairs(V):
    """Two independent uniform drafts over V tokens written out as an explicit law (no closed form,
    no branch-and-bound)."""
    return otspec.explicit(np.indices((V, V)).reshape(2, -1).T, np.full(V * V, 1.0 / V**2), vocab_size=V)


def _without_ortools(call):
    """Run ``call`` as if the optional OR-Tools (maxflow extra) were not installed."""
    name = "ortools.graph.python.max_flow"
    saved = sys.modules.get(name, False)
    sys.modules[name] = None  # makes importlib.import_module(name) raise ImportError
    try:
        return call()
    finally:
        if saved is False:
            del sys.modules[name]
        else:
            sys.modules[name] = saved


def _complex_file():
    import tempfile

    d = tempfile.mkdtemp(prefix="otspec-bad-")
    path = os.path.join(d, "c.npy")
    np.save(path, np.array([0.5 + 0.5j, 0.5]))
    return path


P0 = np.array([0.5, 0.5, 0.0])  # token 0 is never drafted
Q0 = np.array([0.0, 0.5, 0.5])

LIBRARY_CASES = [
    ("nan in p", lambda: otspec.optimal_acceptance([np.nan, 0.5, 0.5], otspec.iid(Q, 2)), InvalidDistributionError, "finite"),
    ("inf in p", lambda: otspec.optimal_acceptance([np.inf, 0.0, 0.0], otspec.iid(Q, 2)), InvalidDistributionError, "finite"),
    ("negative in p", lambda: otspec.optimal_acceptance([1.2, -0.2, 0.0], otspec.iid(Q, 2)), InvalidDistributionError, "non-negative"),
    ("p sums to 0.93", lambda: otspec.optimal_acceptance([0.5, 0.23, 0.2], otspec.iid(Q, 2)), InvalidDistributionError, "0.93"),
    ("p is 2-D", lambda: otspec.optimal_acceptance(np.ones((3, 3)) / 9, otspec.iid(Q, 2)), ShapeMismatchError, "one-dimensional"),
    ("p is empty", lambda: otspec.optimal_acceptance([], otspec.iid(Q, 2)), InvalidDistributionError, "empty"),
    ("nan in q", lambda: otspec.iid([np.nan, 0.5, 0.5], 2), InvalidDistributionError, "q must be finite"),
    ("q not normalised", lambda: otspec.iid([1.0, 1.0, 1.0], 2), InvalidDistributionError, "normalise"),
    ("V mismatch p vs law", lambda: otspec.optimal_acceptance([0.5, 0.5], otspec.iid(Q, 2)), ShapeMismatchError, "V = 2"),
    ("single_draft V mismatch", lambda: otspec.single_draft([0.5, 0.5], Q), ShapeMismatchError, "same vocabulary"),
    ("k = 0", lambda: otspec.iid(Q, 0), InvalidDraftCountError, "got 0"),
    ("k = -1", lambda: otspec.without_replacement(Q, -1), InvalidDraftCountError, "got -1"),
    ("non-integer k", lambda: otspec.iid(Q, 2.5), NotAnIntegerError, "2.5"),
    ("k as string", lambda: otspec.iid(Q, "3"), NotAnIntegerError, "'3'"),
    ("k > support, WOR", lambda: otspec.without_replacement([0.5, 0.5, 0.0], 3), InvalidDraftCountError, "support size"),
    ("k > support, greedy", lambda: otspec.greedy([1.0, 0.0, 0.0], 2), InvalidDraftCountError, "support size"),
    ("ragged explicit tuples", lambda: otspec.explicit([[0, 1], [2]], [0.5, 0.5]), InvalidDraftsError, "rectangular"),
    ("negative explicit ids", lambda: otspec.explicit([[0, -1]], [1.0]), InvalidDraftsError, ">= 0"),
    ("non-integer explicit ids", lambda: otspec.explicit([[0.5, 1.0]], [1.0]), InvalidDraftsError, "integer"),
    ("explicit weight count", lambda: otspec.explicit([[0, 1], [1, 2]], [1.0]), ShapeMismatchError, "one weight per tuple"),
    ("explicit ids beyond vocab_size", lambda: otspec.explicit([[0, 5]], [1.0], vocab_size=3), InvalidDraftsError, "vocab_size"),
    ("product V mismatch", lambda: otspec.product([Q, [0.5, 0.5]]), ShapeMismatchError, "same vocabulary"),
    ("product not a list", lambda: otspec.product(Q[0]), InvalidDraftCountError, "list"),
    ("unknown method", lambda: otspec.optimal_acceptance(P, otspec.iid(Q, 2), method="magic"), UnsupportedMethodError, "magic"),
    (
        "prefix on product law",
        lambda: otspec.optimal_acceptance(P, otspec.product([Q, P]), method="prefix"),
        UnsupportedMethodError,
        "prefix",
    ),
    (
        "subsets on V = 25",
        lambda: otspec.optimal_acceptance(np.full(25, 0.04), otspec.iid(np.full(25, 0.04), 2), method="subsets"),
        UnsupportedMethodError,
        "V = 25",
    ),
    (
        "LP too large",
        lambda: otspec.optimal_acceptance(np.full(5000, 2e-4), otspec.iid(np.full(5000, 2e-4), 4), method="lp"),
        ProblemTooLargeError,
        "GiB",
    ),
    ("memory cap", lambda: otspec.optimal_acceptance(P, otspec.iid(Q, 2), method="lp", memory_cap=10), ProblemTooLargeError, "memory cap"),
    (
        "constraints without cvxpy",
        lambda: otspec.optimal_acceptance(P, otspec.iid(Q, 2), method="lp", constraints=lambda lp: []),
        UnsupportedMethodError,
        "cvxpy",
    ),
    ("law is not a law", lambda: otspec.optimal_acceptance(P, Q), NotADraftLawError, "draft law"),
    ("drafts out of vocabulary", lambda: otspec.iid(Q, 2).validate_drafts([0, 3]), InvalidDraftsError, "< V = 3"),
    ("wrong number of drafts", lambda: otspec.iid(Q, 2).validate_drafts([0]), InvalidDraftsError, "exactly k = 2"),
    ("duplicate drafts WOR", lambda: otspec.without_replacement(Q, 2).validate_drafts([1, 1]), InvalidDraftsError, "repeat"),
    # a drafted token of draft probability 0, at every entry point that takes drafts
    (
        "tree kseq, q = 0 draft",
        lambda: tree.sample(models.context_free(P0), models.context_free(Q0), [[0], [0]], verifier="kseq", rng=np.random.default_rng(0)),
        InvalidDraftsError,
        "tree[0]",
    ),
    (
        "tree rrs, q = 0 draft",
        lambda: tree.sample(models.context_free(P0), models.context_free(Q0), [[1], [0]], verifier="rrs", rng=np.random.default_rng(0)),
        InvalidDraftsError,
        "tree[1]",
    ),
    (
        "tree sample_many, q = 0 deep",
        lambda: tree.sample_many(
            models.context_free(P0), models.context_free(Q0), [[1, 0]], 2, verifier="rrs_wor", rng=np.random.default_rng(0)
        ),
        InvalidDraftsError,
        "position 1",
    ),
    ("kseq_conditional, q = 0 draft", lambda: kseq_conditional(P0, Q0, [0, 0]), InvalidDraftsError, "drafts [0, 0]"),
    ("rrs_conditional, q = 0 draft", lambda: rrs_conditional(P0, Q0, [1, 0]), InvalidDraftsError, "drafts [1, 0]"),
    ("rrs_conditional per-position q", lambda: rrs_conditional(P0, [Q0, P0], [0, 2]), InvalidDraftsError, "qs[0, 0]"),
    ("rrs_wor_conditional, q = 0 draft", lambda: rrs_wor_conditional(P0, Q0, [0, 1]), InvalidDraftsError, "drafts [0, 1]"),
    ("rrs_wor_conditional repeat", lambda: rrs_wor_conditional(P0, Q0, [1, 1]), InvalidDraftsError, "repeat"),
    (
        "sample_batch, q = 0 draft",
        lambda: otspec.verifiers.kseq.sample_batch(P0, otspec.iid(Q0, 2), [[1, 2], [0, 1]], rng=np.random.default_rng(0)),
        InvalidDraftsError,
        "drafts [0, 1]",
    ),
    (
        "sample, q = 0 draft",
        lambda: otspec.verifiers.rrs.sample(P0, otspec.iid(Q0, 2), [0, 1], rng=np.random.default_rng(0)),
        InvalidDraftsError,
        "drafts [0, 1]",
    ),
    # memory cap on synthetic pairs / models, option types
    ("synthetic pair too large", lambda: synthetic_pair(10**11), ProblemTooLargeError, "vocab"),
    ("random model too large", lambda: models.dirichlet(10**11), ProblemTooLargeError, "memory_cap"),
    ("non-numeric memory_cap", lambda: otspec.optimal_acceptance(P, otspec.iid(Q, 2), memory_cap="8GB"), InvalidOptionError, "memory_cap"),
    (
        "negative memory_cap",
        lambda: otspec.optimal_acceptance(P, otspec.iid(Q, 2), method="lp", memory_cap=-1),
        InvalidOptionError,
        "memory_cap",
    ),
    ("memory_cap on kernel", lambda: otspec.verifiers.kseq.kernel(P, otspec.iid(Q, 2), memory_cap=[1]), InvalidOptionError, "memory_cap"),
    (
        "constraints not callable",
        lambda: otspec.optimal_acceptance(P, otspec.iid(Q, 2), method="cvxpy", constraints=5),
        InvalidOptionError,
        "constraints",
    ),
    (
        "constraints return junk",
        lambda: otspec.optimal_acceptance(P, otspec.iid(Q, 2), method="cvxpy", constraints=lambda lp: [1, 2]),
        InvalidOptionError,
        "constraints",
    ),
    (
        "complex p",
        lambda: otspec.optimal_acceptance(np.array([0.5 + 0.1j, 0.3, 0.2]), otspec.iid(Q, 2)),
        InvalidDistributionError,
        "p must be real",
    ),
    ("complex q with zero imaginary part", lambda: otspec.iid(Q.astype(complex), 2), InvalidDistributionError, "q must be real"),
    ("complex file", lambda: otspec_io.load_distribution(_complex_file()), InputFileError, "real numbers"),
    ("directory as a file", lambda: otspec_io.load_distribution(os.path.dirname(_complex_file())), InputFileError, "is a directory"),
    # auto on a large law without a closed form refuses before starting, with the size and a hint
    # (without the maxflow extra; with OR-Tools installed auto solves it, tests/bounds/test_maxflow.py;
    # a product law goes to the branch-and-bound, tests/bounds/test_product.py)
    (
        "auto on a large explicit law",
        lambda: _without_ortools(lambda: otspec.optimal_acceptance(np.full(600, 1 / 600), _all_pairs(600))),
        ProblemTooLargeError,
        "method='auto'",
    ),
    # an error's advice must be true: a product law has no closed form, so method='prefix' is never offered
    (
        "product law at V = 20 000",
        lambda: otspec.optimal_acceptance(np.full(20_000, 5e-5), otspec.product([np.full(20_000, 5e-5)] * 2), method="lp"),
        ProblemTooLargeError,
        "no closed form",
    ),
    (
        "auto on a huge explicit law without maxflow",
        lambda: _without_ortools(lambda: otspec.optimal_acceptance(np.full(600, 1 / 600), _all_pairs(600), memory_cap=1e6)),
        ProblemTooLargeError,
        "method='auto'",
    ),
    # block / tree problems
    (
        "block_optimum bad method",
        lambda: block_optimum(models.context_free(P), models.context_free(Q), 2, method="simplex"),
        UnsupportedMethodError,
        "simplex",
    ),
    ("block_optimum gamma = 0", lambda: block_optimum(models.context_free(P), models.context_free(Q), 0), InvalidDraftCountError, "got 0"),
    (
        "block_optimum V mismatch",
        lambda: block_optimum(models.context_free(P), models.context_free([0.5, 0.5]), 2),
        ShapeMismatchError,
        "V = 2",
    ),
    ("tree_optimum k = 0", lambda: tree_optimum(models.context_free(P), models.context_free(Q), 0, 2), InvalidDraftCountError, "got 0"),
    (
        "tree kernel bad verifier",
        lambda: tree.kernel(models.context_free(P), models.context_free(Q), 2, 1, verifier="magic"),
        UnsupportedMethodError,
        "magic",
    ),
    ("context_free not normalised", lambda: models.context_free([0.5, 0.6]), InvalidDistributionError, "1.1"),
    (
        "block path length mismatch",
        lambda: block_verifier.expected_accepted_given_path([P, P], [Q], [0, 1]),
        ShapeMismatchError,
        "gamma = 1",
    ),
    (
        "block sample out of vocabulary",
        lambda: block_verifier.sample(models.context_free(P), models.context_free(Q), [0, 5], rng=np.random.default_rng(0)),
        InvalidDraftsError,
        "[0, 3)",
    ),
    (
        "token sample out of vocabulary",
        lambda: token_chain.sample(models.context_free(P), models.context_free(Q), [7], rng=np.random.default_rng(0)),
        InvalidDraftsError,
        "[0, 3)",
    ),
    (
        "tree sample out of vocabulary",
        lambda: tree.sample(models.context_free(P), models.context_free(Q), [[0], [9]], rng=np.random.default_rng(0)),
        InvalidDraftsError,
        "[0, 3)",
    ),
    ("single_draft nan q", lambda: otspec.single_draft(P, [np.nan, 0.5, 0.5]), InvalidDistributionError, "finite"),
    ("compare without a law", lambda: otspec.report.compare(P, Q), NotADraftLawError, "draft law"),
    (
        "token chain path, q = 0 draft",
        lambda: token_chain.expected_accepted_given_path([P0, P0], [Q0, Q0], [1, 0]),
        InvalidDraftsError,
        "q_conds[1, 0]",
    ),
    ("holm on a 2-D table", lambda: stats.holm(np.full((2, 3), 0.01)), ShapeMismatchError, "1-D array (got shape (2, 3))"),
    ("BH on a 2-D table", lambda: stats.benjamini_hochberg(np.full((2, 3), 0.01)), ShapeMismatchError, "ravel"),
]


#: The argument each library case must name in its message (by default the first word of it).
ARGUMENT = {
    "V mismatch p vs law": "p",
    "single_draft V mismatch": "q",
    "ragged explicit tuples": "tuples",
    "negative explicit ids": "tuples",
    "non-integer explicit ids": "tuples",
    "explicit weight count": "weights",
    "explicit ids beyond vocab_size": "vocab_size",
    "product V mismatch": "qs[1]",
    "product not a list": "qs",
    "unknown method": "method",
    "prefix on product law": "method",
    "subsets on V = 25": "method",
    "LP too large": "method",
    "memory cap": "memory cap",
    "constraints without cvxpy": "constraints",
    "law is not a law": "law",
    "synthetic pair too large": "vocab",
    "random model too large": "V =",
    "non-numeric memory_cap": "memory_cap",
    "negative memory_cap": "memory_cap",
    "memory_cap on kernel": "memory_cap",
    "constraints not callable": "constraints",
    "constraints return junk": "constraints",
    "complex file": "p file",
    "directory as a file": "p file",
    "auto on a large explicit law": "method",
    "product law at V = 20 000": "method",
    "auto on a huge explicit law without maxflow": "method",
    "block_optimum V mismatch": "q_model",
    "tree kernel bad verifier": "verifier",
    "block path length mismatch": "drafts",
    "block sample out of vocabulary": "drafts",
    "token sample out of vocabulary": "drafts",
    "tree sample out of vocabulary": "tree[1]",
    "compare without a law": "law",
    "block_optimum gamma = 0": "gamma",
    "tree kseq, q = 0 draft": "tree[0]",
    "tree rrs, q = 0 draft": "tree[1]",
    "tree sample_many, q = 0 deep": "tree[0]",
}


@pytest.mark.parametrize("name,call,exc,fragment", LIBRARY_CASES, ids=[c[0] for c in LIBRARY_CASES])
def test_library_rejects(name, call, exc, fragment):
    with pytest.raises(OtspecInputError) as info:
        call()
    assert type(info.value) is exc, f"{name}: raised {type(info.value).__name__}, expected exactly {exc.__name__}"
    assert isinstance(info.value, ValueError)
    msg = str(info.value)
    assert fragment in msg, msg
    arg = ARGUMENT.get(name, msg.split(" ")[0])
    assert arg in msg and arg.split("[")[0] in (
        "p",
        "q",
        "k",
        "drafts",
        "tuples",
        "weights",
        "vocab_size",
        "qs",
        "method",
        "memory cap",
        "constraints",
        "law",
        "vocab",
        "V =",
        "memory_cap",
        "p file",
        "tree",
        "q_model",
        "verifier",
        "gamma",
        "pvalues",
    ), (name, arg, msg)


def test_table_is_large_enough():
    assert len(LIBRARY_CASES) + len(CLI_CASES) >= 40


def test_sampler_requires_generator():
    with pytest.raises(TypeError, match="numpy.random.Generator"):
        otspec.iid(Q, 2).sample(0, 10)


@pytest.fixture
def files(tmp_path):
    good_p = tmp_path / "p.npy"
    np.save(good_p, P)
    good_q = tmp_path / "q.npy"
    np.save(good_q, Q)
    (tmp_path / "garbage.npy").write_bytes(b"not a numpy file")
    (tmp_path / "p.bin").write_bytes(b"\x00")
    np.savez(tmp_path / "two.npz", a=P, b=Q)
    np.save(tmp_path / "mat.npy", np.ones((2, 3)) / 6)
    np.save(tmp_path / "unnorm.npy", np.array([0.5, 0.5, 0.5]))
    np.save(tmp_path / "nan.npy", np.array([np.nan, 0.5, 0.5]))
    np.save(tmp_path / "short.npy", np.array([0.5, 0.5]))
    (tmp_path / "words.txt").write_text("a b c\n")
    (tmp_path / "dir.npy").mkdir()
    np.save(tmp_path / "one.npy", np.array([1.0]))
    return tmp_path


def test_one_token_file_is_a_distribution(files, capsys):
    # Regression: a (1,) file was squeezed to shape () and rejected
    assert main(["bound", "--p", f"{files}/one.npy", "--q", f"{files}/one.npy", "--drafts", "1", "--law", "iid", "--json"]) == 0
    import json

    assert json.loads(capsys.readouterr().out)["results"][0]["value"] == 1.0


CLI_CASES = [
    ("zero vocab", ["bound", "--vocab", "0", "--drafts", "2"], "vocab must be >= 1"),
    ("zero drafts", ["bound", "--vocab", "10", "--drafts", "0"], "k must be >= 1"),
    ("non-integer drafts", ["bound", "--vocab", "10", "--drafts", "2.5"], "invalid int value"),
    ("no source", ["bound", "--drafts", "2"], "--vocab"),
    ("only --p", ["bound", "--p", "{d}/p.npy", "--drafts", "2"], "together"),
    ("vocab and files", ["bound", "--vocab", "3", "--p", "{d}/p.npy", "--q", "{d}/q.npy", "--drafts", "2"], "cannot be combined"),
    ("missing file", ["bound", "--p", "{d}/nope.npy", "--q", "{d}/q.npy", "--drafts", "2"], "does not exist"),
    ("directory as --p", ["bound", "--p", "{d}", "--q", "{d}/q.npy", "--drafts", "2"], "is a directory"),
    ("directory named .npy", ["bound", "--p", "{d}/dir.npy", "--q", "{d}/q.npy", "--drafts", "2"], "is a directory"),
    ("bad extension", ["bound", "--p", "{d}/p.bin", "--q", "{d}/q.npy", "--drafts", "2"], "unsupported extension"),
    ("garbage npy", ["bound", "--p", "{d}/garbage.npy", "--q", "{d}/q.npy", "--drafts", "2"], "cannot be read"),
    ("npz with two arrays", ["bound", "--p", "{d}/two.npz", "--q", "{d}/q.npy", "--drafts", "2"], "exactly one"),
    ("matrix file", ["bound", "--p", "{d}/mat.npy", "--q", "{d}/q.npy", "--drafts", "2"], "one vector"),
    ("unnormalised file", ["bound", "--p", "{d}/unnorm.npy", "--q", "{d}/q.npy", "--drafts", "2"], "sum to 1"),
    ("nan file", ["bound", "--p", "{d}/nan.npy", "--q", "{d}/q.npy", "--drafts", "2"], "finite"),
    ("V mismatch files", ["bound", "--p", "{d}/short.npy", "--q", "{d}/q.npy", "--drafts", "2"], "same vocabulary size"),
    ("text not numbers", ["bound", "--p", "{d}/words.txt", "--q", "{d}/q.npy", "--drafts", "2"], "cannot be read"),
    ("negative temperature", ["bound", "--vocab", "10", "--drafts", "2", "--temperature", "-1"], "temperature must be a positive"),
    (
        "k beyond support WOR",
        ["bound", "--p", "{d}/p.npy", "--q", "{d}/q.npy", "--drafts", "4", "--law", "without_replacement"],
        "support size",
    ),
    ("LP too large", ["bound", "--vocab", "5000", "--drafts", "4", "--method", "lp", "--law", "iid"], "memory cap"),
    ("unknown family", ["bound", "--vocab", "10", "--drafts", "2", "--family", "bogus"], "invalid choice"),
    ("unknown law", ["bound", "--vocab", "10", "--drafts", "2", "--law", "bogus"], "invalid choice"),
    ("bound: huge synthetic vocab", ["bound", "--vocab", "100000000000", "--drafts", "2"], "memory cap"),
    ("bound: negative memory cap", ["bound", "--vocab", "100", "--drafts", "2", "--memory-cap", "-1"], "--memory-cap"),
    ("block: huge vocab", ["block", "--vocab", "100000000000", "--gamma", "1"], "memory cap"),
    ("block: zero vocab", ["block", "--vocab", "0", "--gamma", "1"], "--vocab must be >= 1"),
    ("block: zero gamma", ["block", "--vocab", "3", "--gamma", "0"], "--gamma must be >= 1"),
    ("block: zero drafts", ["block", "--vocab", "3", "--gamma", "1", "--drafts", "0"], "--drafts must be >= 1"),
    ("block: negative seed", ["block", "--vocab", "3", "--gamma", "1", "--seed", "-1"], "--seed must be >= 0"),
    ("block: enumeration too large", ["block", "--vocab", "2000", "--gamma", "3"], "--vocab"),
    ("block: zero memory cap", ["block", "--vocab", "3", "--gamma", "1", "--memory-cap", "0"], "--memory-cap"),
    ("block: bad concentration", ["block", "--vocab", "3", "--gamma", "1", "--concentration", "-1"], "concentration"),
]


@pytest.mark.parametrize("name,argv,fragment", CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_cli_exits_2_with_one_line(name, argv, fragment, files, capsys):
    argv = [a.replace("{d}", str(files)) for a in argv]
    rc = main(argv)
    cap = capsys.readouterr()
    err = cap.err
    assert rc == 2
    assert fragment in err, err
    assert len(err.strip().splitlines()) == 1 and err.startswith("otspec: error: "), err  # usage errors too
    assert "Traceback" not in err and cap.out == "", (err, cap.out)
    flags = [a for a in argv if a.startswith("--")]
    assert any(f in err for f in flags) or any(
        w in err for w in ("vocab", "k must", "memory cap", "p file", "q file", "sum to 1", "finite", "vocabulary", "support size")
    ), err


def test_cli_subprocess_exit_code():
    r = subprocess.run([sys.executable, "-m", "otspec", "bound", "--vocab", "0", "--drafts", "2"], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.startswith("otspec: error:")


# -- every error's advice is true: following a suggested fix runs ---------------------------------

#: The methods an error message can suggest.
_METHOD_WORDS = ("auto", "prefix", "subsets", "lp", "cvxpy", "flow", "maxflow", "closed_form", "product")

_PRODUCT = otspec.product([Q, P])

#: For each library case whose message suggests a fix: the fix as it is written in the message, and
#: the call with that fix applied (it must run).
LIBRARY_FIXES = {
    "k = 0": {"at least 1": lambda: otspec.iid(Q, 1)},
    "constraints return junk": {
        "e.g. [lp.w[0] <= 0.1]": lambda: otspec.optimal_acceptance(
            P, otspec.iid(Q, 2), method="cvxpy", constraints=lambda lp: [lp.w[0] <= 0.1]
        )
    },
    "k = -1": {"at least 1": lambda: otspec.without_replacement(Q, 1)},
    "k > support, greedy": {"lower k": lambda: otspec.greedy([1.0, 0.0, 0.0], 1)},
    "synthetic pair too large": {"a smaller vocab": lambda: synthetic_pair(1000)},
    "random model too large": {"a smaller V": lambda: models.dirichlet(1000)},
    "k > support, WOR": {
        "lower k": lambda: otspec.without_replacement([0.5, 0.5, 0.0], 2),
        "use otspec.iid": lambda: otspec.iid([0.5, 0.5, 0.0], 3),
    },
    "prefix on product law": {f"'{m}'": (lambda m=m: otspec.optimal_acceptance(P, _PRODUCT, method=m)) for m in ("lp", "flow", "subsets")},
    "subsets on V = 25": {
        f"'{m}'": (lambda m=m: otspec.optimal_acceptance(np.full(25, 0.04), otspec.iid(np.full(25, 0.04), 2), method=m))
        for m in ("prefix", "lp")
    },
    "LP too large": {
        "method='prefix'": lambda: otspec.optimal_acceptance(np.full(5000, 2e-4), otspec.iid(np.full(5000, 2e-4), 4), method="prefix"),
        "a smaller V or k": lambda: otspec.optimal_acceptance(np.full(50, 2e-2), otspec.iid(np.full(50, 2e-2), 2), method="lp"),
    },
    "memory cap": {
        "method='prefix'": lambda: otspec.optimal_acceptance(P, otspec.iid(Q, 2), method="prefix", memory_cap=10),
        "raise memory_cap": lambda: otspec.optimal_acceptance(P, otspec.iid(Q, 2), method="lp", memory_cap=10 * 1024**2),
    },
    "constraints without cvxpy": {
        "method='cvxpy'": lambda: otspec.optimal_acceptance(P, otspec.iid(Q, 2), method="cvxpy", constraints=lambda lp: []),
    },
    "non-numeric memory_cap": {"8 * 1024**3": lambda: otspec.optimal_acceptance(P, otspec.iid(Q, 2), memory_cap=8 * 1024**3)},
    "negative memory_cap": {"8 * 1024**3": lambda: otspec.optimal_acceptance(P, otspec.iid(Q, 2), method="lp", memory_cap=8 * 1024**3)},
    "memory_cap on kernel": {"8 * 1024**3": lambda: otspec.verifiers.kseq.kernel(P, otspec.iid(Q, 2), memory_cap=8 * 1024**3)},
    "product law at V = 20 000": {
        "method='product'": lambda: otspec.optimal_acceptance(
            np.full(20_000, 5e-5), otspec.product([np.full(20_000, 5e-5)] * 2), method="product"
        ),
        "a smaller V or k": lambda: otspec.optimal_acceptance(np.full(200, 5e-3), otspec.product([np.full(200, 5e-3)] * 2)),
    },
    "auto on a large explicit law": {
        "install the maxflow extra": lambda: otspec.optimal_acceptance(np.full(600, 1 / 600), _all_pairs(600), method="maxflow"),
        # method='lp' at this size runs for minutes: following it is checked up to the solver (no refusal)
        "method='lp'": lambda: check_acceptance("lp", _all_pairs(600), None),
    },
    "auto on a huge explicit law without maxflow": {
        "a smaller V or k": lambda: _without_ortools(
            lambda: otspec.optimal_acceptance(np.full(200, 5e-3), otspec.product([np.full(200, 5e-3)] * 2))
        ),
    },
    "block_optimum gamma = 0": {"at least 1": lambda: block_optimum(models.context_free(P), models.context_free(Q), 1)},
    "tree_optimum k = 0": {"at least 1": lambda: tree_optimum(models.context_free(P), models.context_free(Q), 1, 2)},
}


def _message(call) -> str:
    with pytest.raises(OtspecInputError) as info:
        call()
    return str(info.value)


def _suggests_a_fix(message: str) -> bool:
    """Whether the advice part of a message names a method, an option value or another function."""
    advice = message.split("; ", 1)[1] if "; " in message else ""
    return bool(re.search(r"method=|memory_cap|use otspec\.|lower k|install|at least|e\.g\.", advice))


@pytest.mark.parametrize("name,call,exc,fragment", LIBRARY_CASES, ids=[c[0] for c in LIBRARY_CASES])
def test_following_the_advice_runs(name, call, exc, fragment):
    """Every suggested fix is listed in LIBRARY_FIXES (each method the message names, each option),
    appears in the message as written there, and runs when applied."""
    if name == "auto on a large explicit law" and not _has_ortools():
        pytest.skip("the maxflow extra is not installed")
    message = _message(call)
    if not _suggests_a_fix(message) and name not in LIBRARY_FIXES:
        return
    fixes = LIBRARY_FIXES.get(name)
    assert fixes, f"{name!r} suggests a fix that no test follows: {message}"
    advice = message.split("; ", 1)[1]
    suggested = {m for m in _METHOD_WORDS if f"'{m}'" in advice}
    followed = {m for m in _METHOD_WORDS for key in fixes if f"'{m}'" in key}
    assert suggested == followed, (name, message, sorted(suggested), sorted(followed))
    for fix, follow in fixes.items():
        assert fix in message, (name, fix, message)
        follow()  # runs: no error


def test_advice_never_offers_prefix_for_a_product_law():
    big = otspec.product([np.full(20_000, 5e-5)] * 2)
    for call in (
        lambda: otspec.optimal_acceptance(np.full(20_000, 5e-5), big, method="lp"),
        lambda: otspec.optimal_acceptance(np.full(25, 0.04), otspec.product([np.full(25, 0.04)] * 2), method="subsets"),
    ):
        message = _message(call)
        assert "method='prefix'" not in message.split("; ", 1)[1], message
    # and 'lp' / the maxflow extra are offered only when they would fit in memory
    message = _message(lambda: _without_ortools(lambda: otspec.optimal_acceptance(np.full(600, 1 / 600), _all_pairs(600), memory_cap=1e6)))
    assert "method='lp'" not in message and "maxflow" not in message, message


def _has_ortools() -> bool:
    from otspec.bounds.maxflow import maxflow_available

    return maxflow_available()


#: CLI cases whose message suggests a flag or a value, with that fix applied (it must exit 0).
CLI_FIXES = {
    "LP too large": ("method='prefix'", ["bound", "--vocab", "5000", "--drafts", "4", "--method", "prefix", "--law", "iid"]),
    "bound: negative memory cap": ("e.g. 8", ["bound", "--vocab", "100", "--drafts", "2", "--memory-cap", "8"]),
    "k beyond support WOR": ("lower k", ["bound", "--p", "{d}/p.npy", "--q", "{d}/q.npy", "--drafts", "2", "--law", "without_replacement"]),
    "negative temperature": ("e.g. 1.0", ["bound", "--vocab", "10", "--drafts", "2", "--temperature", "1.0"]),
    "zero vocab": ("at least 1", ["bound", "--vocab", "1", "--drafts", "2"]),
    "zero drafts": ("at least 1", ["bound", "--vocab", "10", "--drafts", "1"]),
    "block: zero vocab": ("at least 1", ["block", "--vocab", "1", "--gamma", "1"]),
    "block: zero gamma": ("at least 1", ["block", "--vocab", "3", "--gamma", "1"]),
    "block: zero drafts": ("at least 1", ["block", "--vocab", "3", "--gamma", "1", "--drafts", "1"]),
    "block: negative seed": ("at least 0", ["block", "--vocab", "3", "--gamma", "1", "--seed", "0"]),
}


@pytest.mark.parametrize("name,argv,fragment", CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_cli_following_the_advice_runs(name, argv, fragment, files, capsys):
    assert main([a.replace("{d}", str(files)) for a in argv]) == 2
    err = capsys.readouterr().err
    advice = err.split("; ", 1)[1] if "; " in err else ""
    suggests = bool(re.search(r"method=|--[\w-]+ \d|e\.g\.|lower k|at least", advice))
    if not suggests and name not in CLI_FIXES:
        return
    assert name in CLI_FIXES, f"{name!r} suggests a fix that no test follows: {err}"
    fix, fixed = CLI_FIXES[name]
    assert fix in err, (fix, err)
    assert main([a.replace("{d}", str(files)) for a in fixed]) == 0, capsys.readouterr().err
    capsys.readouterr()
