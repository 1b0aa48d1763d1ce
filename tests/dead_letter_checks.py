"""What every parsed dead letter must hold, whatever headers it was read from: the parser's documented types.

Shared by the property tests of the parser (``tests/unit/errors/test_dead_letter_parse_fuzz.py``) and of the
dialects (``tests/unit/errors/test_dialects_fuzz.py``). Kafka's ranges and topic rule are written out here
rather than imported, so that the tests state the contract instead of restating the product.
"""

from __future__ import annotations

import re
from typing import Any

from airflow_kerr.errors import DeadLetterRecord, HeaderSet, Stage

INT16_MAX, INT32_MAX, INT64_MAX = 2**15 - 1, 2**31 - 1, 2**63 - 1
TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")


def is_topic_name(name: str) -> bool:
    return TOPIC_NAME.fullmatch(name) is not None and name not in (".", "..")


def check_documented_types(record: DeadLetterRecord, headers: list[tuple[str, Any]]) -> None:
    """Every field holds a value Kafka accepts or None, and every problem names a header that was there."""
    assert type(record) is DeadLetterRecord
    assert record.header_set is None or isinstance(record.header_set, HeaderSet)
    assert record.source_topic is None or is_topic_name(record.source_topic)
    for number, high in (
        (record.source_partition, INT32_MAX),
        (record.source_offset, INT64_MAX),
        (record.source_timestamp, INT64_MAX),
        (record.task_id, INT32_MAX),
    ):
        assert number is None or (type(number) is int and 0 <= number <= high)
    assert record.delivery_count is None or (
        type(record.delivery_count) is int and 1 <= record.delivery_count <= INT16_MAX
    )
    assert record.stage is None or isinstance(record.stage, Stage)
    for text in (
        record.executing_class,
        record.exception_class,
        record.exception_message,
        record.exception_stacktrace,
        record.connector_name,
        record.group,
        record.wrapper_class,
        record.rule_name,
        record.rule_mode,
        record.rule_subject,
    ):
        assert text is None or type(text) is str
    assert isinstance(record.is_pointer, bool)
    assert all(type(name) is str and (raw is None or type(raw) is bytes) for name, raw in record.headers)
    present = {name for name, _ in headers}
    assert set(record.malformed_headers) <= present
    for name, problem in record.malformed_headers.items():
        assert type(problem) is str and len(problem) < 300, (name, problem)
    assert all(value is None or type(value) is str for value in record.error_headers.values())
