"""The fast failure path writes byte-identical DLQ records to the straightforward one it replaced.

Handling one failed record was made cheaper (issue #18): the traceback's frame text is
cached, constant headers are encoded once, the exception's last line is written directly
and the Kafka-error check skips typing's protocol walk. The references below are the code
as it was before, kept here verbatim in spirit: each frame formatted afresh through
linecache, each header encoded on its own, ``traceback.format_exception_only`` for the last
line. Every DLQ record the real path writes (through ``RetryWithTolerance`` and the DLQ
reporter, as the Spark job's batch runner calls them) must equal the reference's, header
bytes and order included.
"""

from __future__ import annotations

import importlib.util
import json
import linecache
import sys
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest
from confluent_kafka import KafkaError, KafkaException

from airflow_kerr.errors import (
    SKIPPED,
    DeadLetterQueueRecord,
    DeadLetterQueueReporter,
    ErrorContext,
    ErrorHandlingConfig,
    ErrorMetrics,
    ErrorReporter,
    PipelineStage,
    RetryWithTolerance,
    SourceRecord,
    Stage,
    TaskId,
    TimestampType,
    UnhandledError,
)
from airflow_kerr.errors import stacktrace as stacktrace_module
from airflow_kerr.errors.config import HeaderFormat
from airflow_kerr.errors.dead_letter import (
    HEADER_PREFIX,
    dlq_context_headers,
)
from airflow_kerr.errors.exceptions import KafkaErrorLike, is_kafka_error_like
from airflow_kerr.errors.record import Header
from airflow_kerr.errors.stacktrace import exception_class_name, exception_message

# --- the reference: how a DLQ record was built before the fast path -------------------------


def reference_stacktrace(error: BaseException) -> str:
    message = exception_message(error)
    name = exception_class_name(error)
    head = name if message is None else f"{name}: {message}"
    if error.__traceback__ is None and error.__cause__ is None and error.__context__ is None:
        return head
    return head + "\n" + "".join(_reference_lines(error, set()))


def _reference_lines(error: BaseException, seen: set[int]) -> list[str]:
    seen.add(id(error))
    lines: list[str] = []
    cause, context = error.__cause__, error.__context__
    if cause is not None and id(cause) not in seen:
        lines += [
            *_reference_lines(cause, seen),
            "\nThe above exception was the direct cause of the following exception:\n\n",
        ]
    elif context is not None and not error.__suppress_context__ and id(context) not in seen:
        lines += [
            *_reference_lines(context, seen),
            "\nDuring handling of the above exception, another exception occurred:\n\n",
        ]
    if error.__traceback__ is not None:
        lines.append("Traceback (most recent call last):\n")
        for frame, lineno in traceback.walk_tb(error.__traceback__):
            code = frame.f_code
            lines.append(f'  File "{code.co_filename}", line {lineno}, in {code.co_name}\n')
            source = linecache.getline(code.co_filename, lineno, frame.f_globals).strip()
            if source:
                lines.append(f"    {source}\n")
    lines += traceback.format_exception_only(type(error), error)
    return lines


def _utf8(value: str | None) -> bytes | None:
    return None if value is None else value.encode("utf-8")


def reference_connect_headers(context: ErrorContext) -> list[Header]:
    headers: list[Header] = []
    record = context.record
    if record is not None:
        headers.append((HEADER_PREFIX + "topic", _utf8(record.topic)))
        headers.append((HEADER_PREFIX + "partition", _utf8(str(record.partition))))
        headers.append((HEADER_PREFIX + "offset", _utf8(str(record.offset))))
    headers.append((HEADER_PREFIX + "connector.name", _utf8(context.task.pipeline)))
    headers.append((HEADER_PREFIX + "task.id", _utf8(str(context.task.task))))
    headers.append((HEADER_PREFIX + "stage", _utf8(context.stage.value)))
    headers.append((HEADER_PREFIX + "class.name", _utf8(context.executing_class)))
    error = context.error
    headers.append((HEADER_PREFIX + "exception.class.name", _utf8(exception_class_name(error))))
    headers.append((HEADER_PREFIX + "exception.message", _utf8(exception_message(error))))
    headers.append((HEADER_PREFIX + "exception.stacktrace", _utf8(reference_stacktrace(error))))
    return headers


