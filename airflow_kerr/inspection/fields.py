"""The header fast path: the fields a summary counts one record by, read without parsing when that is safe.

A DLQ can hold millions of records and the view must count them in seconds, so a plain
Connect dead letter's fields are taken from its headers as they arrive
(:func:`~airflow_kerr.errors.header_reader.plain_connect_of`); every other record goes
through the one parsing rule, :func:`~airflow_kerr.errors.parse_dead_letter`. The unit
tests check that both give the same fields for any headers.
"""

from __future__ import annotations

from dataclasses import dataclass

from airflow_kerr.errors.dead_letter import DeadLetterRecord, HeaderSet, RawHeaders, letter_from
from airflow_kerr.errors.dialects import header_set_name
from airflow_kerr.errors.header_reader import plain_connect_of, read_error_headers
from airflow_kerr.errors.stage import Stage

#: The stage names a stage header is recognised by (as ``parse_dead_letter`` recognises them).
STAGE_NAMES = frozenset(Stage.__members__)


@dataclass(frozen=True)
class DeadLetterFields:
    """What a summary counts a dead letter by, as :func:`parse_dead_letter` reads it.

    ``header_set`` is the dialect's name (``"none"`` for a header-less record). ``malformed``
    is true when the record is not a dead letter (no dialect's headers) or a header it was
    read from could not be used (``DeadLetterRecord.malformed_headers``).
    """

    exception_class: str | None
    stage: str | None
    source_topic: str | None
    pipeline: str | None
    header_set: str
    malformed: bool


#: Raw field values: (exception class, stage, source topic, pipeline) as bytes or text, the dialect's name, malformed.
RawFields = tuple[bytes | str | None, bytes | str | None, bytes | str | None, bytes | str | None, str, bool]
#: The Connect dialect's name: what the fast path counts a plain Connect dead letter under.
CONNECT = HeaderSet.CONNECT.value


def _fields_of_letter(letter: DeadLetterRecord) -> RawFields:
    stage = None if letter.stage is None else letter.stage.value
    malformed = letter.header_set is None or bool(letter.malformed_headers)
    return (
        letter.exception_class,
        stage,
        letter.source_topic,
        letter.connector_name,
        header_set_name(letter.header_set),
        malformed,
    )


def raw_fields(headers: RawHeaders) -> RawFields:
    """The counted fields of one record's headers, undecoded when they can be, else as ``parse_dead_letter`` reads them.

    A plain Connect dead letter (:func:`plain_connect_of`) gives its fields as they arrive;
    any other record is read by :func:`read_error_headers` and parsed.
    """
    fast = plain_connect_of(headers)
    if fast is None:
        return _fields_of_letter(letter_from(read_error_headers(headers), None, None))
    topic, stage, exception_class, pipeline, _ = fast
    return exception_class, stage, topic, pipeline, CONNECT, False


def header_text(value: bytes | str | None) -> str | None:
    """A header value as ``parse_dead_letter`` decodes it: UTF-8 with U+FFFD for invalid bytes."""
    if value is None or isinstance(value, str):
        return value
    return value.decode("utf-8", errors="replace")


def stage_text(value: bytes | str | None) -> str | None:
    """A stage header's text when it names a stage (as ``parse_dead_letter`` recognises it), else ``None``."""
    text = header_text(value)
    return text if text in STAGE_NAMES else None


def dead_letter_fields(headers: RawHeaders) -> DeadLetterFields:
    """The fields a summary counts one record by (decoded); the same as ``parse_dead_letter`` reads."""
    exception_class, stage, topic, pipeline, header_set, malformed = raw_fields(headers)
    return DeadLetterFields(
        header_text(exception_class),
        stage_text(stage),
        header_text(topic),
        header_text(pipeline),
        header_set,
        malformed,
    )
