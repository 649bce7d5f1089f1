r"""Audit a batched torch verifier with :mod:`otspec.testing` (``otspec audit``), on CPU or CUDA.

A torch single-step verifier (the protocol of :class:`otspec_gpu.verifiers.TorchVerifier`) has

* ``sample(p, q, drafts, *, generator) -> StepOutput`` (or a ``[B]`` long tensor of tokens), and
* ``conditional(p, q, drafts) -> Tensor[B, V]``, the exact output law of each row,

on ``p``, ``q`` ``[B, V]`` (or ``[1, V]``) probability rows and ``drafts`` ``[B, k]`` long.
:func:`adapt` wraps such an object -- a :class:`~otspec_gpu.verifiers.TorchVerifier`, a module
with those two functions, or any object with those two methods -- in :class:`TorchStepVerifier`,
an :class:`otspec.verifiers.Verifier` whose kernel calls ``conditional`` once on every draft tuple
of the law (one batch) and whose sampler calls ``sample`` with a ``torch.Generator`` seeded from
the audit's numpy generator. Every check of :func:`otspec.testing.audit` then runs unchanged.

otspec finds this adapter through the entry-point group ``"otspec.adapters"``
(:data:`otspec.testing.adapters.ADAPTER_GROUP`), so ``otspec`` itself never imports torch.

Examples
--------
>>> from otspec.testing import as_verifier, assert_lossless
>>> import otspec
>>> from otspec_gpu.verifiers import by_name
>>> v = as_verifier(by_name("kseq"))
>>> v
<torch verifier 'kseq' on cpu (lossless claim)>
>>> assert_lossless(v, [0.5, 0.3, 0.2], otspec.iid([0.2, 0.3, 0.5], 2))
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import torch

from otspec.errors import InvalidVerifierError
from otspec.laws import ALL as LAWS
from otspec.laws import DraftLaw
from otspec.verifiers import Verifier

__all__ = ["ONE_Q_KINDS", "OPTIONS", "TorchStepVerifier", "adapt", "is_torch_verifier"]

#: Draft-law kinds a torch verifier may be audited on: its ``q`` is one ``[V]`` row, so the law
#: must be built from one draft distribution.
ONE_Q_KINDS = tuple(law.kind for law in LAWS if law.parameters == "q")

#: The options :func:`adapt` passes on to :class:`TorchStepVerifier`.
OPTIONS = frozenset({"device", "name", "lossless", "kinds", "k"})


def is_torch_verifier(obj: Any) -> bool:
    """Whether ``obj`` follows the torch protocol: callable ``sample`` (with a ``generator``
    keyword) and ``conditional`` attributes.

    Parameters
    ----------
    obj : object
        Anything.

    Returns
    -------
    bool
        True for a :class:`~otspec_gpu.verifiers.TorchVerifier`, a module with ``sample`` and
        ``conditional`` functions of that protocol, or any such object.
    """
    sample, conditional = getattr(obj, "sample", None), getattr(obj, "conditional", None)
    if not (callable(sample) and callable(conditional)):
        return False
    try:
        return "generator" in inspect.signature(sample).parameters
    except (TypeError, ValueError):
        return False


def adapt(obj: Any, **options: Any) -> TorchStepVerifier | None:
    """The ``"otspec.adapters"`` entry point: ``obj`` as a :class:`TorchStepVerifier`, or ``None``
    when it is not a torch verifier (so that :func:`otspec.testing.as_verifier` tries other forms).

    Parameters
    ----------
    obj : object
        A candidate verifier.
    **options
        Options of :class:`TorchStepVerifier` (``device``, ``name``, ``lossless``, ``kinds``, ``k``).

    Returns
    -------
    TorchStepVerifier or None
        The adapter, or ``None``.

    Raises
    ------
    InvalidVerifierError
        If ``obj`` is a torch verifier but an option is invalid (an unknown option or device).
    """
    if not is_torch_verifier(obj):
        return None
    unknown = sorted(set(options) - OPTIONS)
    if unknown:
        raise InvalidVerifierError(f"options {unknown} do not apply to a torch verifier; its options are {sorted(OPTIONS)}")
    return TorchStepVerifier(obj, **options)


class TorchStepVerifier(Verifier):
    """A batched torch single-step verifier seen as an :class:`otspec.verifiers.Verifier`.

    Inputs reach the torch code as float64 tensors on ``device`` (``p`` and ``q`` as ``[1, V]``
    rows shared by every draft row); the kernel is ``conditional`` on every draft tuple of the
    law at once, and each :meth:`sample_batch` call runs ``sample`` once on its draft rows with a
    ``torch.Generator`` seeded from the numpy accept stream (reproducible for a given seed).

    Parameters
    ----------
    torch_verifier : object
        ``sample(p, q, drafts, *, generator)`` and ``conditional(p, q, drafts)`` (see the module
        docstring); its ``name``, ``lossless``, ``draft_law``, ``k_min``, ``k_max`` attributes are
        used when present.
    device : str or torch.device
        Where the tensors live (``"cpu"``, ``"cuda"``, ``"cuda:1"``).
    name : str, optional
        Name in reports (default: the verifier's ``name``, or its module's).
    lossless : bool, optional
        Override the lossless claim (default: the verifier's ``lossless``, else True).
    kinds : str or sequence of str, optional
        Draft-law kinds it applies to (default: its ``draft_law``, else every one-``q`` kind).
    k : int or sequence of int, optional
        Draft counts it applies to (default: ``k_min`` ... ``k_max``).

    Raises
    ------
    InvalidVerifierError
        If ``device`` is not a torch device that is available, or ``kinds`` names a law that is not
        built from one draft distribution.
    """

    def __init__(
        self, torch_verifier: Any, *, device: Any = "cpu", name: str | None = None, lossless: bool | None = None, kinds=None, k=None
    ):
        self.torch_verifier = torch_verifier
        try:
            self.device = torch.device(device)
            torch.empty(0, device=self.device)
        except (RuntimeError, TypeError, AssertionError) as exc:  # an unknown or unavailable device
            raise InvalidVerifierError(
                f"device {device!r} is not an available torch device ({exc}); pass cpu, or cuda on a GPU machine"
            ) from None
        module = getattr(torch_verifier, "__name__", None) or type(torch_verifier).__name__
        self.name = str(name or getattr(torch_verifier, "name", None) or str(module).rsplit(".", 1)[-1])
        self.lossless = bool(getattr(torch_verifier, "lossless", True) if lossless is None else lossless)
        law = getattr(torch_verifier, "draft_law", None)
        self.kinds = tuple([kinds] if isinstance(kinds, str) else kinds or ([law] if law else ONE_Q_KINDS))
        if any(kind not in ONE_Q_KINDS for kind in self.kinds):
            raise InvalidVerifierError(
                f"a torch verifier takes one q row, so kinds must be among {list(ONE_Q_KINDS)} (got {list(self.kinds)}); drop the others"
            )
        self.ks = None if k is None else tuple(int(x) for x in np.atleast_1d(k))
        self.k_min, self.k_max = int(getattr(torch_verifier, "k_min", 1)), getattr(torch_verifier, "k_max", None)
        self.rule = f"torch verifier {self.name!r} takes drafts from a law of kind {' / '.join(self.kinds)}" + (
            f" with k in [{self.k_min}, {self.k_max if self.k_max is not None else 'any'}]"
        )
        self.fix = "pass a law it is declared for"
        self.reference = str(getattr(torch_verifier, "reference", ""))
        self.audit_form = f"torch ({self.device})"

    def applies_to(self, law: DraftLaw) -> bool:
        """True for a law of one of :attr:`kinds` with a draft count the verifier takes.

        Parameters
        ----------
        law : DraftLaw
            A draft law.

        Returns
        -------
        bool
            Whether the torch verifier is defined for ``law``.
        """
        if law.kind not in self.kinds or law.q is None or law.k < self.k_min:
            return False
        if self.k_max is not None and law.k > self.k_max:
            return False
        return self.ks is None or law.k in self.ks

    def _tensors(self, p: np.ndarray, law: DraftLaw, tuples: np.ndarray) -> tuple:
        def rows(x):
            return torch.as_tensor(np.array(x, dtype=np.float64), device=self.device)[None]  # [1, V] (a writable copy)

        return rows(p), rows(law.q), torch.as_tensor(np.asarray(tuples, dtype=np.int64), device=self.device)  # [M, k]

    def _rows(self, p: np.ndarray, law: DraftLaw, tuples: np.ndarray) -> np.ndarray:
        P, Q, D = self._tensors(p, law, tuples)
        with torch.no_grad():
            out = self.torch_verifier.conditional(P, Q, D)  # [M, V]
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != (tuples.shape[0], law.V):
            got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise AssertionError(f"{self.name}.conditional must return a tensor [M, V] = [{tuples.shape[0]}, {law.V}] (got {got})")
        return out.detach().to("cpu", torch.float64).numpy().copy()

    def _sample_rows(self, p, law, tuples, coin_rng, res_rng) -> np.ndarray:
        P, Q, D = self._tensors(p, law, tuples)
        generator = torch.Generator(device=self.device)
        generator.manual_seed(int(coin_rng.integers(0, 2**63 - 1)))
        with torch.no_grad():
            out = self.torch_verifier.sample(P, Q, D, generator=generator)
        token = getattr(out, "token", out)  # a StepOutput, or the tokens themselves
        if not isinstance(token, torch.Tensor) or tuple(token.shape) != (tuples.shape[0],):
            got = tuple(token.shape) if isinstance(token, torch.Tensor) else type(token).__name__
            raise AssertionError(f"{self.name}.sample must return a StepOutput or a long tensor [B] = [{tuples.shape[0]}] (got {got})")
        token = token.detach().to("cpu", torch.int64).numpy().copy()
        if token.size and not (token.min() >= 0 and token.max() < law.V):
            raise AssertionError(f"{self.name}.sample returned token ids {token.min()}..{token.max()} outside [0, {law.V})")
        return token

    def __repr__(self) -> str:
        return f"<torch verifier {self.name!r} on {self.device} ({'lossless' if self.lossless else 'lossy'} claim)>"
