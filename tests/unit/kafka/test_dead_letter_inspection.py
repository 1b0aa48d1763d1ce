"""The DLQ view's pure parts: what a selection accepts, the summary's cursor and buckets, masking, decoding.

The view shows dead letters to whoever may read the Kafka connection, so a credential in a
failed record must never reach the page; and it counts millions of records with a direct
header lookup that must agree with ``parse_dead_letter`` on every input.
"""

from __future__ import annotations

import base64
import json
import struct
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_kerr.errors import (
    MASK,
    ErrorContext,
    SourceRecord,
    Stage,
    TaskId,
    build_dead_letter_record,
    parse_dead_letter,
)
from airflow_kerr.errors.dead_letter import ERROR_HEADER_ORIG_PARTITION
from airflow_kerr.errors.dialects import FIELD_HEADERS, header_set_name
from airflow_kerr.kafka.dead_letter_inspection import (
    BUCKET_WIDTHS_MS,
    MAX_BUCKETS,
    MAX_SHOWN_BYTES,
    NONE_KEY,
    InvalidSelection,
    ScanCursor,
    Selection,
    choose_bucket_ms,
    dead_letter_fields,
    describe_payload,
    mask_secrets,
    mask_text,
)
from tests.dead_letter_writers import (
    Original,
    header_less,
    kip_1191,
    schema_registry_rule,
    spring_dlt,
    streams_bakdata,
)


def connect_headers(error: BaseException | None = None, topic: str = "orders") -> list[tuple[str, bytes | None]]:
    record = SourceRecord(topic, 1, 42, 1_795_250_000_000, key=b"k", value=b"v", headers=[("trace", b"t")])
    context = ErrorContext(
        TaskId("orders_pipeline", 0), Stage.TRANSFORMATION, "x.Validate", error or ValueError("bad"), record
    )
    return build_dead_letter_record(context, topic="orders.dlq").headers


# ------------------------------------------------------------------------------------------- selection


def test_empty_query_selects_everything() -> None:
    """A page opened without filters shows every dead letter."""
    selection = Selection.from_query({"exception_class": "", "stage": None, "start": "  ", "cursor": "x"})
    assert selection == Selection()
    letter = parse_dead_letter(connect_headers(), b"k", b"v")
    assert selection.matches(letter, 5)
    assert selection.to_dict() == dict.fromkeys(
        ("exception_class", "stage", "source_topic", "pipeline", "start_ms", "end_ms", "header_set")
    )


def test_query_values_are_read_and_times_accept_epoch_ms_and_iso() -> None:
    """A user can type a time as epoch milliseconds or as an ISO time, and a stage in lower case."""
    selection = Selection.from_query(
        {
            "exception_class": " ValueError ",
            "stage": "transformation",
            "source_topic": "orders",
            "pipeline": "orders_pipeline",
            "start": "2026-11-23T10:00:00Z",
            "end_ms": "1795500000000",
        }
    )
    assert selection.exception_class == "ValueError"
    assert selection.stage == "TRANSFORMATION"
    assert selection.start_ms == 1_795_428_000_000
    assert selection.end_ms == 1_795_500_000_000
    assert Selection.from_query({"start": "2026-11-23T10:00:00"}).start_ms == 1_795_428_000_000  # naive = UTC
    assert Selection.from_query({"start": "2026-11-23T11:00:00+01:00"}).start_ms == 1_795_428_000_000


def test_every_bad_value_is_named_with_what_is_accepted() -> None:
    """A wrong filter gets one line per mistake naming the key, the value given and what works."""
    with pytest.raises(InvalidSelection) as caught:
        Selection.from_query({"stage": "PUT", "start": "yesterday", "end": "-5"})
    lines = str(caught.value).splitlines()
    assert len(lines) == 3
    assert lines[0].startswith("stage='PUT': expected one of KEY_CONVERTER")
    assert "TASK_PUT" in lines[0] and NONE_KEY in lines[0]
    assert lines[1].startswith("start='yesterday': expected epoch milliseconds")
    assert "ISO-8601" in lines[1]
    assert lines[2].startswith("end='-5': expected epoch milliseconds")
    assert [p.key for p in caught.value.problems] == ["stage", "start", "end"]


