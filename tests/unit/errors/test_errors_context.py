"""The error context: KIP-298's JSON (golden, from the spec's example 4) and Connect's log line."""

from __future__ import annotations

import base64
import json
import random

from airflow_kerr.errors import (
    MASK,
    ErrorContext,
    ErrorHandlingConfig,
    ErrorMetrics,
    PipelineStage,
    RetriableError,
    RetryWithTolerance,
    SourceRecord,
    Stage,
    TaskId,
    TimestampType,
    exception_class_name,
    exception_message,
    format_stacktrace,
)

# The spec's example, with the exception text cut to its class (the rest is a traceback).
SPEC_EXAMPLE = """
{"record": {"topic": "orders", "timestamp": 1795250000000, "timestamp_type": "CREATE_TIME",
            "partition": 2, "offset": 41873,
            "key": {"schema": "STRING", "object": "o-1009"},
            "value": {"schema": "BYTES", "object": "eyJpZDogMTAwOX0="}},
 "index": 1,
 "exception": "json.decoder.JSONDecodeError",
 "attempt": 3,
 "task_id": "orders_pipeline-0",
 "time_of_error": 1795250004412,
 "stages": [{"type": "KEY_CONVERTER", "class": "airflow_kerr...StringConverter", "config": {}},
            {"type": "VALUE_CONVERTER", "class": "airflow_kerr...JsonConverter", "config": {}},
            {"type": "TRANSFORMATION", "class": "mypkg.orders.validate", "config": {}},
            {"type": "TASK_PUT", "class": "airflow_kerr...KafkaSink", "config": {"topic": "orders.clean"}}]}
"""

STAGES = [
    PipelineStage(Stage.KEY_CONVERTER, "airflow_kerr...StringConverter"),
    PipelineStage(Stage.VALUE_CONVERTER, "airflow_kerr...JsonConverter"),
    PipelineStage(Stage.TRANSFORMATION, "mypkg.orders.validate"),
    PipelineStage(Stage.TASK_PUT, "airflow_kerr...KafkaSink", {"topic": "orders.clean"}),
]

ORDER = SourceRecord(
    topic="orders",
    partition=2,
    offset=41873,
    timestamp=1795250000000,
    timestamp_type=TimestampType.CREATE_TIME,
    key=b"o-1009",
    value=base64.b64decode("eyJpZDogMTAwOX0="),
)


def example_context() -> ErrorContext:
    """Reproduce example 4 through the operator: the value converter fails on its third attempt."""
    now = [1795250004412.0 - 300 - 600]
    seen: list[ErrorContext] = []

    class Keep:
        def report(self, context: ErrorContext) -> None:
            seen.append(context)

    def sleep(delay_ms: float) -> None:
        now[0] += delay_ms

    operator = RetryWithTolerance(
        ErrorHandlingConfig.from_properties({"errors.tolerance": "all", "errors.retry.timeout": 60_000}),
        ErrorMetrics(),
        [Keep()],
        task=TaskId("orders_pipeline", 0),
        stages=STAGES,
        clock=lambda: now[0],
        sleep=sleep,
        rng=random.Random(1),
    )
    attempts = iter([RetriableError("schema registry busy"), RetriableError("schema registry busy")])

    def json_converter(raw: bytes) -> object:
        for error in attempts:
            raise error
        return json.loads(raw)

    assert operator.execute(STAGES[0], bytes.decode, ORDER, b"o-1009") == "o-1009"
    operator.execute(STAGES[1], json_converter, ORDER, b'{"id: 1009}')
    return seen[0]


def test_kip298_json_matches_the_spec_example_4() -> None:
    rendered = example_context().to_dict()
    expected = json.loads(SPEC_EXAMPLE)

    assert rendered["exception"].startswith("json.decoder.JSONDecodeError: ")
    assert {**rendered, "exception": "json.decoder.JSONDecodeError"} == expected


def test_kip298_json_keeps_the_example_field_order() -> None:
    rendered = json.loads(example_context().to_json())

    assert list(rendered) == ["record", "index", "exception", "attempt", "task_id", "time_of_error", "stages"]
    assert list(rendered["record"]) == ["topic", "timestamp", "timestamp_type", "partition", "offset", "key", "value"]
    assert list(rendered["stages"][0]) == ["type", "class", "config"]


def context_for(record: SourceRecord | None, **overrides: object) -> ErrorContext:
    try:
        raise ValueError("boom")
    except ValueError as error:
        caught = error
    fields: dict[str, object] = {
        "task": TaskId("orders_pipeline", 3),
        "stage": Stage.TASK_PUT,
        "executing_class": "mypkg.Sink",
        "error": caught,
        "record": record,
        "stages": [PipelineStage(Stage.TASK_PUT, "mypkg.Sink", {"topic": "out", "sasl.jaas.config": "user=u pw=p"})],
        "index": 0,
    }
    fields.update(overrides)
    return ErrorContext(**fields)  # type: ignore[arg-type]


