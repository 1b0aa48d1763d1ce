"""A replay's settings, validated from what a DAG or the trigger form gives (strings, numbers, None).

Every problem is collected and reported at once, each naming the key, the value and what
is accepted, so an on-call person fixes the form in one go; nothing here talks to Kafka
(topic existence is checked by the engine before the first record is read).

Whatever a value is (a list where a string belongs, an integer past Python's 4,300-digit
limit, ``nan``, a set of mixed types, a regular expression nested too deep for the
compiler), :meth:`ReplayOptions.build` returns valid options or raises
:class:`InvalidReplayOptions`, and never lets an unusable value through as if it were unset.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from airflow_kerr.callables import import_callable
from airflow_kerr.errors import Stage
from airflow_kerr.errors.dead_letter import INT64_MAX, TOPIC_NAME_RULE, is_topic_name, shown
from airflow_kerr.formats import FORMATS
from airflow_kerr.inspection.selection import Selection, epoch_ms, parse_time
from airflow_kerr.kafka.offset_spans import SPANS_TEXT_ACCEPTED, OffsetSpans, parse_spans_text, spans_from_fields
from airflow_kerr.replay.policy import DEFAULT_MAX_REPLAYS, PARKING_SUFFIX, FixFn
from airflow_kerr.replay.registry_values import REENCODE_CHOICES
from airflow_kerr.replay.transactions import (
    DEFAULT_TRANSACTION_TIMEOUT_S,
    MAX_TRANSACTION_TIMEOUT_S,
    MIN_TRANSACTION_TIMEOUT_S,
)

MAX_BATCH_SIZE = 100_000
#: Records per transaction: a transaction costs a few round trips, so fewer, larger ones replay faster.
DEFAULT_BATCH_SIZE = 1000
#: The latest time accepted (9999-12-31T23:59:59.999Z in epoch milliseconds), the end of ``datetime``'s range.
MAX_TIME_MS = 253_402_300_799_999
#: Kafka's protocol limit for a string such as a group id, in UTF-8 bytes.
MAX_GROUP_ID_BYTES = 32_767
_INT_RANGE = re.compile(r"\s*(-?[0-9]{1,20})\s*", re.ASCII)
_DECIMAL = re.compile(r"\s*[+-]?([0-9]{1,30}(\.[0-9]{0,30})?|\.[0-9]{1,30})([eE][+-]?[0-9]{1,4})?\s*", re.ASCII)
_LISTS = (list, tuple, set, frozenset)


class InvalidReplayOptions(ValueError):
    """One or more replay settings are outside what is accepted; the message lists every problem."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("invalid DLQ replay settings:\n  - " + "\n  - ".join(problems))


