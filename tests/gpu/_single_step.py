"""Shared oracles of the single-step torch tests: the (verifier, law, k) combinations, random small
laws and the numpy kernels (public otspec API only)."""

from __future__ import annotations

import numpy as np

import otspec
from otspec.verifiers.step.approximate import ApproximateVerifier

LAWS = {"iid": otspec.iid, "without_replacement": otspec.without_replacement, "greedy": otspec.greedy}

#: (verifier name, draft law, k): every law each verifier is defined on, k <= 3.
COMBOS = (
    [("token", law, 1) for law in LAWS]
    + [(name, "iid", k) for name in ("kseq", "rrs", "optimal_iid", "khisti") for k in (1, 2, 3)]
    + [(name, "without_replacement", k) for name in ("rrs_wor", "wor_iid") for k in (1, 2, 3)]
    + [("greedy_optimal", "greedy", k) for k in (1, 2, 3)]
    + [("spechub", "greedy", 2)]
    + [(name, law, k) for name in ("nss", "naive") for law in LAWS for k in (1, 2, 3)]
    + [("approximate", "iid", 1)]
)


def extra_for(name: str, law: str, V: int, rng: np.random.Generator | None = None) -> dict:
    """Verifier-specific keyword arguments: naive's law; a random predicate for approximate."""
    if name == "naive":
        return {"law": law}
    if name == "approximate" and rng is not None:
        a = rng.uniform(0.0, 1.0, V)
        a[rng.integers(V)] = 0.0
        return {"pass_prob": a}
    return {}


def numpy_kernel(name: str, p: np.ndarray, q: np.ndarray, law: str, k: int, extra: dict):
    """The numpy core's exact kernel (tuples, weights, pi) of the same rule."""
    L = LAWS[law](q, k)
    if name == "approximate" and extra.get("pass_prob") is not None:
        return ApproximateVerifier(np.asarray(extra["pass_prob"])).kernel(p, L)
    return otspec.verifiers.by_name(name).kernel(p, L)


def random_law_pair(rng: np.random.Generator, V: int, k: int, law: str) -> tuple[np.ndarray, np.ndarray]:
    """A random (p, q) on V tokens with exact zeros in p and q, valid for k drafts under ``law``."""
    while True:
        p = rng.dirichlet(np.full(V, 0.6))
        q = rng.dirichlet(np.full(V, 0.6))
        if rng.random() < 0.5:
            p[rng.integers(V)] = 0.0
            p /= p.sum()
        if rng.random() < 0.5:
            q[rng.integers(V)] = 0.0
            q /= q.sum()
        support = int((q > 0).sum())
        if (law == "without_replacement" and support >= k) or (law == "greedy" and support >= k) or law == "iid":
            return p, q
