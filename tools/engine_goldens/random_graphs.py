"""The `random_graphs` scenario: small random StateGraphs from a fixed seed.

Each graph is a declarative JSON spec (see SEMANTICS below) that this module
interprets to build a LangGraph StateGraph, and `tests/engine_random.rs`
interprets to build the same graph on our engine: combinations of fan-out,
joins, conditional edges (node lists, END, Sends), loops, breakpoints,
recursion limits, `interrupt()` calls answered with `Command(resume=..)`,
nodes failing on their first runs, `update_state`, time travel, a subgraph
node, `add_messages`, and repeated input nobody wrote by hand.

`random_graphs(h)` is registered in generate.py like the other scenarios.
`RANDOM_GRAPHS_SEED` / `RANDOM_GRAPHS_N` (environment) override the seed and
the number of graphs, and `RANDOM_GRAPHS_SPECS=<file>` runs the specs of a
JSON list instead (to shrink a failing graph by hand), to explore with
`--out <dir>` (the committed fixture uses the defaults).

`gen_specs(seed, n)` and `build(spec, counted)` are also used on their own
(every spec field added after the first version is optional in `build`);
`run_calls(spec, graph, config, invoke, update_state)` makes a spec's calls.
"""

from __future__ import annotations

import json
import operator
import os
import random
import sys
import time
from typing import Annotated, Any, Callable

from langgraph.config import get_config
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, Send, interrupt
from typing_extensions import TypedDict

SEED = 38170
N_GRAPHS = 9
MOD = 7
# A failing node sleeps this long before it raises, so that its siblings in
# the superstep finish (and their writes are stored) first: LangGraph stops
# waiting for the others once a task fails.
FAIL_SLEEP = 0.05
ERRORS = {"ValueError": ValueError, "RuntimeError": RuntimeError, "TypeError": TypeError}

SEMANTICS = {
    "state": "ordered [key, type] pairs; 'int': a LastValue channel holding an int; "
    "'list': a list of strings with reducer operator.add; 'messages': a message list with "
    "reducer add_messages (a write is a dict {'role', 'content', 'id'}; a known id replaces)",
    "value": "value(e) = (sum(term(t) for t in e.terms) + e.add) % 7, where term({'int': k}) = "
    "state.get(k, 0), term({'len': k}) = len(state.get(k, [])), term({'arg': true}) = "
    "state.get('arg', 0) (the Send argument; 0 when the node runs from an edge, as the Send "
    "argument {'arg': v} has no state keys and an edge-triggered run has no 'arg'), "
    "term({'answer': j}) = the value the node's j-th interrupt() call returned",
    "nodes": "node n (a function unless it has 'subgraph') runs: if n.fail: r = how many "
    "times n has started on this thread (this run included); a = [interrupt(f'{n}?{value(e)}') "
    "for e in n.interrupt.asks] (if n.interrupt); if n.fail and r <= n.fail.runs: sleep 50 ms, "
    "raise n.fail.class(f'{n} failed ({r})'); else return {w.key: value(w) if key is int, "
    "[f'{n}:{value(w)}'] if list, [{'role': 'assistant', 'content': f'{n}:{value(w)}', 'id': "
    "f'm{value(w)}'}] if messages, for w in n.writes}, and if n.interrupt, the item "
    "f'{n}?' + ','.join(str(x) for x in a) appended to the list n.interrupt.echo writes "
    "(an empty dict when there is nothing to write). A node with 'subgraph' is that spec "
    "(same state, no checkpointer of its own) compiled and added as the node",
    "edges": "add_edge(a, b) for each [a, b]",
    "joins": "add_edge([a, b, ...], c) for each [[a, b, ...], c] (a NamedBarrierValue)",
    "routers": "add_conditional_edges(source, router) with no path map, in this order; the "
    "router (function name r.name) reads the state with the source's writes applied and "
    "returns END if r.stop and len(state.get(r.stop.len, [])) >= r.stop.at_least, else the "
    "list choices[state.get(r.on, 0) % len(choices)], each item a node name, '__end__', or "
    "{'send': node, 'arg': e} meaning Send(node, {'arg': value(e)})",
    "compile": "interrupt_before / interrupt_after lists given to compile(); recursion_limit "
    "(when not null) in the config of every call",
    "calls": "on thread t<i>, in order: {'invoke': input} is invoke(input); "
    "{'resume_until_done': n} is up to n invoke(None) calls, each made only while the "
    "thread's get_state().next is not empty and the previous call raised no error; "
    "{'drive': n} is up to n calls, each made only while get_state().next is not empty and "
    "the previous call raised no InvalidUpdateError: invoke(Command(resume=answers[k % "
    "len(answers)])) when get_state().interrupts is not empty, unless the previous call "
    "raised and after_error is 'retry' (k: resumes sent on the thread so far), else "
    "invoke(None) (none when get_state() raises: the head shown live is an "
    "invalid update); {'update_state': values, 'as_node': node or null, 'at': "
    "null or i} is update_state(config, values, as_node), config the thread's or, with 'at', "
    "that of its root checkpoint history[i % len(history)] (oldest first); {'fork': input, "
    "'at': i} is invoke(input, config of history[i % len(history)])",
}