@dataclass(frozen=True)
class ReplayOptions:
    """Validated replay settings; build them with :meth:`build`."""

    dlq_topic: str
    group_id: str
    parking_topic: str
    selection: Selection = field(default_factory=Selection)
    fix_path: str | None = None
    target_topic: str | None = None
    target_allowlist: re.Pattern[str] | None = None
    max_replays: int = DEFAULT_MAX_REPLAYS
    max_records_per_second: float | None = None
    max_records: int | None = None
    dry_run: bool = False
    batch_size: int = DEFAULT_BATCH_SIZE
    progress_interval_s: float = 5.0
    #: The budget of one transaction, from its begin to its commit, retries included; also the
    #: producer's ``transaction.timeout.ms``. An unreachable broker fails the run after about this long.
    transaction_timeout_s: float = DEFAULT_TRANSACTION_TIMEOUT_S
    fix: FixFn | None = field(default=None, compare=False, repr=False)
    #: With a fix: the registry format of the keys and values (None: bytes), and which schema re-encodes them.
    key_format: str | None = None
    value_format: str | None = None
    reencode_with: str = "record"
    #: The DLQ partitions this run reads and commits (None: all of them). A fanned-out replay gives each
    #: mapped task its own group of partitions (:mod:`airflow_kerr.replay.fanout`).
    partitions: tuple[int, ...] | None = None

    @property
    def formats(self) -> dict[str, str]:
        """The parts the fix receives decoded, and their format: ``{"value": "avro"}``; empty for bytes only."""
        found = {"key": self.key_format, "value": self.value_format}
        return {part: fmt for part, fmt in found.items() if fmt is not None}

    @classmethod
    def build(  # noqa: PLR0913 - the DAG author's settings, raw and by name, validated in one place
        cls,
        *,
        dlq_topic: Any,
        replay_group: Any = None,
        source_topics: Any = None,
        stages: Any = None,
        exception_class_regex: Any = None,
        start_time: Any = None,
        end_time: Any = None,
        start_offset: Any = None,
        end_offset: Any = None,
        header_match: Any = None,
        dlq_offsets: Any = None,
        fix: Any = None,
        key_format: Any = None,
        value_format: Any = None,
        reencode_with: Any = "record",
        target_topic: Any = None,
        target_allowlist: Any = None,
        max_replays: Any = DEFAULT_MAX_REPLAYS,
        parking_topic: Any = None,
        max_records_per_second: Any = None,
        max_records: Any = None,
        dry_run: Any = False,
        batch_size: Any = DEFAULT_BATCH_SIZE,
        progress_interval_s: Any = 5.0,
        transaction_timeout_s: Any = DEFAULT_TRANSACTION_TIMEOUT_S,
        partitions: Any = None,
    ) -> ReplayOptions:
        """Validate raw values (None and "" mean unset); raise :class:`InvalidReplayOptions` listing every problem.

        Accepted: topic names by Kafka's rule; integers as int, integral float or decimal text
        (ASCII digits), within the key's range (offsets and counts up to int64); numbers as
        finite int, float or decimal text; times as epoch milliseconds (0 to :data:`MAX_TIME_MS`),
        a ``datetime`` or ISO-8601 text (naive means UTC); lists as a list, tuple or set, or
        comma-separated text, every item set; ``transaction_timeout_s`` from 1 to 900 seconds;
        ``partitions`` as a list of partition numbers or ``0-3,7`` text.
        """
        p: list[str] = []
        dlq = _topic(p, "dlq_topic", dlq_topic, required=True) or ""
        target = _topic(p, "target_topic", target_topic)
        parking = _topic(p, "parking_topic", parking_topic) or (dlq + PARKING_SUFFIX if dlq else "")
        allowlist = _regex(p, "target_allowlist", target_allowlist)
        for key, name in (("target_topic", target), ("parking_topic", parking)):
            if name and name.startswith("__"):
                p.append(f"{key}={name!r}: internal topics (starting with '__') are never written to")
            elif name and name == dlq:
                p.append(f"{key}={name!r}: must differ from dlq_topic; replay never writes to the DLQ itself")
        if target and parking == target:
            p.append(f"parking_topic={parking!r}: must differ from target_topic")
        if target and allowlist is not None and not allowlist.fullmatch(target):
            p.append(f"target_topic={target!r}: does not match target_allowlist {allowlist.pattern!r}")

        start_ms, end_ms = _time(p, "start_time", start_time), _time(p, "end_time", end_time)
        if start_ms is not None and end_ms is not None and start_ms >= end_ms:
            p.append(
                f"start_time={shown(start_time)}, end_time={shown(end_time)}: inverted or empty range; "
                "start must be earlier"
            )
        first = _int(p, "start_offset", start_offset, 0, INT64_MAX)
        last = _int(p, "end_offset", end_offset, 0, INT64_MAX)
        if first is not None and last is not None and first >= last:
            p.append(f"start_offset={first}, end_offset={last}: inverted or empty range; expected start < end")

        selection = Selection(
            source_topics=frozenset(_topics(p, "source_topics", source_topics)),
            stages=frozenset(_stages(p, stages)),
            exception_pattern=_regex(p, "exception_class_regex", exception_class_regex),
            start_ms=start_ms,
            end_ms=end_ms,
            start_offset=first,
            end_offset=last,
            headers=_header_match(p, header_match),
            dlq_offsets=_dlq_offsets(p, dlq_offsets),
        )
        fix_path = _str(p, "fix", fix)
        fix_fn: FixFn | None = None
        if fix_path:
            try:
                fix_fn = import_callable(fix_path)
            except Exception as error:  # importing runs the module: any error of it means "cannot use this"
                p.append(
                    f"fix={shown(fix_path)}: {_reason(error)}; expected the dotted path of a function "
                    "record -> record or None"
                )

        options = cls(
            dlq_topic=dlq,
            group_id=_group(p, replay_group) or f"kerr-replay.{dlq}",
            parking_topic=parking,
            selection=selection,
            fix_path=fix_path,
            target_topic=target,
            target_allowlist=allowlist,
            max_replays=_int(p, "max_replays", max_replays, 1, INT64_MAX) or DEFAULT_MAX_REPLAYS,
            max_records_per_second=_positive(p, "max_records_per_second", max_records_per_second),
            max_records=_int(p, "max_records", max_records, 1, INT64_MAX),
            dry_run=_bool(p, "dry_run", dry_run),
            batch_size=_int(p, "batch_size", batch_size, 1, MAX_BATCH_SIZE) or DEFAULT_BATCH_SIZE,
            progress_interval_s=_positive(p, "progress_interval_s", progress_interval_s) or 5.0,
            transaction_timeout_s=_seconds(
                p, "transaction_timeout_s", transaction_timeout_s, MIN_TRANSACTION_TIMEOUT_S, MAX_TRANSACTION_TIMEOUT_S
            )
            or DEFAULT_TRANSACTION_TIMEOUT_S,
            fix=fix_fn,
            key_format=_format(p, "key_format", key_format),
            value_format=_format(p, "value_format", value_format),
            reencode_with=_choice(p, "reencode_with", reencode_with, REENCODE_CHOICES) or "record",
            partitions=partition_set(p, partitions),
        )
        if p:
            raise InvalidReplayOptions(p)
        return options


