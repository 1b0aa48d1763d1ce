"""How a dead letter's key, value and texts are shown: decoded for people, cut to a size, secrets masked.

What a failed record carries may quote a credential, and the page is read by people the
connection's secrets were not given to, so every text shown here goes through the one
masking rule (:mod:`airflow_kerr.errors.masking`); and a value can be megabytes, so only
a bounded part of it is shown, saying so.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import asdict, dataclass
from typing import Any

from airflow_kerr.errors.masking import mask_secrets, mask_text

#: Key and value bytes shown per sampled record; longer ones are cut and say so.
MAX_SHOWN_BYTES = 64 * 1024
#: Characters of a header value, exception message or stack trace shown per sampled record.
MAX_SHOWN_CHARS = 64 * 1024


def cut_text(text: str | None) -> str | None:
    """Text shown whole up to :data:`MAX_SHOWN_CHARS`; beyond, cut with the length noted."""
    if text is None or len(text) <= MAX_SHOWN_CHARS:
        return text
    return f"{text[:MAX_SHOWN_CHARS]}\u2026 [cut: {len(text):,} characters in all]"


def shown_text(text: str | None) -> str | None:
    """Free text (an exception message, a stack trace) as shown: masked, then cut."""
    return None if text is None else cut_text(mask_text(text))


_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


@dataclass(frozen=True)
class SchemaRef:
    """The registry schema a key or value was decoded with: what an on-call person looks the schema up by."""

    id: int
    #: ``avro``, ``protobuf`` or ``json_schema``.
    format: str
    #: A subject holding the schema (the source topic's, by TopicNameStrategy, when it is one) and its version there;
    #: ``None`` when the registry lists none.
    subject: str | None
    version: int | None


@dataclass(frozen=True)
class Payload:
    """A record key or value for display: text (JSON pretty-printed, secrets masked) or base64 for bytes.

    ``text`` is set when the bytes are UTF-8 without control characters (other than tab and
    line ends); ``json`` when that text is a JSON object or array, then shown indented. Other
    bytes are ``base64`` (standard alphabet). Only the first :data:`MAX_SHOWN_BYTES` are
    shown; ``truncated`` says so and ``bytes`` is the full size. ``None`` has both unset.

    A value in a Schema Registry format (:mod:`airflow_kerr.inspection.registry_values`) is
    the decoded value as JSON with ``schema`` naming the schema it was decoded with; one that
    could not be decoded keeps its base64 and says why in ``error``.
    """

    text: str | None
    base64: str | None
    json: bool
    bytes: int
    truncated: bool
    schema: SchemaRef | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def describe_payload(raw: bytes | None) -> Payload:
    """How a sampled record's key or value is shown (see :class:`Payload`)."""
    if raw is None:
        return Payload(None, None, False, 0, False)
    size = len(raw)
    truncated = size > MAX_SHOWN_BYTES
    shown_bytes = raw[:MAX_SHOWN_BYTES]
    text: str | None = None
    for trim in range(4 if truncated else 1):  # a cut may split a UTF-8 sequence: drop up to 3 bytes of it
        try:
            text = shown_bytes[: len(shown_bytes) - trim].decode("utf-8")
            break
        except UnicodeDecodeError:
            continue
    if text is None or _CONTROL.search(text):
        return Payload(None, base64.b64encode(shown_bytes).decode("ascii"), False, size, truncated)
    if not truncated and text.lstrip()[:1] in ("{", "["):
        try:
            document = json.loads(text)
            pretty = json.dumps(mask_secrets(document), indent=2, ensure_ascii=False)
        except (ValueError, RecursionError):
            pass
        else:
            return Payload(pretty, None, True, size, False)
    return Payload(mask_text(text), None, False, size, truncated)
