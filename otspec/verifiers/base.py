r"""The base class of every single-step verifier (the contract of :doc:`verifiers`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from otspec._docs import fill_doc
from otspec._tolerances import KERNEL_AUTO_MAX_ENTRIES, SAMPLE_CHUNK_ENTRIES
from otspec._validation import as_distribution, as_generator, check_memory
from otspec.errors import NotADraftLawError, ProblemTooLargeError, UnsupportedMethodError
from otspec.laws import DraftLaw
from otspec.sampling import spawn_streams
from otspec.verifiers.kernel import AcceptanceEstimate, VerifierKernel
from otspec.verifiers.schedule import AcceptSchedule, sample_schedule, schedule_rows
from otspec.verifiers.tuples import membership_mask

__all__ = ["Verifier"]


class Verifier:
    """Base class of single-step verifiers (the contract in :doc:`verifiers`).

    Subclasses set ``name``, ``lossless``, ``rule`` (when it applies, in words), ``reference``, and
    implement :meth:`applies_to` and either :meth:`_schedule` (sequential rules) or :meth:`_rows` and
    :meth:`_sample_rows`; optionally :meth:`_closed_form`.
    """

    name: str = "verifier"
    lossless: bool = True
    rule: str = ""
    fix: str = "use a verifier that applies to this law (see otspec.verifiers.ALL)"
    reference: str = ""
    #: whether Monte Carlo acceptance is possible for laws too large to enumerate
    monte_carlo_ok: bool = True
    #: whether the acceptance equals the optimum :math:`\alpha^*(p, Q)` on every law it applies
    #: to (then :func:`otspec.optimal_acceptance` computes it at any size)
    optimal: bool = False

    # -- to implement ----------------------------------------------------------------------
    def applies_to(self, law: DraftLaw) -> bool:
        """True when the verifier is defined (and, if flagged lossless, lossless) for ``law``.

        Parameters
        ----------
        law : DraftLaw
            A draft law (its ``kind``, ``k`` and ``q`` decide).

        Returns
        -------
        bool
            Whether :meth:`kernel`, :meth:`acceptance` and :meth:`sample` accept ``law``; when
            False they raise :class:`~otspec.errors.UnsupportedMethodError` with :attr:`rule`.
        """
        raise NotImplementedError

    def _schedule(self, p: np.ndarray, law: DraftLaw, tuples: np.ndarray) -> AcceptSchedule:
        raise NotImplementedError

    def _closed_form(self, p: np.ndarray, law: DraftLaw) -> tuple[float, dict] | None:
        return None

    def _rows(self, p: np.ndarray, law: DraftLaw, tuples: np.ndarray) -> np.ndarray:
        return schedule_rows(self._schedule(p, law, tuples), law.V)

    def _sample_rows(self, p, law, tuples, coin_rng, res_rng) -> np.ndarray:
        return sample_schedule(self._schedule(p, law, tuples), coin_rng, res_rng)

    def _tuple_acceptance(self, p: np.ndarray, law: DraftLaw, tuples: np.ndarray) -> np.ndarray:
        """Hook behind :meth:`tuple_acceptance` (inputs already validated; default: from the
        kernel rows). Subclasses with an O(k) formula override it."""
        pi = self._rows(p, law, tuples)
        return np.sum(np.where(membership_mask(tuples, law.V), pi, 0.0), axis=1)

    def _prepare(self, p: np.ndarray, law: DraftLaw) -> None:
        """Hook run once per public call after validation (e.g. to solve an LP)."""

    # -- boundary checks -------------------------------------------------------------------
    def _check(self, p: Any, law: Any) -> np.ndarray:
        if not isinstance(law, DraftLaw):
            raise NotADraftLawError(
                f"law must be a draft law (got {type(law).__name__}); build one with otspec.iid, otspec.without_replacement, "
                "otspec.greedy, otspec.product or otspec.explicit"
            )
        p = as_distribution(p, "p")
        law.check_compatible(p)
        if not self.applies_to(law):
            raise UnsupportedMethodError(f"verifier {self.name!r} does not apply to the draft law {law!r}: {self.rule}; {self.fix}")
        return p

    # -- public API ------------------------------------------------------------------------
    @fill_doc
    def check_inputs(self, p: Any, law: Any) -> np.ndarray:
        """Validate a target and a draft law the way every public method does, and return ``p``.

        For code that drives a verifier's hooks itself (the checks of :mod:`otspec.testing`):
        the same boundary checks as :meth:`kernel` or :meth:`acceptance`, subclass refinements
        included (e.g. ``optimal_iid`` refuses laws that are not i.i.d. at heart).

        Parameters
        ----------
        {p_law_args}

        Returns
        -------
        ndarray of float64, shape (V,)
            ``p`` as a validated distribution.

        Raises
        ------
        {p_law_raises}
        UnsupportedMethodError
            If the verifier does not apply to ``law``.
        """
        return self._check(p, law)

    @fill_doc
    def kernel(self, p: Any, law: DraftLaw, *, memory_cap: float | None = None) -> VerifierKernel:
        r"""Exact conditional output law :math:`\pi(y \mid \bar x)` for every draft tuple of ``law``.

        Refuses (:class:`~otspec.errors.ProblemTooLargeError`) laws whose enumeration, or
        whose ``(M, V)`` kernel, would exceed ``memory_cap`` bytes.

        Parameters
        ----------
        p : array_like, shape (V,)
            Target distribution.
        law : DraftLaw
            An enumerable draft law the verifier applies to.
        memory_cap : float, optional
            Bytes for the enumeration and the kernel; ``None``: the library default.

        Returns
        -------
        VerifierKernel
            Every ordered draft tuple, its probability and its output law ``pi`` ``(M, V)``
            (read-only); losslessness is ``K.output_law() == p``.

        Raises
        ------
        {p_law_raises}
        UnsupportedMethodError
            If the verifier does not apply to ``law``.
        ProblemTooLargeError
            If the enumeration or the kernel would exceed ``memory_cap``.
        """
        p = self._check(p, law)
        n = law.num_tuples()
        check_memory(
            8.0 * n * law.V * 3,
            memory_cap,
            f"the kernel of {self.name!r} on {law!r} ({n:,} tuples x {law.V:,} tokens)",
            "use acceptance() (closed form or Monte Carlo) or a smaller V/k",
        )
        tuples, weights = law.enumerate(memory_cap=memory_cap)
        self._prepare(p, law)
        pi = self._rows(p, law, tuples)
        pi.setflags(write=False)
        return VerifierKernel(tuples=tuples, weights=weights, pi=pi, verifier=self.name)

    def tuple_acceptance(self, p: Any, law: DraftLaw, tuples: Any) -> np.ndarray:
        r"""Exact conditional acceptance of each draft tuple.

        .. math:: a(\bar x) = P\big(Y \in \{x_1, \dots, x_k\} \,\big|\, \bar X = \bar x\big)
                  = \sum_{y \in \{x_1, \dots, x_k\}} \pi(y \mid \bar x),

        the acceptance of one kernel row; :math:`\sum_{\bar x} Q(\bar x)\, a(\bar x)` is the
        verifier's acceptance (:meth:`acceptance` averages it over sampled tuples for Monte Carlo).

        Parameters
        ----------
        p : array_like, shape (V,)
            Target distribution.
        law : DraftLaw
            The draft law the tuples come from.
        tuples : array_like of int, shape (N, k) or (k,)
            Draft tuples, each with positive probability under ``law``.

        Returns
        -------
        ndarray, shape (N,)
            :math:`a(\bar x)` for every row of ``tuples``.

        Raises
        ------
        NotADraftLawError
            If ``law`` is not a draft law.
        InvalidDistributionError, ShapeMismatchError
            If ``p`` is not a distribution, or not over the law's vocabulary.
        UnsupportedMethodError
            If the verifier does not apply to ``law``.
        InvalidDraftsError
            If a tuple has the wrong length, an out-of-vocabulary token, or probability 0.

        Examples
        --------
        >>> import numpy as np, otspec
        >>> from otspec.verifiers import token
        >>> p, q = np.array([0.5, 0.5]), np.array([0.8, 0.2])
        >>> token.tuple_acceptance(p, otspec.iid(q, 1), [[0], [1]])  # min(1, p/q) for one draft
        array([0.625, 1.   ])
        """
        p = self._check(p, law)
        d = law.validate_draft_batch(tuples)
        self._prepare(p, law)
        chunk = max(1, SAMPLE_CHUNK_ENTRIES // max(law.V, 1))
        if d.shape[0] <= chunk:
            return self._tuple_acceptance(p, law, d)
        return np.concatenate([self._tuple_acceptance(p, law, d[s : s + chunk]) for s in range(0, d.shape[0], chunk)])

    @fill_doc
    def acceptance(
        self,
        p: Any,
        law: DraftLaw,
        *,
        method: str = "auto",
        n_samples: int = 2000,
        rng: np.random.Generator | None = None,
    ) -> AcceptanceEstimate:
        r"""Membership acceptance :math:`P(Y \in \{X_1, \dots, X_k\})`.

        ``method="auto"`` uses the closed form when the verifier has one for this law, else the
        exact kernel when it has at most :data:`KERNEL_AUTO_MAX_ENTRIES` entries, else Monte
        Carlo: ``n_samples`` draft tuples drawn from the law, each contributing its *exact*
        conditional acceptance (a Rao-Blackwellised estimator), with a 99% normal interval.
        ``rng`` (default ``numpy.random.default_rng(0)``, so results are reproducible) is used
        only by Monte Carlo. ``method`` may force ``"closed_form"``, ``"kernel"`` or
        ``"monte_carlo"``.

        Parameters
        ----------
        p : array_like, shape (V,)
            Target distribution.
        law : DraftLaw
            A draft law the verifier applies to.
        {acceptance_method_args}

        Returns
        -------
        AcceptanceEstimate
            The value, ``how`` it was obtained, its 99% interval (the value itself when exact),
            and verifier-specific ``extras``.

        Raises
        ------
        UnsupportedMethodError
            If ``method`` is unknown, a closed form is forced where there is none, the verifier
            does not apply to ``law``, or ``n_samples < 2``.
        {p_law_raises}
        ProblemTooLargeError
            If the verifier needs an enumerable law and ``law`` is too large.
        OtspecTypeError
            If ``rng`` is given and is not a ``numpy.random.Generator``.
        """
        if method not in ("auto", "closed_form", "kernel", "monte_carlo"):
            raise UnsupportedMethodError(
                f"method must be one of 'auto', 'closed_form', 'kernel', 'monte_carlo' (got {method!r}); pick one of those"
            )
        p = self._check(p, law)
        if method in ("auto", "closed_form"):
            cf = self._closed_form(p, law)
            if cf is not None:
                value, extras = cf
                return AcceptanceEstimate(float(value), "closed_form", float(value), float(value), 0, dict(extras))
            if method == "closed_form":
                raise UnsupportedMethodError(
                    f"verifier {self.name!r} has no closed-form acceptance for {law!r}; use method='kernel' or 'monte_carlo'"
                )
        if method == "kernel" or (method == "auto" and law.num_tuples() * law.V <= KERNEL_AUTO_MAX_ENTRIES):
            K = self.kernel(p, law)
            v = K.acceptance()
            return AcceptanceEstimate(v, "kernel", v, v, 0, {})
        if not self.monte_carlo_ok:
            raise ProblemTooLargeError(
                f"verifier {self.name!r} needs an enumerable law and {law!r} has {law.num_tuples():,} tuples x {law.V:,} tokens; "
                "use a smaller V/k"
            )
        return self._monte_carlo(p, law, int(n_samples), np.random.default_rng(0) if rng is None else as_generator(rng))

    def _monte_carlo(self, p, law, n, rng) -> AcceptanceEstimate:
        if n < 2:
            raise UnsupportedMethodError(f"n_samples must be >= 2 for Monte Carlo (got {n}); pass more samples")
        self._prepare(p, law)
        chunk = max(1, SAMPLE_CHUNK_ENTRIES // max(law.V, 1))
        vals = []
        done = 0
        while done < n:
            m = min(chunk, n - done)
            tuples = law.sample(rng, m)
            vals.append(self._tuple_acceptance(p, law, tuples))
            done += m
        return AcceptanceEstimate.from_samples(np.concatenate(vals), "mean over sampled draft tuples of the exact conditional acceptance")

    @fill_doc
    def sample(self, p: Any, law: DraftLaw, drafts: Any, *, rng: np.random.Generator) -> int:
        """One output token for one draft tuple (validated with ``law.validate_drafts``).

        Accept coins come from ``rng``; residual draws from a child stream spawned from it
        (:func:`otspec.sampling.spawn_streams` with ``parent_first=True``).

        Parameters
        ----------
        p : array_like, shape (V,)
            Target distribution.
        law : DraftLaw
            The law the drafts were drawn from.
        drafts : array_like of int, shape (k,)
            One draft tuple.
        rng : numpy.random.Generator
            The caller's generator.

        Returns
        -------
        int
            The output token :math:`Y \\sim \\pi(\\cdot \\mid \\bar x)`.

        Raises
        ------
        {p_law_raises}
        UnsupportedMethodError
            If the verifier does not apply to ``law``.
        InvalidDraftsError
            If ``drafts`` is not a tuple the law can produce.
        OtspecTypeError
            If ``rng`` is not a ``numpy.random.Generator``.
        """
        p = self._check(p, law)
        d = law.validate_drafts(drafts)
        coin_rng, res_rng = spawn_streams(rng, 2, parent_first=True)
        self._prepare(p, law)
        return int(self._sample_rows(p, law, d[None, :], coin_rng, res_rng)[0])

    @fill_doc
    def sample_batch(self, p: Any, law: DraftLaw, drafts: Any, *, rng: np.random.Generator) -> np.ndarray:
        """One output token per row of ``drafts`` ``(N, k)``, vectorised; the same rule and the
        same stream discipline as :meth:`sample` (``sample(d) == sample_batch([d])[0]`` for the
        same generator state).

        Parameters
        ----------
        p : array_like, shape (V,)
            Target distribution.
        law : DraftLaw
            The law the drafts were drawn from.
        drafts : array_like of int, shape (N, k) or (k,)
            Draft tuples, one per row.
        rng : numpy.random.Generator
            The caller's generator.

        Returns
        -------
        ndarray of int64, shape (N,)
            One output token per row, each :math:`\\sim \\pi(\\cdot \\mid \\bar x_n)`.

        Raises
        ------
        {p_law_raises}
        UnsupportedMethodError
            If the verifier does not apply to ``law``.
        InvalidDraftsError
            If a row is not a tuple the law can produce.
        OtspecTypeError
            If ``rng`` is not a ``numpy.random.Generator``.
        """
        p = self._check(p, law)
        d = law.validate_draft_batch(drafts)
        coin_rng, res_rng = spawn_streams(rng, 2, parent_first=True)
        self._prepare(p, law)
        chunk = max(1, SAMPLE_CHUNK_ENTRIES // max(law.V, 1))
        out = np.empty(d.shape[0], dtype=np.int64)
        for s in range(0, d.shape[0], chunk):
            out[s : s + chunk] = self._sample_rows(p, law, d[s : s + chunk], coin_rng, res_rng)
        return out

    def __repr__(self) -> str:
        return f"<verifier {self.name!r} ({'lossless' if self.lossless else 'lossy'})>"
