r"""The pytest plugin of :mod:`otspec.testing`: check a verifier's losslessness in any project's CI.

Installed with otspec (entry point ``pytest11``: ``otspec = "otspec.testing.pytest_plugin"``), so
every pytest run where otspec is installed has it; it does nothing until a test asks for it.

The marker runs the check after the test body, and fails the test with a counterexample::

    import pytest

    @pytest.mark.otspec_verifier(my_batched_sampler, delta=0.01, alpha=1e-3, beta=1e-3)
    def test_rejection_sampler_is_lossless():
        pass

The fixture does the same from inside a test (and returns what was checked)::

    def test_rejection_sampler_is_lossless(otspec_check):
        result = otspec_check(my_batched_sampler, delta=0.01)
        print(result.statement)   # "detects any output law at TV >= 0.01 from p with probability >= 0.999 ..."

``otspec_battery`` gives the problems themselves (a list of ``(p, law)``) for tests of one's own.

The verifier is anything :func:`otspec.testing.as_verifier` accepts: a batched numpy sampler or
conditional law (:mod:`otspec.testing.batched`), an :class:`otspec.verifiers.Verifier`, or a batched
torch verifier of the ``otspec_gpu`` protocol. One with an exact kernel is checked exactly; a
sampler by the test of :mod:`otspec.testing.power`, whose sample size guarantees: *detects any output
law at TV >= delta from p with probability >= 1 - beta*, with false alarm at most alpha.

Command-line defaults (the marker's and the fixture's keyword arguments override them):
``--otspec-delta`` (0.01), ``--otspec-alpha`` (1e-3), ``--otspec-beta`` (1e-3), ``--otspec-seed`` (0),
``--otspec-problems`` (6 sampled problems).
"""

from __future__ import annotations

from typing import Any

import pytest

__all__ = ["DEFAULTS", "otspec_battery", "otspec_check", "pytest_addoption", "pytest_configure", "pytest_runtest_call"]

#: Defaults of the check's options (command-line flags ``--otspec-<name>`` override them).
DEFAULTS = {"delta": 0.01, "alpha": 1e-3, "beta": 1e-3, "seed": 0, "problems": 6}

_TYPES = {"delta": float, "alpha": float, "beta": float, "seed": int, "problems": int}

_MARKER = "otspec_verifier"


def pytest_addoption(parser: Any) -> None:
    """Add the ``--otspec-*`` options (defaults of the marker and the fixture).

    Parameters
    ----------
    parser : pytest.Parser
        pytest's parser.
    """
    group = parser.getgroup("otspec", "otspec verifier checks (otspec.testing)")
    for name, default in DEFAULTS.items():
        group.addoption(
            f"--otspec-{name}", dest=f"otspec_{name}", type=_TYPES[name], default=None, help=f"default {name} of otspec checks ({default})"
        )


def pytest_configure(config: Any) -> None:
    """Register the marker (so ``--strict-markers`` accepts it).

    Parameters
    ----------
    config : pytest.Config
        pytest's configuration.
    """
    config.addinivalue_line(
        "markers",
        f"{_MARKER}(verifier, **options): after the test body, check that the verifier is lossless on otspec's problem battery "
        "(options: delta, alpha, beta, seed, problems, method)",
    )


def _options(config: Any, given: dict) -> dict:
    out = {}
    for name, default in DEFAULTS.items():
        flag = config.getoption(f"otspec_{name}", default=None)
        out[name] = default if flag is None else flag
    out.update(given)
    return out


def _run(config: Any, verifier: Any, options: dict):
    from otspec.testing._findings import VerifierAssertionError
    from otspec.testing.battery import check_battery

    try:
        return check_battery(verifier, **_options(config, options))
    except VerifierAssertionError as exc:
        pytest.fail(f"otspec: verifier is not lossless\n{exc}", pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: Any):
    """Run the test body, then the check of its ``otspec_verifier`` marker (if any).

    Parameters
    ----------
    item : pytest.Item
        The test being run.

    Returns
    -------
    object
        The result of the inner hooks (unchanged).

    Raises
    ------
    pytest.fail.Exception
        If the marked verifier fails the check (the message holds the counterexample).
    """
    result = yield
    marker = item.get_closest_marker(_MARKER)
    if marker is not None:
        if len(marker.args) != 1:
            pytest.fail(f"@pytest.mark.{_MARKER} takes one verifier (got {len(marker.args)} positional arguments)", pytrace=False)
        _run(item.config, marker.args[0], dict(marker.kwargs))
    return result


@pytest.fixture
def otspec_check(request: Any):
    """A callable ``check(verifier=None, **options) -> BatteryCheck`` that fails the test with a
    counterexample when the verifier is not lossless (``verifier=None``: the marker's).

    Parameters
    ----------
    request : pytest.FixtureRequest
        pytest's request.

    Returns
    -------
    callable
        ``check(verifier=None, *, delta, alpha, beta, seed, problems, method)``.
    """
    marker = request.node.get_closest_marker(_MARKER)

    def check(verifier: Any = None, **options: Any):
        if verifier is None:
            if marker is None or not marker.args:
                pytest.fail(f"otspec_check() needs a verifier (or a @pytest.mark.{_MARKER}(verifier) on the test)", pytrace=False)
            verifier, options = marker.args[0], {**marker.kwargs, **options}
        return _run(request.config, verifier, options)

    return check


@pytest.fixture
def otspec_battery(request: Any) -> list:
    """The audit's small problems as ``(p, law)`` pairs (seed ``--otspec-seed``), smallest first.

    Parameters
    ----------
    request : pytest.FixtureRequest
        pytest's request.

    Returns
    -------
    list of tuple
        ``(p, law)``: ``p`` a float64 ``(V,)`` array, ``law`` a draft law (V <= 5, k <= 3).
    """
    import numpy as np

    from otspec.testing._problems import step_problems

    seed = _options(request.config, {})["seed"]
    return [pr.build() for pr in sorted(step_problems(np.random.default_rng(seed), 40, 64), key=lambda pr: pr.size())]