#: The most partitions a topic can have (Kafka's partition number is an int32).
MAX_PARTITION = 2**31 - 1
PARTITIONS_ACCEPTED = "expected DLQ partition numbers, as a list or as text such as 0-3,7"


def partition_set(p: list[str], value: Any, key: str = "partitions") -> tuple[int, ...] | None:
    """Partition numbers, sorted and unique, from a list of integers or ``0-3,7`` text; None when unset."""
    if _unset(value) or (isinstance(value, _LISTS) and not value):
        return None
    whole = isinstance(value, int) and not isinstance(value, bool)
    items = value.split(",") if isinstance(value, str) else [value] if whole else value
    if not isinstance(items, _LISTS):
        p.append(f"{key}={shown(value)}: {PARTITIONS_ACCEPTED}")
        return None
    found: set[int] = set()
    for item in items:
        low, dash, high = item.partition("-") if isinstance(item, str) else (item, "", None)
        ends = [_int([], key, low, 0, MAX_PARTITION), _int([], key, high, 0, MAX_PARTITION) if dash else None]
        if ends[0] is None or (dash and (ends[1] is None or ends[1] < ends[0])):
            p.append(f"{key}={shown(value)}: {shown(item)} is not a partition or a range; {PARTITIONS_ACCEPTED}")
            return None
        last = ends[1] if ends[1] is not None else ends[0]
        if last - ends[0] > MAX_PARTITION_SPAN:
            p.append(f"{key}={shown(value)}: {shown(item)} spans more than {MAX_PARTITION_SPAN} partitions")
            return None
        found.update(range(ends[0], last + 1))
    return tuple(sorted(found))


#: The widest range ``partitions`` takes (no topic has more partitions than this in practice).
MAX_PARTITION_SPAN = 100_000


def _format(p: list[str], key: str, value: Any) -> str | None:
    """A registry format for the fix's keys or values; ``bytes`` (or unset) hands them over as bytes."""
    text = _str(p, key, value)
    if text is None or text == "bytes":
        return None
    if text not in FORMATS:
        p.append(f"{key}={shown(value)}: expected one of bytes, {', '.join(FORMATS)}")
        return None
    return text


