"""The draft-law protocol (:mod:`otspec.laws.base`): every registered law implements it, carries its
behaviour in its own module, and nothing outside :mod:`otspec.laws` dispatches on a law's name.

* structure: each law in :data:`otspec.laws.ALL` is a :class:`~otspec.laws.DraftLaw` subclass with
  a unique ``kind``, its public constructor reachable as ``otspec.laws.<kind>``, a known
  ``parameters`` form and the required members overridden; each law module holds exactly one
  registered law, and every law class defined under ``otspec/laws`` is registered;
* behaviour: on a small seeded instance of every law, each member the law offers agrees with its
  enumeration (:math:`Q(H^k)` on every set, prefix masses, inclusion probabilities, the first-draft
  marginal, tuple probabilities, samples in the support), every structure it declares (``iid_q``,
  ``independent_qs``, ``without_replacement_q``, ``top_and_rest``) reproduces its enumeration,
  and its closed forms agree with the brute-force optimum;
* no dispatch by name: no module of ``otspec``, ``otspec_gpu`` or ``experiments`` outside
  ``otspec/laws`` compares a ``kind`` to a registered law's name (read with ``ast``);
* one module suffices: a law defined only by its required members (here, in this file) runs through
  ``optimal_acceptance`` and every lossless verifier that applies to it (exact kernel, output p).

All checks are exact (enumeration, V <= 5). Runtime: a few seconds.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import itertools
import pkgutil
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

import otspec
import otspec.laws
from otspec import verifiers
from otspec._tolerances import EXACT_ATOL
from otspec.errors import InvalidDraftCountError
from otspec.laws import ALL, KINDS, DraftLaw, as_token_mask, by_kind
from otspec.laws.enumeration import subset_prob_all_in, successive_denominators
from otspec.testing import assert_lossless
from tests.conftest import random_simplex

ROOT = Path(otspec.__file__).resolve().parents[1]

#: Modules of ``otspec/laws`` that hold the protocol and shared helpers rather than a law.
_SHARED = {"otspec.laws", "otspec.laws.base", "otspec.laws.enumeration", "otspec.laws.tokens"}

#: Members a law must define itself (the base raises ``NotImplementedError``).
_REQUIRED = ("num_tuples", "_enumerate", "prob_all_in", "sample")


def _instance(cls: type[DraftLaw], seed: int, V: int = 5, k: int = 2) -> DraftLaw:
    """A small seeded instance of a registered law, built through its constructor."""
    rng = np.random.default_rng(seed)
    if cls.parameters == "q":
        return cls.constructor(random_simplex(rng, V, zeros=1), k)
    if cls.parameters == "qs":
        return cls.constructor([random_simplex(rng, V, zeros=1) for _ in range(k)])
    tuples = rng.integers(0, V, size=(4, k))
    return cls.constructor(tuples, random_simplex(rng, 4), vocab_size=V)


def _law_modules():
    for info in pkgutil.iter_modules(otspec.laws.__path__, "otspec.laws."):
        yield info.name, importlib.import_module(info.name)


# -- structure ------------------------------------------------------------------------------------


def test_registry_is_well_formed():
    assert len(set(KINDS)) == len(KINDS) == len(ALL)
    for cls in ALL:
        assert issubclass(cls, DraftLaw) and by_kind(cls.kind) is cls
        assert cls.parameters in ("q", "qs", "tuples"), cls
        assert getattr(otspec.laws, cls.kind) is cls.constructor, f"otspec.laws.{cls.kind} must be {cls.__name__}'s constructor"
        for name in _REQUIRED:
            assert getattr(cls, name) is not getattr(DraftLaw, name), f"{cls.__name__} must define {name}"
    with pytest.raises(otspec.errors.UnsupportedMethodError, match="unknown draft law"):
        by_kind("no_such_law")


def test_one_registered_law_per_module_and_every_law_registered():
    defined = {}
    for name, module in _law_modules():
        own = [c for c in vars(module).values() if inspect.isclass(c) and issubclass(c, DraftLaw) and c.__module__ == name]
        laws = [c for c in own if c is not DraftLaw]
        if name in _SHARED:
            assert not laws, f"{name} holds shared code, not laws ({laws})"
            continue
        assert len(laws) == 1, f"{name} must hold exactly one law class (got {laws})"
        defined[name] = laws[0]
    assert set(defined.values()) == set(ALL), "register every law module in otspec.laws.ALL (one line)"


@pytest.mark.parametrize("cls", ALL, ids=KINDS)
def test_constructor_returns_the_law(cls):
    law = _instance(cls, 0)
    assert type(law) is cls and law.kind == cls.kind and law.prefix_exact == cls.prefix_exact
    assert repr(law) == f"{cls.kind}(V={law.V}, k={law.k})"


# -- behaviour against the enumeration -------------------------------------------------------------


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("cls", ALL, ids=KINDS)
def test_members_agree_with_the_enumeration(cls, seed):
    law = _instance(cls, seed)
    V, k = law.V, law.k
    tuples, w = law.enumerate()
    assert abs(w.sum() - 1.0) <= EXACT_ATOL and np.all(w > 0) and tuples.shape == (law.num_tuples(), k)
    # Q(H^k) on every set: prob_all_in, subset_prob_all_in and the zeta transform of the enumeration
    sets, sw = law.enumerate_sets()
    brute = subset_prob_all_in(sets, sw, V)
    assert np.allclose(law.subset_prob_all_in(), brute, rtol=0, atol=EXACT_ATOL)
    for mask in range(2**V):
        H = np.array([(mask >> b) & 1 for b in range(V)], dtype=bool)
        assert abs(law.prob_all_in(H) - float(w[np.all(H[tuples], axis=1)].sum())) <= EXACT_ATOL
    order = np.random.default_rng(seed).permutation(V)
    vals, err = law.prefix_prob_all_in(order)
    expect = [w[np.all(as_token_mask(order[:i], V)[tuples], axis=1)].sum() for i in range(V + 1)]
    assert np.allclose(vals, expect, rtol=0, atol=max(err, EXACT_ATOL))
    # per-token quantities
    inc = law.inclusion_probabilities()
    if inc is not None:
        assert np.allclose(inc, [w[np.any(tuples == y, axis=1)].sum() for y in range(V)], rtol=0, atol=EXACT_ATOL)
    assert np.allclose(law.first_draft_marginal(), np.bincount(tuples[:, 0], weights=w, minlength=V), rtol=0, atol=EXACT_ATOL)
    for t, x in zip(tuples[:5], w[:5], strict=False):
        assert abs(law.tuple_probability(t) - x) <= EXACT_ATOL
    drawn = law.sample(np.random.default_rng(seed), 50)
    assert drawn.shape == (50, k)
    law.validate_draft_batch(drawn)  # every sampled tuple has positive probability


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("cls", ALL, ids=KINDS)
def test_declared_structure_reproduces_the_enumeration(cls, seed):
    law = _instance(cls, seed)
    tuples, w = law.enumerate()
    qs = law.independent_qs
    if qs is not None:
        assert len(qs) == law.k
        assert np.allclose(w, np.prod([qs[j][tuples[:, j]] for j in range(law.k)], axis=0), rtol=0, atol=EXACT_ATOL)
    if law.iid_q is not None:
        assert qs is not None and all(np.array_equal(qj, law.iid_q) for qj in qs)
    if law.without_replacement_q is not None:
        q = law.without_replacement_q
        assert np.allclose(w, np.prod(q[tuples] / successive_denominators(q, tuples), axis=1), rtol=0, atol=EXACT_ATOL)
    if law.top_and_rest is not None:
        top, rest = law.top_and_rest
        assert np.all(tuples[:, :-1] == top[None, :]) and np.allclose(w, rest[tuples[:, -1]], rtol=0, atol=EXACT_ATOL)
    if cls.k_within_support:
        with pytest.raises(InvalidDraftCountError):
            cls.constructor(np.array([0.5, 0.5, 0.0]), 3)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("cls", ALL, ids=KINDS)
def test_closed_forms_agree_with_the_brute_force_optimum(cls, seed):
    law = _instance(cls, seed)
    p = random_simplex(np.random.default_rng(100 + seed), law.V, zeros=1)
    best = otspec.optimal_acceptance(p, law, method="subsets").value
    closed = law.closed_form_optimum(p)
    if closed is not None:
        assert abs(closed - best) <= 1e-12
    lower = law.closed_form_lower(p)
    if lower is not None:
        assert lower <= best + 1e-12
    if law.prefix_exact:
        assert abs(otspec.optimal_acceptance(p, law, method="prefix").value - best) <= 1e-12


# -- no dispatch by name ---------------------------------------------------------------------------


def _names_kind(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "kind") or (isinstance(node, ast.Name) and node.id == "kind")


def _law_literals(node: ast.AST) -> list[str]:
    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return [x.value for x in items if isinstance(x, ast.Constant) and x.value in KINDS]


def kind_comparisons(source: str) -> list[int]:
    """Lines of ``source`` that compare a ``kind`` (``x.kind`` or ``kind``) with a law's name."""
    hits = []
    with warnings.catch_warnings():  # a module's own invalid escapes are not this test's subject
        warnings.simplefilter("ignore")
        tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(_names_kind(o) for o in operands) and any(_law_literals(o) for o in operands):
                hits.append(node.lineno)
    return hits


