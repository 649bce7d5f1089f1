"""The package's layers point one way, no module reaches into another's private names, no two
modules import each other (directly or round a longer circle), and the core never imports the
torch package.

Every ``import`` in ``otspec`` and ``otspec_gpu`` (module level or inside a function) is read with
``ast``. In ``otspec`` a module may import only from its own layer or the layers below it; in both
packages no module imports a private name (``_x``) of another module and no import circle exists;
``otspec`` never imports ``otspec_gpu`` or ``torch`` (the torch side registers through entry points).
A private *module* (a dotted name with a part ``_x``) is imported only from inside the package that
holds it: ``otspec.cli.toolkit`` and :mod:`otspec.plugin` are what the torch side builds on, never
``otspec._validation``. Inside ``otspec_gpu`` the torch library (verifiers, kernels, samplers,
models, scoring) never imports its applications (decoding, SPRINTER, the corpus, the CLI).
Runtime: well under a second.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "otspec"
GPU_ROOT = ROOT.parent / "otspec_gpu"

#: Lowest layer first. A module imports only from layers with an index <= its own.
LAYERS = [
    ("otspec._tolerances", "otspec.errors", "otspec._docs", "otspec._display", "otspec._arith", "otspec._optional"),
    ("otspec._validation", "otspec.sampling", "otspec.plugin"),
    ("otspec._race", "otspec.stats"),
    ("otspec.laws", "otspec.models", "otspec.prefixes", "otspec.synthetic", "otspec.io", "otspec.metrics", "otspec.corpus_shards"),
    ("otspec.trees",),
    ("otspec.bounds",),
    ("otspec.verifiers",),
    ("otspec.report", "otspec.truncation", "otspec.theory", "otspec.trace_report", "otspec.logs"),
    ("otspec.cli", "otspec.plot", "otspec.testing", "otspec.__main__", "otspec"),
]

#: Deliberate upward references, each with its reason (none: every arrow points down).
ALLOWED_UPWARD: set[tuple[str, str]] = set()


def _layer(name: str) -> int:
    best, best_len = None, -1
    for i, prefixes in enumerate(LAYERS):
        for pre in prefixes:
            if (name == pre or name.startswith(pre + ".")) and len(pre) > best_len:
                best, best_len = i, len(pre)
    assert best is not None, f"module {name} is in no layer; add it to LAYERS"
    return best


def _modules(root: Path = ROOT):
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        yield ".".join(parts), ast.parse(path.read_text())


def _in_core(name: str) -> bool:
    """``otspec`` and its submodules (``otspec_gpu`` is an optional adapter the CLI imports lazily)."""
    return name == "otspec" or name.startswith("otspec.")


def _in_gpu(name: str) -> bool:
    """``otspec_gpu`` and its submodules."""
    return name == "otspec_gpu" or name.startswith("otspec_gpu.")


def _imports(tree: ast.AST, package=_in_core):
    """``(module, name)`` of every import of ``package``'s modules (``name`` None for ``import m``)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and package(node.module):
            for alias in node.names:
                yield node.module, alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if package(alias.name):
                    yield alias.name, None


def _gpu_modules() -> list:
    return list(_modules(GPU_ROOT))


def _either(name: str) -> bool:
    return _in_core(name) or _in_gpu(name)


@pytest.mark.parametrize("module, tree", list(_modules()), ids=lambda x: x if isinstance(x, str) else "")
def test_imports_point_down(module, tree):
    own = _layer(module)
    for target, name in _imports(tree):
        full = f"{target}.{name}" if name and target == "otspec" else target
        if (_root(module), _root(full)) in ALLOWED_UPWARD:
            continue
        assert _layer(full) <= own, f"{module} (layer {own}) imports {full} (layer {_layer(full)})"


def _root(name: str) -> str:
    for prefixes in LAYERS:
        for pre in prefixes:
            if name == pre or name.startswith(pre + "."):
                return pre
    return name