def reference_record(context: ErrorContext, config: ErrorHandlingConfig, group: str | None) -> DeadLetterQueueRecord:
    record = context.record
    assert record is not None
    timestamp = record.timestamp
    if timestamp is not None and (timestamp < 0 or record.timestamp_type is TimestampType.NO_TIMESTAMP_TYPE):
        timestamp = None
    copy = config.dlq_copy_record_enable
    headers: list[Header] = list(record.headers) if copy else []
    if config.dlq_context_headers_enable:
        if config.dlq_header_format is HeaderFormat.DLQ:
            headers.extend(dlq_context_headers(context, group=group))
        else:
            headers.extend(reference_connect_headers(context))
    return DeadLetterQueueRecord(
        topic=config.dlq_topic_name,
        key=record.key if copy else None,
        value=record.value if copy else None,
        headers=headers,
        timestamp=timestamp,
    )


# --- the real path ---------------------------------------------------------------------------


class Capture:
    """A reporter that keeps each error context, to build the reference from."""

    def __init__(self) -> None:
        self.contexts: list[ErrorContext] = []

    def report(self, context: ErrorContext) -> None:
        self.contexts.append(context)


KEY_STAGE = PipelineStage(Stage.KEY_CONVERTER, "airflow_kerr.spark.stages.StringConverter")
VALUE_STAGE = PipelineStage(Stage.VALUE_CONVERTER, "airflow_kerr.spark.stages.JsonConverter")
TRANSFORM_STAGE = PipelineStage(Stage.TRANSFORMATION, "tests.orders.validate", {"strict": True})
PUT_STAGE = PipelineStage(Stage.TASK_PUT, "airflow_kerr.spark.sinks.KafkaSink", {"topic": "orders.clean"})
STAGES = (KEY_STAGE, VALUE_STAGE, TRANSFORM_STAGE, PUT_STAGE)


def handler(
    extra: dict[str, str] | None = None, task: TaskId | None = None
) -> tuple[RetryWithTolerance, list[DeadLetterQueueRecord], Capture, ErrorHandlingConfig]:
    config = ErrorHandlingConfig.from_properties(
        {
            "errors.tolerance": "all",
            "errors.deadletterqueue.topic.name": "orders.dlq",
            "errors.deadletterqueue.context.headers.enable": "true",
            **(extra or {}),
        }
    )
    metrics = ErrorMetrics()
    sent: list[DeadLetterQueueRecord] = []
    capture = Capture()
    reporters: list[ErrorReporter] = [
        capture,
        DeadLetterQueueReporter(config, metrics, sent.append, group="orders-job"),
    ]
    retry = RetryWithTolerance(
        config,
        metrics,
        reporters,
        task=task or TaskId("orders_pipeline", 3),
        stages=STAGES,
        clock=lambda: 1_795_250_000_000.0,
        sleep=lambda _ms: None,
    )
    return retry, sent, capture, config


def source(offset: int, topic: str = "orders", partition: int = 0, value: bytes = b"{bad") -> SourceRecord:
    return SourceRecord(
        topic=topic,
        partition=partition,
        offset=offset,
        timestamp=1_795_250_000_000 + offset,
        timestamp_type=TimestampType.CREATE_TIME,
        key=b"o-%d" % offset,
        value=value,
        headers=[("trace-id", b"t-%d" % offset), ("empty", None)],
    )


def run_batch(
    retry: RetryWithTolerance,
    stage: PipelineStage,
    fn: Callable[[object], object],
    items: list[object],
    records: list[SourceRecord],
) -> list[object]:
    """As ``BatchRunner.run`` does: map in C, hand each record that raised to ``execute_after_failure``."""
    results: list[object] = []
    remaining = iter(items)
    while True:
        try:
            results.extend(map(fn, remaining))
            return results
        except Exception as error:
            failed = len(results)
            results.append(retry.execute_after_failure(stage, fn, records[failed], error, 0.0, items[failed]))


def assert_same_as_reference(
    sent: list[DeadLetterQueueRecord], capture: Capture, config: ErrorHandlingConfig, group: str | None = "orders-job"
) -> None:
    assert len(sent) == len(capture.contexts) > 0
    for written, context in zip(sent, capture.contexts, strict=True):
        expected = reference_record(context, config, group)
        assert written == expected
        assert [name for name, _ in written.headers] == [name for name, _ in expected.headers]
        assert written.produce_kwargs() == expected.produce_kwargs()


# --- failing stage functions -------------------------------------------------------------------


def decode_json(raw: object) -> object:
    assert isinstance(raw, bytes)
    return json.loads(raw)


