"""One table of bad inputs: each must raise a specific error whose message names the problem,
from the library, and exit 2 with one line from the CLI."""

import subprocess
import sys

import numpy as np
import pytest

import otspec
from otspec.errors import (
    InvalidDistributionError,
    InvalidDraftCountError,
    InvalidDraftsError,
    OtspecInputError,
    ProblemTooLargeError,
    ShapeMismatchError,
    UnsupportedMethodError,
)
from otspec.cli import main

P = np.array([0.5, 0.3, 0.2])
Q = np.array([0.2, 0.3, 0.5])

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
    ("non-integer k", lambda: otspec.iid(Q, 2.5), InvalidDraftCountError, "2.5"),
    ("k as string", lambda: otspec.iid(Q, "3"), InvalidDraftCountError, "'3'"),
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
    ("prefix on product law", lambda: otspec.optimal_acceptance(P, otspec.product([Q, P]), method="prefix"), UnsupportedMethodError, "prefix"),
    ("subsets on V = 25", lambda: otspec.optimal_acceptance(np.full(25, 0.04), otspec.iid(np.full(25, 0.04), 2), method="subsets"), UnsupportedMethodError, "V = 25"),
    ("LP too large", lambda: otspec.optimal_acceptance(np.full(5000, 2e-4), otspec.iid(np.full(5000, 2e-4), 4), method="lp"), ProblemTooLargeError, "GiB"),
    ("memory cap", lambda: otspec.optimal_acceptance(P, otspec.iid(Q, 2), method="lp", memory_cap=10), ProblemTooLargeError, "memory cap"),
    ("constraints without cvxpy", lambda: otspec.optimal_acceptance(P, otspec.iid(Q, 2), method="lp", constraints=lambda lp: []), UnsupportedMethodError, "cvxpy"),
    ("law is not a law", lambda: otspec.optimal_acceptance(P, Q), UnsupportedMethodError, "draft law"),
    ("drafts out of vocabulary", lambda: otspec.iid(Q, 2).validate_drafts([0, 3]), InvalidDraftsError, "< V = 3"),
    ("wrong number of drafts", lambda: otspec.iid(Q, 2).validate_drafts([0]), InvalidDraftsError, "exactly k = 2"),
    ("duplicate drafts WOR", lambda: otspec.without_replacement(Q, 2).validate_drafts([1, 1]), InvalidDraftsError, "repeat"),
]


@pytest.mark.parametrize("name,call,exc,fragment", LIBRARY_CASES, ids=[c[0] for c in LIBRARY_CASES])
def test_library_rejects(name, call, exc, fragment):
    with pytest.raises(exc) as info:
        call()
    assert isinstance(info.value, (OtspecInputError, ValueError))
    assert fragment in str(info.value), str(info.value)


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
    return tmp_path


CLI_CASES = [
    ("zero vocab", ["bound", "--vocab", "0", "--drafts", "2"], "vocab must be >= 1"),
    ("zero drafts", ["bound", "--vocab", "10", "--drafts", "0"], "k must be >= 1"),
    ("non-integer drafts", ["bound", "--vocab", "10", "--drafts", "2.5"], "invalid int value"),
    ("no source", ["bound", "--drafts", "2"], "--vocab"),
    ("only --p", ["bound", "--p", "{d}/p.npy", "--drafts", "2"], "together"),
    ("vocab and files", ["bound", "--vocab", "3", "--p", "{d}/p.npy", "--q", "{d}/q.npy", "--drafts", "2"], "cannot be combined"),
    ("missing file", ["bound", "--p", "{d}/nope.npy", "--q", "{d}/q.npy", "--drafts", "2"], "does not exist"),
    ("bad extension", ["bound", "--p", "{d}/p.bin", "--q", "{d}/q.npy", "--drafts", "2"], "unsupported extension"),
    ("garbage npy", ["bound", "--p", "{d}/garbage.npy", "--q", "{d}/q.npy", "--drafts", "2"], "cannot be read"),
    ("npz with two arrays", ["bound", "--p", "{d}/two.npz", "--q", "{d}/q.npy", "--drafts", "2"], "exactly one"),
    ("matrix file", ["bound", "--p", "{d}/mat.npy", "--q", "{d}/q.npy", "--drafts", "2"], "one vector"),
    ("unnormalised file", ["bound", "--p", "{d}/unnorm.npy", "--q", "{d}/q.npy", "--drafts", "2"], "sum to 1"),
    ("nan file", ["bound", "--p", "{d}/nan.npy", "--q", "{d}/q.npy", "--drafts", "2"], "finite"),
    ("V mismatch files", ["bound", "--p", "{d}/short.npy", "--q", "{d}/q.npy", "--drafts", "2"], "same vocabulary size"),
    ("text not numbers", ["bound", "--p", "{d}/words.txt", "--q", "{d}/q.npy", "--drafts", "2"], "cannot be read"),
    ("negative temperature", ["bound", "--vocab", "10", "--drafts", "2", "--temperature", "-1"], "temperature must be a positive"),
    ("k beyond support WOR", ["bound", "--p", "{d}/p.npy", "--q", "{d}/q.npy", "--drafts", "4", "--law", "without_replacement"], "support size"),
    ("LP too large", ["bound", "--vocab", "5000", "--drafts", "4", "--method", "lp", "--law", "iid"], "memory cap"),
    ("unknown family", ["bound", "--vocab", "10", "--drafts", "2", "--family", "bogus"], "invalid choice"),
    ("unknown law", ["bound", "--vocab", "10", "--drafts", "2", "--law", "bogus"], "invalid choice"),
]


@pytest.mark.parametrize("name,argv,fragment", CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_cli_exits_2_with_one_line(name, argv, fragment, files, capsys):
    argv = [a.replace("{d}", str(files)) for a in argv]
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2
    assert fragment in err, err
    if "invalid" not in fragment:  # our own errors are exactly one line
        assert len(err.strip().splitlines()) == 1, err


def test_cli_subprocess_exit_code():
    r = subprocess.run([sys.executable, "-m", "otspec", "bound", "--vocab", "0", "--drafts", "2"], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.startswith("otspec: error:")
