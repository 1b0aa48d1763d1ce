"""The one reader of dead-letter headers, for every dialect in :mod:`airflow_kerr.errors.dialects`.

:func:`read_error_headers` takes a record's headers once: by name, which dialect they are,
and (when asked) which of them are the original record's; :meth:`ErrorHeaders.fields`
decodes every field for :func:`~airflow_kerr.errors.dead_letter.parse_dead_letter`.
:func:`plain_connect_of` reads a plain Connect dead letter in one pass for the two callers
that see a million of them (the DLQ view's count and the replay's fast path). This module
is the only place a header value becomes a topic or a number.

A DLQ holds whatever its writers put there, so nothing is trusted: a topic name or a number
Kafka would not accept is never handed on, but described in ``problems`` (header name to
what is wrong, quoting the value cut short).

One file, a little over 500 lines, on purpose: it is the single place a header value is
judged, and the full read, the one-pass read and their checks share its compiled rules.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from airflow_kerr.errors.dialects import (
    BINARY_HEADERS,
    CONNECT,
    DIALECTS,
    ERROR_HEADER_CONNECTOR_NAME,
    ERROR_HEADER_EXCEPTION,
    ERROR_HEADER_ORIG_OFFSET,
    ERROR_HEADER_ORIG_PARTITION,
    ERROR_HEADER_ORIG_TOPIC,
    ERROR_HEADER_PREFIXES,
    ERROR_HEADER_STAGE,
    ERROR_HEADER_TASK_ID,
    FIELD_HEADERS,
    FIRST_WINS,
    Dialect,
)
from airflow_kerr.errors.record import Header

RawHeaders = Sequence[tuple[str, bytes | str | None]] | Mapping[str, bytes | str | None] | None

#: Kafka's rule for topic names (``org.apache.kafka.common.internals.Topic.validate``), less '.' and '..'.
TOPIC_NAME_PATTERN = re.compile(r"[a-zA-Z0-9._-]{1,249}")
TOPIC_NAME_RULE = "1-249 of ASCII letters, digits, '.', '_', '-'"
INT16_MAX = 2**15 - 1
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
#: Characters of a bad value quoted in a problem: enough to recognise it, never a megabyte header.
SHOWN_CHARS = 60


def is_topic_name(name: object) -> bool:
    """Whether ``name`` is a name Kafka accepts for a topic; anything else makes librdkafka refuse the topic."""
    return isinstance(name, str) and TOPIC_NAME_PATTERN.fullmatch(name) is not None and name not in (".", "..")


def shown(value: object, limit: int = SHOWN_CHARS) -> str:
    """``repr`` of a value from outside, cut to ``limit`` characters with its length noted.

    Safe for anything: an integer past Python's digit limit for ``str`` is described rather
    than converted (its ``repr`` would raise ``ValueError``).
    """
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 1000:
        return f"<an integer of about {int(value.bit_length() * 0.30103)} digits>"
    try:
        text = repr(value)
    except ValueError:  # Python will not print an integer of more than 4,300 digits, nested ones included
        return f"<a {type(value).__name__} holding an integer too long to print>"
    except Exception as error:  # a caller's object whose __repr__ fails: describe it instead
        return f"<a {type(value).__name__} whose repr failed: {type(error).__name__}>"
    if len(text) <= limit:
        return text
    size = f"{len(value):,} characters" if isinstance(value, str) else f"{len(text):,} characters as text"
    return f"{text[: limit - 1]}\u2026 ({size})"


#: Topic names already found valid: a DLQ names few source topics, so most records skip the pattern
#: (cleared, never replaced, so a caller may hold it).
TOPIC_NAMES_SEEN: set[str] = set()
_TOPIC_NAMES_KEPT = 4096


def known_topic_name(text: str) -> bool:
    """:func:`is_topic_name`, remembered: a DLQ names few source topics, so the pattern runs once per name."""
    if text in TOPIC_NAMES_SEEN:
        return True
    if not is_topic_name(text):
        return False
    if len(TOPIC_NAMES_SEEN) >= _TOPIC_NAMES_KEPT:
        TOPIC_NAMES_SEEN.clear()
    TOPIC_NAMES_SEEN.add(text)
    return True


def as_bytes(name: str, value: object) -> bytes | None:
    """A header value as Kafka holds it: bytes or null (text is UTF-8; a lone surrogate is kept, not raised on)."""
    if value is None or type(value) is bytes:
        return value
    if isinstance(value, str):
        return value.encode("utf-8", errors="surrogatepass")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"header {name!r}: value {shown(value)} is not bytes, str or None")


def decode(name: str, value: object) -> str | None:
    """An error header's text: invalid UTF-8 becomes U+FFFD, so a value is always readable."""
    if value is None or isinstance(value, str):
        return value
    if type(value) is bytes:
        try:
            return value.decode()
        except UnicodeDecodeError:
            return value.decode("utf-8", errors="replace")
    raw = as_bytes(name, value)
    return None if raw is None else raw.decode("utf-8", errors="replace")


