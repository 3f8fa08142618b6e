"""LangGraph's checkpointer and store in one SQLite file, backed by the agentstate Rust crate."""

from agentstate._native import BusyError, ConflictError, CorruptError, Error
from agentstate._native import import_sqlite_saver
from agentstate._native import version as _native_version
from agentstate.saver import AgentStateSaver
from agentstate.store import AgentStateIndexConfig, AgentStateStore

__version__ = _native_version()
__all__ = [
    "AgentStateIndexConfig",
    "AgentStateSaver",
    "AgentStateStore",
    "BusyError",
    "ConflictError",
    "CorruptError",
    "Error",
    "__version__",
    "import_sqlite_saver",
]