def validate(order: object) -> object:  # noqa: C901, PLR0912 - the reference: the DLQ build as it was before the fast path
    """Fails on different lines for different inputs, with a message that names the input."""
    if order == "negative":
        raise ValueError(f"amount below zero in {order!r}")
    if order == "missing":
        return {"id": 1}["customer"]
    if order == "silent":
        raise RuntimeError
    if order == "empty-message":
        raise RuntimeError("")
    if order == "noted":
        error = ValueError("noted")
        error.add_note("checked against the schema registry")
        error.add_note("second note\nover two lines")
        raise error
    if order == "syntax":
        compile("def broken(:\n", "<order rule>", "exec")
    if order == "unicode":
        raise ValueError("montant n\u00e9gatif: \u20ac -3 \U0001f4b8")
    if order == "chained":
        try:
            json.loads("{oops")
        except ValueError as error:
            raise LookupError("could not read the order") from error
    if order == "context":
        fields: dict[str, str] = {}
        try:
            fields["currency"]
        except KeyError:
            raise TypeError("currency is required") from None
    if order == "implicit":
        try:
            int("x")
        except ValueError:
            raise OverflowError("retrying the parse overflowed")  # noqa: B904 - the implicit context is the point
    if order == "deep":
        return _recurse(4)
    if order == "odd-module":
        raise OddModule("a class whose __module__ is not a string")
    if order == "unprintable-cause":
        raise ValueError("outer") from Unprintable("inner")
    return order


OddModule = type("OddModule", (Exception,), {"__module__": None})


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text")


def _recurse(depth: int) -> object:
    if depth == 0:
        raise ArithmeticError("bottom of the recursion")
    return _recurse(depth - 1)


ORDERS = [
    "negative",
    "missing",
    "silent",
    "empty-message",
    "noted",
    "syntax",
    "unicode",
    "chained",
    "context",
    "implicit",
    "odd-module",
    "unprintable-cause",
]


# --- the tests -----------------------------------------------------------------------------------


def test_malformed_json_values_with_changing_messages_on_several_topics_and_partitions() -> None:
    retry, sent, capture, config = handler()
    values: list[object] = [b'{"id": "o-1", "amount": ', b"{bad", b'{"id": 1}', b"[1, 2", b"nul", b'{"a": 1}']
    records = [source(100 + i, topic=f"orders.{i % 2}", partition=i % 3, value=v) for i, v in enumerate(values)]  # type: ignore[arg-type]
    results = run_batch(retry, VALUE_STAGE, decode_json, values, records)
    assert len(sent) == 4 and results[2] == {"id": 1}
    messages = {dict(record.headers)[HEADER_PREFIX + "exception.message"] for record in sent}
    assert len(messages) == 4
    assert_same_as_reference(sent, capture, config)


def test_many_exception_kinds_through_different_lines_cache_misses_then_hits() -> None:
    retry, sent, capture, config = handler()
    orders: list[object] = [*ORDERS, *ORDERS, "ok", "deep"]
    records = [source(i) for i in range(len(orders))]
    run_batch(retry, TRANSFORM_STAGE, validate, orders, records)
    assert len(sent) == len(orders) - 1
    assert_same_as_reference(sent, capture, config)
    stacktraces = [dict(record.headers)[HEADER_PREFIX + "exception.stacktrace"] for record in sent]
    # Same failure, same text: the second round (cache hits) equals the first (misses).
    assert stacktraces[: len(ORDERS)] == stacktraces[len(ORDERS) : 2 * len(ORDERS)]


def test_every_stage_and_two_tasks_get_their_own_constant_headers() -> None:
    for task in (TaskId("orders_pipeline", 0), TaskId("refunds", 12)):
        retry, sent, capture, config = handler(task=task)
        for offset, stage in enumerate(STAGES):
            record = source(offset, partition=offset)
            if stage is not PUT_STAGE:
                assert run_batch(retry, stage, decode_json, [b"{nope"], [record]) == [SKIPPED], "tolerated"
                continue
            # A non-retriable error in TASK_PUT is never tolerated: reported (its DLQ record), then the task fails.
            with pytest.raises(UnhandledError) as failed:
                run_batch(retry, stage, decode_json, [b"{nope"], [record])
            assert isinstance(failed.value.__cause__, json.JSONDecodeError), failed.value.__cause__
            assert failed.value.context is not None and failed.value.context.stage is Stage.TASK_PUT
            assert failed.value.context.record == record
        assert [dict(r.headers)[HEADER_PREFIX + "stage"] for r in sent] == [s.type.value.encode() for s in STAGES]
        assert_same_as_reference(sent, capture, config)


def test_retries_on_and_a_retriable_kafka_error_that_runs_out() -> None:
    retry, sent, capture, config = handler({"errors.retry.timeout": "1"})
    error = KafkaException(KafkaError(KafkaError._TRANSPORT, "broker down", retriable=True))

    def produce(_: object) -> object:
        raise error

    run_batch(retry, VALUE_STAGE, decode_json, [b"{x", b"[y"], [source(1), source(2)])
    run_batch(retry, TRANSFORM_STAGE, produce, ["a"], [source(3)])
    assert len(sent) == 3
    assert_same_as_reference(sent, capture, config)


