"""The replay's fast path: what :func:`~airflow_kerr.replay.policy.decide` gives for the common dead letter.

Its own module because it is a different job from the policy's rules: it does not decide
anything :func:`~airflow_kerr.replay.policy.decide` does not, it only skips parsing for
records whose outcome it can read straight off the raw headers, and hands every other
record back. It runs once per DLQ record, so its cost is the replay's cost (see
``benchmarks/replay.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from airflow_kerr.errors import Header, Stage
from airflow_kerr.errors.dead_letter import STAGES_BY_HEADER_BYTES
from airflow_kerr.errors.header_reader import plain_connect_of, read_error_headers
from airflow_kerr.replay.policy import (
    COUNT_HEADERS,
    HEADER_REPLAY_SOURCE,
    LINEAGE_PREFIX,
    Action,
    BreakdownKey,
    Decision,
    Outgoing,
    ParkReason,
    ReplayPolicy,
    ReplayRecord,
    apply_fix,
    lineage_headers,
    outgoing,
    park,
    split_lineage,
)

#: What :func:`fast_replayer` returns for ``(headers, key, value, dlq_partition, dlq_offset, timestamp)``: what is
#: written (``None`` for a drop) and its breakdown key; a park :class:`Decision` (only after a fix, which ran once
#: and must not run again); or ``None`` when the record needs :func:`parse_dead_letter` and :func:`decide`.
FastReplayer = Callable[
    [Sequence[Header], bytes | None, bytes | None, int, int, int | None],
    tuple[Outgoing | None, BreakdownKey] | Decision | None,
]


def fast_replayer(policy: ReplayPolicy) -> FastReplayer:  # noqa: C901 - holds replay_fast, kept whole (+3-4% split)
    """What :func:`decide` gives for a DLQ record, read once by the header reader, when every record is selected.

    The replay's common case: a dead letter with plain coordinates, a source topic known to
    be valid, a target that may be written. Then nothing of the parsed record is needed but
    a few fields, so the returned function builds no ``DeadLetterRecord`` and decodes none
    of the error headers the replay drops. With a fix, the fix gets a :class:`ReplayRecord`
    whose ``dead_letter`` is parsed only if the fix reads it (or the record is parked).

    The headers are read by :func:`read_error_headers`, as :func:`parse_dead_letter` reads
    them. A Connect dead letter's coordinates are checked as the raw bytes they arrive as
    (plain digits, short enough to be in range, give what the parser gives); a header-less
    record needs none. The function answers ``None`` whenever the record needs :func:`decide`'s
    closer look (another dialect, a header Kafka would not accept, a pointer to resolve, a
    record to park before any fix runs): the caller then parses and decides, which gives
    what it would have given anyway. The policy's fields
    are bound once, in the closure, because the function runs once per record.
    """
    max_replays = policy.max_replays
    override = policy.target_topic
    source_prefix = policy.source_prefix
    stage_of = STAGES_BY_HEADER_BYTES.get
    fix = policy.fix
    dlq = policy.dlq_topic
    # Per-record costs cut to the bone: the first replay's lineage headers prebuilt, targets'
    # refusals remembered in a local dict.
    first_count = COUNT_HEADERS[1]
    run_header = policy.run_header
    refusal = policy.refusal
    target_ok = _TargetOk(refusal)

    # Kept whole: the fix's outcome as a function of its own cost 0.15-0.22 us per fixed record (+3-4%,
    # 5.69 -> 5.84 us, 100k Connect dead letters, in-process); its rare branches are split off already.
    def replay_fast(  # noqa: C901, PLR0912 - per record: a split-off fix step measured +3-4%
        headers: Sequence[Header],
        key: bytes | None,
        value: bytes | None,
        partition: int,
        offset: int,
        timestamp: int | None,
    ) -> tuple[Outgoing | None, BreakdownKey] | Decision | None:
        if key is None and value is None:  # a pointer to resolve, or nothing to write
            return None
        stage: Stage | None = None
        exception: str | None = None
        source: str | None = None
        fast = plain_connect_of(headers)
        if fast is not None:
            source, stage_raw, exception_raw, _, kept = fast
            stage = None if stage_raw is None else stage_of(stage_raw)
            exception = exception_raw.decode("utf-8", errors="replace")
        else:  # header-less (with a target it goes as it is), or anything for the parser and decide()
            without = _headers_without_dialect(headers)
            if without is None:
                return None
            kept = without
        count = 0
        for name, _ in kept:
            if name.startswith(LINEAGE_PREFIX):  # replayed before: how often decides
                kept, count = split_lineage(kept)
                if count >= max_replays:
                    return None
                break
        target = override or source
        if not target:
            return None
        if not target_ok[target]:
            return None
        read_at = source_prefix + b"%d/%d" % (partition, offset)
        if fix is None:
            if count == 0:
                kept.append(first_count)
                kept.append((HEADER_REPLAY_SOURCE, read_at))
                kept.append(run_header)
            else:
                kept += lineage_headers(policy, count + 1, read_at)
            return (target, value, key, kept, None), (Action.REPLAY, target, stage, exception, None)
        unparsed = (headers, key, value, dlq, partition, offset, timestamp)
        record = ReplayRecord.unparsed(target, key, value, kept, unparsed)
        fixed, problem = apply_fix(record, fix)
        if problem is not None:
            return park(record.dead_letter, headers, policy, problem[0], problem[1], count)
        if fixed is None:
            return None, (Action.DROP, None, stage, exception, None)
        refused = refusal(fixed.topic)
        if refused is not None:
            return park(record.dead_letter, headers, policy, refused[0], refused[1], count)
        fixed.headers += lineage_headers(policy, count + 1, read_at)
        return outgoing(fixed), (Action.REPLAY, fixed.topic, stage, exception, None)

    return replay_fast


class _TargetOk(dict[str, bool]):
    """Whether the policy lets the replay write to a topic, asked once per topic.

    A dict whose :meth:`__missing__` asks the policy, so the per-record look-up is one
    subscript with no branch for the first sight of a topic.
    """

    def __init__(self, refusal: Callable[[str], tuple[ParkReason, str] | None]) -> None:
        super().__init__()
        self._refusal = refusal

    def __missing__(self, topic: str) -> bool:
        ok = self[topic] = self._refusal(topic) is None
        return ok


def _headers_without_dialect(headers: Sequence[Header]) -> list[Header] | None:
    """The headers of a header-less dead letter, or ``None`` when the parser and decide() must look.

    Off the fast path's common branch (a Connect dead letter never gets here), so it costs
    that record no call.
    """
    try:
        read = read_error_headers(headers)
    except TypeError:  # not (str, bytes) pairs: the parser says what is wrong
        return None
    return None if read.dialect is not None else read.kept