@pytest.mark.parametrize("module, tree", list(_modules()), ids=lambda x: x if isinstance(x, str) else "")
def test_no_private_names_across_modules(module, tree):
    for target, name in _imports(tree):
        if name and name.startswith("_") and not name.startswith("__") and target != "otspec":
            raise AssertionError(f"{module} imports the private name {name} from {target}")


def test_bounds_never_import_verifiers():
    for module, tree in _modules():
        if module.startswith("otspec.bounds"):
            assert not any(t.startswith("otspec.verifiers") for t, _ in _imports(tree)), module


# -- no import circles ------------------------------------------------------------------------


def _targets(module: str, tree: ast.AST, known: set[str], package=_in_core) -> set[str]:
    """The ``package`` modules ``module`` imports anywhere in its body: ``from a.b import c`` names
    the module ``a.b.c`` when that is a module, else ``a.b``."""
    out = set()
    for target, name in _imports(tree, package):
        sub = f"{target}.{name}" if name else target
        out.add(sub if sub in known else target)
    out.discard(module)
    return out


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in graph:
                    continue
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_circle_finder_finds_circles():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _circles(graph) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": {"a"}}) == [["a", "b"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circles():
    """No module imports itself back through others, counting imports inside functions too (a
    function-level import that closes a circle only hides it)."""
    modules = dict(_modules())
    known = set(modules)
    graph = {m: _targets(m, tree, known) for m, tree in modules.items()}
    assert _circles(graph) == []


# -- the core's CLI is torch-free by construction -----------------------------------------------


def _foreign(tree: ast.AST, packages: tuple[str, ...]):
    """Imports of ``packages`` in ``tree``: import statements and ``importlib.import_module("...")``."""

    def hit(name: str) -> bool:
        return any(name == p or name.startswith(p + ".") for p in packages)

    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and hit(node.module):
            yield node.module
        elif isinstance(node, ast.Import):
            yield from (a.name for a in node.names if hit(a.name))
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", None)) in ("import_module", "__import__")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and hit(node.args[0].value)
        ):
            yield node.args[0].value


def test_core_never_imports_torch_or_otspec_gpu():
    """Torch commands and adapters are plug-ins (entry points of the groups "otspec.cli" and
    "otspec.adapters"), never imported by the core: not by its CLI, not anywhere else."""
    for module, tree in _modules():
        assert list(_foreign(tree, ("otspec_gpu", "torch"))) == [], module
    assert list(_foreign(ast.parse("from otspec_gpu.cli import decode"), ("otspec_gpu",))) == ["otspec_gpu.cli"]
    assert list(_foreign(ast.parse("importlib.import_module('otspec_gpu.cli')"), ("otspec_gpu",))) == ["otspec_gpu.cli"]


# -- otspec_gpu: no private names across modules, no circles ---------------------------------------


@pytest.mark.parametrize("module, tree", _gpu_modules(), ids=lambda x: x if isinstance(x, str) else "")
def test_gpu_no_private_names_across_modules(module, tree):
    """``otspec_gpu`` reaches into no other module's private names, its own or the core's (a name
    two modules share is public in one of them; ``from pkg import _module`` counts too)."""
    bad = [
        f"{name} from {target}"
        for target, name in _imports(tree, _either)
        if name and name.startswith("_") and not name.startswith("__") and target not in ("otspec", "otspec_gpu")
    ]
    assert bad == [], f"{module} imports the private names {bad}"


def test_gpu_no_import_circles():
    """No ``otspec_gpu`` module imports itself back through others (function-level imports count)."""
    modules = dict(_gpu_modules())
    known = set(modules)
    graph = {m: _targets(m, tree, known, _in_gpu) for m, tree in modules.items()}
    assert _circles(graph) == []