def _choice(p: list[str], key: str, value: Any, accepted: tuple[str, ...]) -> str | None:
    text = _str(p, key, value)
    if text is not None and text not in accepted:
        p.append(f"{key}={shown(value)}: expected one of {', '.join(accepted)}")
        return None
    return text


def _reason(error: BaseException, limit: int = 200, *, with_class: bool = True) -> str:
    """``Class: message`` (or the message alone) of an error raised while checking a value, cut to ``limit``."""
    try:
        text = f"{type(error).__name__}: {error}" if with_class else str(error)
    except Exception:  # a message that cannot be made text (it holds a huge integer, say)
        text = type(error).__name__
    return text if len(text) <= limit else f"{text[: limit - 1]}\u2026"


def _unset(value: Any) -> bool:
    """None, "" and the text a non-native template renders for None ("None", "null")."""
    return value is None or (isinstance(value, str) and value.strip() in ("", "None", "null"))


def _str(p: list[str], key: str, value: Any) -> str | None:
    """Text, or a number given for text (a native template renders the text "123" as a number)."""
    if _unset(value):
        return None
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) < 10**249:
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return str(value)
    if not isinstance(value, str):
        p.append(f"{key}={shown(value)}: expected a string")
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        p.append(f"{key}={shown(value)}: expected text that UTF-8 can encode (it holds a lone surrogate)")
        return None
    return value.strip()


def _topic(p: list[str], key: str, value: Any, *, required: bool = False) -> str | None:
    name = _str(p, key, value)
    if name is None:
        if required and _unset(value):
            p.append(f"{key}={shown(value)}: required, a topic name")
        return None
    if not is_topic_name(name):
        p.append(f"{key}={shown(name)}: not a valid topic name ({TOPIC_NAME_RULE})")
        return None
    return name


def _items(p: list[str], key: str, value: Any, what: str) -> list[Any]:
    """A list setting's items: a list, tuple or set, or comma-separated text. An empty item is a problem.

    An empty item is most likely a blank line in the form; read as "no filter" it would
    replay everything, so it is reported instead.
    """
    if _unset(value):
        return []
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, _LISTS):
        p.append(f"{key}={shown(value)}: expected a list of {what}")
        return []
    if any(_unset(item) for item in items):
        p.append(f"{key}={shown(value)}: an item is empty; expected a list of {what}, every item set")
    return [item for item in items if not _unset(item)]


def _topics(p: list[str], key: str, value: Any) -> list[str]:
    names = [_topic(p, key, item) for item in _items(p, key, value, "topic names")]
    return [name for name in names if name]


def _stages(p: list[str], value: Any) -> list[Stage]:
    found: list[Stage] = []
    for item in _items(p, "stages", value, "stage names"):
        text = item.strip() if isinstance(item, str) else None
        if text is not None and text in Stage.__members__:
            found.append(Stage(text))
        else:
            p.append(f"stages: {shown(item)} is not a stage; accepted: {', '.join(Stage.__members__)}")
    return found


def _regex(p: list[str], key: str, value: Any) -> re.Pattern[str] | None:
    text = _str(p, key, value)
    if text is None:
        return None
    try:
        return re.compile(text)
    except re.error as error:  # its message says what and where ("missing ), unterminated subpattern at position 7")
        p.append(f"{key}={shown(text)}: not a valid regular expression ({_reason(error, with_class=False)})")
        return None
    except (OverflowError, RecursionError, ValueError) as error:
        p.append(f"{key}={shown(text)}: not a valid regular expression ({_reason(error)})")
        return None


def _int(p: list[str], key: str, value: Any, minimum: int, maximum: int) -> int | None:
    """An integer in ``[minimum, maximum]`` from an int, an integral float or ASCII decimal text."""
    if _unset(value):
        return None
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, str):
        match = _INT_RANGE.fullmatch(value)
        number = int(match[1]) if match else None
    if number is None or not minimum <= number <= maximum:
        bound = f">= {minimum}" if maximum == INT64_MAX else f"between {minimum} and {maximum}"
        p.append(f"{key}={shown(value)}: expected an integer {bound}")
        return None
    return number


