"""The ``errors.*`` configuration: Kafka Connect's keys and defaults plus our documented extensions.

Defaults are Connect's: fail fast, no retries, no log, no DLQ. Every key is checked
against its domain and every problem is reported at once, so a DAG author fixes a
configuration in one pass rather than one error per parse.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

# The masking rule lives in errors.masking; MASK, is_sensitive_key and mask_credentials are re-exported for
# their users here (errors.context and spark.spec import them from this module).
from airflow_kerr.errors.masking import MASK as MASK
from airflow_kerr.errors.masking import is_sensitive_key as is_sensitive_key
from airflow_kerr.errors.masking import mask_credentials as mask_credentials

SPARK_CONF_PREFIX = "spark.kerr."

ERRORS_RETRY_TIMEOUT = "errors.retry.timeout"
ERRORS_RETRY_DELAY_MAX_MS = "errors.retry.delay.max.ms"
ERRORS_TOLERANCE = "errors.tolerance"
ERRORS_LOG_ENABLE = "errors.log.enable"
ERRORS_LOG_INCLUDE_MESSAGES = "errors.log.include.messages"
DLQ_TOPIC_NAME = "errors.deadletterqueue.topic.name"
DLQ_TOPIC_REPLICATION_FACTOR = "errors.deadletterqueue.topic.replication.factor"
DLQ_CONTEXT_HEADERS_ENABLE = "errors.deadletterqueue.context.headers.enable"
ERRORS_TOLERANCE_LIMIT = "errors.tolerance.limit"
ERRORS_TOLERANCE_RATE_LIMIT = "errors.tolerance.rate.limit"
ERRORS_TOLERANCE_RATE_DURATION = "errors.tolerance.rate.duration"
ERRORS_LOG_INCLUDE_CONFIGS = "errors.log.include.configs"
DLQ_TOPIC_PARTITIONS = "errors.deadletterqueue.topic.partitions"
DLQ_HEADER_FORMAT = "errors.deadletterqueue.header.format"
DLQ_COPY_RECORD_ENABLE = "errors.deadletterqueue.copy.record.enable"
DLQ_TOPIC_NAME_PREFIX = "errors.deadletterqueue.topic.name.prefix"
DLQ_AUTO_CREATE_TOPICS_ENABLE = "errors.deadletterqueue.auto.create.topics.enable"
# Our extension, off by default: failures that look like an outage fail the task instead of filling the DLQ.
OUTAGE_ENABLE = "errors.outage.enable"
OUTAGE_CONSECUTIVE_FAILURES = "errors.outage.consecutive.failures"
OUTAGE_BATCH_FAILURE_PERCENT = "errors.outage.batch.failure.percent"
OUTAGE_BATCH_MIN_RECORDS = "errors.outage.batch.min.records"

#: Named windows accepted by ``errors.tolerance.rate.duration``, in milliseconds.
RATE_DURATIONS_MS: Mapping[str, int] = {"minute": 60_000, "hour": 3_600_000, "day": 86_400_000}

LONG_MIN = -(2**63)
LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1
SHORT_MIN = -(2**15)
SHORT_MAX = 2**15 - 1
_TOPIC_MAX_LENGTH = 249
_TOPIC_CHARS = re.compile(r"[A-Za-z0-9._-]+")
_INTEGER = re.compile(r"[+-]?[0-9]+")
# Decimal digits of LONG_MAX: a longer integer string is out of every range we accept, so it is
# rejected before int() parses it (int() refuses strings past 4,300 digits with a ValueError).
_LONG_DIGITS = len(str(LONG_MAX))
_SHOW_MAX = 1000


class ToleranceType(StrEnum):
    """``errors.tolerance``: ``none`` fails on the first error, ``all`` skips failed records."""

    NONE = "none"
    ALL = "all"


class HeaderFormat(StrEnum):
    """Which error-context header set the DLQ record carries."""

    #: Kafka Connect's ``__connect.errors.*`` headers.
    CONNECT = "connect"
    #: KIP-1191's ``__dlq.errors.*`` headers (share-group DLQ).
    DLQ = "dlq"


def show_value(value: object) -> str:
    """``repr(value)`` for an error message: never raises, never floods the log.

    Python refuses to print an integer of more than 4,300 digits (``ValueError``), also
    inside a list or dict, so such a value is described instead; anything long is cut.
    """
    try:
        text = repr(value)
    except ValueError:
        if isinstance(value, int):
            return f"<an integer of {value.bit_length()} bits>"
        text = f"<a {type(value).__name__} holding an integer too long to print>"
    except Exception:
        text = f"<a {type(value).__name__} that cannot be printed>"
    return text if len(text) <= _SHOW_MAX else text[: _SHOW_MAX - 3] + "..."


@dataclass(frozen=True)
class ConfigProblem:
    """One rejected setting: the key, the value given, and what would have been accepted."""

    key: str
    value: object
    accepted: str

    def __str__(self) -> str:
        return f"{self.key}={show_value(self.value)}: {self.accepted}"


class InvalidErrorsConfig(ValueError):
    """Every problem found in an ``errors.*`` configuration, raised once."""

    def __init__(self, problems: Iterable[ConfigProblem]) -> None:
        self.problems: tuple[ConfigProblem, ...] = tuple(problems)
        count = len(self.problems)
        lines = "\n".join(f"  - {problem}" for problem in self.problems)
        noun = "problem" if count == 1 else "problems"
        super().__init__(f"invalid errors.* configuration ({count} {noun}):\n{lines}")

    @property
    def keys(self) -> tuple[str, ...]:
        """The keys with a problem, in the order found."""
        return tuple(problem.key for problem in self.problems)


class _Invalid(Exception):
    """Internal: a value failed its type or domain check; the text says what is accepted."""


def _parse_bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise _Invalid("expected a boolean: true or false")


def parse_integer(value: object, low: int, high: int) -> int | None:
    """``value`` as an integer in ``[low, high]``, or ``None`` when it is not one.

    Accepts an ``int`` (never a ``bool``, which Python counts as one) or a string of ASCII
    digits. The type and the digit count are checked before ``int()`` runs, so no input
    makes it raise: a string with more digits than ``LONG_MAX`` is out of range whatever
    it says. Floats (``inf`` and ``nan`` too) are refused, as Java's ``LONG`` type refuses them.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        text = value.strip()
        if not _INTEGER.fullmatch(text) or len(text.lstrip("+-").lstrip("0")) > _LONG_DIGITS:
            return None
        value = int(text)
    if not isinstance(value, int) or not low <= value <= high:
        return None
    return value