def test_gpu_checks_see_violations():
    """The two checks above find what they look for (so a pass means something)."""
    tree = ast.parse("from otspec_gpu.decoding import _multinomial\nimport otspec_gpu.trace\n")
    assert list(_imports(tree, _either)) == [("otspec_gpu.decoding", "_multinomial"), ("otspec_gpu.trace", None)]
    graph = {
        m: _targets(m, ast.parse(src), {"otspec_gpu.a", "otspec_gpu.b"}, _in_gpu)
        for m, src in [("otspec_gpu.a", "def f():\n    from otspec_gpu import b\n"), ("otspec_gpu.b", "from otspec_gpu.a import x\n")]
    }
    assert _circles(graph) == [["otspec_gpu.a", "otspec_gpu.b"]]


# -- private modules stay inside their package ----------------------------------------------------


def _private_owner(module: str) -> str | None:
    """The package a private module belongs to (the dotted prefix before its first ``_x`` part),
    or None for a public module: ``otspec.cli._common`` -> ``otspec.cli``."""
    parts = module.split(".")
    for i, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:i])
    return None


def _imported_modules(tree: ast.AST, known: set[str]):
    """Every module of either package that ``tree`` imports (``from pkg import _mod`` names the
    module ``pkg._mod`` when that is one)."""
    for target, name in _imports(tree, _either):
        sub = f"{target}.{name}" if name else target
        yield sub if sub in known else target


def _private_module_violations(modules: dict[str, ast.AST]) -> list[str]:
    known = set(modules)
    bad = []
    for module, tree in modules.items():
        for target in _imported_modules(tree, known):
            owner = _private_owner(target)
            if owner is not None and not (module == owner or module.startswith(owner + ".")):
                bad.append(f"{module} imports the private module {target} (private to {owner})")
    return bad


def test_no_private_modules_across_packages():
    """No module imports another package's private module, in either package."""
    modules = dict(_modules()) | dict(_gpu_modules())
    assert _private_module_violations(modules) == []


def test_private_module_check_sees_violations():
    modules = {
        "otspec_gpu.cli.decode": ast.parse("from otspec.cli._common import CliError\nfrom otspec import _race\n"),
        "otspec.cli.bound": ast.parse("from otspec.cli._common import CliError\n"),
        "otspec.cli._common": ast.parse(""),
        "otspec._race": ast.parse(""),
    }
    assert _private_module_violations(modules) == [
        "otspec_gpu.cli.decode imports the private module otspec.cli._common (private to otspec.cli)",
        "otspec_gpu.cli.decode imports the private module otspec._race (private to otspec)",
    ]
    assert _private_owner("otspec.verifiers.step._luce_law") == "otspec.verifiers.step"
    assert _private_owner("otspec.cli.toolkit") is None


# -- otspec_gpu: the library never imports its applications ---------------------------------------

#: The applications built on the torch library, each a package or module of ``otspec_gpu``: the
#: decoder and its recorder (trace, exact theory, report), SPRINTER, the corpus, the command line.
GPU_APPLICATIONS = (
    "otspec_gpu.decoding",
    "otspec_gpu.drafters",
    "otspec_gpu.prompt_lookup",
    "otspec_gpu.recording",
    "otspec_gpu.theory",
    "otspec_gpu.trace",
    "otspec_gpu.report",
    "otspec_gpu.sprinter",
    "otspec_gpu.corpus",
    "otspec_gpu.cli",
)

#: Applications that use another application, each with its reason.
GPU_APP_USES: dict[tuple[str, str], str] = {
    ("otspec_gpu.corpus", "otspec_gpu.sprinter"): "the corpus reads SPRINTER's packaged prompt sets as one of its sources",
    ("otspec_gpu.decoding", "otspec_gpu.drafters"): "the decoder takes its drafter from the drafter registry",
    ("otspec_gpu.drafters", "otspec_gpu.prompt_lookup"): "prompt lookup is one of the registered drafters",
    ("otspec_gpu.decoding", "otspec_gpu.recording"): "the recorder is the decoder's last stage",
    ("otspec_gpu.decoding", "otspec_gpu.report"): "a decode result carries its theory-vs-practice report",
    ("otspec_gpu.recording", "otspec_gpu.theory"): "the recorder stores the exact theory of every round",
    ("otspec_gpu.recording", "otspec_gpu.trace"): "the recorder accumulates the trace",
}


