"""Hermes bootstrap: configuration, the composition root and the public API.

``AIAgent`` is the familiar entry point; ``hermes_core.Agent`` composes the same engine
from adapters chosen in code.
"""

from hermes_bootstrap.facade import AIAgent

__all__ = ["AIAgent"]