def _parse_int(value: object, low: int, high: int, domain: str) -> int:
    parsed = parse_integer(value, low, high)
    if parsed is None:
        raise _Invalid(f"expected an integer, {domain}")
    return parsed


def _parse_str(value: object) -> str:
    if isinstance(value, str):
        return value.strip()
    raise _Invalid("expected a string")


def _choices(options: Iterable[str]) -> str:
    return ", ".join(repr(option) for option in options)


def _retry_timeout(value: object) -> int:
    # Connect defines this LONG without a validator and treats every negative value as "no deadline".
    domain = (
        "0 (no retry), a positive number of milliseconds (the retry budget) "
        f"or a negative one such as -1 (retry forever); within {LONG_MIN}..{LONG_MAX}"
    )
    return _parse_int(value, LONG_MIN, LONG_MAX, domain)


def _delay_max(value: object) -> int:
    return _parse_int(value, 1, LONG_MAX, f"milliseconds >= 1 (at most {LONG_MAX})")


def _tolerance(value: object) -> ToleranceType:
    accepted = f"expected one of {_choices(t.value for t in ToleranceType)} (case-sensitive)"
    if not isinstance(value, str) or value.strip() not in {t.value for t in ToleranceType}:
        raise _Invalid(accepted)
    return ToleranceType(value.strip())


def _header_format(value: object) -> HeaderFormat:
    accepted = f"expected one of {_choices(f.value for f in HeaderFormat)} (case-sensitive)"
    if not isinstance(value, str) or value.strip() not in {f.value for f in HeaderFormat}:
        raise _Invalid(accepted)
    return HeaderFormat(value.strip())