def _application(name: str) -> str | None:
    for app in GPU_APPLICATIONS:
        if name == app or name.startswith(app + "."):
            return app
    return None


def _gpu_layer_violations(modules: dict[str, ast.AST]) -> list[str]:
    known = set(modules)
    bad = []
    for module, tree in modules.items():
        mine = _application(module)
        for target in _targets(module, tree, known, _in_gpu):
            theirs = _application(target)
            if theirs is None or theirs == mine or mine == "otspec_gpu.cli":
                continue
            if mine is None:
                bad.append(f"library module {module} imports the application module {target}")
            elif (mine, theirs) not in GPU_APP_USES:
                bad.append(f"application {mine} ({module}) imports another application, {target}, without a stated reason")
    return bad


def test_gpu_library_never_imports_its_applications():
    """The torch library (everything outside :data:`GPU_APPLICATIONS`) imports no application; an
    application uses another only with a reason in :data:`GPU_APP_USES`; the CLI sits on top."""
    assert _gpu_layer_violations(dict(_gpu_modules())) == []


def test_gpu_layer_check_sees_violations():
    modules = {
        "otspec_gpu.verifiers.tree": ast.parse("from otspec_gpu.decoding import decode\n"),
        "otspec_gpu.sprinter.data": ast.parse("from otspec_gpu.corpus import run_corpus\n"),
        "otspec_gpu.cli.decode": ast.parse("import otspec_gpu.decoding\n"),
        "otspec_gpu.decoding": ast.parse(""),
        "otspec_gpu.corpus": ast.parse(""),
    }
    assert _gpu_layer_violations(modules) == [
        "library module otspec_gpu.verifiers.tree imports the application module otspec_gpu.decoding",
        "application otspec_gpu.sprinter (otspec_gpu.sprinter.data) imports another application, otspec_gpu.corpus, without a stated reason",
    ]


# -- experiments use the public API; a benchmark of an internal says which and why ------------------

EXPERIMENTS = ROOT.parent / "experiments"

#: Benchmarks that time a private module of the core directly, each with its reason.
BENCH_PRIVATE: dict[tuple[str, str], str] = {
    ("bench/bench_optimal_verifier.py", "otspec.verifiers.step._iid_selection"): "times the selection solver alone, beside the verifier",
    ("bench/bench_optimal_verifier.py", "otspec.verifiers.step._iid_tree"): "times the threshold-tree builders alone",
    ("bench/bench_optimal_wor.py", "otspec.verifiers.step._luce_kernels"): "reports whether the compiled law kernels are in use",
    ("bench/bench_wor.py", "otspec._race"): "times the without-replacement race integral alone",
}


def _experiment_private_imports() -> set[tuple[str, str]]:
    found = set()
    for path in sorted(EXPERIMENTS.rglob("*.py")):
        rel = str(path.relative_to(EXPERIMENTS))
        for target, name in _imports(ast.parse(path.read_text()), _either):
            mod = f"{target}.{name}" if name and name.startswith("_") else target  # `from otspec import _race` names a module
            if _private_owner(mod) is not None:
                found.add((rel, mod))
    return found


def test_experiments_import_only_public_modules():
    """Experiment scripts use otspec's public API (DESIGN: experiments import only public names);
    a benchmark that times an internal is listed in :data:`BENCH_PRIVATE` with its reason."""
    found = _experiment_private_imports()
    unlisted = sorted(f for f in found if f not in BENCH_PRIVATE)
    assert unlisted == [], f"private modules imported by experiments without a stated reason: {unlisted}"
    assert all(rel.startswith("bench/") for rel, _ in found), "only benchmarks may time an internal"
    stale = sorted(k for k in BENCH_PRIVATE if k not in found)
    assert stale == [], f"BENCH_PRIVATE lists imports that no longer exist: {stale}"