# ---------------------------------------------------------------------------
# Spec generation
# ---------------------------------------------------------------------------


def _expr(rng: random.Random, ints: list[str], lists: list[str], arg: bool, answers: int = 0) -> dict:
    pool = [{"int": k} for k in ints] + [{"len": k} for k in lists]
    if arg:
        pool += [{"arg": True}] * 2
    terms = rng.sample(pool, k=min(len(pool), rng.randint(0, 2)))
    if arg and {"arg": True} not in terms and rng.random() < 0.7:
        terms.append({"arg": True})
    for j in range(answers):
        if rng.random() < 0.6:
            terms.append({"answer": j})
    return {"terms": terms, "add": rng.randrange(MOD)}


def _message(content: str, v: int, role: str = "assistant") -> dict:
    return {"role": role, "content": content, "id": f"m{v}"}


def _gen_node(
    rng: random.Random,
    x: str,
    state: list,
    ints: list[str],
    lists: list[str],
    lens: list[str],
    *,
    send_target: bool = False,
    must: set[str] | frozenset[str] = frozenset(),
    asker: bool = False,
    failer: bool = False,
) -> dict:
    asks = rng.choice([1, 1, 2]) if asker else 0
    writes = []
    silent = not must and not asks and rng.random() < 0.12
    for key, typ in state:
        p = 0.15 if (typ == "int" and send_target) else 0.45
        if key in must or (not silent and rng.random() < p):
            writes.append({"key": key, **_expr(rng, ints, lens, send_target, asks)})
    node: dict = {"name": x, "writes": writes}
    if asks:
        node["interrupt"] = {"asks": [_expr(rng, ints, lens, False) for _ in range(asks)], "echo": rng.choice(lists)}
    if failer:
        node["fail"] = {"runs": rng.choice([1, 1, 2]), "class": rng.choice(sorted(ERRORS))}
    return node


def _gen_subgraph(
    rng: random.Random, parent: str, state: list, ints: list[str], lists: list[str], lens: list[str], asker: bool, failer: bool
) -> dict:
    """A small subgraph spec over the parent's state: 1-3 nodes named
    `<parent>s<j>`, forward edges, no routers; maybe the graph's node that
    calls interrupt() or fails."""
    names = [f"{parent}s{j}" for j in range(rng.randint(1, 3))]
    edges = [[START, names[0]]]
    for i, a in enumerate(names):
        later = names[i + 1 :]
        targets = rng.sample(later, k=min(len(later), rng.choice([1, 1, 2]))) if later else [END]
        edges += [[a, t] for t in targets]
    ask_at = rng.choice(names) if asker else None
    fail_at = rng.choice(names) if failer else None
    nodes = [
        _gen_node(rng, x, state, ints, lists, lens, asker=x == ask_at, failer=x == fail_at) for x in names
    ]
    return {
        "index": f"{parent}sub",
        "state": state,
        "nodes": nodes,
        "edges": edges,
        "joins": [],
        "routers": [],
        "interrupt_before": [],
        "interrupt_after": [],
        "recursion_limit": None,
    }


