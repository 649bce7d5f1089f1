"""otspec._optional.require: the one guard of every optional dependency (maxflow, plots, torch, ...)
fails with what needed the package and the exact install command."""

import sys

import pytest

from otspec._optional import require
from otspec.bounds import maxflow
from otspec.errors import OtspecInputError


def test_present_module_is_returned():
    import math

    assert require("math", None, needed_by="x") is math


def test_missing_module_names_the_need_and_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ortools.graph.python.max_flow", None)
    with pytest.raises(
        ImportError,
        match=r"^method='maxflow' \(OR-Tools\) needs ortools\.graph\.python\.max_flow, which is not installed; install it with `pip install \"otspec\[maxflow\]\"`$",
    ):
        maxflow.require_ortools()


def test_install_command_and_error_type_can_be_given():
    class MissingThing(OtspecInputError):
        pass

    with pytest.raises(MissingThing, match=r"the source needs no_such_pkg_1234, .*`pip install no-such-pkg==1\.0`$"):
        require("no_such_pkg_1234", None, needed_by="the source", install="pip install no-such-pkg==1.0", error=MissingThing)
