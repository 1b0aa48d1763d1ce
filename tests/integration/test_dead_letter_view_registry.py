"""Schema Registry values in the DLQ view (issue #42, point 1), through the plugin's routes.

The plugin's real FastAPI app, served by a TestClient, reads the real broker and decodes
through the development Schema Registry (``airflow_kerr.local.schema_registry``) named by a
``schema_registry`` connection. Avro, Protobuf and JSON Schema dead letters come back as
JSON with their schema's subject, version and id and their secrets masked by field name; a
record whose schema is missing says so on that record while the others decode; and a
registry that does not answer changes neither the counts nor the other records. Only
Airflow's authentication is stood in for (a signed-in admin), as in
``test_dead_letter_view_requests.py``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from airflow_kerr.errors import MASK
from airflow_kerr.local.broker import free_port
from tests.clock import RECENT_MS
from tests.registry_dead_letters import (
    AVRO_ORDER,
    JSON_SHIPMENT,
    MISSING_SCHEMA_ID,
    PROTO_REFUND,
    RegistryDlq,
    write_registry_dlq,
)

#: A registry port nothing listens on, and credentials in its URL that no answer may show.
DOWN_PORT = free_port()
DOWN_PASSWORD = "pw-down-4242"


@pytest.fixture(scope="module")
def written(kafka_bootstrap: str, schema_registry: Any) -> RegistryDlq:
    suffix = uuid.uuid4().hex[:8]
    return write_registry_dlq(
        {"bootstrap.servers": kafka_bootstrap}, schema_registry.url, f"view-sr-{suffix}.dlq", f"view-sr-{suffix}"
    )


@pytest.fixture(scope="module")
def client(kafka_bootstrap: str, schema_registry: Any) -> Iterator[TestClient]:
    """The plugin's app, a signed-in admin asking; ``schema_registry_default`` is the development registry."""
    from airflow.api_fastapi.app import init_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from airflow.api_fastapi.core_api.security import get_user

    from airflow_kerr.plugins.dead_letter_view import app

    connections = {
        "kafka_default": {"conn_type": "kafka", "extra": {"bootstrap.servers": kafka_bootstrap}},
        "schema_registry_default": {"conn_type": "schema_registry", "host": schema_registry.url},
        "registry_down": {"conn_type": "schema_registry", "host": f"http://svc:{DOWN_PASSWORD}@127.0.0.1:{DOWN_PORT}"},
        "not_a_registry": {"conn_type": "kafka", "extra": {"bootstrap.servers": kafka_bootstrap}},
    }
    patch = pytest.MonkeyPatch()
    for conn_id, connection in connections.items():
        patch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(connection))
    init_auth_manager()
    app.dependency_overrides[get_user] = lambda: SimpleAuthManagerUser(username="on-call", role="admin")
    try:
        with TestClient(app, raise_server_exceptions=False) as test_client:
            yield test_client
    finally:
        app.dependency_overrides.clear()
        patch.undo()


def samples(client: TestClient, written: RegistryDlq, **params: Any) -> dict[int, dict[str, Any]]:
    """The samples route's records, by their source offset (which record was written is told by it)."""
    answer = client.get(f"/api/topics/{written.dlq}/samples", params={"limit": 20, **params})
    assert answer.status_code == 200, answer.text
    records = {record["source"]["offset"]: record for record in answer.json()["records"]}
    assert len(records) == written.count, records.keys()
    return records


def test_avro_protobuf_and_json_schema_values_show_as_json_with_their_schema(
    client: TestClient, written: RegistryDlq
) -> None:
    records = samples(client, written)
    avro = records[written.avro]
    assert json.loads(avro["value"]["text"]) == {**AVRO_ORDER, "card_token": MASK}
    assert avro["value"]["schema"] == {
        "id": written.avro_schema_id,
        "format": "avro",
        "subject": f"{written.source}-value",
        "version": 1,
    }
    assert avro["value"]["error"] is None and avro["value"]["base64"] is None
    assert json.loads(avro["key"]["text"]) == "order-7"
    assert avro["key"]["schema"]["subject"] == f"{written.source}-key"

    refund = records[written.protobuf]["value"]
    assert json.loads(refund["text"]) == PROTO_REFUND
    assert refund["schema"] == {
        "id": written.protobuf_schema_id,
        "format": "protobuf",
        "subject": f"{written.refunds}-value",
        "version": 1,
    }
    shipment = records[written.json_schema]["value"]
    assert json.loads(shipment["text"]) == {**JSON_SHIPMENT, "api_password": MASK}
    assert shipment["schema"] == {
        "id": written.json_schema_id,
        "format": "json_schema",
        "subject": f"{written.shipments}-value",
        "version": 1,
    }
    assert "tok-4111-secret" not in json.dumps(records) and "pw-9000" not in json.dumps(records)


def test_a_missing_schema_is_said_on_its_record_while_the_others_decode(
    client: TestClient, written: RegistryDlq, schema_registry: Any
) -> None:
    records = samples(client, written)
    missing = records[written.missing]["value"]
    assert missing["error"] == f"schema {MISSING_SCHEMA_ID} not found in the registry at {schema_registry.url}"
    assert missing["base64"] and missing["schema"] is None  # the bytes are still there to read
    cut = records[written.undecodable]["value"]
    assert cut["error"].startswith(
        f"schema {written.avro_schema_id} (avro, subject {written.source}-value version 1) does not decode this value: "
    )
    assert "EOFException" in cut["error"] and cut["base64"]
    assert json.loads(records[written.plain_json]["value"]["text"]) == {"id": 15, "secret": MASK}
    assert records[written.avro]["value"]["schema"]["id"] == written.avro_schema_id