def gen_spec(rng: random.Random, index: int) -> dict:
    ints = [f"i{j}" for j in range(rng.randint(1, 2))]
    lists = [f"l{j}" for j in range(rng.randint(1, 2))]
    state = [[k, "int"] for k in ints] + [[k, "list"] for k in lists]
    # a message list (add_messages): its length is a term, never a stop key
    # (a replaced message does not make it longer)
    msgs = ["m0"] if rng.random() < 0.2 else []
    state += [[k, "messages"] for k in msgs]
    rng.shuffle(state)
    lens = lists + msgs
    names = [f"n{j}" for j in range(rng.randint(2, 6))]
    n = len(names)

    # routers first: a router's source must append to its stop list
    routers: list[dict] = []
    must_write: dict[str, set[str]] = {x: set() for x in names}
    send_targets: set[str] = set()
    sources = [START] if rng.random() < 0.15 else []
    sources += [x for x in names if rng.random() < 0.4]
    if any(s != START for s in sources) and rng.random() < 0.15:
        sources.append(rng.choice([s for s in sources if s != START]))  # a second router
    for r, src in enumerate(sources):
        choices = []
        for _ in range(rng.randint(2, 3)):
            items: list[Any] = []
            for _ in range(rng.choice([0, 1, 1, 1, 2, 2])):
                p = rng.random()
                if p < 0.55:
                    items.append(rng.choice(names))
                elif p < 0.75:
                    items.append(END)
                else:
                    t = rng.choice(names)
                    send_targets.add(t)
                    items.append({"send": t, "arg": _expr(rng, ints, lens, False)})
            choices.append(items)
        stop = None
        if src != START:
            key = rng.choice(lists)
            must_write[src].add(key)
            stop = {"len": key, "at_least": rng.randint(2, 5)}
        routers.append({"source": src, "name": f"route_{r}", "stop": stop, "on": rng.choice(ints), "choices": choices})

    # static edges only go forward (n_i -> n_j, j > i): every loop goes
    # through a router, whose stop list grows each time around
    edges: list[list[str]] = []
    if not any(r["source"] == START for r in routers) or rng.random() < 0.5:
        for t in rng.sample(names, k=rng.choice([1, 1, 2])):
            edges.append([START, t])
    for i, a in enumerate(names):
        later = names[i + 1 :] + [END]
        for t in rng.sample(later, k=min(len(later), rng.choice([0, 1, 1, 2]))):
            edges.append([a, t])
    joins: list[list] = []
    if n >= 3 and rng.random() < 0.4:
        c = rng.randrange(2, n)
        srcs = rng.sample(names[:c], k=rng.randint(2, min(3, c)))
        joins.append([srcs, names[c]])

    # dynamic behaviour: one node that calls interrupt() (not a Send target:
    # a bare resume answers a single pending interrupt), one that fails on
    # its first runs (not a Send target: one failing task per superstep),
    # one subgraph node (no router from it: its output is its whole state)
    plain = [x for x in names if x not in send_targets]
    asker = rng.choice(plain) if plain and rng.random() < 0.35 else None
    failer = rng.choice(plain) if plain and rng.random() < 0.3 else None
    sub_ok = [x for x in plain if x not in (asker, failer) and not must_write[x]]
    subgraph = rng.choice(sub_ok) if sub_ok and rng.random() < 0.2 else None

    inner_asker = subgraph is not None and asker is None and rng.random() < 0.4
    inner_failer = subgraph is not None and failer is None and rng.random() < 0.3
    nodes = []
    for x in names:
        if x == subgraph:
            sub = _gen_subgraph(rng, x, state, ints, lists, lens, inner_asker, inner_failer)
            nodes.append({"name": x, "writes": [], "subgraph": sub})
        else:
            nodes.append(
                _gen_node(
                    rng,
                    x,
                    state,
                    ints,
                    lists,
                    lens,
                    send_target=x in send_targets,
                    must=must_write[x],
                    asker=x == asker,
                    failer=x == failer,
                )
            )

    types = dict(state)

    def values(tag: str, keys: list[str]) -> dict:
        out: dict = {}
        for k in keys:
            v = rng.randrange(MOD)
            if types[k] == "int":
                out[k] = v
            elif types[k] == "list":
                out[k] = [f"{tag}:{v}"]
            else:
                out[k] = [_message(f"{tag}:{v}", v, "user")]
        return out

    def inp() -> dict:
        return values("in", rng.sample([k for k, _ in state], k=rng.randint(1, len(state))))

    interrupt_before = [rng.choice(names)] if rng.random() < 0.25 else []
    interrupt_after = [rng.choice(names)] if rng.random() < 0.2 else []
    pausing = bool(interrupt_before or interrupt_after or asker or failer or inner_asker or inner_failer)
    drive = {"drive": 4}
    calls: list[dict] = [{"invoke": inp()}]
    if pausing and rng.random() < 0.9:
        calls.append(drive)
    extras = [e for e, p in (("update", 0.35), ("invoke", 0.35), ("fork", 0.3)) if rng.random() < p]
    rng.shuffle(extras)
    for e in extras:
        if e == "update":
            keys = rng.sample([k for k, _ in state], k=rng.randint(1, min(2, len(state))))
            calls.append(
                {
                    "update_state": values("up", keys),
                    "as_node": rng.choice(names) if rng.random() < 0.7 else None,
                    "at": rng.randrange(12) if rng.random() < 0.25 else None,
                }
            )
            calls.append(drive)
        elif e == "invoke":
            calls.append({"invoke": inp()})
            if pausing:
                calls.append(drive)
        else:
            calls.append({"fork": inp() if rng.random() < 0.4 else None, "at": rng.randrange(12)})
            calls.append(drive)
    return {
        "index": index,
        "state": state,
        "nodes": nodes,
        "edges": edges,
        "joins": joins,
        "routers": routers,
        "interrupt_before": interrupt_before,
        "interrupt_after": interrupt_after,
        "recursion_limit": rng.randint(2, 6) if rng.random() < 0.25 else None,
        "answers": [rng.randrange(10, 100) for _ in range(4)],
        # after a failed call with an interrupt pending (e.g. a node that
        # failed after its interrupt() got an answer), a "drive" answers again
        # or retries with invoke(None): odd graphs retry
        "after_error": "retry" if index % 2 else "resume",
        "calls": calls,
    }


