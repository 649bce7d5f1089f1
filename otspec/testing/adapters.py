r"""Turn a user's object into a testable verifier: detection (:func:`as_verifier`), decorators, and
``MODULE:OBJECT`` loading (:func:`load_object`, :func:`object_spec`).

The forms themselves live in :mod:`otspec.testing.forms` (conditional law, sampler) and
:mod:`otspec.testing.chain_forms` (chain verifiers); other packages add forms through the entry-point
group :data:`ADAPTER_GROUP` (``otspec_gpu`` registers its torch verifiers there).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import inspect
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from otspec.errors import InvalidVerifierError, UnsupportedMethodError
from otspec.testing.chain_forms import ChainVerifier
from otspec.testing.forms import ConditionalVerifier, SamplerVerifier
from otspec.verifiers import Verifier

#: Entry-point group of verifier adapters from other packages: each entry point is a callable
#: ``adapt(obj, **options)`` returning an :class:`otspec.verifiers.Verifier` for the objects it
#: knows and ``None`` for the others. ``otspec_gpu`` registers ``torch = "otspec_gpu.testing:adapt"``.
ADAPTER_GROUP = "otspec.adapters"

__all__ = ["ADAPTER_GROUP", "as_verifier", "chain_verifier", "conditional_verifier", "load_object", "object_spec", "sampler_verifier"]


def _decorator(cls, fn, kwargs):
    if fn is None:
        return lambda f: cls(f, **kwargs)
    return cls(fn, **kwargs)


def conditional_verifier(pi: Callable | None = None, **kwargs: Any) -> Any:
    """Decorator form of :class:`ConditionalVerifier` (``@conditional_verifier`` or
    ``@conditional_verifier(kinds="iid", k=(2, 3))``).

    Parameters
    ----------
    pi : callable, optional
        The conditional law; omitted when the decorator is called with options.
    **kwargs
        Options of :class:`ConditionalVerifier` (``name``, ``lossless``, ``kinds``, ``k``, ``second``).

    Returns
    -------
    ConditionalVerifier or callable
        The adapter, or (called with options only) a decorator that builds it.

    Examples
    --------
    >>> @conditional_verifier(k=1)
    ... def ignore_drafts(p, q, drafts):
    ...     return p
    >>> ignore_drafts.name, ignore_drafts.lossless
    ('ignore_drafts', True)
    """
    return _decorator(ConditionalVerifier, pi, kwargs)


def sampler_verifier(sample: Callable | None = None, **kwargs: Any) -> Any:
    """Decorator form of :class:`SamplerVerifier`.

    Parameters
    ----------
    sample : callable, optional
        The sampler; omitted when the decorator is called with options.
    **kwargs
        Options of :class:`SamplerVerifier`.

    Returns
    -------
    SamplerVerifier or callable
        The adapter, or a decorator that builds it.
    """
    return _decorator(SamplerVerifier, sample, kwargs)


def chain_verifier(conditional_law: Callable | None = None, **kwargs: Any) -> Any:
    """Decorator form of :class:`ChainVerifier`.

    Parameters
    ----------
    conditional_law : callable, optional
        The per-path law; omitted when the decorator is called with options.
    **kwargs
        Options of :class:`ChainVerifier` (``name``, ``lossless``).

    Returns
    -------
    ChainVerifier or callable
        The adapter, or a decorator that builds it.
    """
    return _decorator(ChainVerifier, conditional_law, kwargs)


def as_verifier(obj: Any, **kwargs: Any) -> Any:
    """Return ``obj`` as a testable verifier.

    * instances of :class:`otspec.verifiers.Verifier` (including the adapters) and of
      :class:`ChainVerifier` are returned as they are;
    * a subclass of :class:`otspec.verifiers.Verifier` is instantiated without arguments;
    * a module with a ``conditional_law(p_model, q_model, drafts)`` function (such as
      :mod:`otspec.verifiers.block`) becomes a :class:`ChainVerifier`;
    * a function is recognised by its parameters: ``(p_model, q_model, drafts)`` -> chain,
      four parameters or one named ``rng`` -> sampler, three -> conditional law;
    * anything else is offered to the adapters registered under the entry-point group
      :data:`ADAPTER_GROUP`: with ``otspec_gpu`` installed, a batched torch verifier
      (``sample(p, q, drafts, *, generator)`` and ``conditional(p, q, drafts)`` on tensors)
      becomes an :class:`otspec_gpu.testing.TorchStepVerifier` (option ``device``).

    Keyword arguments go to the adapter's constructor (``name``, ``lossless``, ``kinds``, ``k``,
    ``second``; ``device`` for torch verifiers); they are refused for objects that are already
    verifiers.

    Parameters
    ----------
    obj : object
        A verifier instance or class, a chain-verifier module, a function, or an object a plug-in
        adapts (a torch verifier).
    **kwargs
        Adapter options (functions and modules only).

    Returns
    -------
    Verifier or ChainVerifier
        ``obj`` itself, an instance of it, or an adapter around it.

    Raises
    ------
    InvalidVerifierError
        If ``obj`` is none of the supported forms, its signature cannot be read, or options are
        given for an object that is already a verifier.

    Examples
    --------
    >>> from otspec.verifiers import kseq
    >>> as_verifier(kseq) is kseq
    True
    >>> as_verifier(lambda p, q, drafts: p, k=1)
    <ConditionalVerifier '<lambda>' (lossless claim)>
    """
    if isinstance(obj, (Verifier, ChainVerifier)):
        if kwargs:
            raise InvalidVerifierError(f"{obj!r} is already a verifier; options {sorted(kwargs)} only apply to functions")
        return obj
    if isinstance(obj, type) and issubclass(obj, Verifier):
        if kwargs:
            raise InvalidVerifierError(f"options {sorted(kwargs)} only apply to functions; set them as class attributes")
        return obj()
    native = _native_form(obj)
    if native is None:  # not a form of the core: a plug-in may know it (otspec_gpu's torch verifiers)
        adapted, reasons = _from_plugins(obj, kwargs)
        if adapted is not None:
            return adapted
        raise InvalidVerifierError(_not_a_verifier(obj) + "".join(f"; plug-in {r}" for r in reasons))
    unknown = sorted(set(kwargs) - _FUNCTION_OPTIONS)
    if unknown:
        raise InvalidVerifierError(
            f"options {unknown} do not apply to {getattr(obj, '__name__', obj)!r} (a {native.__name__}); "
            f"its options are {sorted(_FUNCTION_OPTIONS)}"
        )
    if isinstance(obj, types.ModuleType):
        return native(obj.conditional_law, name=kwargs.pop("name", obj.__name__.rsplit(".", 1)[-1]), **kwargs)
    return native(obj, **kwargs)


#: Options of the function adapters (:mod:`otspec.testing.forms`, :mod:`otspec.testing.chain_forms`).
_FUNCTION_OPTIONS = frozenset({"name", "lossless", "kinds", "k", "second"})


def _native_form(obj: Any) -> type | None:
    """The adapter class of a module or function of the core's forms, ``None`` for anything else."""
    if isinstance(obj, types.ModuleType):
        return ChainVerifier if callable(getattr(obj, "conditional_law", None)) else None
    if not callable(obj):
        return None
    try:
        params = [prm for prm in inspect.signature(obj).parameters.values() if prm.kind in (prm.POSITIONAL_ONLY, prm.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        return None
    names = [prm.name for prm in params]
    if names[:1] == ["p_model"]:
        return ChainVerifier
    if len(names) >= 4 or "rng" in names:
        return SamplerVerifier
    return ConditionalVerifier if len(names) == 3 else None


def _not_a_verifier(obj: Any) -> str:
    if isinstance(obj, types.ModuleType):
        return (
            f"module {obj.__name__} is not a verifier (it has no conditional_law(p_model, q_model, drafts)); "
            "point at a function, a Verifier subclass or an instance instead (MODULE:OBJECT)"
        )
    if not callable(obj):
        return (
            f"{type(obj).__name__} object is not a verifier; pass a conditional law pi(p, q, drafts), a sampler "
            "sample(p, law, drafts, rng), or an otspec.verifiers.Verifier"
        )
    try:
        names = list(inspect.signature(obj).parameters)
    except (TypeError, ValueError):
        return f"cannot read the signature of {obj!r}; wrap it with conditional_verifier or sampler_verifier"
    return (
        f"{getattr(obj, '__name__', obj)!r} takes parameters {names}: expected pi(p, q_or_law, drafts) (3), "
        "sample(p, q_or_law, drafts, rng) (4) or conditional_law(p_model, q_model, drafts); wrap it explicitly"
    )


def _from_plugins(obj: Any, options: dict) -> tuple[Any, list]:
    """The first plug-in adapter that accepts ``obj``, and why the others could not be asked."""
    reasons = []
    for ep in sorted(importlib.metadata.entry_points(group=ADAPTER_GROUP), key=lambda ep: ep.name):
        try:
            adapt = ep.load()
        except Exception as exc:  # a plug-in that cannot load (torch missing) must not hide the real answer
            reasons.append(f"{ep.name!r} unavailable ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})")
            continue
        adapted = adapt(obj, **options)
        if adapted is not None:
            return adapted, reasons
    return None, reasons


def load_object(spec: str) -> Any:
    """Import ``"MODULE:OBJECT"`` (``OBJECT`` may be dotted; ``MODULE`` may be a ``.py`` file path).

    Without ``:OBJECT`` the module itself is returned.

    Parameters
    ----------
    spec : str
        ``"package.module:name"`` or ``"path/to/file.py:name"`` (Windows drive letters allowed).

    Returns
    -------
    object
        The named object (or the module).

    Raises
    ------
    InvalidVerifierError
        If ``spec`` is malformed, the file or module does not exist or fails to import, or the
        attribute is missing.

    Examples
    --------
    >>> load_object("otspec.verifiers:kseq").name
    'kseq'
    """
    if not isinstance(spec, str) or not spec or spec.startswith(":"):
        raise InvalidVerifierError(
            f"expected MODULE:OBJECT (got {spec!r}); e.g. mypackage.rules:my_verifier or path/to/file.py:my_verifier"
        )
    mod_name, _, attr = spec.partition(":") if not _looks_like_windows_path(spec) else _split_windows(spec)
    if mod_name.endswith(".py") or "/" in mod_name or "\\" in mod_name:
        path = Path(mod_name)
        if not path.is_file():
            raise InvalidVerifierError(f"no such file {mod_name!r} (from {spec!r}); pass an existing .py file or an importable module name")
        name = "_otspec_audit_" + path.stem
        sspec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(sspec)
        sys.modules[name] = module
        try:
            sspec.loader.exec_module(module)
        except (Exception, SystemExit, KeyboardInterrupt) as exc:  # user code: any import-time failure or exit is bad input
            sys.modules.pop(name, None)
            raise InvalidVerifierError(_import_failure(mod_name, exc)) from exc
    else:
        try:
            module = importlib.import_module(mod_name)
        except ImportError as exc:
            raise InvalidVerifierError(f"cannot import module {mod_name!r} ({exc}); check the name and that it is on sys.path") from None
        except (Exception, SystemExit, KeyboardInterrupt) as exc:  # user code, an exit included
            raise InvalidVerifierError(_import_failure(mod_name, exc)) from exc
    obj: Any = module
    for part in filter(None, attr.split(".")):
        if not hasattr(obj, part):
            raise InvalidVerifierError(
                f"{mod_name} has no attribute {attr!r}; available: {[n for n in dir(module) if not n.startswith('_')][:20]}"
            )
        obj = getattr(obj, part)
    return obj


def _import_failure(mod_name: str, exc: BaseException) -> str:
    if isinstance(exc, SystemExit):
        return f"importing {mod_name} called sys.exit({exc.code!r}); a verifier's module must not exit when imported (guard it with if __name__ == '__main__')"
    return f"importing {mod_name} failed: {type(exc).__name__}: {exc}; fix the module so that it imports"


def _looks_like_windows_path(spec: str) -> bool:
    return len(spec) > 2 and spec[1] == ":" and spec[2] in "\\/"


def _split_windows(spec: str) -> tuple[str, str, str]:
    head, sep, tail = spec[2:].partition(":")
    return spec[:2] + head, sep, tail


def object_spec(obj: Any) -> str | None:
    """A ``MODULE:OBJECT`` string that :func:`load_object` resolves to ``obj``, when one is found.

    The shortest importing package that exposes ``obj`` under a public name is preferred; adapters
    are looked up by their wrapped function.

    Parameters
    ----------
    obj : object
        A verifier, adapter or function.

    Returns
    -------
    str or None
        The spec, or ``None`` when ``obj`` is not reachable by name (e.g. a lambda).

    Examples
    --------
    >>> from otspec.verifiers import kseq
    >>> object_spec(kseq)
    'otspec.verifiers:kseq'
    """
    targets = [obj]
    modules = [getattr(obj, "__module__", None), getattr(type(obj), "__module__", None)]
    if isinstance(obj, (ConditionalVerifier, SamplerVerifier, ChainVerifier)):
        targets.append(obj.fn)  # a decorated function is stored under its own name
        modules = [getattr(obj.fn, "__module__", None)]
    for cand in modules:
        if not cand or cand.startswith("_otspec_audit_"):
            continue
        parts = cand.split(".")
        for i in range(1, len(parts) + 1):  # the package that re-exports it reads best: shortest first
            module = sys.modules.get(".".join(parts[:i]))
            for attr, value in vars(module).items() if module is not None else ():
                if any(value is t for t in targets) and not attr.startswith("_"):
                    return f"{'.'.join(parts[:i])}:{attr}"
    return None


def step_verifier(verifier: Any, p: Any, law: Any) -> tuple[Any, np.ndarray]:
    v = as_verifier(verifier)
    if isinstance(v, ChainVerifier):
        raise UnsupportedMethodError(f"{v!r} is a chain verifier; use assert_chain_lossless(verifier, p_model, q_model, gamma)")
    p = v.check_inputs(p, law)
    return v, p
