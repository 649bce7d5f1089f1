"""Context-dependent models: determinism, caching, validation, enumeration."""

import numpy as np
import pytest

from otspec import models, prefixes
from otspec._tolerances import FLOAT64_ATOL
from otspec.errors import (
    InvalidDistributionError,
    InvalidDraftCountError,
    InvalidDraftsError,
    ProblemTooLargeError,
    ShapeMismatchError,
)
from tests._tolerances import FALSE_ALARM, FLOAT64_ULPS_ATOL


def test_dirichlet_is_a_function_of_seed_and_prefix():
    a = models.dirichlet(5, seed=3, concentration=0.5)
    b = models.dirichlet(5, seed=3, concentration=0.5)
    # visit prefixes in different orders: same conditionals
    order1 = [a(x) for x in [(), (1,), (1, 2), (4, 4, 4)]]
    order2 = [b(x) for x in [(4, 4, 4), (1, 2), (1,), ()]][::-1]
    for u, v in zip(order1, order2, strict=False):
        assert np.array_equal(u, v)
    assert not np.array_equal(a((1,)), a((2,)))
    assert not np.array_equal(a((1,)), models.dirichlet(5, seed=4, concentration=0.5)((1,)))
    assert not np.array_equal(a(()), a((0,)))  # length is part of the context
    assert a((1,)) is a((1,))  # cached
    assert abs(a((3, 1)).sum() - 1) < FLOAT64_ATOL and a((3, 1)).dtype == np.float64


def test_concentration_controls_peakiness():
    flat = np.mean([models.dirichlet(50, concentration=100.0, seed=s)(()).max() for s in range(5)])
    peaky = np.mean([models.dirichlet(50, concentration=0.05, seed=s)(()).max() for s in range(5)])
    assert peaky > 3 * flat


def test_zero_prob_gives_exact_zeros():
    m = models.dirichlet(6, seed=1, zero_prob=0.5)
    rows = np.stack([m((i,)) for i in range(6)])
    assert (rows == 0).sum() > 0 and np.all((rows > 0).sum(axis=1) >= 1)
    assert np.allclose(rows.sum(axis=1), 1)


def test_markov_depends_on_last_tokens_only():
    m = models.markov(4, order=1, seed=2)
    assert np.array_equal(m((0, 3)), m((2, 3)))
    assert not np.array_equal(m((0, 3)), m((0, 2)))
    m2 = models.markov(4, order=2, seed=2)
    assert np.array_equal(m2((1, 0, 3)), m2((2, 0, 3)))
    assert not np.array_equal(m2((1, 0, 3)), m2((1, 1, 3)))
    m0 = models.markov(4, order=0, seed=2)
    assert np.array_equal(m0(()), m0((1, 2)))


def test_close_draft():
    p = models.dirichlet(6, seed=0, concentration=0.5)
    assert np.allclose(models.close_draft(p, noise=0.0)((1,)), p((1,)))
    q = models.close_draft(p, noise=0.2, temperature=2.0, seed=5)
    x = q((1, 2))
    assert abs(x.sum() - 1) < FLOAT64_ATOL and np.all(x > 0)
    tv_near = 0.5 * np.abs(models.close_draft(p, noise=0.1, seed=5)((1,)) - p((1,))).sum()
    tv_far = 0.5 * np.abs(models.close_draft(p, noise=0.9, seed=5)((1,)) - p((1,))).sum()
    assert tv_near < tv_far
    # temperature: flatter than the target
    hot = models.close_draft(p, noise=0.0, temperature=3.0)
    assert hot((2,)).max() < p((2,)).max()


def test_tabulated_and_context_free():
    m = models.tabulated({(): [0.5, 0.5], (1,): [0.0, 1.0]})
    assert m((1,)).tolist() == [0.0, 1.0]
    with pytest.raises(InvalidDraftsError, match="not in the model's table"):
        m((0,))
    with pytest.raises(InvalidDistributionError):
        models.tabulated({(): [0.5, 0.6]})
    with pytest.raises(ShapeMismatchError):
        models.tabulated({(): [0.5, 0.5], (0,): [1.0, 0.0, 0.0]})
    c = models.context_free([0.2, 0.8])
    assert c((1, 1, 0)).tolist() == [0.2, 0.8]


