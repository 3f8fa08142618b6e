"""LangGraph's own conformance suite (langgraph-checkpoint-conformance 0.0.2)
against AgentStateSaver: every base and extended capability must be detected
and pass. The counts are printed (`pytest -s`) and asserted."""

from __future__ import annotations

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES
from langgraph.checkpoint.conformance.report import ProgressCallbacks

from agentstate import AgentStateSaver
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

from test_saver_edges import ToyCipher


def _registered(tmp_path, **kwargs):
    counter = iter(range(1_000_000))

    @checkpointer_test(name=f"AgentStateSaver{kwargs}")
    async def factory():
        saver = AgentStateSaver(str(tmp_path / f"conformance-{next(counter)}.db"), **kwargs)
        yield saver
        saver.close()

    return factory


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"write_behind": True}, {"serde": "encrypted"}],
    ids=["sync", "write_behind", "encrypted"],
)
async def test_conformance_every_capability_passes(tmp_path, kwargs):
    if kwargs.get("serde") == "encrypted":
        # A random nonce per value, like LangGraph's AES serializer.
        kwargs = {"serde": EncryptedSerializer(ToyCipher())}
    failures: list[str] = []

    def on_result(cap, name, passed, error):
        if not passed:
            failures.append(f"{cap}/{name}: {error}")

    report = await validate(_registered(tmp_path, **kwargs), progress=ProgressCallbacks(on_test_result=on_result))
    counts = {cap: (r.tests_passed, r.tests_failed, r.detected) for cap, r in report.results.items()}
    print(f"\nconformance {kwargs}: {counts}")
    assert not failures, "\n".join(failures)
    assert {c.value for c in ALL_CAPABILITIES} == {cap for cap, r in report.results.items() if r.detected}
    assert all(r.passed for r in report.results.values())
    assert sum(r.tests_passed for r in report.results.values()) > 50
