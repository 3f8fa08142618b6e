#!/usr/bin/env bash
# agentstate vs LangGraph's Python persistence, same workloads, same run.
#
#   bash bench/compare.sh [--reps 3] [--store-reps 2] [--steps 100,1000] [--n-small 10000] [--n-large 50000]
#   bash bench/compare.sh --python [--repeats 3]
#
# --python: the agentstate Python package instead (built into the same venv
# with maturin): bench/py_graph.py (LangGraph's graph benchmark with our saver
# beside SqliteSaver) and bench/py_api.py (the reference checkpointer and
# store benchmarks run unchanged through our Python classes).
#
# Sets up the Python reference exactly as shared/peer-bench/run_all.sh pins it
# (a venv from Debian's /usr/bin/python3, the only Python here that can load
# sqlite-vec), builds the Rust benchmarks in release mode, then runs
# bench/compare.py, which alternates Python and Rust runs and prints one
# markdown table per workload (metric, Python median, Rust median, ratio,
# target). Raw results go to $TMPDIR/agentstate-compare/raw.json.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${PEERBENCH_VENV:-/tmp/peerbench/sysvenv}"
if [ ! -x "$VENV/bin/python" ]; then
  /usr/bin/python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
fi
"$VENV/bin/pip" install -q langgraph==1.2.22 langgraph-checkpoint==4.3.2 \
    langgraph-checkpoint-sqlite==3.1.2 sqlite-vec==0.1.9 numpy==2.4.6
export PEER_BENCH="${PEER_BENCH:-$(pwd)/../shared/peer-bench}"
if [ "${1:-}" = "--python" ]; then
  shift
  "$VENV/bin/pip" install -q 'maturin>=1.9,<2'
  (cd python && VIRTUAL_ENV="$VENV" PATH="$VENV/bin:$PATH" maturin develop --release)
  "$VENV/bin/python" bench/py_graph.py "$@"
  exec "$VENV/bin/python" bench/py_api.py "$@"
fi
cargo build --release --example bench_checkpointer --example bench_store --example bench_graph
exec /usr/bin/python3 bench/compare.py --python "$VENV/bin/python" "$@"