def test_a_registry_that_does_not_answer_blanks_no_figures_and_shows_no_credentials(
    client: TestClient, written: RegistryDlq
) -> None:
    """The counts read headers only; each framed record says the registry did not answer, naming it bare."""
    cursor, total, matched = None, None, 0
    while True:
        params = {"schema_registry_conn_id": "registry_down", **({"cursor": cursor} if cursor else {})}
        chunk = client.get(f"/api/topics/{written.dlq}/summary", params=params)
        assert chunk.status_code == 200, chunk.text
        body = chunk.json()
        total, matched, cursor = body["total"], matched + body["matched"], body["cursor"]
        if not cursor:
            break
    assert (total, matched) == (written.count, written.count)

    records = samples(client, written, schema_registry_conn_id="registry_down")
    for offset in written.framed:
        error = records[offset]["value"]["error"]
        assert error and f"the registry at http://127.0.0.1:{DOWN_PORT} did not answer" in error, error
    assert json.loads(records[written.plain_json]["value"]["text"])["id"] == 15
    shown = json.dumps(records)
    assert DOWN_PASSWORD not in shown and "svc:" not in shown


def test_without_a_registry_connection_framed_values_say_why_they_are_not_decoded(
    client: TestClient, written: RegistryDlq, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__KERR__DEAD_LETTER_VIEW_REGISTRY_CONN_ID", "no_registry_here")
    assert client.get("/api/settings").json()["schema_registry_conn_id"] == "no_registry_here"
    records = samples(client, written)
    avro = records[written.avro]["value"]
    assert avro["error"] == (
        f"schema {written.avro_schema_id} not decoded: there is no Schema Registry connection 'no_registry_here'; "
        "create one, or name one on the page"
    )
    assert avro["base64"] and json.loads(records[written.plain_json]["value"]["text"])["id"] == 15


@pytest.mark.parametrize(
    ("conn_id", "status", "says"),
    [
        ("no_such_registry", 404, "schema_registry_conn_id='no_such_registry': no such connection"),
        ("not_a_registry", 400, "a 'kafka' connection; Schema Registry values are decoded through a 'schema_registry'"),
        ("bad\x00id", 400, "not a connection id"),
    ],
)
def test_a_registry_connection_the_view_cannot_use_is_a_4xx_naming_it(
    client: TestClient, written: RegistryDlq, conn_id: str, status: int, says: str
) -> None:
    answer = client.get(f"/api/topics/{written.dlq}/samples", params={"schema_registry_conn_id": conn_id})
    assert answer.status_code == status, answer.text
    assert says in answer.json()["detail"]


def replay_formats(client: TestClient, written: RegistryDlq, **params: Any) -> dict[str, str]:
    """What the samples route says "Replay this selection…" prefills as the key and value format."""
    answer = client.get(f"/api/topics/{written.dlq}/samples", params={"limit": 20, **params})
    assert answer.status_code == 200, answer.text
    formats: dict[str, str] = answer.json()["replay_formats"]
    return formats


def test_the_replay_handoff_carries_the_registry_connection_and_the_selections_one_format(
    client: TestClient, written: RegistryDlq
) -> None:
    """ "Replay this selection…" fills the replay form from what the page used: its dialog is built from the settings
    route's field list, which now has the Schema Registry connection (the page fills it with its own), and from the
    samples route's ``replay_formats``, a registry format only where every sampled record of the selection was
    decoded with that one format."""
    from airflow_kerr.operators.dlq_replay import replay_form_params

    settings = client.get("/api/settings").json()
    fields = {field["name"]: field for field in settings["replay_form"]}
    assert list(fields) == list(replay_form_params())  # the dialog offers every field the DAG takes
    assert fields["schema_registry_conn_id"]["schema"]["type"] == ["null", "string"]
    assert settings["schema_registry_conn_id"] == "schema_registry_default"

    only_first = {"start": str(RECENT_MS), "end": str(RECENT_MS + 1)}  # the Avro order: Avro key and value
    assert replay_formats(client, written, **only_first) == {"key_format": "avro", "value_format": "avro"}
    refunds = replay_formats(client, written, source_topic=written.refunds)
    assert refunds == {"key_format": "bytes", "value_format": "protobuf"}  # text keys, Protobuf values
    shipments = replay_formats(client, written, source_topic=written.shipments)
    assert shipments == {"key_format": "bytes", "value_format": "json_schema"}
    # The orders' topic also holds a missing schema, a body that does not decode and plain JSON: no one format.
    assert replay_formats(client, written, source_topic=written.source) == {
        "key_format": "bytes",
        "value_format": "bytes",
    }
    assert replay_formats(client, written) == {"key_format": "bytes", "value_format": "bytes"}
    # Undecoded (the registry did not answer), a framed value's format is unknown: bytes, not a guess.
    down = replay_formats(client, written, source_topic=written.refunds, schema_registry_conn_id="registry_down")
    assert down == {"key_format": "bytes", "value_format": "bytes"}
    for name, value in {**refunds, **shipments}.items():
        assert value in fields[name]["schema"]["enum"], (name, value)
