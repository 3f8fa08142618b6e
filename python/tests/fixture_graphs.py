"""The LangGraph graphs the tests run, defined once: in the script that wrote
tests/fixtures/import/sqlite_saver.sqlite (tools/sqlite_saver_fixture/make.py),
loaded from there (test_import.py and test_graphs.py run them too)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "sqlite_saver_fixture", Path(__file__).resolve().parents[2] / "tools" / "sqlite_saver_fixture" / "make.py"
)
fixture = importlib.util.module_from_spec(_spec)
sys.modules["sqlite_saver_fixture"] = fixture  # its TypedDict hints resolve through sys.modules
_spec.loader.exec_module(fixture)

chat, approval, nested, fanout, failing = fixture.chat, fixture.approval, fixture.nested, fixture.fanout, fixture.failing
FAIL, GRAPHS = fixture.FAIL, fixture.GRAPHS
