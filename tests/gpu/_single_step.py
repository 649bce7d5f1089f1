"""Shared oracles of the single-step torch tests: the (verifier, law, k) combinations, random small
laws and the numpy kernels (public otspec API only)."""

from __future__ import annotations

import numpy as np

import otspec
from otspec.verifiers.step.approximate import ApproximateVerifier

LAWS = {"iid": otspec.iid, "without_replacement": otspec.without_replacement, "greedy": otspec.greedy}


def _combos() -> list[tuple[str, str, int]]:
    """Every (name, law, k <= 3) a registered torch twin runs: the laws its numpy twin applies to,
    restricted to the twin's ``draft_law`` and ``laws`` (any law at k = 1, one draw from q)."""
    from otspec_gpu.verifiers import SINGLE_STEP

    probe = np.full(4, 0.25)
    out = []
    for name, ver in SINGLE_STEP.items():
        core = otspec.verifiers.by_name(name)
        runs_on = {ver.draft_law, *ver.laws}
        for law, make in LAWS.items():
            for k in range(ver.k_min, min(ver.k_max or 3, 3) + 1):
                if (k == 1 or law in runs_on) and core.applies_to(make(probe, k)):
                    out.append((name, law, k))
    return out


#: (verifier name, draft law, k): every law each registered verifier is defined on, k <= 3 (derived
#: from the registry, so a new twin is tested without editing this table).
COMBOS = _combos()


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
