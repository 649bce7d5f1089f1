"""The default test run is reproducible: the hypothesis profile loaded when
HYPOTHESIS_PROFILE is unset draws the same examples every run; exploration is opt-in."""

import os

from hypothesis import settings


def test_default_profile_is_derandomized():
    if os.environ.get("HYPOTHESIS_PROFILE") == "explore":
        return  # the explicit exploration profile is random on purpose
    assert settings.default.derandomize is True


def test_exploration_profile_exists_and_is_random():
    prof = settings.get_profile("explore")
    assert prof.derandomize is False and prof.max_examples >= settings.get_profile("ci").max_examples