def display(name: str, value: object) -> str | None:
    """An error header as a person reads it: a big-endian number as its decimal value, anything else as text.

    A binary header of the wrong width is shown in hex, never as a wrong number (width 0: any
    width up to 8 bytes, as Java's ``BigInteger.toByteArray`` writes).
    """
    width = BINARY_HEADERS.get(name)
    if width is None or value is None:
        return decode(name, value)
    raw = as_bytes(name, value)
    assert raw is not None
    if len(raw) != width and not (width == 0 and 0 < len(raw) <= 8):
        return f"0x{raw.hex()}"
    return str(int.from_bytes(raw, "big", signed=True))


#: Decimal text as Connect, KIP-1191 and Streams write numbers, with surrounding blanks tolerated.
_DECIMAL = re.compile(r"[ \t\r\n]*(-?[0-9]{1,19})[ \t\r\n]*")


def _pairs(headers: RawHeaders) -> Iterable[tuple[str, bytes | str | None]]:
    if type(headers) is list:  # what confluent-kafka returns: no ABC check needed
        return headers
    if headers is None:
        return ()
    if isinstance(headers, Mapping):
        return list(headers.items())
    if isinstance(headers, (str, bytes, bytearray)):
        raise TypeError(f"headers must be a list of (name, value) pairs or a mapping, not {type(headers).__name__}")
    return list(headers)


#: Each dialect with the names that make a record one of its dead letters, and every other dialect's names.
_DETECT: tuple[tuple[Dialect, frozenset[str], frozenset[str]], ...] = tuple(
    (dialect, dialect.names, frozenset().union(*(other.names for other in DIALECTS if other is not dialect)))
    for dialect in DIALECTS
)


#: Every header name a dialect reads a field from.
_ERROR_NAMES: frozenset[str] = frozenset().union(*(dialect.names for dialect in DIALECTS))


def _dialect_of_prefix(names: Iterable[object]) -> Dialect | None:
    """The highest-precedence dialect whose prefix one of ``names`` has (a header it has no field for)."""
    best: int | None = None
    for name in names:
        if type(name) is str and name.startswith(ERROR_HEADER_PREFIXES):
            for rank, dialect in enumerate(DIALECTS):
                if name.startswith(dialect.prefixes) and (best is None or rank < best):
                    best = rank
    return None if best is None else DIALECTS[best]


#: A plain Connect dead letter's source topic, raw stage, exception class and connector name, and its original headers.
PlainConnect = tuple[str | None, bytes | None, bytes, bytes | None, list[Header]]
#: Connect's ten headers by the slot plain_connect_of keeps them in: source topic, partition, offset, task id,
#: stage, exception class, connector; the three it does not read share the last.
_CONNECT_SLOTS: dict[str, int] = {
    ERROR_HEADER_ORIG_TOPIC: 0,
    ERROR_HEADER_ORIG_PARTITION: 1,
    ERROR_HEADER_ORIG_OFFSET: 2,
    ERROR_HEADER_TASK_ID: 3,
    ERROR_HEADER_STAGE: 4,
    ERROR_HEADER_EXCEPTION: 5,
    ERROR_HEADER_CONNECTOR_NAME: 6,
    **dict.fromkeys(
        CONNECT.names
        - {
            ERROR_HEADER_ORIG_TOPIC,
            ERROR_HEADER_ORIG_PARTITION,
            ERROR_HEADER_ORIG_OFFSET,
            ERROR_HEADER_TASK_ID,
            ERROR_HEADER_STAGE,
            ERROR_HEADER_EXCEPTION,
            ERROR_HEADER_CONNECTOR_NAME,
        },
        7,
    ),
}
#: Source topic headers already found valid, as they arrive, and their text: a DLQ names few topics.
_TOPIC_TEXT: dict[bytes, str] = {}


