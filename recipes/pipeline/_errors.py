"""The output protocol's error, in a module of its own: the output and its compacted
segments both raise it, and neither imports the other's module for it."""

from __future__ import annotations

from coordination.errors import CoordinationError

__all__ = ["PipelineOutputError"]


class PipelineOutputError(CoordinationError):
    """The pipeline's output directory is not in a state the protocol allows.

    Raised when a batch to publish is incomplete or gone without having been
    published, when commit metadata names a batch whose results are lost, or
    when an argument breaks the protocol's rules (an offset out of the batch's
    range). The message says which directory and which rule.
    """
