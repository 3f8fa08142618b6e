"""AgentStateSaver at the edges of LangGraph's saver contract, against
SqliteSaver (on its own file: two SQLite copies in one process must never
open the same file) and InMemorySaver: a custom serde sees every channel
value, strings Python can hold but UTF-8 cannot, integers JSON text cannot
carry through Rust, close() and use after it, a saver whose knowledge of the
file went stale, and where we deliberately refuse what would lose data."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.sqlite import SqliteSaver

import agentstate
from agentstate import AgentStateSaver

V1 = f"{1:032}.0000000000000001"
V2 = f"{2:032}.0000000000000001"
CONFIG = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}


class ToyCipher:
    """A CipherProtocol like LangGraph's AES one: a fresh random nonce per
    encryption, so encrypting the same bytes twice gives other bytes."""

    def encrypt(self, plaintext: bytes) -> tuple[str, bytes]:
        nonce = os.urandom(8)
        return "toy", nonce + bytes(b ^ nonce[i % 8] for i, b in enumerate(plaintext))

    def decrypt(self, ciphername: str, ciphertext: bytes) -> bytes:
        assert ciphername == "toy"
        nonce, body = ciphertext[:8], ciphertext[8:]
        return bytes(b ^ nonce[i % 8] for i, b in enumerate(body))


def _checkpoint(values: dict[str, Any], versions: dict[str, Any] | None = None):
    cp = empty_checkpoint()
    cp["channel_values"] = values
    cp["channel_versions"] = versions if versions is not None else {k: V1 for k in values}
    return cp


def _sqlite(tmp_path: Path, **kwargs: Any) -> SqliteSaver:
    saver = SqliteSaver(sqlite3.connect(str(tmp_path / "reference.sqlite"), check_same_thread=False), **kwargs)
    saver.setup()
    return saver


def _file_bytes(path: Path) -> bytes:
    """The database file and its WAL as raw bytes (read as bytes, not opened
    with SQLite, so it is safe while the saver has the file open)."""
    return b"".join(p.read_bytes() for p in path.parent.glob(path.name + "*"))


def _open_fds_on(path: Path) -> list[str]:
    fds = Path("/proc/self/fd")
    out = []
    for fd in fds.iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith(str(path)):
            out.append(target)
    return out


# -- a custom serde sees every value ------------------------------------------


def test_an_encrypting_serde_keeps_primitive_channel_values_out_of_the_file(tmp_path):
    # SqliteSaver passes the whole checkpoint through the serde, so with
    # EncryptedSerializer no channel value is in the file in clear. Ours must
    # not store str/int/... channel values inline (plain JSON) then.
    secret = "SECRET-SSN-123-45-6789"
    serde = EncryptedSerializer(ToyCipher())
    path = tmp_path / "enc.db"
    saver = AgentStateSaver(str(path), serde=serde)
    saver.put(CONFIG, _checkpoint({"ssn": secret, "n": 424242}), {"source": "loop", "step": 1}, {"ssn": V1, "n": V1})
    saver.flush()
    assert secret.encode() not in _file_bytes(path)

    reference = _sqlite(tmp_path, serde=EncryptedSerializer(ToyCipher()))
    reference.put(CONFIG, _checkpoint({"ssn": secret, "n": 424242}), {}, {"ssn": V1, "n": V1})
    assert secret.encode() not in (tmp_path / "reference.sqlite").read_bytes()

    # And both read back the same values, through the serde.
    for s in (saver, reference):
        assert s.get_tuple(CONFIG).checkpoint["channel_values"] == {"ssn": secret, "n": 424242}


def test_a_custom_serde_decodes_primitive_channel_values_too(tmp_path):
    # A serde whose loads_typed transforms values (here: tags every str) is
    # applied to every channel value by SqliteSaver; ours must not bypass it
    # for values it could have stored inline.
    class Tagging:
        def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
            return EncryptedSerializer(ToyCipher()).serde.dumps_typed(obj)

        def loads_typed(self, data: tuple[str, bytes]) -> Any:
            value = EncryptedSerializer(ToyCipher()).serde.loads_typed(data)
            return f"seen:{value}" if isinstance(value, str) else value

    saver = AgentStateSaver(str(tmp_path / "tag.db"), serde=Tagging())
    saver.put(CONFIG, _checkpoint({"s": "x"}), {}, {"s": V1})
    assert saver.get_tuple(CONFIG).checkpoint["channel_values"] == {"s": "seen:x"}


def test_the_default_serde_still_stores_primitives_inline(tmp_path):
    # The inline fast path stays for LangGraph's JsonPlusSerializer: the
    # Rust side and the CLI read those values without Python.
    path = tmp_path / "plain.db"
    saver = AgentStateSaver(str(path))
    saver.put(CONFIG, _checkpoint({"s": "PLAIN-VALUE-XYZ"}), {}, {"s": V1})
    saver.flush()
    # Inline in the checkpoint row (a MessagePack str since format 7), not a
    # serde-encoded blob.
    assert b"PLAIN-VALUE-XYZ" in _file_bytes(path)
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM checkpoint_blobs WHERE channel = 's'").fetchone() == (0,)
    assert saver.get_tuple(CONFIG).checkpoint["channel_values"] == {"s": "PLAIN-VALUE-XYZ"}


def test_put_is_idempotent_with_a_serde_that_encrypts_with_a_random_nonce(tmp_path):
    # SqliteSaver replaces the row when the same checkpoint is put again (a
    # retried put). Under a serde other than LangGraph's default, the saver
    # opens the crate with `with_unstable_encoding`: a (channel, version)
    # put again keeps its first stored value instead of comparing bytes,
    # which differ every time under a random nonce. (With the default serde
    # a difference is a real second value, refused: see test_saver.py.)
    reference = _sqlite(tmp_path, serde=EncryptedSerializer(ToyCipher()))
    cp = _checkpoint({"a": [1, 2]})
    reference.put(CONFIG, cp, {}, {"a": V1})
    reference.put(CONFIG, cp, {}, {"a": V1})
    assert reference.get_tuple(CONFIG).checkpoint["channel_values"] == {"a": [1, 2]}

    saver = AgentStateSaver(str(tmp_path / "nonce.db"), serde=EncryptedSerializer(ToyCipher()))
    saver.put(CONFIG, cp, {}, {"a": V1})
    saver.put(CONFIG, cp, {}, {"a": V1})
    assert saver.get_tuple(CONFIG).checkpoint["channel_values"] == {"a": [1, 2]}


# -- strings Python holds that UTF-8 cannot --------------------------------


def test_a_str_channel_value_with_a_lone_surrogate_is_stored_like_sqlitesaver(tmp_path):
    # json.loads('"\\ud83d"') (a broken emoji escape in an LLM answer) gives
    # a str UTF-8 cannot encode. LangGraph's msgpack stores it with '?' in its
    # place; a put must not fail on it because the value would go inline.
    value = "broken \ud83d emoji"
    reference = _sqlite(tmp_path)
    reference.put(CONFIG, _checkpoint({"s": value}), {}, {"s": V1})
    expected = reference.get_tuple(CONFIG).checkpoint["channel_values"]["s"]
    assert expected == "broken ? emoji"

    saver = AgentStateSaver(str(tmp_path / "surrogate.db"))
    saver.put(CONFIG, _checkpoint({"s": value}), {}, {"s": V1})
    assert saver.get_tuple(CONFIG).checkpoint["channel_values"]["s"] == expected


def test_a_lone_surrogate_in_metadata_is_dropped_like_sqlitesaver(tmp_path):
    # SqliteSaver encodes its metadata JSON with errors="ignore".
    metadata = {"source": "loop", "step": 1, "note": "a\ud800b", "nested": {"k": "x\udfffy"}}
    reference = _sqlite(tmp_path)
    reference.put(CONFIG, _checkpoint({"a": 1}), metadata, {"a": V1})
    expected = reference.get_tuple(CONFIG).metadata
    assert expected["note"] == "ab" and expected["nested"] == {"k": "xy"}

    saver = AgentStateSaver(str(tmp_path / "meta.db"))
    saver.put(CONFIG, _checkpoint({"a": 1}), metadata, {"a": V1})
    assert saver.get_tuple(CONFIG).metadata == expected


# -- metadata numbers -------------------------------------------------------


@pytest.mark.parametrize("number", [2**64, -(2**63) - 1, 10**30])
def test_an_integer_metadata_cannot_hold_exactly_is_refused_not_rounded(tmp_path, number):
    # SqliteSaver keeps any int exactly (Python's json). The Rust crate parses
    # metadata numbers as 64-bit integers or floats, so 2**64 would read back
    # as 1.8446744073709552e19: silently another value. We refuse it instead
    # (deliberately unlike SqliteSaver) and nothing is stored.
    reference = _sqlite(tmp_path)
    reference.put(CONFIG, _checkpoint({"a": 1}), {"n": {"deep": [number]}}, {"a": V1})
    assert reference.get_tuple(CONFIG).metadata["n"] == {"deep": [number]}

    saver = AgentStateSaver(str(tmp_path / "ints.db"))
    with pytest.raises(ValueError, match="64 bits"):
        saver.put(CONFIG, _checkpoint({"a": 1}), {"n": {"deep": [number]}}, {"a": V1})
    # Also when the number comes from the config (LangGraph copies scalar
    # `configurable` and `metadata` entries into the checkpoint's metadata).
    config = {"configurable": {**CONFIG["configurable"], "user": number}}
    with pytest.raises(ValueError, match="64 bits"):
        saver.put(config, _checkpoint({"a": 1}), {}, {"a": V1})
    assert saver.get_tuple(CONFIG) is None


def test_integers_metadata_holds_exactly_are_kept(tmp_path):
    saver = AgentStateSaver(str(tmp_path / "ints.db"))
    metadata = {"u64": 2**64 - 1, "i64": -(2**63), "big_float": 1e308, "flag": True, "step": 3}
    saver.put(CONFIG, _checkpoint({"a": 1}), metadata, {"a": V1})
    got = saver.get_tuple(CONFIG).metadata
    assert got == metadata and type(got["u64"]) is int and type(got["flag"]) is bool


def test_nan_in_metadata_is_refused(tmp_path):
    # SqliteSaver writes NaN (not JSON) into its metadata column; the crate
    # keeps metadata as JSON and could not store it. Refused, deliberately,
    # before anything is written.
    reference = _sqlite(tmp_path)
    reference.put(CONFIG, _checkpoint({"a": 1}), {"score": float("nan")}, {"a": V1})
    assert reference.get_tuple(CONFIG).metadata["score"] != reference.get_tuple(CONFIG).metadata["score"]

    saver = AgentStateSaver(str(tmp_path / "nan.db"))
    with pytest.raises(ValueError):
        saver.put(CONFIG, _checkpoint({"a": 1}), {"score": float("inf")}, {"a": V1})
    assert saver.get_tuple(CONFIG) is None


def test_the_metadata_key_writes_is_kept_and_filterable_like_sqlitesaver(tmp_path):
    # SqliteSaver and InMemorySaver keep it (get_checkpoint_metadata); only
    # the Postgres saver drops it.
    metadata = {"source": "loop", "step": 1, "parents": {}, "writes": {"node": {"x": 1}}}
    for saver in (_sqlite(tmp_path), AgentStateSaver(str(tmp_path / "writes.db"))):
        saver.put(CONFIG, _checkpoint({"a": 1}), metadata, {"a": V1})
        assert saver.get_tuple(CONFIG).metadata == metadata, type(saver).__name__
        assert len(list(saver.list(CONFIG, filter={"writes": {"node": {"x": 1}}}))) == 1, type(saver).__name__


def test_a_bytearray_value_round_trips_like_sqlitesaver_and_inmemorysaver(tmp_path):
    # LangGraph's serde hands a bytearray over as it is, ("bytearray", obj).
    from langgraph.graph import START, StateGraph
    from typing_extensions import TypedDict

    class State(TypedDict):
        v: Any

    def node(state: State) -> dict[str, Any]:
        return {"v": bytearray(b"xy")}

    builder = StateGraph(State)
    builder.add_node("node", node)
    builder.add_edge(START, "node")
    saver = AgentStateSaver(str(tmp_path / "bytearray.db"))
    results = []
    for s in (InMemorySaver(), saver):
        graph = builder.compile(checkpointer=s)
        results.append(graph.invoke({"v": bytearray(b"in")}, {"configurable": {"thread_id": "b"}}))
    assert results[1] == results[0] == {"v": bytearray(b"xy")}
    saver.put(CONFIG, _checkpoint({"a": bytearray(b"\x00\xff")}), {}, {"a": V1})
    saver.put_writes(saver.get_tuple(CONFIG).config, [("w", bytearray(b"w"))], "task")
    got = saver.get_tuple(CONFIG)
    assert got.checkpoint["channel_values"]["a"] == bytearray(b"\x00\xff")
    assert type(got.checkpoint["channel_values"]["a"]) is bytearray
    assert got.pending_writes == [("task", "w", bytearray(b"w"))]


# -- config shapes -----------------------------------------------------------


def test_put_returns_the_thread_id_it_was_given(tmp_path):
    # SqliteSaver and InMemorySaver hand back config["configurable"]["thread_id"]
    # as given (an int stays an int); every later call takes it.
    config = {"configurable": {"thread_id": 42, "checkpoint_ns": ""}}
    expected = [s.put(config, _checkpoint({"a": 1}), {}, {"a": V1}) for s in (InMemorySaver(), _sqlite(tmp_path))]
    saver = AgentStateSaver(str(tmp_path / "int.db"))
    got = saver.put(config, _checkpoint({"a": 1}), {}, {"a": V1})
    assert [e["configurable"]["thread_id"] for e in expected] == [42, 42]
    assert got["configurable"]["thread_id"] == 42
    assert saver.get_tuple(got).checkpoint["channel_values"] == {"a": 1}


def test_float_channel_versions_are_refused(tmp_path):
    # BaseCheckpointSaver allows int, float or str versions; the crate takes
    # integers and strings only. Our own get_next_version gives strings, so
    # LangGraph never makes a float version here; a subclass that did gets a
    # ValueError at put (nothing stored), never a wrong value.
    reference = _sqlite(tmp_path)
    reference.put(CONFIG, _checkpoint({"a": [1]}, {"a": 1.5}), {}, {"a": 1.5})
    assert reference.get_tuple(CONFIG).checkpoint["channel_versions"] == {"a": 1.5}

    saver = AgentStateSaver(str(tmp_path / "fv.db"))
    with pytest.raises(ValueError, match="channel version"):
        saver.put(CONFIG, _checkpoint({"a": [1]}, {"a": 1.5}), {}, {"a": 1.5})
    assert saver.get_tuple(CONFIG) is None
    # Integer versions (BaseCheckpointSaver's default) work.
    saver.put(CONFIG, _checkpoint({"a": [1]}, {"a": 1}), {}, {"a": 1})
    assert saver.get_tuple(CONFIG).checkpoint["channel_versions"] == {"a": 1}


def test_a_channel_value_without_a_version_is_refused(tmp_path):
    # SqliteSaver keeps it, InMemorySaver drops it silently; the crate refuses
    # it (it could not be read back through channel_versions). Deliberate.
    saver = AgentStateSaver(str(tmp_path / "nv.db"))
    with pytest.raises(ValueError, match="no version"):
        saver.put(CONFIG, _checkpoint({"a": 1, "b": "x"}, {"a": V1}), {}, {"a": V1})
    assert saver.get_tuple(CONFIG) is None


# -- what this saver knows about the file ------------------------------------


def test_a_put_after_another_saver_deleted_the_thread_succeeds(tmp_path):
    # Saver A remembers that channel "a" at V1 is stored, so its next put
    # does not send it again; saver B (another process, the CLI) deletes the
    # thread in between. SqliteSaver stores the checkpoint whole and cannot
    # fail here; ours must not fail because its memory went stale.
    path = str(tmp_path / "shared.db")
    a, b = AgentStateSaver(path), AgentStateSaver(path)
    first = a.put(CONFIG, _checkpoint({"a": [1], "b": [1]}), {}, {"a": V1, "b": V1})
    b.delete_thread("t")
    a.put(first, _checkpoint({"a": [1], "b": [2]}, {"a": V1, "b": V2}), {}, {"b": V2})
    assert b.get_tuple(CONFIG).checkpoint["channel_values"] == {"a": [1], "b": [2]}


def test_a_before_without_a_checkpoint_id_lists_nothing_like_sqlitesaver(tmp_path):
    # Reference 2.4: SqliteSaver and the Postgres saver compare with a NULL
    # id (no rows); InMemorySaver ignores such a `before`. We follow
    # SqliteSaver, for a missing id and an empty one alike.
    ours, sqlite = AgentStateSaver(str(tmp_path / "ours.db")), _sqlite(tmp_path)
    for saver in (ours, sqlite):
        saver.put(CONFIG, _checkpoint({"a": [1]}), {}, {"a": V1})
    for before in ({"configurable": {}}, {"configurable": {"checkpoint_id": ""}}):
        assert list(sqlite.list(CONFIG, before=before)) == []
        assert list(ours.list(CONFIG, before=before)) == []
    assert len(list(ours.list(CONFIG, before=None))) == len(list(sqlite.list(CONFIG, before=None))) == 1


@pytest.mark.parametrize("remove", ["delete_thread", "prune"])
def test_a_value_stored_again_under_a_deleted_version_is_read_anew(tmp_path, remove):
    # Saver A has read channel "m" at version 1. Saver B (another process,
    # the CLI) deletes the thread and stores "m" at version 1 again with
    # another value, as SqliteSaver would let it: A reads the new value, as
    # SqliteSaver does (its own integer versions make this reachable).
    path = str(tmp_path / "shared.db")
    a, b = AgentStateSaver(path), AgentStateSaver(path)
    a.put(CONFIG, _checkpoint({"m": ["first"]}, {"m": 1}), {}, {"m": 1})
    assert a.get_tuple(CONFIG).checkpoint["channel_values"] == {"m": ["first"]}
    if remove == "delete_thread":
        b.delete_thread("t")
    else:
        b.prune(["t"], strategy="delete")
    b.put(CONFIG, _checkpoint({"m": ["second"]}, {"m": 1}), {}, {"m": 1})
    assert a.get_tuple(CONFIG).checkpoint["channel_values"] == {"m": ["second"]}
    assert [t.checkpoint["channel_values"] for t in a.list(CONFIG)] == [{"m": ["second"]}]


def test_reads_after_delete_prune_and_copy_in_one_saver(tmp_path):
    saver = AgentStateSaver(str(tmp_path / "life.db"))
    config = CONFIG
    versions = {}
    for i in range(3):
        versions = {"a": saver.get_next_version(versions.get("a"), None)}
        config = saver.put(config, _checkpoint({"a": [i], "keep": [0]}, {**versions, "keep": V1}), {}, versions | ({"keep": V1} if i == 0 else {}))
    saver.copy_thread("t", "u")
    saver.prune(["t"], strategy="keep_latest")
    assert [t.checkpoint["channel_values"] for t in saver.list(CONFIG)] == [{"a": [2], "keep": [0]}]
    # The next put on the pruned thread relies on "keep" still being stored.
    nxt = {"a": saver.get_next_version(versions["a"], None)}
    saver.put(config, _checkpoint({"a": [3], "keep": [0]}, {**nxt, "keep": V1}), {}, nxt)
    assert saver.get_tuple(CONFIG).checkpoint["channel_values"] == {"a": [3], "keep": [0]}
    copied = {"configurable": {"thread_id": "u", "checkpoint_ns": ""}}
    assert len(list(saver.list(copied))) == 3
    saver.delete_thread("t")
    assert saver.get_tuple(CONFIG) is None
    # A put on the deleted thread's old parent config starts the thread anew.
    saver.put(config, _checkpoint({"a": [9], "keep": [0]}, {**nxt, "keep": V1}), {}, nxt)
    assert saver.get_tuple(CONFIG).checkpoint["channel_values"] == {"a": [9], "keep": [0]}
    assert saver.get_tuple(copied).checkpoint["channel_values"] == {"a": [2], "keep": [0]}


# -- close --------------------------------------------------------------------


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")
def test_close_lets_the_file_go_and_later_calls_raise(tmp_path):
    # SqliteSaver.from_conn_string closes its connection when the block ends
    # (later calls raise), as AgentStateStore.close() does; a saver a
    # compiled graph still references must not keep the file open after it.
    path = tmp_path / "closing.db"
    with AgentStateSaver.from_conn_string(str(path), write_behind=True) as saver:
        saver.put(CONFIG, _checkpoint({"a": [1]}), {}, {"a": V1})
        assert _open_fds_on(path)
    assert _open_fds_on(path) == []
    with pytest.raises(agentstate.Error, match="closed"):
        saver.get_tuple(CONFIG)
    with pytest.raises(agentstate.Error, match="closed"):
        saver.put(CONFIG, _checkpoint({"a": [2]}), {}, {"a": V1})
    saver.close()  # idempotent
    # What was queued behind was committed before the file was let go.
    reference = sqlite3.connect(str(path))
    try:
        assert reference.execute("SELECT count(*) FROM checkpoints").fetchone()[0] == 1
    finally:
        reference.close()
    assert AgentStateSaver(str(path)).get_tuple(CONFIG).checkpoint["channel_values"] == {"a": [1]}