def test_start_must_come_before_end() -> None:
    """An empty time window is refused rather than silently showing nothing."""
    with pytest.raises(InvalidSelection, match=r"end='1000': expected a time after start \(2000 ms\)"):
        Selection.from_query({"start": "2000", "end": "1000"})


def test_selection_matches_fields_none_key_and_time_bounds() -> None:
    """Filtering by class, stage, topic, pipeline and a half-open time window picks exactly those records."""
    letter = parse_dead_letter(connect_headers(KeyError("customer")), b"k", b"v")
    assert Selection(exception_class="KeyError", stage="TRANSFORMATION").matches(letter, 10)
    assert not Selection(exception_class="ValueError").matches(letter, 10)
    assert Selection(source_topic="orders", pipeline="orders_pipeline").matches(letter, 10)
    assert Selection(start_ms=10, end_ms=11).matches(letter, 10)
    assert not Selection(start_ms=10, end_ms=11).matches(letter, 11)
    assert not Selection(start_ms=10).matches(letter, None)
    plain = parse_dead_letter([("a", b"b")], b"k", b"v")
    assert Selection(exception_class=NONE_KEY, stage=NONE_KEY).matches(plain, 1)
    assert not Selection(exception_class=NONE_KEY).matches(letter, 1)


# ------------------------------------------------------------------------------------------- fields


def test_direct_lookup_equals_parse_for_a_connect_record() -> None:
    """The fast count reads the same class, stage, topic and pipeline as the replay's parser."""
    fields = dead_letter_fields(connect_headers(KeyError("customer")))
    assert (fields.exception_class, fields.stage, fields.source_topic, fields.pipeline, fields.malformed) == (
        "KeyError",
        "TRANSFORMATION",
        "orders",
        "orders_pipeline",
        False,
    )


def _parsed_fields(headers: Any) -> tuple[Any, ...]:
    letter = parse_dead_letter(headers, None, None)
    return (
        letter.exception_class,
        None if letter.stage is None else letter.stage.value,
        letter.source_topic,
        letter.connector_name,
        header_set_name(letter.header_set),
        letter.header_set is None or bool(letter.malformed_headers),
    )


def _counted_fields(headers: Any) -> tuple[Any, ...]:
    fields = dead_letter_fields(headers)
    return (
        fields.exception_class,
        fields.stage,
        fields.source_topic,
        fields.pipeline,
        fields.header_set,
        fields.malformed,
    )


#: Every dialect's field headers (Spring's binary ones among them), its other headers, and others.
_DIALECT_NAMES = sorted({name for names in FIELD_HEADERS.values() for name in names})
_NAMES = st.sampled_from(
    [
        *_DIALECT_NAMES,
        "kafka_dlt-original-timestamp-type",
        "retry_topic-attempts",
        "retry_topic-backoff-timestamp",
        "__streams.errors.task.id",
        "__connect.errors.other",
        "__rule.other",
        "trace-id",
    ]
)
_VALUES = st.one_of(
    st.none(),
    st.sampled_from([b"0", b"7", b"123456789", b"1234567890", b"-1", b" 5", b"orders", b"bad topic", b"TASK_PUT", b""]),
    st.binary(max_size=12),
    st.from_regex(rb"[0-9]{1,20}", fullmatch=True),
    st.integers(-(2**31), 2**31 - 1).map(lambda n: struct.pack(">i", n)),
    st.integers(-(2**63), 2**63 - 1).map(lambda n: struct.pack(">q", n)),
    st.text(max_size=8),
)
_ORIGINAL = Original("orders", 1, 42, 1_795_250_000_000, b"k", b"v", [("trace", b"t")])
#: A record of each dialect as its writer writes it (tests/dead_letter_writers.py), Connect's as the job does.
_WRITTEN = {
    "connect": lambda: connect_headers(),
    "spring": lambda: spring_dlt(_ORIGINAL)["headers"],
    "spring_key": lambda: spring_dlt(_ORIGINAL, key_failure=True, group=None)["headers"],
    "schema_registry": lambda: schema_registry_rule(_ORIGINAL, dlq_topic="orders.dlq")["headers"],
    "kip_1191": lambda: kip_1191(_ORIGINAL, dlq_topic="orders.dlq")["headers"],
    "streams": lambda: streams_bakdata(_ORIGINAL, dlq_topic="orders.dlq")["headers"],
    "none": lambda: header_less(_ORIGINAL, dlq_topic="orders.dlq").get("headers", []),
}


