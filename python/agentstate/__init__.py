"""LangGraph's checkpointer and store in one SQLite file, backed by the agentstate Rust crate."""

from agentstate._native import version as _native_version

__version__ = _native_version()
__all__ = ["__version__"]