def _real(value: Any) -> float | None:
    """A finite float from an int, a float or ASCII decimal text; ``None`` for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return float(value) if abs(value) < 10**300 else None
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str) and _DECIMAL.fullmatch(value):
        number = float(value)
        return number if math.isfinite(number) else None
    return None


def _positive(p: list[str], key: str, value: Any) -> float | None:
    if _unset(value):
        return None
    number = _real(value)
    if number is None or number <= 0:
        p.append(f"{key}={shown(value)}: expected a positive number")
        return None
    return number


def _seconds(p: list[str], key: str, value: Any, minimum: float, maximum: float) -> float | None:
    if _unset(value):
        return None
    number = _real(value)
    if number is None or not minimum <= number <= maximum:
        p.append(f"{key}={shown(value)}: expected a number of seconds between {minimum:g} and {maximum:g}")
        return None
    return number


def _bool(p: list[str], key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    p.append(f"{key}={shown(value)}: expected true or false")
    return False


def _group(p: list[str], value: Any) -> str | None:
    group = _str(p, "replay_group", value)
    if group is not None and len(group.encode("utf-8")) > MAX_GROUP_ID_BYTES:
        p.append(f"replay_group={shown(group)}: longer than Kafka's {MAX_GROUP_ID_BYTES} bytes for a group id")
        return None
    return group


_TIME_ACCEPTED = (
    "expected an ISO-8601 date-time (2026-01-31T12:00:00+00:00) or epoch milliseconds from 0 to "
    f"{MAX_TIME_MS} (9999-12-31)"
)


def _time(p: list[str], key: str, value: Any) -> int | None:
    """Epoch milliseconds from an int or integral float (ms), a datetime, or ISO-8601 text (naive means UTC)."""
    if _unset(value):
        return None
    ms: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        ms = value
    elif isinstance(value, float) and value.is_integer():
        ms = int(value)
    elif isinstance(value, datetime):
        ms = epoch_ms(value)
    elif isinstance(value, str):
        ms = parse_time(value)
    if ms is None or not 0 <= ms <= MAX_TIME_MS:
        p.append(f"{key}={shown(value)}: {_TIME_ACCEPTED}")
        return None
    return ms


def _dlq_offsets(p: list[str], value: Any) -> OffsetSpans | None:
    """Exact DLQ offsets as ``partition:first-last`` text (:func:`parse_spans_text`), or their JSON mapping."""
    if _unset(value):
        return None
    if isinstance(value, Mapping):
        spans = spans_from_fields(value)
        if spans is None:
            p.append(f"dlq_offsets={shown(value)}: expected {{partition: [[start, end], ...]}} (end excluded)")
        return spans
    if not isinstance(value, str):
        p.append(f"dlq_offsets={shown(value)}: {SPANS_TEXT_ACCEPTED}")
        return None
    try:
        return parse_spans_text(value)
    except ValueError as error:
        p.append(f"dlq_offsets={shown(value)}: {error}")
        return None


def _header_match(p: list[str], value: Any) -> dict[str, str]:
    if _unset(value):
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            p.append(f"header_match={shown(value)}: expected a JSON object of header name to value")
            return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and k for k in value):
        p.append(f"header_match={shown(value)}: expected an object of header name (non-empty text) to value")
        return {}
    found: dict[str, str] = {}
    for name, text in value.items():
        whole = isinstance(text, int) and not isinstance(text, bool) and abs(text) <= INT64_MAX
        if isinstance(text, str):
            found[name] = text
        elif whole or (isinstance(text, float) and math.isfinite(text)):
            found[name] = str(text)
        else:
            p.append(
                f"header_match: header {shown(name)} has value {shown(text)}; expected the header's UTF-8 text "
                "(a string, or a number up to int64)"
            )
    return found if len(found) == len(value) else {}