@pytest.mark.parametrize(
    "extra",
    [
        {"errors.deadletterqueue.context.headers.enable": "false"},
        {"errors.deadletterqueue.header.format": "dlq"},
        {"errors.deadletterqueue.header.format": "dlq", "errors.deadletterqueue.copy.record.enable": "false"},
    ],
)
def test_other_dead_letter_shapes(extra: dict[str, str]) -> None:
    retry, sent, capture, config = handler(extra)
    run_batch(retry, TRANSFORM_STAGE, validate, list(ORDERS[:4]), [source(i) for i in range(4)])
    assert_same_as_reference(sent, capture, config)


@pytest.fixture
def rule_module(tmp_path: Path) -> Iterator[tuple[ModuleType, Path]]:
    path = tmp_path / "order_rule.py"
    path.write_text("def check(order):\n    raise ValueError(f'rejected {order}')\n")
    spec = importlib.util.spec_from_file_location("order_rule", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules["order_rule"] = module
    yield module, path
    sys.modules.pop("order_rule", None)
    linecache.checkcache(str(path))


def test_a_source_file_that_linecache_reloads_is_formatted_afresh(rule_module: tuple[ModuleType, Path]) -> None:
    module, path = rule_module
    retry, sent, capture, config = handler()
    run_batch(retry, TRANSFORM_STAGE, module.check, ["a", "b"], [source(1), source(2)])
    assert_same_as_reference(sent, capture, config)
    sent.clear()
    capture.contexts.clear()
    # The file changes on disk and linecache notices: the old text must not be served from the cache.
    path.write_text("def check(order):\n    raise ValueError(f'rejected {order}')  # edited\n")
    linecache.checkcache(str(path))
    run_batch(retry, TRANSFORM_STAGE, module.check, ["c"], [source(3)])
    assert_same_as_reference(sent, capture, config)
    assert b"# edited" in (dict(sent[-1].headers)[HEADER_PREFIX + "exception.stacktrace"] or b"")


def test_code_without_source_is_formatted_every_time() -> None:
    namespace: dict[str, object] = {}
    exec(compile("def check(order):\n    raise ValueError(order)\n", "<generated rule>", "exec"), namespace)
    retry, sent, capture, config = handler()
    check = namespace["check"]
    assert callable(check)
    run_batch(retry, TRANSFORM_STAGE, check, ["a", "b"], [source(1), source(2)])
    assert_same_as_reference(sent, capture, config)
    assert not any(
        entry.sources and entry.sources[-1][0] == "<generated rule>"
        for entry in stacktrace_module._frames_cache.values()
    )


def test_the_frames_cache_starts_over_when_full(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stacktrace_module, "FRAMES_CACHE_SIZE", 2)
    stacktrace_module._frames_cache.clear()
    retry, sent, capture, config = handler()
    run_batch(retry, TRANSFORM_STAGE, validate, [*ORDERS, *ORDERS], [source(i) for i in range(2 * len(ORDERS))])
    assert len(stacktrace_module._frames_cache) <= 2
    assert_same_as_reference(sent, capture, config)


class FakeKafkaError:
    def fatal(self) -> bool:
        return False

    def retriable(self) -> bool:
        return True

    def txn_requires_abort(self) -> bool:
        return False


class Blocked(FakeKafkaError):
    retriable = None  # type: ignore[assignment]


class Masquerading(Exception):
    """Claims another class through ``__class__``; ABC checks both."""

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        return ValueError


def _with_instance_methods() -> Exception:
    error = Exception("dynamic")
    error.fatal = lambda: False  # type: ignore[attr-defined]
    error.retriable = lambda: True  # type: ignore[attr-defined]
    error.txn_requires_abort = lambda: False  # type: ignore[attr-defined]
    return error


@pytest.mark.parametrize(
    "value",
    [
        KafkaError(KafkaError._TRANSPORT, "down", retriable=True),
        KafkaException(KafkaError(KafkaError._TRANSPORT)),
        FakeKafkaError(),
        Blocked(),
        _with_instance_methods(),
        Masquerading("x"),
        json.JSONDecodeError("Expecting value", "{", 1),
        "a string",
        None,
        42,
    ],
    ids=repr,
)
def test_the_kafka_error_check_agrees_with_isinstance(value: object) -> None:
    assert is_kafka_error_like(value) is isinstance(value, KafkaErrorLike)
