"""``BreachPauser``: the Connect client made before the breach, dropped after a failed ask, never raising.

Real hook, real HTTP client, a real closed port (nothing listens): what a worker that went away looks like.
"""

from __future__ import annotations

import json
import socket
from concurrent.futures import ThreadPoolExecutor

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


def test_pausers_on_one_connection_share_a_client_and_a_changed_connection_gets_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Same connection id and settings: one client for both pausers (a triggerer with a thousand watches holds
    one). The connection's password changed since: the next pauser gets a client with the new settings, the
    pausers holding the old one keep it until they let go, and no share is keyed by the password in clear."""
    connection = {"conn_type": "kafka_connect", "host": "connect.example", "port": 8083, "login": "svc"}
    monkeypatch.setenv("AIRFLOW_CONN_SHARED_CONNECT", json.dumps({**connection, "password": "old-s3cret"}))
    first, second = BreachPauser("shared_connect", ["a"]), BreachPauser("shared_connect", ["b"])
    first.prepare()
    second.prepare()
    assert first._hook is not None and first._hook is second._hook, "two clients for one connection"
    client = first._hook._client
    assert client is not None and first._share is not None and "s3cret" not in repr(first._share)

    monkeypatch.setenv("AIRFLOW_CONN_SHARED_CONNECT", json.dumps({**connection, "password": "new-s3cret"}))
    third = BreachPauser("shared_connect", ["c"])
    third.prepare()
    assert third._hook is not None and third._hook is not first._hook, "a changed connection kept the old client"
    assert third._hook.settings.auth == ("svc", "new-s3cret")

    first.close()
    assert not client.is_closed, "a pauser still holding the client saw it closed"
    second.close()
    assert client.is_closed, "the last pauser left its client open"
    third.close()


def test_pausers_preparing_at_once_in_worker_threads_make_one_client(unreachable_connect: str) -> None:
    """The triggerer opens watches in worker threads: eight opening at once still make one client."""
    pausers = [BreachPauser(unreachable_connect, [f"sink-{n}"]) for n in range(8)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda pauser: pauser.prepare(), pausers))
    try:
        assert len({id(pauser._hook) for pauser in pausers}) == 1 and pausers[0]._hook is not None
    finally:
        for pauser in pausers:
            pauser.close()