def plain_connect_of(headers: object) -> PlainConnect | None:
    """A plain Connect dead letter's source topic, raw stage, exception class and connector name, and original headers.

    ``None`` unless ``headers`` is confluent-kafka's list of ``(str, bytes | None)`` pairs of
    a Connect dead letter alone (no other dialect's header, no unknown error header), with an
    exception class header, whose partition, offset and task id are absent or short ASCII
    decimals and whose source topic is absent or a valid name: for such a record
    :func:`~airflow_kerr.errors.dead_letter.parse_dead_letter` finds no problem and reads
    these fields from exactly these headers (the last of a repeated name, as Connect
    appends), and its original headers are the others, in order.

    The view's count and the replay's fast path take a plain Connect dead letter here, a
    million times a scan: one pass over the pairs, a dict look-up each, no
    :class:`ErrorHeaders` built. Anything else they read in full.
    """
    if type(headers) is not list:
        return None
    slots: list[Any] = [None] * 8
    kept: list[Header] = []
    slot_of = _CONNECT_SLOTS.get
    try:
        for pair in headers:
            name, raw = pair
            if type(raw) is not bytes and raw is not None:  # bytes first: nearly every value is
                return None
            slot = slot_of(name)
            if slot is not None:
                slots[slot] = raw
            elif type(pair) is not tuple or name.startswith(ERROR_HEADER_PREFIXES):
                return None  # another dialect's header, or an error header no field is read from
            else:
                kept.append(pair)
    except (AttributeError, TypeError, ValueError):  # not (str, bytes) pairs: the reader says what is wrong
        return None
    topic, partition, offset, task, stage, exception, connector, _ = slots
    if exception is None:
        return None
    # Plain decimal digits, short enough to be in range: the parser takes them as they are.
    # One condition rather than three statements: the checks stay inline, no call per record.
    if (
        (partition is not None and not (len(partition) < 10 and partition.isdigit()))
        or (offset is not None and not (len(offset) < 19 and offset.isdigit()))
        or (task is not None and not (len(task) < 10 and task.isdigit()))
    ):
        return None
    source = None
    if topic is not None:
        # A DLQ names few topics: nearly every record finds its topic in the cache, without a call.
        source = _TOPIC_TEXT.get(topic) or _new_topic_text(topic)
        if source is None:
            return None
    return source, stage, exception, connector, kept


def _new_topic_text(topic: bytes) -> str | None:
    """A source topic header not seen before, as text if it is a valid topic name (then cached); else ``None``.

    Apart from :func:`plain_connect_of` because it runs once per distinct topic, not per
    record: the decode and the name check are the rare path.
    """
    try:
        source = topic.decode()
    except UnicodeDecodeError:
        return None
    if not known_topic_name(source):
        return None
    if len(_TOPIC_TEXT) >= _TOPIC_NAMES_KEPT:
        _TOPIC_TEXT.clear()
    _TOPIC_TEXT[topic] = source
    return source


def original_headers(pairs: Sequence[Any]) -> list[Header] | None:
    """The pairs that are no writer's error header, in order, if all are ``(str, bytes | None)`` tuples; else ``None``.

    One comprehension that finds known error headers by name before testing prefixes: the
    common case of :attr:`ErrorHeaders.kept`, and the replay's for a plain Connect record.
    """
    try:
        kept = [pair for pair in pairs if pair[0] not in _ERROR_NAMES and not pair[0].startswith(ERROR_HEADER_PREFIXES)]
    except (AttributeError, TypeError, LookupError):  # not a (str, value) pair
        return None
    for pair in kept:
        if type(pair) is not tuple or (pair[1] is not None and type(pair[1]) is not bytes):
            return None
    return kept


