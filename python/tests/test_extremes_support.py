"""What the extreme-input tests share (no tests here): deep values, short
test ids, running a coroutine, the sync/async parametrization."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

MB = 1 << 20


def nested_lists(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def nested_dicts(depth: int) -> dict[str, Any]:
    value: Any = 1
    for _ in range(depth):
        value = {"d": value}
    return value


def short(value: Any) -> str:
    """A test id: the value's repr, cut short (2**2000 has 600 digits)."""
    return repr(value)[:24]


def run(coro):
    return asyncio.run(coro)



MODES = pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
