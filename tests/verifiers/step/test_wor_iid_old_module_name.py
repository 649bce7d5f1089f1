"""The module's 0.1.0 name still imports, warns, and gives the same objects (version policy)."""

import importlib
import sys

import pytest

import otspec.verifiers.step.wor_iid as new


def test_old_module_name_warns_and_aliases():
    sys.modules.pop("otspec.verifiers.step.iid_embedding_wor", None)
    with pytest.warns(DeprecationWarning, match=r"otspec\.verifiers\.step\.wor_iid"):
        old = importlib.import_module("otspec.verifiers.step.iid_embedding_wor")
    for name in old.__all__:
        assert getattr(old, name) is getattr(new, name)