class ErrorHeaders:
    """One record's headers, read once.

    ``found`` holds every header by name (the last of a repeated name, except the
    :data:`~airflow_kerr.errors.dialects.FIRST_WINS` ones, whose first counts); ``dialect``
    is the highest-precedence dialect the record carries a field header of (only when it
    carries none, the one whose prefix a header has), ``None`` for a header-less record.
    :attr:`kept` is computed when first asked.
    """

    __slots__ = ("_kept", "alone", "dialect", "found", "pairs")

    def __init__(
        self,
        pairs: Sequence[tuple[Any, Any]],
        found: dict[Any, Any],
        dialect: Dialect | None,
        alone: bool,
    ) -> None:
        self.pairs = pairs
        self.found = found
        self.dialect = dialect
        #: Whether no other dialect's field header is present, so every field comes from ``dialect``
        #: alone. A fast path that reads one dialect's headers directly must ask this first: another
        #: dialect's header could fill a field this one lacks, or be malformed.
        self.alone = alone
        self._kept: list[Header] | None = None

    @property
    def kept(self) -> list[Header]:
        """The original record's headers, in order: every header that is no writer's error header.

        Raises ``TypeError`` when a pair is not ``(str, bytes | str | None)``.
        """
        kept = self._kept
        if kept is None:
            kept = original_headers(self.pairs)
            if kept is None:
                kept = self._kept_checked()
            self._kept = kept
        return kept

    def _kept_checked(self) -> list[Header]:
        """:attr:`kept` one pair at a time: text values encoded, anything else named in a ``TypeError``."""
        kept: list[Header] = []
        keep = kept.append
        try:
            for name, raw in self.pairs:
                if type(name) is not str:
                    raise TypeError(f"header name {shown(name)} is not a str")
                if not name.startswith(ERROR_HEADER_PREFIXES):
                    keep((name, raw if raw is None or type(raw) is bytes else as_bytes(name, raw)))
        except ValueError as error:  # a pair that is not two items
            raise TypeError(f"headers must be (name, value) pairs: {error}") from None
        return kept

    def error_headers(self) -> dict[str, str | None]:
        """Every error header (any dialect's prefix) as a person reads it (see :func:`display`)."""
        shown_headers: dict[str, str | None] = {}
        for name, raw in self.found.items():
            if name in _ERROR_NAMES or (type(name) is str and name.startswith(ERROR_HEADER_PREFIXES)):
                if type(raw) is bytes:
                    try:
                        shown_headers[name] = raw.decode()
                    except UnicodeDecodeError:
                        shown_headers[name] = raw.decode("utf-8", errors="replace")
                else:
                    shown_headers[name] = decode(name, raw)
        if not BINARY_HEADERS.keys().isdisjoint(shown_headers):
            for name in BINARY_HEADERS.keys() & shown_headers.keys():
                shown_headers[name] = display(name, self.found[name])
        return shown_headers

    def fields(self, problems: dict[str, str]) -> dict[str, Any]:
        """Every field the record's headers carry, decoded and checked; a field no header carries is left out.

        Each field comes from the first header, in order of precedence, that is not null (the
        record's own dialect alone when no other dialect's field header is present). A topic
        or number Kafka would not accept is left out too, with the problem noted. This is
        :func:`~airflow_kerr.errors.dead_letter.parse_dead_letter`'s work, done in one loop
        over a plan made once per dialect, because the replay parses every record it cannot
        take the fast path for.
        """
        dialect = self.dialect
        if dialect is None:
            return {}
        get = self.found.get
        values: dict[str, Any] = {}
        for field, names, rule in _PLANS[dialect.header_set] if self.alone else _MERGED_PLAN:
            for name in names:
                raw = get(name)
                if raw is not None:
                    break
            else:
                continue
            if rule is None:  # text
                if type(raw) is bytes:
                    try:
                        values[field] = raw.decode()
                    except UnicodeDecodeError:
                        values[field] = raw.decode("utf-8", errors="replace")
                else:
                    values[field] = decode(name, raw)
            elif type(rule) is str:  # a topic name
                _put_topic(values, problems, field, name, raw)
            else:
                assert isinstance(rule, tuple)
                low, high, unknown, digits = rule
                if type(raw) is bytes and len(raw) < digits and raw.isdigit() and name not in BINARY_HEADERS:
                    number: int | None = int(raw)  # plain digits, too few to leave the range
                else:
                    number = header_number(problems, name, raw, low, high, unknown=unknown)
                if number is not None:
                    values[field] = number
        return values


def _put_topic(values: dict[str, Any], problems: dict[str, str], field: str, name: str, raw: object) -> None:
    """Put the topic header ``name`` holds in ``values[field]`` if Kafka accepts it as a name, else note the problem.

    Apart from :meth:`ErrorHeaders.fields` to keep that loop within the branch limit; one
    field a record, and :func:`known_topic_name` was a call already.
    """
    text = raw.decode("utf-8", errors="replace") if type(raw) is bytes else decode(name, raw)
    assert text is not None
    if known_topic_name(text):
        values[field] = text
    else:
        problems[name] = f"{shown(text)} is not a topic name ({TOPIC_NAME_RULE})"