def _replication_factor(value: object) -> int:
    # Connect's SHORT without a validator: the broker judges the value when it creates the topic.
    domain = (
        f"{SHORT_MIN}..{SHORT_MAX} (Java's short); -1 takes the broker's default.replication.factor, "
        "and the broker rejects 0, values below -1 and more replicas than brokers when it creates the DLQ topic"
    )
    return _parse_int(value, SHORT_MIN, SHORT_MAX, domain)


def _partitions(value: object) -> int:
    domain = f"-1 (broker default) or a positive number of partitions (at most {INT_MAX})"
    parsed = _parse_int(value, -1, INT_MAX, domain)
    if parsed == 0:
        raise _Invalid(f"expected an integer, {domain}")
    return parsed


def _limit(value: object) -> int:
    return _parse_int(value, -1, LONG_MAX, f"-1 (no limit) or a number of records >= 0 (at most {LONG_MAX})")


def _rate_duration(value: object) -> int:
    if isinstance(value, str) and value.strip() in RATE_DURATIONS_MS:
        return RATE_DURATIONS_MS[value.strip()]
    parsed = parse_integer(value, 1, LONG_MAX)
    if parsed is None:
        raise _Invalid(f"expected one of {_choices(RATE_DURATIONS_MS)} (case-sensitive) or a positive number of ms")
    return parsed


def _consecutive_failures(value: object) -> int:
    return _parse_int(
        value, 0, INT_MAX, f"0 (rule off) or a number of failed records in a row >= 1 (at most {INT_MAX})"
    )


def _failure_percent(value: object) -> int:
    return _parse_int(value, 0, 100, "0..100: a batch trips when more than this percent of it failed; 100 turns it off")


def _min_records(value: object) -> int:
    return _parse_int(value, 1, INT_MAX, f"a number of records >= 1 (at most {INT_MAX})")


def topic_name_problem(name: str, *, internal_allowed: bool = False) -> str | None:
    """What Kafka would reject in ``name`` as a topic name, or ``None`` when it is legal.

    Kafka's rules: 1..249 ASCII letters, digits, ``.``, ``_`` and ``-``, not ``.`` or ``..``.
    Names starting with ``__`` are Kafka's internal topics; only a reader may name one.
    """
    if not name:
        return "expected a Kafka topic name, not an empty string"
    if len(name) > _TOPIC_MAX_LENGTH:
        return f"expected a Kafka topic name of at most {_TOPIC_MAX_LENGTH} characters"
    if name in (".", "..") or not _TOPIC_CHARS.fullmatch(name):
        return "expected a Kafka topic name: ASCII letters, digits, '.', '_' and '-', not '.' or '..'"
    if name.startswith("__") and not internal_allowed:
        return "expected a topic name not starting with '__' (reserved for Kafka's internal topics)"
    return None


def _dlq_topic(value: object) -> str:
    parsed = _parse_str(value)
    if parsed:
        problem = topic_name_problem(parsed)
        if problem:
            raise _Invalid(f"{problem}; or '' for no dead letter queue")
    return parsed


def _dlq_prefix(value: object) -> str:
    parsed = _parse_str(value)
    if parsed:
        problem = topic_name_problem(parsed)
        if problem:
            raise _Invalid(f"{problem.replace('topic name', 'topic name prefix')}; or '' for none")
    return parsed


def _bool_text(value: bool) -> str:
    return "true" if value else "false"


def _duration_text(value: int) -> str:
    for name, millis in RATE_DURATIONS_MS.items():
        if millis == value:
            return name
    return str(value)


@dataclass(frozen=True)
class _Key:
    attr: str
    parse: Callable[[object], Any]
    render: Callable[[Any], str]