def gen_specs(seed: int, n: int) -> list[dict]:
    rng = random.Random(seed)
    return [gen_spec(rng, i) for i in range(n)]


# ---------------------------------------------------------------------------
# Spec interpretation (LangGraph side)
# ---------------------------------------------------------------------------


def value(state: dict, e: dict, answers: list | tuple = ()) -> int:
    total = e["add"]
    for t in e["terms"]:
        if "int" in t:
            total += state.get(t["int"], 0)
        elif "len" in t:
            total += len(state.get(t["len"], []))
        elif "answer" in t:
            total += answers[t["answer"]]
        else:
            total += state.get("arg", 0)
    return total % MOD


def _run_key() -> tuple:
    """The thread (and saver) a node runs for: a failing node counts its
    runs per thread."""
    conf = get_config().get("configurable", {})
    return conf.get("thread_id"), id(conf.get("__pregel_checkpointer"))


def _node_fn(name: str, node: dict, types: dict[str, str]):
    writes = node["writes"]
    asks = node.get("interrupt")
    fail = node.get("fail")
    runs: dict[tuple, int] = {}

    def fn(state):
        r = 0
        if fail:
            key = _run_key()
            runs[key] = r = runs.get(key, 0) + 1
        answers = [interrupt(f"{name}?{value(state, e)}") for e in asks["asks"]] if asks else []
        if fail and r <= fail["runs"]:
            time.sleep(FAIL_SLEEP)
            raise ERRORS[fail["class"]](f"{name} failed ({r})")
        out: dict = {}
        for w in writes:
            v = value(state, w, answers)
            typ = types[w["key"]]
            if typ == "int":
                out[w["key"]] = v
            elif typ == "list":
                out[w["key"]] = [f"{name}:{v}"]
            else:
                out[w["key"]] = [_message(f"{name}:{v}", v)]
        if asks:
            out.setdefault(asks["echo"], []).append(f"{name}?" + ",".join(str(a) for a in answers))
        return out

    return fn


def _router(r: dict):
    def route(state):
        stop = r["stop"]
        if stop and len(state.get(stop["len"], [])) >= stop["at_least"]:
            return END
        out = []
        for item in r["choices"][state.get(r["on"], 0) % len(r["choices"])]:
            if isinstance(item, dict):
                out.append(Send(item["send"], {"arg": value(state, item["arg"])}))
            else:
                out.append(item)
        return out

    route.__name__ = r["name"]
    return route


_REDUCED = {"int": int, "list": Annotated[list, operator.add], "messages": Annotated[list, add_messages]}


def build(spec: dict, counted) -> StateGraph:
    types = dict(spec["state"])
    fields = {k: _REDUCED[t] for k, t in spec["state"]}
    S = TypedDict(f"S{spec['index']}", fields)  # type: ignore[misc]
    b = StateGraph(S)
    for node in spec["nodes"]:
        if node.get("subgraph"):
            b.add_node(node["name"], build(node["subgraph"], counted).compile())
        else:
            b.add_node(node["name"], counted(node["name"], _node_fn(node["name"], node, types)))
    for a, c in spec["edges"]:
        b.add_edge(a, c)
    for srcs, c in spec["joins"]:
        b.add_edge(list(srcs), c)
    for r in spec["routers"]:
        b.add_conditional_edges(r["source"], _router(r))
    return b


def _history(graph, config: dict) -> list[dict]:
    """The thread's root checkpoints' configs, oldest first."""
    return [s.config for s in reversed(list(graph.get_state_history(config)))]


def _next(graph, config: dict) -> tuple:
    try:
        return graph.get_state(config).next
    except Exception:  # noqa: BLE001 - see the "drive" call
        return ()


