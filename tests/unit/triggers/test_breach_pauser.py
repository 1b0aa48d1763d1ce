"""``BreachPauser``: the Connect client made before the breach, dropped after a failed ask, never raising.

Real hook, real HTTP client, a real closed port (nothing listens): what a worker that went away looks like.
"""

from __future__ import annotations

import json
import socket

import pytest

from airflow_kerr.hooks.breach_pause import BreachPauser


@pytest.fixture
def unreachable_connect(monkeypatch: pytest.MonkeyPatch) -> str:
    with socket.socket() as probe:  # a port nothing listens on once the probe is closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    connection = {"conn_type": "kafka_connect", "host": "127.0.0.1", "port": port, "schema": "http"}
    monkeypatch.setenv("AIRFLOW_CONN_PAUSER_TEST", json.dumps(connection))
    return "pauser_test"


def test_prepare_makes_the_client_and_a_failed_ask_drops_it_without_raising(unreachable_connect: str) -> None:
    pauser = BreachPauser(unreachable_connect, ["orders-sink", "payments-sink"])
    pauser.prepare()
    assert pauser._hook is not None, "the client was not made before the breach"

    done = pauser.pause()

    assert set(done) == {"orders-sink", "payments-sink"}
    assert all(result["asked_at_ms"] is None and "could not connect" in result["error"] for result in done.values())
    assert pauser._hook is None, "a client that failed is kept for the next breach"


def test_a_missing_connection_is_reported_per_connector_at_the_breach() -> None:
    pauser = BreachPauser("no_such_connection_anywhere", ["orders-sink"])
    pauser.prepare()  # logged, not raised: the breach is met anyway
    assert pauser._hook is None

    done = pauser.pause()

    assert done["orders-sink"]["asked_at_ms"] is None
    assert "no_such_connection_anywhere" in done["orders-sink"]["error"]


def test_no_connectors_reads_no_connection() -> None:
    pauser = BreachPauser("no_such_connection_anywhere", [])
    pauser.prepare()
    assert pauser.pause() == {} and pauser._hook is None