@given(
    bases=st.lists(st.sampled_from(sorted(_WRITTEN)), max_size=3),
    extra=st.lists(st.tuples(_NAMES, _VALUES), max_size=8),
    drop=st.sets(st.integers(0, 30), max_size=4),
    data=st.data(),
)
def test_direct_lookup_agrees_with_parse_dead_letter_on_any_headers(
    bases: list[str], extra: list[tuple[str, Any]], drop: set[int], data: st.DataObject
) -> None:
    """One parsing rule: whatever the headers, of whichever writers, the summary counts a record by what
    parse_dead_letter reads (class, stage, source topic, pipeline, dialect, malformed)."""
    headers: list[tuple[str, Any]] = [pair for base in bases for pair in _WRITTEN[base]()]
    headers = [pair for i, pair in enumerate(headers) if i not in drop] + extra
    headers = data.draw(st.permutations(headers)) if data.draw(st.booleans()) else headers

    assert _counted_fields(headers) == _parsed_fields(headers)
    assert _counted_fields(dict(headers)) == _parsed_fields(dict(headers)), "a mapping, too"


@pytest.mark.parametrize("writer", sorted(_WRITTEN))
def test_each_dialect_is_counted_by_its_name_and_class(writer: str) -> None:
    """The summary names every writer's dead letters by dialect, and by the class parse_dead_letter reads
    (Spring's root cause, Schema Registry's rule), never only Connect's."""
    fields = dead_letter_fields(_WRITTEN[writer]())
    expected = {
        "connect": ("ValueError", "connect", "orders", False),
        "spring": ("java.lang.IllegalStateException", "spring", "orders", False),
        "spring_key": ("java.lang.IllegalStateException", "spring", "orders", False),
        "schema_registry": ("rule:checkSsnLen", "schema_registry", "orders", False),
        "kip_1191": (None, "dlq", "orders", False),
        "streams": ("org.apache.kafka.common.errors.SerializationException", "streams", "orders", False),
        "none": (None, "none", None, True),
    }[writer]
    assert (fields.exception_class, fields.header_set, fields.source_topic, fields.malformed) == expected


def test_malformed_and_plain_records_are_flagged() -> None:
    """A record with a garbage partition header, or with no error headers at all, counts as malformed."""
    headers = [(n, b"x" if n == ERROR_HEADER_ORIG_PARTITION else v) for n, v in connect_headers()]
    assert dead_letter_fields(headers).malformed
    assert dead_letter_fields([("trace", b"1")]).malformed
    assert not dead_letter_fields(connect_headers()).malformed


# ------------------------------------------------------------------------------------------- cursor, buckets


