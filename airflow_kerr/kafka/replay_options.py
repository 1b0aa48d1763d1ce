"""A replay's settings, validated from what a DAG or the trigger form gives (strings, numbers, None).

Every problem is collected and reported at once, each naming the key, the value and what
is accepted, so an on-call person fixes the form in one go; nothing here talks to Kafka
(topic existence is checked by the engine before the first record is read).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from airflow_kerr.errors import Stage
from airflow_kerr.kafka.replay_select import DEFAULT_MAX_REPLAYS, PARKING_SUFFIX, FixFn, Selection
from airflow_kerr.spark.spec import import_callable

_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")
MAX_BATCH_SIZE = 100_000
#: Records per transaction: a transaction costs a few round trips, so fewer, larger ones replay faster.
DEFAULT_BATCH_SIZE = 1000


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
    fix: FixFn | None = field(default=None, compare=False, repr=False)

    @classmethod
    def build(
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
        fix: Any = None,
        target_topic: Any = None,
        target_allowlist: Any = None,
        max_replays: Any = DEFAULT_MAX_REPLAYS,
        parking_topic: Any = None,
        max_records_per_second: Any = None,
        max_records: Any = None,
        dry_run: Any = False,
        batch_size: Any = DEFAULT_BATCH_SIZE,
        progress_interval_s: Any = 5.0,
    ) -> ReplayOptions:
        """Validate raw values (None and "" mean unset); raise :class:`InvalidReplayOptions` listing every problem."""
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
                f"start_time={start_time!r}, end_time={end_time!r}: inverted or empty range; start must be earlier"
            )
        first, last = _int(p, "start_offset", start_offset, 0), _int(p, "end_offset", end_offset, 0)
        if first is not None and last is not None and first >= last:
            p.append(f"start_offset={first}, end_offset={last}: inverted or empty range; expected start < end")

        selection = Selection(
            source_topics=frozenset(_topics(p, "source_topics", source_topics)),
            stages=frozenset(_stages(p, stages)),
            exception_class=_regex(p, "exception_class_regex", exception_class_regex),
            start_time_ms=start_ms,
            end_time_ms=end_ms,
            start_offset=first,
            end_offset=last,
            headers=_header_match(p, header_match),
        )
        fix_path = _str(p, "fix", fix)
        fix_fn: FixFn | None = None
        if fix_path:
            try:
                fix_fn = import_callable(fix_path)
            except ImportError as error:
                p.append(f"fix={fix_path!r}: {error}; expected the dotted path of a function record -> record or None")

        options = cls(
            dlq_topic=dlq,
            group_id=_str(p, "replay_group", replay_group) or f"kerr-replay.{dlq}",
            parking_topic=parking,
            selection=selection,
            fix_path=fix_path,
            target_topic=target,
            target_allowlist=allowlist,
            max_replays=_int(p, "max_replays", max_replays, 1) or DEFAULT_MAX_REPLAYS,
            max_records_per_second=_positive(p, "max_records_per_second", max_records_per_second),
            max_records=_int(p, "max_records", max_records, 1),
            dry_run=_bool(p, "dry_run", dry_run),
            batch_size=_int(p, "batch_size", batch_size, 1, MAX_BATCH_SIZE) or DEFAULT_BATCH_SIZE,
            progress_interval_s=_positive(p, "progress_interval_s", progress_interval_s) or 5.0,
            fix=fix_fn,
        )
        if p:
            raise InvalidReplayOptions(p)
        return options


def _unset(value: Any) -> bool:
    """None, "" and the text a non-native template renders for None ("None", "null")."""
    return value is None or (isinstance(value, str) and value.strip() in ("", "None", "null"))


def _str(p: list[str], key: str, value: Any) -> str | None:
    if _unset(value):
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)  # a native template renders the text "123" as a number
    if not isinstance(value, str):
        p.append(f"{key}={value!r}: expected a string")
        return None
    return value.strip()


def _topic(p: list[str], key: str, value: Any, *, required: bool = False) -> str | None:
    name = _str(p, key, value)
    if name is None:
        if required and _unset(value):
            p.append(f"{key}={value!r}: required, a topic name")
        return None
    if not _TOPIC_NAME.fullmatch(name) or name in (".", ".."):
        p.append(f"{key}={name!r}: not a valid topic name (1-249 of letters, digits, '.', '_', '-')")
        return None
    return name


def _topics(p: list[str], key: str, value: Any) -> list[str]:
    if _unset(value):
        return []
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, (list, tuple, set, frozenset)):
        p.append(f"{key}={value!r}: expected a list of topic names")
        return []
    names = [_topic(p, key, item) for item in items if not _unset(item)]
    return [name for name in names if name]


def _stages(p: list[str], value: Any) -> list[Stage]:
    if _unset(value):
        return []
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, (list, tuple, set, frozenset)):
        p.append(f"stages={value!r}: expected a list of stage names")
        return []
    found: list[Stage] = []
    for item in items:
        text = item.strip() if isinstance(item, str) else item
        if text in Stage.__members__:
            found.append(Stage(text))
        elif not _unset(text):
            p.append(f"stages: {text!r} is not a stage; accepted: {', '.join(Stage.__members__)}")
    return found


def _regex(p: list[str], key: str, value: Any) -> re.Pattern[str] | None:
    text = _str(p, key, value)
    if text is None:
        return None
    try:
        return re.compile(text)
    except re.error as error:
        p.append(f"{key}={text!r}: not a valid regular expression ({error})")
        return None


def _int(p: list[str], key: str, value: Any, minimum: int, maximum: int | None = None) -> int | None:
    if _unset(value):
        return None
    number: int | None = None
    integral_float = isinstance(value, float) and value.is_integer()
    digits = isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value) is not None
    if (isinstance(value, int) and not isinstance(value, bool)) or integral_float or digits:
        number = int(value)
    bound = f"between {minimum} and {maximum}" if maximum is not None else f">= {minimum}"
    if number is None or number < minimum or (maximum is not None and number > maximum):
        p.append(f"{key}={value!r}: expected an integer {bound}")
        return None
    return number


def _positive(p: list[str], key: str, value: Any) -> float | None:
    if _unset(value):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = float("nan")
    if isinstance(value, bool) or not 0 < number < float("inf"):
        p.append(f"{key}={value!r}: expected a positive number")
        return None
    return number


def _bool(p: list[str], key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    p.append(f"{key}={value!r}: expected true or false")
    return False


def _time(p: list[str], key: str, value: Any) -> int | None:
    """Epoch milliseconds from an int (ms), a datetime, or an ISO-8601 string (naive means UTC)."""
    if _unset(value):
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value)
    moment: datetime | None = value if isinstance(value, datetime) else None
    if isinstance(value, str):
        text = value.strip()
        if re.fullmatch(r"\d+", text):
            return int(text)
        try:
            moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            moment = None
    if moment is None:
        p.append(f"{key}={value!r}: expected an ISO-8601 date-time (2026-01-31T12:00:00+00:00) or epoch milliseconds")
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def _header_match(p: list[str], value: Any) -> dict[str, str]:
    if _unset(value):
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            p.append(f"header_match={value!r}: expected a JSON object of header name to value")
            return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and k for k in value):
        p.append(f"header_match={value!r}: expected an object of header name to value")
        return {}
    bad = {k: v for k, v in value.items() if not isinstance(v, (str, int, float)) or isinstance(v, bool)}
    if bad:
        p.append(f"header_match={value!r}: values must be strings (the header's UTF-8 text); not {bad!r}")
        return {}
    return {k: str(v) for k, v in value.items()}