def test_binary_null_and_headers_are_rendered_as_kip298_schema_and_object() -> None:
    record = SourceRecord("orders", 0, 5, None, TimestampType.NO_TIMESTAMP_TYPE, None, b"\x00\xff", [("h", b"\x01")])

    rendered = context_for(record).to_dict()["record"]

    assert rendered["key"] == {"schema": None, "object": None}
    assert rendered["value"] == {"schema": "BYTES", "object": "AP8="}
    assert rendered["timestamp"] is None
    assert rendered["timestamp_type"] == "NO_TIMESTAMP_TYPE"
    assert rendered["headers"] == [{"key": "h", "value": {"schema": "BYTES", "object": "AQ=="}}]


def test_converted_values_keep_their_type_in_the_json() -> None:
    context = context_for(ORDER, converted_key=17, converted_value={"id": 1009, "raw": b"\x01"})

    rendered = context.to_dict()["record"]

    assert rendered["key"] == {"schema": "INT64", "object": 17}
    assert rendered["value"] == {"schema": "MAP", "object": {"id": 1009, "raw": "AQ=="}}


def test_stage_configs_in_the_json_never_show_credentials() -> None:
    text = context_for(ORDER).to_json()

    assert "pw=p" not in text
    assert json.loads(text)["stages"][0]["config"] == {"topic": "out", "sasl.jaas.config": MASK}


def test_json_without_a_record_says_so() -> None:
    assert context_for(None).to_dict()["record"] is None


def test_log_line_is_connects_with_only_the_record_coordinates() -> None:
    message = context_for(ORDER).log_message()

    assert message == (
        "Error encountered in task orders_pipeline-3. Executing stage 'TASK_PUT' with class 'mypkg.Sink', "
        "where consumed record is {topic='orders', partition=2, offset=41873}."
    )


def test_log_line_with_messages_adds_timestamp_key_value_and_headers() -> None:
    record = SourceRecord("orders", 2, 41873, 1795250000000, TimestampType.CREATE_TIME, b"k1", b"v1", [("h", b"x")])

    message = context_for(record).log_message(include_messages=True)

    assert message.startswith(
        "Error encountered in task orders_pipeline-3. Executing stage 'TASK_PUT' with class 'mypkg.Sink', "
        "where consumed record is {topic='orders', partition=2, offset=41873, "
        "timestamp=1795250000000, timestampType=CreateTime, "
    )
    assert 'key={"schema": "BYTES", "object": "azE="}' in message
    assert 'value={"schema": "BYTES", "object": "djE="}' in message
    assert 'headers=[{"key": "h", "value": {"schema": "BYTES", "object": "eA=="}}]' in message
    assert message.endswith("}.")


def test_log_line_with_configs_masks_credentials() -> None:
    message = context_for(ORDER).log_message(
        include_configs=True,
        job_config={"bootstrap.servers": "b:9092", "sasl.password": "hunter2", "ssl.key": "-----BEGIN"},
    )

    assert "hunter2" not in message
    assert "BEGIN" not in message
    assert "pw=p" not in message
    assert '"bootstrap.servers": "b:9092"' in message
    assert message.endswith(
        'Stage config: {"sasl.jaas.config": "[hidden]", "topic": "out"}. '
        'Job config: {"bootstrap.servers": "b:9092", "sasl.password": "[hidden]", "ssl.key": "[hidden]"}.'
    )


def test_log_line_without_a_record_stops_after_the_class() -> None:
    assert context_for(None).log_message(include_messages=True) == (
        "Error encountered in task orders_pipeline-3. Executing stage 'TASK_PUT' with class 'mypkg.Sink'."
    )


def test_exception_rendering_follows_java_conventions() -> None:
    assert exception_class_name(ValueError("x")) == "ValueError"
    assert exception_class_name(json.JSONDecodeError("m", "d", 0)) == "json.decoder.JSONDecodeError"
    assert exception_message(ValueError()) is None
    assert exception_message(ValueError("")) == ""
    assert format_stacktrace(ValueError()) == "ValueError"
    assert format_stacktrace(ValueError("bad")) == "ValueError: bad"

    try:
        try:
            raise KeyError("inner")
        except KeyError as inner:
            raise RuntimeError("outer") from inner
    except RuntimeError as outer:
        trace = format_stacktrace(outer)

    first, rest = trace.split("\n", 1)
    assert first == "RuntimeError: outer"
    assert "KeyError: 'inner'" in rest
    assert "The above exception was the direct cause" in rest
