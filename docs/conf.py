"""Sphinx configuration for the otspec documentation (built with -W in the test suite)."""

import os
import sys

sys.path.insert(0, os.path.abspath("_ext"))
sys.path.insert(0, os.path.abspath(".."))

project = "otspec"
author = "the otspec developers"
copyright = "2026, the otspec developers"
release = "0.1.0"

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "clihelp",
]
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False
napoleon_use_ivar = True
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": False}
autodoc_typehints = "none"
autodoc_member_order = "bysource"
nitpicky = False
exclude_patterns = ["_build"]
html_theme = "alabaster"
html_static_path = []
suppress_warnings = ["toc.not_included", "ref.python"]