def header_number(
    problems: dict[str, str], name: str, value: object, low: int, high: int, *, unknown: bool
) -> int | None:
    """The integer header ``name`` holds, in its writer's encoding, when it lies in ``[low, high]``.

    A big-endian header (:data:`~airflow_kerr.errors.dialects.BINARY_HEADERS`) must have
    exactly its width; decimal text takes only ASCII digits, at most 19 of them, so neither
    ``int``'s 4,300-digit limit nor other scripts' digits (which ``int`` would accept) are
    ever reached. Anything else is ``None`` with the problem noted.
    """
    if value is None:
        return None
    number: int | None
    width = BINARY_HEADERS.get(name)
    if width is not None:
        raw = as_bytes(name, value)
        assert raw is not None
        if len(raw) != width and not (width == 0 and 0 < len(raw) <= 8):
            problems[name] = f"{shown(raw)} is not a {width or '1- to 8'}-byte big-endian integer"
            return None
        number = int.from_bytes(raw, "big", signed=True)
    else:
        text = decode(name, value)
        assert text is not None
        if text.isdigit() and text.isascii() and len(text) < 19:
            number = int(text)
        else:
            match = _DECIMAL.fullmatch(text)
            number = int(match[1]) if match else None
        value = text
    if number is not None and low <= number <= high:
        return number
    if number == -1 and unknown:
        return None
    problems[name] = f"{shown(value)} is not an integer from {low} to {high}"
    return None


#: How a field's header is checked: ``None`` for text, :data:`_TOPIC` for a topic name, or a number's
#: (lowest, highest, whether -1 means "not known", digits below which plain decimal is surely in range).
_TOPIC = "topic"
_NumberRule = tuple[int, int, bool, int]
_FIELD_RULES: dict[str, str | _NumberRule | None] = {
    "source_topic": _TOPIC,
    "source_partition": (0, INT32_MAX, True, 10),
    "source_offset": (0, INT64_MAX, True, 19),
    "source_timestamp": (0, INT64_MAX, True, 19),
    "task_id": (0, INT32_MAX, False, 10),
    "delivery_count": (1, INT16_MAX, False, 0),
}
_Plan = tuple[tuple[str, tuple[str, ...], str | _NumberRule | None], ...]


def _plan(fields: Mapping[str, tuple[str, ...]]) -> _Plan:
    return tuple((field, names, _FIELD_RULES.get(field)) for field, names in fields.items())


#: Each dialect's own fields, for a record that carries no other dialect's field header.
_PLANS: dict[Any, _Plan] = {dialect.header_set: _plan(dialect.fields) for dialect in DIALECTS}
#: Every field across dialects, in order of precedence, for a record that carries several.
_MERGED_PLAN: _Plan = _plan(FIELD_HEADERS)


def read_error_headers(headers: RawHeaders) -> ErrorHeaders:
    """Read a record's headers once: by name, and which dialect's dead letter it is.

    Takes confluent-kafka's list of ``(name, bytes)`` pairs, a mapping, or ``None``. Raises
    ``TypeError`` only for headers that are not pairs; a name that is not a ``str`` raises
    when :attr:`ErrorHeaders.kept` is computed.
    """
    pairs = headers if type(headers) is list else _pairs(headers)
    try:
        found = dict(pairs)
    except (TypeError, ValueError) as error:
        raise TypeError(f"headers must be (name, value) pairs: {error}") from None
    if len(found) < len(pairs) and not FIRST_WINS.isdisjoint(found):  # type: ignore[arg-type]
        firsts: dict[str, Any] = {}
        for name, raw in pairs:
            if name in FIRST_WINS and name not in firsts:
                firsts[name] = raw
        found.update(firsts)
    keys = found.keys()
    for dialect, names, others in _DETECT:
        if not keys.isdisjoint(names):
            return ErrorHeaders(pairs, found, dialect, others.isdisjoint(keys))  # type: ignore[arg-type]
    return ErrorHeaders(pairs, found, _dialect_of_prefix(keys), True)  # type: ignore[arg-type]
