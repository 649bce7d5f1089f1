"""CLI plug-ins: commands declared as entry points of the group "otspec.cli" (torch commands live
outside the core this way). A working plug-in runs; a core command never imports a plug-in; a
plug-in that fails to import is listed with its reason and, when run, exits 2 with one line, while
the core commands keep working."""

import importlib.metadata
import sys

import pytest

from otspec.cli import PLUGIN_GROUP, main

GOOD = """
def register(sub):
    ap = sub.add_parser("hello", help="say hello")
    ap.add_argument("--name", default="world")
    ap.set_defaults(func=lambda args: print(f"hello {args.name}") or 0)
"""


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    """Install fake plug-in modules and entry points: ``plugins({"hello": source, ...})``."""
    monkeypatch.syspath_prepend(str(tmp_path))

    def install(sources: dict[str, str]) -> None:
        eps = []
        for name, source in sources.items():
            mod = f"_otspec_fake_plugin_{name}"
            (tmp_path / f"{mod}.py").write_text(source)
            monkeypatch.delitem(sys.modules, mod, raising=False)
            eps.append(importlib.metadata.EntryPoint(name=name, value=f"{mod}:register", group=PLUGIN_GROUP))
        real = importlib.metadata.entry_points

        def fake(**params):
            if params.get("group") == PLUGIN_GROUP:
                return importlib.metadata.EntryPoints(eps)
            return real(**params)

        monkeypatch.setattr(importlib.metadata, "entry_points", fake)

    return install


def test_plugin_command_runs(plugins, capsys):
    plugins({"hello": GOOD})
    assert main(["hello", "--name", "otspec"]) == 0
    assert capsys.readouterr().out == "hello otspec\n"
    assert main(["--help"]) == 0
    assert "say hello" in capsys.readouterr().out


def test_core_command_does_not_import_plugins(plugins, capsys):
    plugins({"hello": GOOD.replace("def register", "import sys; sys.exit(7)\ndef register")})
    assert main(["bound", "--vocab", "20", "--drafts", "2", "--law", "iid"]) == 0
    assert "_otspec_fake_plugin_hello" not in sys.modules
    assert "optimal acceptance" in capsys.readouterr().out


@pytest.mark.parametrize(
    "source, reason",
    [
        ("raise ImportError('this plug-in needs torch; pip install otspec[torch]')", "needs torch"),
        ("import _no_such_module_anywhere\ndef register(sub): pass", "No module named"),
        ("def register(sub):\n    raise RuntimeError('broken register')", "broken register"),
        ("import sys\nsys.exit(0)", "SystemExit"),
        (
            GOOD.replace('ap.add_argument("--name"', 'raise RuntimeError("half registered")\n    ap.add_argument("--name"'),
            "half registered",
        ),
    ],
)
def test_broken_plugin_is_listed_and_fails_closed(plugins, capsys, source, reason):
    plugins({"hello": source})
    # the core commands still work
    assert main(["block", "--vocab", "3", "--gamma", "2", "--lp", "no"]) == 0
    capsys.readouterr()
    # the plug-in is listed with its reason
    assert main(["--help"]) == 0
    assert "unavailable" in capsys.readouterr().out
    # running it (with any flags, --help included) is one line and exit 2
    for argv in (["hello"], ["hello", "--name", "x"], ["hello", "--help"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "`otspec hello` is unavailable" in err and reason in err, err


def test_plugin_cannot_shadow_a_core_command(plugins, capsys):
    plugins({"bound": GOOD.replace('"hello"', '"bound"')})
    assert main(["bound", "--vocab", "20", "--drafts", "2", "--law", "iid"]) == 0
    assert "optimal acceptance" in capsys.readouterr().out
