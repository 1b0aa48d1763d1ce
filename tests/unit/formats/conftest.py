"""A real HTTP server on loopback answering as a Confluent Schema Registry does, for the formats tests.

Not the development registry (``airflow_kerr.local``), which needs the embedded broker: this
one serves the four requests the converters and the sink make from a dict, and can be told
to answer 503 or to hang, which a real registry cannot be made to do on demand. Its error
bodies are Confluent's (``{"error_code": 40403, "message": "Schema 42 not found"}``).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest


@dataclass
class RegistryState:
    schemas: dict[int, dict[str, Any]] = field(default_factory=dict)
    subjects: dict[str, list[int]] = field(default_factory=dict)
    #: Answer this many requests with 503 before serving again.
    unavailable: int = 0
    #: While set, requests wait until it is cleared (or the server stops).
    hang: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    requests: list[str] = field(default_factory=list)
    authorizations: list[str] = field(default_factory=list)

    def add(self, schema: str, schema_type: str = "AVRO", subject: str | None = None) -> int:
        known = [number for number, entry in self.schemas.items() if entry["schema"] == schema]
        schema_id = known[0] if known else len(self.schemas) + 1
        self.schemas.setdefault(schema_id, {"schema": schema, "schemaType": schema_type})
        if subject is not None and schema_id not in self.subjects.setdefault(subject, []):
            self.subjects[subject].append(schema_id)
        return schema_id


class _Handler(BaseHTTPRequestHandler):
    state: RegistryState

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _answer(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _gate(self) -> bool:
        state = self.state
        state.requests.append(f"{self.command} {self.path}")
        if self.headers.get("Authorization"):
            state.authorizations.append(self.headers["Authorization"])
        if state.hang.is_set():
            state.release.wait()
            return False
        if state.unavailable > 0:
            state.unavailable -= 1
            self._answer(503, {"error_code": 50003, "message": "Error while forwarding the request to the leader"})
            return False
        return True

    def do_GET(self) -> None:
        if not self._gate():
            return
        parts = urlsplit(self.path).path.strip("/").split("/")
        state = self.state
        if parts[:2] == ["schemas", "ids"]:
            schema_id = int(parts[2])
            if schema_id not in state.schemas:
                self._answer(404, {"error_code": 40403, "message": f"Schema {schema_id} not found"})
                return
            self._answer(200, state.schemas[schema_id])
            return
        if parts[0] == "subjects" and parts[2] == "versions":
            subject = unquote(parts[1])
            ids = state.subjects.get(subject)
            if not ids:
                self._answer(404, {"error_code": 40401, "message": f"Subject '{subject}' not found."})
                return
            version = len(ids) if parts[3] == "latest" else int(parts[3])
            schema_id = ids[version - 1]
            self._answer(200, {"subject": subject, "version": version, "id": schema_id, **state.schemas[schema_id]})
            return
        self._answer(404, {"error_code": 404, "message": "HTTP 404 Not Found"})

    def do_POST(self) -> None:
        if not self._gate():
            return
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        parts = urlsplit(self.path).path.strip("/").split("/")
        subject = unquote(parts[1])
        schema_type = body.get("schemaType", "AVRO")
        if parts[-1] == "versions":
            self._answer(200, {"id": self.state.add(body["schema"], schema_type, subject)})
            return
        for version, schema_id in enumerate(self.state.subjects.get(subject, []), start=1):
            if self.state.schemas[schema_id]["schema"] == body["schema"]:
                self._answer(200, {"subject": subject, "version": version, "id": schema_id, "schema": body["schema"]})
                return
        self._answer(404, {"error_code": 40403, "message": "Schema not found"})


@contextmanager
def registry_server() -> Iterator[tuple[str, RegistryState]]:
    """Serve a :class:`RegistryState` on a free loopback port; yield its URL and the state."""
    state = RegistryState()
    handler = type("Handler", (_Handler,), {"state": state})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", state
    finally:
        state.release.set()
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def registry() -> Iterator[tuple[str, RegistryState]]:
    with registry_server() as served:
        yield served
