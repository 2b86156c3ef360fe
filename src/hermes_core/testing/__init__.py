"""Contract suites for the ports, importable by third parties.

Each suite is an abstract pytest class: subclass it in your own tests, provide the
fixtures it names, and your adapter is held to the same behaviour as ours. This is the
one place in ``hermes_core`` that imports pytest.
"""

from hermes_core.testing.llm import ChatModelContract
from hermes_core.testing.memory import MemoryStoreContract
from hermes_core.testing.sessions import SessionStoreContract
from hermes_core.testing.tools import ToolContract

__all__ = ["ChatModelContract", "MemoryStoreContract", "SessionStoreContract", "ToolContract"]
