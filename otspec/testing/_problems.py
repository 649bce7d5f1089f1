"""The audit's problems: small integer weights (exact, printable, shrinkable), single-step and chain."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

import numpy as np

from otspec.laws import KINDS, IIDLaw, by_kind
from otspec.testing._code import array_code, law_code

__all__ = [
    "LAW_KINDS",
    "SUBNORMAL_ADJACENT",
    "AuditProblem",
    "ChainProblem",
    "normalized",
    "random_problems",
    "step_problems",
    "weight_pairs",
    "wide_range_pairs",
    "wide_range_problems",
]

#: Every registered single-step draft law (:data:`otspec.laws.KINDS`; a tree law's one step is its
#: root set, which the ``top_k`` law already covers).
LAW_KINDS = tuple(kind for kind in KINDS if not by_kind(kind).draft_tree)

#: What every other law shrinks to: k i.i.d. drafts from the first q.
_SIMPLEST = IIDLaw.kind


@dataclass(frozen=True)
class AuditProblem:
    p: tuple
    kind: str
    k: int
    qs: tuple  # one weight tuple (parameters "q"), k of them ("qs"), () ("tuples")
    tuples: tuple = ()  # parameters "tuples" only
    tw: tuple = ()

    @property
    def V(self) -> int:
        return len(self.p)

    @property
    def parameters(self) -> str:
        """How the law is built (:attr:`otspec.laws.DraftLaw.parameters`)."""
        return by_kind(self.kind).parameters

    def valid(self) -> bool:
        if sum(self.p) <= 0 or self.k < 1 or self.V < 2:
            return False
        if self.parameters == "tuples":
            return bool(self.tuples) and all(len(t) == self.k for t in self.tuples) and all(w > 0 for w in self.tw)
        if any(sum(q) <= 0 for q in self.qs):
            return False
        if by_kind(self.kind).k_within_support:
            return self.k <= sum(1 for x in self.qs[0] if x > 0)
        return len(self.qs) == (self.k if self.parameters == "qs" else 1)

    def build(self):
        p = normalized(self.p)
        make = by_kind(self.kind).constructor
        if self.parameters == "qs":
            return p, make([normalized(q) for q in self.qs])
        if self.parameters == "tuples":
            return p, make([list(t) for t in self.tuples], normalized(self.tw), vocab_size=self.V)
        return p, make(normalized(self.qs[0]), self.k)

    def size(self) -> tuple:
        _, law = self.build()
        return (self.V, self.k, law.num_tuples(), sum(self.p) + sum(map(sum, self.qs)) + sum(self.tw), LAW_KINDS.index(self.kind))

    def code(self) -> str:
        p, law = self.build()
        return f"p = {array_code(p)}\nlaw = {law_code(law)}"

    def shrinks(self) -> Iterator[AuditProblem]:
        """Simpler problems, most aggressive first."""
        if self.kind != _SIMPLEST and self.qs:
            yield replace(self, kind=_SIMPLEST, qs=(self.qs[0],), tuples=(), tw=())
        if self.k > 1:
            if self.parameters == "qs":
                yield replace(self, k=self.k - 1, qs=self.qs[:-1])
            elif self.parameters == "tuples":
                yield replace(self, k=self.k - 1, tuples=tuple(t[:-1] for t in self.tuples))
            else:
                yield replace(self, k=self.k - 1)
        for j in range(self.V):
            yield self._drop(j)
        if self.parameters == "tuples":
            for i in range(len(self.tuples)):
                yield replace(self, tuples=self.tuples[:i] + self.tuples[i + 1 :], tw=self.tw[:i] + self.tw[i + 1 :])
        arrays = [("p", None)] + [("qs", i) for i in range(len(self.qs))]
        for name, i in arrays:
            w = self.p if name == "p" else self.qs[i]
            for j, x in enumerate(w):
                for new in ([1] if x > 1 else []) + ([x // 2] if x > 3 else []) + [0]:
                    if new != x:
                        yield self._set(name, i, j, new)

    def _drop(self, j: int) -> AuditProblem:
        def cut(w):
            return tuple(w[:j]) + tuple(w[j + 1 :])

        if self.parameters == "tuples":
            keep = [(tuple(t), w) for t, w in zip(self.tuples, self.tw, strict=False) if j not in t]
            tuples = tuple(tuple(x - (x > j) for x in t) for t, _ in keep)
            return replace(self, p=cut(self.p), tuples=tuples, tw=tuple(w for _, w in keep))
        return replace(self, p=cut(self.p), qs=tuple(cut(q) for q in self.qs))

    def _set(self, name: str, i: int | None, j: int, value: int) -> AuditProblem:
        if name == "p":
            w = list(self.p)
            w[j] = value
            return replace(self, p=tuple(w))
        qs = [list(q) for q in self.qs]
        qs[i][j] = value
        return replace(self, qs=tuple(tuple(q) for q in qs))


def normalized(w) -> np.ndarray:
    w = np.asarray(w, dtype=np.float64)
    return w / w.sum()


def weight_pairs(rng: np.random.Generator, n_random: int) -> list:
    """(p, q) integer weights: an adversarial catalogue, then random ones (zeros included)."""
    out = []
    for V in (2, 3, 4):
        ramp = tuple(range(1, V + 1))
        out += [
            (ramp, ramp),  # p == q: everything must be accepted
            ((1,) * (V // 2) + (0,) * (V - V // 2), (0,) * (V // 2) + (1,) * (V - V // 2)),  # disjoint supports
            ((0,) + ramp[1:], ramp[::-1]),  # p = 0 at a token q proposes most
            (ramp[::-1], (0,) + ramp[1:]),  # q = 0 where p is largest: reached only by residual draws
            ((1,) * V, (50,) + (1,) * (V - 1)),  # a peaky draft against a flat target
            (tuple(1 if i == V - 1 else 0 for i in range(V)), ramp),  # one-hot target
            (ramp, (2, 2) + (1,) * (V - 2)),  # ties in q (greedy's top set)
        ]
    for _ in range(n_random):
        V = int(rng.integers(2, 6))
        p = rng.integers(0, 7, size=V)
        q = rng.integers(0, 7, size=V)
        p[rng.integers(V)] += 1
        q[rng.integers(V)] += 1
        out.append((tuple(int(x) for x in p), tuple(int(x) for x in q)))
    return out


def step_problems(rng: np.random.Generator, n_random: int, max_tuples: int) -> list:
    probs = []
    for pw, qw in weight_pairs(rng, n_random):
        V = len(pw)
        other = tuple(int(x) + 1 for x in rng.permutation(np.asarray(qw)))  # a second drafter
        for k in (1, 2, 3):
            if V**k > max_tuples:
                continue
            probs.append(AuditProblem(pw, "iid", k, (qw,)))
            probs.append(AuditProblem(pw, "without_replacement", k, (qw,)))
            probs.append(AuditProblem(pw, "greedy", k, (qw,)))
            probs.append(AuditProblem(pw, "product", k, (qw,) + (other,) * (k - 1)))
            m = int(rng.integers(1, 5))
            tuples = tuple(tuple(int(x) for x in rng.integers(0, V, size=k)) for _ in range(m))
            probs.append(AuditProblem(pw, "explicit", k, (), tuples, tuple(int(x) for x in rng.integers(1, 5, size=m))))
    return _unique_valid(probs)


#: Largest weight of the wide-range problems: 4e307 / (4e307 + 1) leaves 2.5e-308 for a weight 1,
#: just above the smallest normal float64 (2.2e-308).
SUBNORMAL_ADJACENT = 4 * 10**307


def wide_range_pairs() -> list:
    """(p, q) integer weights whose probabilities span 1e-3 ... 1e-12 and reach 2.5e-308.

    Rare tokens are where a biased rule hides: a token with p = 1e-4 that q proposes often must
    be kept with probability p/q, not 1."""
    decades = (10**12, 10**9, 10**6, 10**3, 1)  # p ~ (1, 1e-3, 1e-6, 1e-9, 1e-12)
    return [
        ((10**3, 1), (1, 1)),  # p = 1e-3 at a token q proposes half the time
        ((10**4, 1), (1, 1)),  # p = 1e-4
        (decades, (1,) * 5),  # every decade down to 1e-12 against a flat draft
        (decades, decades[::-1]),  # the draft's favourite is the target's rarest
        ((10**6, 10**3, 1), (1, 10**3, 10**6)),  # three tokens, mirrored decades
        ((SUBNORMAL_ADJACENT, 1), (1, 1)),  # p = 2.5e-308: subnormal-adjacent target mass
        ((1, 1), (SUBNORMAL_ADJACENT, 1)),  # q = 2.5e-308 at the token p wants most
        ((SUBNORMAL_ADJACENT, 1, 10**150), (1, SUBNORMAL_ADJACENT, 1)),  # tiny on both sides
    ]


def wide_range_problems(max_tuples: int) -> list:
    """Every draft-law kind with k = 1, 2 on :func:`wide_range_pairs` (deterministic: no generator)."""
    probs = []
    for pw, qw in wide_range_pairs():
        V = len(pw)
        for k in (1, 2):
            if V**k > max_tuples:
                continue
            for kind in LAW_KINDS:  # the extremes: two constant tuples, a flat second drafter
                params = by_kind(kind).parameters
                if params == "tuples":
                    probs.append(AuditProblem(pw, kind, k, (), ((0,) * k, (V - 1,) * k), (1, 1)))
                else:
                    probs.append(AuditProblem(pw, kind, k, (qw,) + (((1,) * V,) * (k - 1) if params == "qs" else ())))
    return _unique_valid(probs)


def random_problems(rng: np.random.Generator, n: int, max_tuples: int, keep=None) -> list:
    """``n`` seeded random problems beyond the catalogue (that ``keep`` accepts, when given): any
    kind, k <= 3, V <= 5, weights either small integers (0..7) or decades (1 ... 1e12, zeros
    included). Gives up after ``50 n`` draws (a verifier that applies to almost nothing)."""
    out: list = []
    for _ in range(50 * n):
        if len(out) >= n:
            break
        V, k, kind = int(rng.integers(2, 6)), int(rng.integers(1, 4)), LAW_KINDS[int(rng.integers(len(LAW_KINDS)))]
        if V**k > max_tuples:
            continue
        p, q, other = (_random_weights(rng, V) for _ in range(3))
        params = by_kind(kind).parameters
        if params == "tuples":
            m = int(rng.integers(1, 5))
            tuples = tuple(tuple(int(x) for x in rng.integers(0, V, size=k)) for _ in range(m))
            pr = AuditProblem(p, kind, k, (), tuples, tuple(int(x) for x in rng.integers(1, 5, size=m)))
        else:
            pr = AuditProblem(p, kind, k, (q,) + ((other,) * (k - 1) if params == "qs" else ()))
        if pr.valid() and (keep is None or keep(pr)):
            out.append(pr)
    return out


def _random_weights(rng: np.random.Generator, V: int) -> tuple:
    if rng.random() < 0.5:
        w = [int(x) for x in rng.integers(0, 8, size=V)]
    else:
        w = [0 if z else 10 ** int(e) for z, e in zip(rng.random(V) < 0.2, rng.integers(0, 13, size=V), strict=True)]
    w[int(rng.integers(V))] += 1
    return tuple(w)


def _unique_valid(probs: list) -> list:
    seen, out = set(), []
    for pr in probs:
        if pr.valid() and pr not in seen:
            seen.add(pr)
            out.append(pr)
    return out


@dataclass(frozen=True)
class ChainProblem:
    p: tuple = ()
    q: tuple = ()
    gamma: int = 1
    dirichlet: tuple = ()  # (V, seed, zero_prob) for a context-dependent pair

    def models(self):
        from otspec import models

        if self.dirichlet:
            V, s, z = self.dirichlet
            return models.dirichlet(V, seed=s, zero_prob=z), models.dirichlet(V, seed=s + 1000, zero_prob=z)
        return models.context_free(normalized(self.p)), models.context_free(normalized(self.q))

    def valid(self) -> bool:
        if self.dirichlet:
            return self.gamma >= 1
        return self.gamma >= 1 and len(self.p) >= 2 and sum(self.p) > 0 and sum(self.q) > 0

    def size(self) -> tuple:
        V = self.dirichlet[0] if self.dirichlet else len(self.p)
        return (self.gamma, V, 0 if not self.dirichlet else 1, sum(self.p) + sum(self.q))

    def code(self) -> str:
        if self.dirichlet:
            V, s, z = self.dirichlet
            return (
                f"p_model = models.dirichlet({V}, seed={s}, zero_prob={z})\n"
                f"q_model = models.dirichlet({V}, seed={s + 1000}, zero_prob={z})\ngamma = {self.gamma}"
            )
        return (
            f"p_model = models.context_free({array_code(normalized(self.p))})\n"
            f"q_model = models.context_free({array_code(normalized(self.q))})\ngamma = {self.gamma}"
        )

    def shrinks(self):
        if self.gamma > 1:
            yield replace(self, gamma=self.gamma - 1)
        if self.dirichlet:
            return
        for j in range(len(self.p)):
            yield replace(self, p=self.p[:j] + self.p[j + 1 :], q=self.q[:j] + self.q[j + 1 :])
        for name in ("p", "q"):
            w = getattr(self, name)
            for j, x in enumerate(w):
                for new in ([1] if x > 1 else []) + [0]:
                    if new != x:
                        yield replace(self, **{name: w[:j] + (new,) + w[j + 1 :]})