_KEYS: dict[str, _Key] = {
    ERRORS_RETRY_TIMEOUT: _Key("retry_timeout_ms", _retry_timeout, str),
    ERRORS_RETRY_DELAY_MAX_MS: _Key("retry_delay_max_ms", _delay_max, str),
    ERRORS_TOLERANCE: _Key("tolerance", _tolerance, str),
    ERRORS_LOG_ENABLE: _Key("log_enable", _parse_bool, _bool_text),
    ERRORS_LOG_INCLUDE_MESSAGES: _Key("log_include_messages", _parse_bool, _bool_text),
    DLQ_TOPIC_NAME: _Key("dlq_topic_name", _dlq_topic, str),
    DLQ_TOPIC_REPLICATION_FACTOR: _Key("dlq_topic_replication_factor", _replication_factor, str),
    DLQ_CONTEXT_HEADERS_ENABLE: _Key("dlq_context_headers_enable", _parse_bool, _bool_text),
    ERRORS_TOLERANCE_LIMIT: _Key("tolerance_limit", _limit, str),
    ERRORS_TOLERANCE_RATE_LIMIT: _Key("tolerance_rate_limit", _limit, str),
    ERRORS_TOLERANCE_RATE_DURATION: _Key("tolerance_rate_duration_ms", _rate_duration, _duration_text),
    ERRORS_LOG_INCLUDE_CONFIGS: _Key("log_include_configs", _parse_bool, _bool_text),
    DLQ_TOPIC_PARTITIONS: _Key("dlq_topic_partitions", _partitions, str),
    DLQ_HEADER_FORMAT: _Key("dlq_header_format", _header_format, str),
    DLQ_COPY_RECORD_ENABLE: _Key("dlq_copy_record_enable", _parse_bool, _bool_text),
    DLQ_TOPIC_NAME_PREFIX: _Key("dlq_topic_name_prefix", _dlq_prefix, str),
    DLQ_AUTO_CREATE_TOPICS_ENABLE: _Key("dlq_auto_create_topics_enable", _parse_bool, _bool_text),
    OUTAGE_ENABLE: _Key("outage_enable", _parse_bool, _bool_text),
    OUTAGE_CONSECUTIVE_FAILURES: _Key("outage_consecutive_failures", _consecutive_failures, str),
    OUTAGE_BATCH_FAILURE_PERCENT: _Key("outage_batch_failure_percent", _failure_percent, str),
    OUTAGE_BATCH_MIN_RECORDS: _Key("outage_batch_min_records", _min_records, str),
}


def _topic_set(topics: Iterable[str] | None) -> frozenset[str]:
    """Topics as a set; a lone string is one topic, not a set of characters; non-strings name no topic."""
    if topics is None:
        return frozenset()
    if isinstance(topics, str):
        return frozenset({topics})
    if not isinstance(topics, Iterable):
        return frozenset()
    return frozenset(topic for topic in topics if isinstance(topic, str))


_STRING_KEY_EXPECTED = "expected a string key such as 'errors.tolerance'"
_MAPPING_EXPECTED = "expected a mapping of errors.* keys to values, such as {'errors.tolerance': 'all'}"


def _unknown_key_problem(key: str, value: object) -> ConfigProblem:
    close = difflib.get_close_matches(key, list(_KEYS), n=1, cutoff=0.75)
    if close:
        return ConfigProblem(key, value, f"unknown errors.* key; did you mean {close[0]!r}?")
    return ConfigProblem(key, value, f"unknown errors.* key; accepted keys: {', '.join(_KEYS)}")