def test_the_kind_scan_finds_dispatch():
    assert kind_comparisons('if law.kind == "greedy":\n    pass\n') == [1]
    assert kind_comparisons('ok = kind in ("iid", "product")\n') == [1]
    assert kind_comparisons('if "explicit" != self.kind:\n    pass\n') == [1]
    assert kind_comparisons('if arr.dtype.kind == "f" or node.kind == "split":\n    pass\n') == []


def test_no_module_outside_laws_dispatches_on_a_law_name():
    found = []
    for package in ("otspec", "otspec_gpu", "experiments"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.is_relative_to(ROOT / "otspec" / "laws"):
                continue
            for line in kind_comparisons(path.read_text()):
                found.append(f"{path.relative_to(ROOT)}:{line}")
    assert not found, "ask the law (a capability in otspec.laws.base) instead of comparing its kind: " + ", ".join(found)


# -- one module suffices ---------------------------------------------------------------------------


def _shifted(q, k):
    """X_1 ~ q, X_2 = X_1 + 1 (mod V): a joint law no built-in module describes."""
    q = np.asarray(q, dtype=np.float64)
    return ShiftedPairLaw(k=2, V=q.size, q_=q)


@dataclass(frozen=True, eq=False, repr=False)
class ShiftedPairLaw(DraftLaw):
    """The two drafts ``(x, x + 1 mod V)`` with ``x ~ q``; only the required members."""

    q_: np.ndarray = field(default=None)  # type: ignore[assignment]
    kind: str = field(init=False, default="shifted_pair")
    parameters = "q"
    constructor = staticmethod(_shifted)

    def num_tuples(self):
        return int(np.count_nonzero(self.q_))

    def _enumerate(self):
        x = np.flatnonzero(self.q_)
        return np.stack([x, (x + 1) % self.V], axis=1).astype(np.int64), self.q_[x]

    def prob_all_in(self, H):
        mask = as_token_mask(H, self.V)
        return float(self.q_[mask & np.roll(mask, -1)].sum())

    def sample(self, rng, size):
        x = rng.choice(self.V, size=int(size), p=self.q_)
        return np.stack([x, (x + 1) % self.V], axis=1).astype(np.int64)


@pytest.mark.parametrize("seed", range(3))
def test_a_law_with_only_the_required_members_runs_everywhere(seed):
    rng = np.random.default_rng(seed)
    V = 5
    p, q = random_simplex(rng, V, zeros=1), random_simplex(rng, V)
    law = _shifted(q, 2)
    assert not law.prefix_exact and law.iid_q is None and law.top_and_rest is None
    best = otspec.optimal_acceptance(p, law, method="subsets").value
    for method in ("auto", "lp", "flow"):
        res = otspec.optimal_acceptance(p, law, method=method)
        assert res.status == "optimal" and abs(res.value - best) <= 1e-9, method
    # brute force: 1 + min over every token set H of P(H) - Q(H^2)
    sets = itertools.product([False, True], repeat=V)
    assert abs(best - min(1.0 + p[list(H)].sum() - law.prob_all_in(list(H)) for H in sets)) <= 1e-12
    applies = [v for v in verifiers.ALL if v.applies_to(law)]
    assert {v.name for v in applies} >= {"nss", "naive", "optimal_plan"}
    for v in applies:
        if v.lossless:  # a lossy rule may accept more than any lossless one
            assert_lossless(v, p, law)
            assert v.acceptance(p, law).value <= best + 1e-9