def run_calls(
    spec: dict,
    graph,
    config: dict,
    invoke: Callable[[Any, dict], BaseException | None] | None = None,
    update_state: Callable[[dict, Any, str | None], BaseException | None] | None = None,
) -> None:
    """Makes `spec["calls"]` on `graph` (compiled with a checkpointer) on
    `config`'s thread. `invoke(input, config)` / `update_state(config,
    values, as_node)` make one call and return the exception it raised
    (default: the graph's own, errors swallowed)."""

    def _invoke(inp: Any, cfg: dict) -> BaseException | None:
        try:
            graph.invoke(inp, cfg)
        except Exception as e:  # noqa: BLE001 - an outcome of the call
            return e
        return None

    def _update(cfg: dict, values: Any, as_node: str | None) -> BaseException | None:
        try:
            graph.update_state(cfg, values, as_node=as_node)
        except Exception as e:  # noqa: BLE001
            return e
        return None

    invoke = invoke or _invoke
    update_state = update_state or _update
    answers = spec.get("answers") or [0]
    resumes = 0
    last: BaseException | None = None
    for call in spec["calls"]:
        if "invoke" in call:
            last = invoke(call["invoke"], config)
        elif "resume_until_done" in call:
            for _ in range(call["resume_until_done"]):
                if last is not None or not _next(graph, config):
                    break
                last = invoke(None, config)
        elif "drive" in call:
            for _ in range(call["drive"]):
                if type(last).__name__ == "InvalidUpdateError":
                    break
                try:
                    state = graph.get_state(config)
                except Exception:  # noqa: BLE001
                    # the head shown live (its finished tasks' writes
                    # applied) is itself an invalid update: nothing to drive
                    break
                if not state.next:
                    break
                if state.interrupts and (last is None or spec.get("after_error", "resume") == "resume"):
                    last = invoke(Command(resume=answers[resumes % len(answers)]), config)
                    resumes += 1
                else:
                    last = invoke(None, config)
        elif "update_state" in call:
            cfg = config
            if call.get("at") is not None:
                hist = _history(graph, config)
                cfg = {**config, "configurable": hist[call["at"] % len(hist)]["configurable"]}
            last = update_state(cfg, call["update_state"], call.get("as_node"))
        elif "fork" in call:
            hist = _history(graph, config)
            cfg = {**config, "configurable": hist[call["at"] % len(hist)]["configurable"]}
            last = invoke(call["fork"], cfg)
        else:
            raise ValueError(f"unknown call {call}")


def random_graphs(h) -> dict:
    # counted() of the module that defined the Harness (generate.py runs as
    # __main__): its execution counter is the one the Harness reads
    counted = sys.modules[type(h).__module__].counted
    seed = int(os.environ.get("RANDOM_GRAPHS_SEED", SEED))
    n = int(os.environ.get("RANDOM_GRAPHS_N", N_GRAPHS))
    specs = gen_specs(seed, n)
    if os.environ.get("RANDOM_GRAPHS_SPECS"):
        with open(os.environ["RANDOM_GRAPHS_SPECS"]) as f:
            specs = json.load(f)
        n = len(specs)
    graphs = {}
    for spec in specs:
        i = spec["index"]
        key, thread = f"g{i}", f"t{i}"
        h.compile(
            key,
            build(spec, counted),
            interrupt_before=spec["interrupt_before"] or None,
            interrupt_after=spec["interrupt_after"] or None,
        )
        config: dict = {"configurable": {"thread_id": thread}}
        if spec["recursion_limit"] is not None:
            config["recursion_limit"] = spec["recursion_limit"]

        def invoke(inp: Any, cfg: dict, key: str = key, thread: str = thread) -> BaseException | None:
            h.invoke(key, thread, inp, cfg)
            return _error(h.calls[-1])

        def update_state(cfg: dict, values: Any, as_node: str | None, key: str = key) -> BaseException | None:
            h.update_state(key, cfg, values, as_node)
            return _error(h.calls[-1])

        run_calls(spec, h.graphs[key], config, invoke, update_state)
        graphs[key] = {"spec": spec}
    return {
        "description": f"{n} random graphs from random.Random({seed}) (tools/engine_goldens/random_graphs.py), "
        "graph g<i> run on thread t<i>. Each spec is JSON; its meaning: "
        + "; ".join(f"{k}: {v}" for k, v in SEMANTICS.items()),
        "graphs": graphs,
    }


class _Recorded(Exception):
    """A recorded call's error, by class name."""


def _error(entry: dict) -> BaseException | None:
    if "error" not in entry:
        return None
    cls = type(entry["error"]["class"], (_Recorded,), {})
    return cls(entry["error"]["str"])
