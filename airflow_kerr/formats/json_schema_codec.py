"""JSON Schema bodies: JSON text, checked against the writer's schema when asked (``json.fail.invalid.schema``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from jsonschema import exceptions as jsonschema_errors  # type: ignore[import-untyped]
from jsonschema import validators

from airflow_kerr.formats.exceptions import SerializationError

try:
    import msgspec

    _decode: Callable[[bytes], Any] = msgspec.json.Decoder().decode
    _DECODE_ERRORS: tuple[type[Exception], ...] = (msgspec.DecodeError, ValueError)
except ImportError:  # pragma: no cover - msgspec comes with Airflow; a bare executor may lack it
    _decode = json.loads
    _DECODE_ERRORS = (ValueError,)

_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


class JsonSchemaCodec:
    """One JSON Schema, its validator built once (the draft its ``$schema`` names, else draft 7 as Confluent's)."""

    def __init__(self, schema: str | dict[str, Any]) -> None:
        try:
            parsed = json.loads(schema) if isinstance(schema, str) else schema
            cls = validators.validator_for(parsed, default=validators.Draft7Validator)
            cls.check_schema(parsed)
        except (ValueError, jsonschema_errors.SchemaError) as error:
            raise SerializationError(f"Invalid JSON Schema: {error}") from None
        self.schema = parsed
        self.validator = cls(parsed)
        title = parsed.get("title") if isinstance(parsed, dict) else None
        self.name = title if isinstance(title, str) else None

    def decode(self, body: bytes, validate: bool) -> Any:
        try:
            value = _decode(body)
        except _DECODE_ERRORS as error:
            raise SerializationError(f"Invalid JSON: {error}") from None
        if validate:
            self.check(value)
        return value

    def check(self, value: Any) -> None:
        error = jsonschema_errors.best_match(self.validator.iter_errors(value))
        if error is not None:
            where = "/".join(str(part) for part in error.absolute_path) or "(root)"
            raise SerializationError(f"Validation error at {where}: {error.message}")

    def encode(self, value: Any) -> bytes:
        """``value`` as compact JSON, after checking it against the schema (a record that does not fit fails)."""
        self.check(value)
        return _encode(value).encode("utf-8")
