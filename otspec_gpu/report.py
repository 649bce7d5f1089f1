"""The decode report, :mod:`otspec.trace_report` (numpy only, in the core since it needs no torch),
re-exported under the name the decoder has always used (:meth:`otspec_gpu.decoding.DecodeResult.report`)."""

from otspec.trace_report import AGREE_ATOL, Z99, Agreement, Report, summarize

__all__ = ["AGREE_ATOL", "Z99", "Agreement", "Report", "summarize"]