def test_as_model_validates_every_conditional():
    def bad(prefix):
        return [0.5, 0.5] if len(prefix) == 0 else [0.7, 0.7]

    m = models.as_model(bad)
    assert m.V == 2
    with pytest.raises(InvalidDistributionError, match=r"model\(\(0,\)\)"):
        m((0,))
    with pytest.raises(InvalidDistributionError):
        models.as_model(lambda prefix: [0.5, 0.5, 0.0] if prefix else [0.5, 0.5])((1,))
    with pytest.raises(InvalidDistributionError):
        models.as_model([0.5, 0.5])
    with pytest.raises(ShapeMismatchError):  # a vocabulary mismatch is a shape error
        models.as_model(models.context_free([0.5, 0.5]), V=3)


@pytest.mark.parametrize("prefix", [(3,), (-1,), (0.5,), "ab", 7])
def test_bad_prefixes(prefix):
    with pytest.raises(InvalidDraftsError):
        models.dirichlet(3)(prefix)


@pytest.mark.parametrize(
    "call, err",
    [
        (lambda: models.dirichlet(0), InvalidDraftCountError),
        (lambda: models.dirichlet(3, concentration=0), InvalidDistributionError),
        (lambda: models.dirichlet(3, concentration=float("nan")), InvalidDistributionError),
        (lambda: models.dirichlet(3, seed=-1), InvalidDraftCountError),
        (lambda: models.dirichlet(3, zero_prob=1.0), InvalidDistributionError),
        (lambda: models.close_draft(models.dirichlet(3), noise=1.5), InvalidDistributionError),
        (lambda: models.close_draft(models.dirichlet(3), temperature=0), InvalidDistributionError),
        (lambda: models.markov(3, order=-1), InvalidDraftCountError),
    ],
)
def test_bad_parameters(call, err):
    with pytest.raises(err):
        call()


def test_enumerate_prefixes():
    p, q = models.dirichlet(3, seed=0), models.dirichlet(3, seed=1)
    t = prefixes.enumerate_prefixes(p, q, 3)
    for i in range(4):
        assert abs(t.p_joint[i].sum() - 1) < FLOAT64_ATOL and abs(t.q_joint[i].sum() - 1) < FLOAT64_ATOL
    paths = t.paths(2)
    for n in (0, 4, 8):
        x = tuple(int(v) for v in paths[n])
        assert np.array_equal(t.p_cond[2][n], p(x))
        assert abs(t.q_joint[2][n] - q(())[x[0]] * q(x[:1])[x[1]]) < FLOAT64_ULPS_ATOL
    anc = t.ancestors(3)
    assert anc.shape == (27, 4) and anc[26].tolist() == [0, 2, 8, 26]
    with pytest.raises(ProblemTooLargeError, match="prefixes"):
        prefixes.enumerate_prefixes(models.dirichlet(5000), models.dirichlet(5000), 2)
    with pytest.raises(ProblemTooLargeError, match="memory cap"):
        prefixes.enumerate_prefixes(p, q, 3, memory_cap=100)
    assert prefixes.enumeration_size(3, 3) == 40


def test_sample_path_and_conditionals_along():
    m = models.dirichlet(4, seed=9)
    a = models.sample_path(m, 5, rng=np.random.default_rng(1))
    b = models.sample_path(m, 5, rng=np.random.default_rng(1))
    assert a == b and len(a) == 5 and all(0 <= x < 4 for x in a)
    C = models.conditionals_along(m, a)
    assert C.shape == (6, 4) and np.array_equal(C[3], m(a[:3]))
    with pytest.raises(TypeError):
        models.sample_path(m, 3, rng=1)
    # first-token frequencies follow the model (chi-square, false alarm 1e-6)
    from scipy.stats import chi2

    rng = np.random.default_rng(5)
    n = 20_000
    counts = np.bincount([models.sample_path(m, 1, rng=rng)[0] for _ in range(n)], minlength=4)
    exp = n * m(())
    assert chi2.sf(((counts - exp) ** 2 / exp).sum(), 3) > FALSE_ALARM