@dataclass(frozen=True)
class ErrorHandlingConfig:
    """A validated ``errors.*`` configuration.

    Build it with :meth:`from_properties` (Java-properties strings or native values) or
    :meth:`from_spark_conf`; direct construction validates too. Times are milliseconds.
    ``errors.tolerance.limit`` and the rate limit apply only with tolerance ``all``: with
    ``none`` the first failed record fails the job whatever they say.
    """

    KEYS: ClassVar[tuple[str, ...]] = tuple(_KEYS)

    retry_timeout_ms: int = 0
    retry_delay_max_ms: int = 60_000
    tolerance: ToleranceType = ToleranceType.NONE
    log_enable: bool = False
    log_include_messages: bool = False
    dlq_topic_name: str = ""
    dlq_topic_replication_factor: int = 3
    dlq_context_headers_enable: bool = False
    tolerance_limit: int = -1
    tolerance_rate_limit: int = -1
    tolerance_rate_duration_ms: int = 60_000
    log_include_configs: bool = False
    dlq_topic_partitions: int = 1
    dlq_header_format: HeaderFormat = HeaderFormat.CONNECT
    dlq_copy_record_enable: bool = True
    dlq_topic_name_prefix: str = ""
    dlq_auto_create_topics_enable: bool = True
    outage_enable: bool = False
    outage_consecutive_failures: int = 100
    outage_batch_failure_percent: int = 50
    outage_batch_min_records: int = 100
    source_topics: frozenset[str] = field(default=frozenset(), compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "source_topics", _topic_set(self.source_topics))
        problems: list[ConfigProblem] = []
        for key, spec in _KEYS.items():
            value = getattr(self, spec.attr)
            try:
                parsed = spec.parse(value)
            except _Invalid as invalid:
                problems.append(ConfigProblem(key, value, str(invalid)))
                continue
            object.__setattr__(self, spec.attr, parsed)
        if not problems:
            problems.extend(self._cross_key_problems())
        if problems:
            raise InvalidErrorsConfig(problems)

    @classmethod
    def from_properties(
        cls, properties: Mapping[str, object], *, source_topics: Iterable[str] | None = None
    ) -> ErrorHandlingConfig:
        """Read and validate the ``errors.*`` keys of ``properties``; other keys are ignored.

        Values may be strings as in Java properties (``"true"``, ``"3000"``) or native
        Python values; ``None`` means "use the default". Unknown ``errors.*`` keys, keys that
        are not strings (no Java property has one), wrong types and out-of-domain values are
        collected and raised together as :class:`InvalidErrorsConfig`; so is ``properties``
        itself when it is not a mapping. ``source_topics`` enables the check that the DLQ
        topic is not one of the job's input topics.
        """
        if not isinstance(properties, Mapping):
            raise InvalidErrorsConfig([ConfigProblem("errors", properties, _MAPPING_EXPECTED)])
        problems: list[ConfigProblem] = []
        values: dict[str, Any] = {}
        for key, value in properties.items():
            if not isinstance(key, str):
                problems.append(ConfigProblem(show_value(key), value, _STRING_KEY_EXPECTED))
                continue
            if not key.startswith("errors."):
                continue
            spec = _KEYS.get(key)
            if spec is None:
                problems.append(_unknown_key_problem(key, value))
                continue
            if value is None:
                continue
            try:
                values[spec.attr] = spec.parse(value)
            except _Invalid as invalid:
                problems.append(ConfigProblem(key, value, str(invalid)))
        topics = _topic_set(source_topics)
        if problems:
            defaults = cls(source_topics=topics)
            merged = {spec.attr: values.get(spec.attr, getattr(defaults, spec.attr)) for spec in _KEYS.values()}
            problems.extend(cls._cross_key_problems_of(merged, topics, {p.key for p in problems}))
            raise InvalidErrorsConfig(problems)
        return cls(**values, source_topics=topics)

    @classmethod
    def from_spark_conf(
        cls, conf: Mapping[str, object], *, source_topics: Iterable[str] | None = None
    ) -> ErrorHandlingConfig:
        """Read the ``spark.kerr.errors.*`` entries written by :meth:`to_spark_conf`."""
        if not isinstance(conf, Mapping):
            raise InvalidErrorsConfig([ConfigProblem("spark conf", conf, "expected a mapping of Spark settings")])
        stripped = {
            key[len(SPARK_CONF_PREFIX) :]: value
            for key, value in conf.items()
            if isinstance(key, str) and key.startswith(SPARK_CONF_PREFIX + "errors.")
        }
        return cls.from_properties(stripped, source_topics=source_topics)

    def to_properties(self) -> dict[str, str]:
        """Every key with its value as a Java-properties string; ``from_properties`` reads it back."""
        return {key: spec.render(getattr(self, spec.attr)) for key, spec in _KEYS.items()}

    def to_spark_conf(self) -> dict[str, str]:
        """The properties under ``spark.kerr.`` for ``spark-submit --conf``."""
        return {SPARK_CONF_PREFIX + key: value for key, value in self.to_properties().items()}

    def validate_against_sources(self, topics: Iterable[str]) -> None:
        """Raise :class:`InvalidErrorsConfig` if the DLQ topic is one of the job's source topics.

        Writing failed records back into an input would feed them to the job again.
        """
        problem = self._source_topic_problem(self.dlq_topic_name, _topic_set(topics))
        if problem:
            raise InvalidErrorsConfig([problem])

    @property
    def dlq_enabled(self) -> bool:
        """True when failed records go to a dead letter queue topic."""
        return bool(self.dlq_topic_name)

    @property
    def retry_enabled(self) -> bool:
        """True when retriable failures are retried at all (``errors.retry.timeout`` != 0)."""
        return self.retry_timeout_ms != 0

    def _cross_key_problems(self) -> list[ConfigProblem]:
        values = {spec.attr: getattr(self, spec.attr) for spec in _KEYS.values()}
        return self._cross_key_problems_of(values, self.source_topics, set())

    @staticmethod
    def _source_topic_problem(dlq_topic: str, topics: frozenset[str]) -> ConfigProblem | None:
        if dlq_topic and dlq_topic in topics:
            return ConfigProblem(
                DLQ_TOPIC_NAME,
                dlq_topic,
                f"expected a topic that is not one of the job's source topics ({', '.join(sorted(topics))})",
            )
        return None

    @classmethod
    def _cross_key_problems_of(
        cls, values: Mapping[str, Any], topics: frozenset[str], already_bad: set[str]
    ) -> list[ConfigProblem]:
        problems: list[ConfigProblem] = cls._outage_problems_of(values, already_bad)
        topic = values["dlq_topic_name"]
        if not topic or DLQ_TOPIC_NAME in already_bad:
            return problems
        prefix = values["dlq_topic_name_prefix"]
        if prefix and DLQ_TOPIC_NAME_PREFIX not in already_bad and not topic.startswith(prefix):
            problems.append(
                ConfigProblem(
                    DLQ_TOPIC_NAME, topic, f"expected a name starting with {DLQ_TOPIC_NAME_PREFIX}={prefix!r}"
                )
            )
        source_problem = cls._source_topic_problem(topic, topics)
        if source_problem:
            problems.append(source_problem)
        copy_record = values["dlq_copy_record_enable"]
        headers = values["dlq_context_headers_enable"]
        headers_known = DLQ_CONTEXT_HEADERS_ENABLE not in already_bad
        if copy_record is False and headers is False and headers_known and DLQ_COPY_RECORD_ENABLE not in already_bad:
            problems.append(
                ConfigProblem(
                    DLQ_COPY_RECORD_ENABLE,
                    copy_record,
                    f"expected true unless {DLQ_CONTEXT_HEADERS_ENABLE}=true: "
                    "a headers-only DLQ record without context headers would carry nothing",
                )
            )
        return problems

    @staticmethod
    def _outage_problems_of(values: Mapping[str, Any], already_bad: set[str]) -> list[ConfigProblem]:
        """``errors.outage.enable=true`` needs tolerance ``all`` (``none`` fails on the first error) and a rule."""
        if values["outage_enable"] is not True or OUTAGE_ENABLE in already_bad:
            return []
        problems: list[ConfigProblem] = []
        if values["tolerance"] is not ToleranceType.ALL and ERRORS_TOLERANCE not in already_bad:
            problems.append(
                ConfigProblem(
                    OUTAGE_ENABLE,
                    True,
                    f"expected false unless {ERRORS_TOLERANCE}='all': with 'none' the first failed record "
                    "fails the task already",
                )
            )
        rules_known = not {OUTAGE_CONSECUTIVE_FAILURES, OUTAGE_BATCH_FAILURE_PERCENT} & already_bad
        if rules_known and values["outage_consecutive_failures"] == 0 and values["outage_batch_failure_percent"] == 100:
            problems.append(
                ConfigProblem(
                    OUTAGE_ENABLE,
                    True,
                    f"expected false when both rules are off ({OUTAGE_CONSECUTIVE_FAILURES}=0 and "
                    f"{OUTAGE_BATCH_FAILURE_PERCENT}=100): nothing could trip",
                )
            )
        return problems

    @property
    def outage_rules(self) -> str:
        """The outage rules in words, for the failure message and the logs."""
        rules = []
        if self.outage_consecutive_failures:
            rules.append(f"{self.outage_consecutive_failures} failed records in a row (same class, same stage)")
        if self.outage_batch_failure_percent < 100:
            percent, least = self.outage_batch_failure_percent, self.outage_batch_min_records
            rules.append(f"more than {percent}% of a batch of >= {least} records")
        return " or ".join(rules)