def test_cursor_round_trips_and_is_url_safe() -> None:
    """The page passes the cursor back in a URL and the scan resumes exactly where it stopped."""
    selection = Selection(exception_class="ValueError")
    cursor = ScanCursor("orders.dlq", selection.fingerprint(), 60_000, 1, 2, 100, 40, {0: (10, 50), 3: (0, 60)})
    text = cursor.encode()
    assert all(c.isalnum() or c in "-_" for c in text)
    assert ScanCursor.decode(text, "orders.dlq", selection) == cursor


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("not-a-cursor", "not a summary cursor"),
        ("", "not a summary cursor"),
        (base64.urlsafe_b64encode(b'{"v": 1}').decode(), "not a summary cursor"),
        (base64.urlsafe_b64encode(b"[1, 2]").decode(), "not a summary cursor"),
    ],
)
def test_a_bad_cursor_is_refused_naming_cursor(text: str, why: str) -> None:
    """A cursor typed or cut short in a URL is refused with a message naming it, not a server error."""
    with pytest.raises(InvalidSelection, match=rf"^cursor=.*{why}; expected the cursor of the previous chunk"):
        ScanCursor.decode(text, "orders.dlq", Selection())


def test_a_cursor_for_another_topic_or_selection_is_refused() -> None:
    """Counts from two different scans are never added up by mistake."""
    cursor = ScanCursor("a.dlq", Selection().fingerprint(), 1_000, None, None, 5, 0, {0: (0, 5)}).encode()
    with pytest.raises(InvalidSelection, match=r"made for topic 'a\.dlq'"):
        ScanCursor.decode(cursor, "b.dlq", Selection())
    with pytest.raises(InvalidSelection, match="another selection"):
        ScanCursor.decode(cursor, "a.dlq", Selection(stage="TASK_PUT"))


def test_cursor_with_next_past_end_is_refused() -> None:
    """A hand-edited cursor cannot make the scan read outside the range it fixed."""
    raw = json.dumps({"v": 1, "t": "a", "s": Selection().fingerprint(), "b": 1000, "o": None, "n": None, "T": 1,
                      "P": 0, "p": [[0, 9, 5]]})  # fmt: skip
    text = base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")
    with pytest.raises(InvalidSelection):
        ScanCursor.decode(text, "a", Selection())


@pytest.mark.parametrize(
    ("span_ms", "width"),
    [(0, 1_000), (59_000, 1_000), (60_000, 10_000), (3_000_000, 60_000), (86_400_000, 3_600_000)],
)
def test_bucket_width_is_round(span_ms: int, width: int) -> None:
    """The timeline uses a round width (1 s, 10 s, 1 min ... 1 day) with about 60 bars at most."""
    assert choose_bucket_ms(1_795_250_000_000, 1_795_250_000_000 + span_ms) == width


@given(st.integers(0, 2**42), st.integers(0, 2**38))
def test_bucket_width_gives_at_most_60_buckets(oldest: int, span: int) -> None:
    """Any range of timestamps gives at most 60 bars, unless it is longer than 60 of the widest buckets."""
    width = choose_bucket_ms(oldest, oldest + span)
    assert width in BUCKET_WIDTHS_MS
    buckets = (oldest + span) // width - oldest // width + 1
    assert buckets <= MAX_BUCKETS or width == BUCKET_WIDTHS_MS[-1]
    smaller = [w for w in BUCKET_WIDTHS_MS if w < width]
    if smaller:
        assert (oldest + span) // smaller[-1] - oldest // smaller[-1] + 1 > MAX_BUCKETS


# ------------------------------------------------------------------------------------------- masking


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("ssl.key.password=abc", f"ssl.key.password={MASK}"),
        ("bad config: sasl.password=s3cr3t, retries=3", f"bad config: sasl.password={MASK}, retries=3"),
        ('{"sasl.password": "abc", "id": 1}', f'{{"sasl.password": "{MASK}", "id": 1}}'),
        ("{'token': 'abc'}", f"{{'token': '{MASK}'}}"),
        ('payload "{\\"api_key\\": \\"xyz\\"}"', f'payload "{{\\"api_key\\": \\"{MASK}\\"}}"'),
        ("client_secret: abc def", f"client_secret: {MASK} def"),
        ("ValueError: amount=-12.5 at line 3", "ValueError: amount=-12.5 at line 3"),
        (f"password={MASK}", f"password={MASK}"),
    ],
)
def test_text_masking_hides_sensitive_pairs(text: str, shown: str) -> None:
    """An exception message quoting a config shows the key but never the credential."""
    assert mask_text(text) == shown


