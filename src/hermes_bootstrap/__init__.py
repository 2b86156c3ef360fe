"""Hermes bootstrap: configuration, the composition root and the public API.

``AIAgent`` is the familiar entry point and ``SessionDB`` opens a session store from a
URL or path; ``hermes_core.Agent`` composes the same engine from adapters chosen in code.
"""

from hermes_bootstrap.facade import AIAgent
from hermes_bootstrap.sessions import SessionDB

__all__ = ["AIAgent", "SessionDB"]
