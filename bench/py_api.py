#!/usr/bin/env python3
"""The Python reference benchmarks (shared/peer-bench/bench_checkpointer.py and
bench_store.py) run unchanged through the agentstate Python package, beside
SqliteSaver / SqliteStore, in one run, alternating.

    python bench/py_api.py [--part checkpointer,store] [--repeats 3] [--json out.json]
                           [bench_checkpointer / bench_store options, e.g. --steps 1000 --n-large 50000]

Each reference script's `run_once` does the timing; only the object under
test changes: `open_saver` returns an AgentStateSaver, the store Backend an
AgentStateStore. Prints one markdown table per part: metric, the Python
backend's median, agentstate's median, and how many times better agentstate
is (>1: faster or smaller).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

from agentstate import AgentStateSaver

PEER = os.environ.get("PEER_BENCH", os.path.join(os.path.dirname(__file__), "..", "..", "shared", "peer-bench"))


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, os.path.join(PEER, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


class _Conn:
    """What bench_checkpointer's `run_once` does with the sqlite3 connection
    `open_saver` returns: a few statistics queries, then close (after which it
    measures the file). The queries run in a child process: Python's sqlite3
    must not open a file our SQLite has open in this process (closing it
    would drop our POSIX locks)."""

    def __init__(self, path: str, saver: AgentStateSaver):
        self.path, self.saver = path, saver

    def execute(self, sql: str, *args):
        code = "import json, sqlite3, sys; c = sqlite3.connect(sys.argv[1]); print(json.dumps(c.execute(sys.argv[2]).fetchone()))"
        out = subprocess.run([sys.executable, "-c", code, self.path, sql], check=True, capture_output=True, text=True)
        row = tuple(json.loads(out.stdout))
        return type("Cursor", (), {"fetchone": lambda _self: row})()

    def close(self) -> None:
        # As closing SqliteSaver's last connection does: the WAL goes into
        # the file (from another process, for the reason above).
        self.saver.close()
        self.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def open_agentstate(path: str, synchronous: str):
    durability = "full" if synchronous == "FULL" else "normal"
    saver = AgentStateSaver(path, durability=durability)
    return _Conn(path, saver), saver


def better(key: str, python: float, ours: float) -> float:
    """How many times better agentstate is on a metric."""
    if not python or not ours:
        return float("nan")
    return ours / python if "_per_s" in key else python / ours


def table(title: str, python: dict, ours: dict, names: tuple[str, str]) -> str:
    lines = [f"\n### {title}\n", f"| metric | {names[0]} | agentstate | better |", "|---|---:|---:|---:|"]
    for k in python:
        if k not in ours:
            continue
        lines.append(f"| {k} | {python[k]:.4g} | {ours[k]:.4g} | {better(k, python[k], ours[k]):.2f}x |")
    return "\n".join(lines)


def alternate(part: str, repeats: int, who: list[str], run) -> dict[str, dict]:
    """`run(who, workdir)` for each of `who` in turn, `repeats` times, each in
    a fresh directory; the median of every metric per `who`."""
    runs: dict[str, list[dict]] = {w: [] for w in who}
    for rep in range(repeats):
        for w in who:
            d = tempfile.mkdtemp(prefix=f"pyapi-{part}-{w}-")
            try:
                runs[w].append(run(w, d))
            finally:
                shutil.rmtree(d)
        print(f"# {part} repeat {rep + 1}/{repeats}", file=sys.stderr)
    return {w: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for w, rs in runs.items()}


def checkpointer(args, rest: list[str]) -> tuple[str, dict]:
    bc = load("bench_checkpointer")
    sys.argv = ["bench_checkpointer"] + rest
    ap_args = _parse(bc, rest)
    reference = bc.open_saver

    def run(who: str, d: str) -> dict:
        bc.open_saver = reference if who == "python" else open_agentstate
        return bc.run_once(ap_args, d)

    med = alternate("checkpointer", args.repeats, ["python", "agentstate"], run)
    return table("bench_checkpointer.py through the Python API", med["python"], med["agentstate"],
                 ("SqliteSaver", "agentstate")), med


def store(args, rest: list[str]) -> tuple[str, dict]:
    from agentstate import AgentStateStore

    bs = load("bench_store")
    ap_args = _parse(bs, ["--backend", "sqlite"] + rest)
    original_open, original_size = bs.Backend.open, bs.Backend.size

    def open_(self, name: str, with_index: bool = True):
        if self.kind != "agentstate":
            return original_open(self, name, with_index)
        self.path = os.path.join(self.workdir, name + ".db")
        cm = AgentStateStore.from_conn_string(self.path, index=bs.index_cfg() if with_index else None)
        store = cm.__enter__()
        self._cms.append(cm)
        return store

    def size(self):
        if self.kind != "agentstate":
            return original_size(self)
        return sum(os.path.getsize(self.path + s) for s in ("", "-wal") if os.path.exists(self.path + s))

    bs.Backend.open, bs.Backend.size = open_, size
    med = alternate("store", args.repeats, ["sqlite", "agentstate"], lambda kind, d: bs.run_once(kind, ap_args, d))
    return table("bench_store.py through the Python API", med["sqlite"], med["agentstate"],
                 ("SqliteStore", "agentstate")), med


def _parse(module, argv: list[str]):
    """The reference script's own defaults and options, parsed from `argv`."""
    saved = sys.argv
    captured = {}

    class Stop(Exception):
        pass

    import argparse as ap

    original = ap.ArgumentParser.parse_args

    def grab(self, *a, **k):
        captured["args"] = original(self, argv)
        raise Stop

    ap.ArgumentParser.parse_args = grab
    try:
        module.main()
    except Stop:
        pass
    finally:
        ap.ArgumentParser.parse_args = original
        sys.argv = saved
    return captured["args"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--part", default="checkpointer,store")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", default=None)
    args, rest = ap.parse_known_args()
    out = {}
    for part in args.part.split(","):
        text, med = {"checkpointer": checkpointer, "store": store}[part](args, rest)
        print(text)
        out[part] = med
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