def test_json_masking_is_recursive() -> None:
    """A credential nested anywhere in a JSON value, or quoted in one of its strings, is hidden."""
    value = {
        "id": 1,
        "client": {"sasl.jaas.config": "x", "nested": [{"password": "p", "ok": "fine"}]},
        "note": "retry with token=abc",
        "ssl_key": {"whole": "object hidden"},
    }
    assert mask_secrets(value) == {
        "id": 1,
        "client": {"sasl.jaas.config": MASK, "nested": [{"password": MASK, "ok": "fine"}]},
        "note": f"retry with token={MASK}",
        "ssl_key": MASK,
    }


@given(st.text(max_size=60), st.sampled_from(["password", "sasl.jaas.config", "ssl.key.password", "api_key"]))
def test_a_sensitive_value_never_survives_masking(secret: str, key: str) -> None:
    """Whatever the secret looks like, a sensitive key's value does not appear after masking."""
    secret = "".join(c for c in secret if c.isalnum()) or "x"
    secret = f"Zq{secret}"
    masked = mask_text(f"failed: {key}={secret} while connecting")
    assert secret not in masked and MASK in masked
    assert mask_text(masked) == masked  # idempotent


def test_masking_a_long_identifier_is_fast() -> None:
    """A 1 MB run of identifier characters (a hex dump in a message) does not stall the page."""
    import time

    started = time.perf_counter()
    mask_text("a" * 1_000_000 + ": b")
    assert time.perf_counter() - started < 1.0


# ------------------------------------------------------------------------------------------- decoding


def test_json_value_is_pretty_printed_and_masked() -> None:
    """A JSON value reads as indented JSON, with its credentials hidden."""
    payload = describe_payload(b'{"id": "o-1", "password": "p", "items": [1, 2]}')
    assert payload.json and payload.base64 is None and not payload.truncated
    assert json.loads(payload.text or "") == {"id": "o-1", "password": MASK, "items": [1, 2]}
    assert payload.text and "\n  " in payload.text
    assert payload.to_dict()["bytes"] == 47


def test_text_and_binary_values() -> None:
    """Plain text shows as text; bytes that are not text (Avro, Protobuf) show as base64."""
    text = describe_payload("naïve order 42".encode())
    assert (text.text, text.base64, text.json) == ("naïve order 42", None, False)
    binary = describe_payload(b"\x00\x00\x00\x00\x01\xff\xfe")
    assert binary.text is None and base64.b64decode(binary.base64 or "") == b"\x00\x00\x00\x00\x01\xff\xfe"
    assert describe_payload(None).to_dict() == {
        "text": None,
        "base64": None,
        "json": False,
        "bytes": 0,
        "truncated": False,
    }
    assert describe_payload(b"42").json is False  # a bare number is text, not a document


def test_large_values_are_cut_and_say_so() -> None:
    """A 1 MB value is cut at 64 KiB, even inside a multi-byte character, and the page says how large it was."""
    raw = ("é" * 600_000).encode()
    payload = describe_payload(raw)
    assert payload.truncated and payload.bytes == len(raw)
    assert payload.text is not None and len(payload.text.encode()) <= MAX_SHOWN_BYTES
    assert not payload.json
    binary = describe_payload(b"\x00" * (MAX_SHOWN_BYTES + 10))
    assert binary.truncated and len(base64.b64decode(binary.base64 or "")) == MAX_SHOWN_BYTES


@given(st.binary(max_size=300))
def test_any_bytes_decode_to_text_or_base64(raw: bytes) -> None:
    """Any key or value can be shown: as text when it is text, else as base64 of exactly its bytes."""
    payload = describe_payload(raw)
    assert (payload.text is None) != (payload.base64 is None)
    if payload.base64 is not None:
        assert base64.b64decode(payload.base64) == raw
    assert payload.bytes == len(raw)
