"""One polled batch of dead letters, decided: what each record writes and counts, and where reading stands after it.

This is the transform step of the exactly-once loop (:mod:`airflow_kerr.replay.engine`) and
the hot path of a replay: :meth:`BatchDecider.decide` runs once per record read, so the
common record takes :func:`~airflow_kerr.replay.fast_path.fast_replayer`'s one pass over its
headers inline, and only the rare ones (unreadable headers, pointers, records too large to
write, records a selection looks at) leave the loop for a method of their own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from airflow_kerr.errors import DeadLetterRecord, Header
from airflow_kerr.errors import parse_dead_letter as parse
from airflow_kerr.errors.header_reader import read_error_headers
from airflow_kerr.replay.failures import LogLike, consumer_error
from airflow_kerr.replay.fast_path import FastReplayer, fast_replayer
from airflow_kerr.replay.options import InvalidReplayOptions, ReplayOptions
from airflow_kerr.replay.pointers import Coordinates, Gone, PointerReader
from airflow_kerr.replay.policy import (
    BreakdownKey,
    Decision,
    Outgoing,
    ReplayPolicy,
    decide,
    outgoing,
    park_source_gone,
    park_too_large,
    with_original,
)
from airflow_kerr.replay.size import NOT_WRITTEN, SizeLimits
from airflow_kerr.replay.summary import BatchCounts
from airflow_kerr.replay.transactions import describe_error


class BatchDecider:
    """Decides polled batches for one run; remembers whether the run's first record was checked.

    ``sizes`` is shared with the loop, which teaches it the records the broker refused, so a
    batch read again after such an abort parks them instead. Pointer dead letters' originals are
    read with a :class:`PointerReader` opened at the first one; :meth:`close` closes it.
    """

    def __init__(
        self, kafka_config: Mapping[str, Any], options: ReplayOptions, sizes: SizeLimits, log: LogLike, timeout_s: float
    ) -> None:
        self.kafka_config = dict(kafka_config)
        self.options = options
        self.sizes = sizes
        self.log = log
        self.timeout_s = timeout_s
        #: Whether the run's first record was looked at (:meth:`_check_first_record`).
        self._first_checked = False
        #: Reads the originals of pointer dead letters; opened at the first one.
        self._pointers: PointerReader | None = None

    def close(self) -> None:
        """Close the pointer reader, if the run met a pointer dead letter."""
        if self._pointers is not None:
            self._pointers.close()
            self._pointers = None

    def decide(
        self,
        messages: Sequence[Any],
        positions: Mapping[int, int],
        ends: Mapping[int, int],
        policy: ReplayPolicy,
        budget: int | None,
    ) -> tuple[list[Outgoing], BatchCounts, dict[int, int]]:
        """Decide every record of one polled batch, in order; stop early when ``budget`` selections are used.

        Names are bound to locals because attribute look-ups per record are a visible share of
        a replay's cost, and the common record never leaves this loop: without a selection, a
        record with Connect's plain header set takes :func:`fast_replayer`'s one pass over its
        headers (and a fix gets it with its DLQ record parsed only if read). Any other record
        is parsed and decided in full by :meth:`_decide_parsed`.
        """
        matches, fast = self._paths(policy)
        originals = self._prepare(messages, positions, ends, policy)
        counts = BatchCounts()
        breakdown = counts.breakdown
        outputs: list[Outgoing] = []
        written = outputs.append
        next_positions, scanned, selected = dict(positions), 0, 0
        dlq, limit = self.options.dlq_topic, -1 if budget is None else budget
        refused, oversize = self.sizes.refused, self.sizes.oversize
        for message in messages:
            error = message.error()
            if error is not None:
                consumer_error(error, self.log)
                continue
            partition, offset = message.partition(), message.offset()
            if offset < next_positions[partition]:
                continue
            if offset >= ends[partition]:
                next_positions[partition] = ends[partition]
                continue
            try:
                headers, unreadable = message.headers() or [], None
            except Exception as error:  # header names that are not UTF-8: the client cannot decode them
                headers, unreadable = [], error
            kind, ts = message.timestamp()
            stamp = ts if kind and ts >= 0 else None
            key, value = message.key(), message.value()
            done = None
            if fast is not None and unreadable is None:
                if selected == limit:  # every record is selected here: stop before a fix runs on it
                    break
                done = fast(headers, key, value, partition, offset, stamp)
            if done is None:  # the fast path is not sure of it, or not taken: parse and decide in full
                letter = parse(headers, key, value, topic=dlq, partition=partition, offset=offset, timestamp=stamp)
                if matches is None or matches(letter):
                    if selected == limit:
                        break
                    selected += 1
                    self._decide_parsed(letter, headers, unreadable, policy, originals, counts, written)
            elif (
                isinstance(done, Decision)
                or (out := done[0]) is None
                or refused
                or oversize(out[0], out[2], out[1], out[3])
            ):
                selected += 1
                self._fast_rare(done, message, headers, policy, counts, written)
            else:  # the common record: replayed as the fast path wrote it
                selected += 1
                written(out)
                breakdown[done[1]] += 1
            scanned += 1
            next_positions[partition] = offset + 1
        counts.scanned, counts.selected = scanned, selected
        return outputs, counts, next_positions

    def _paths(self, policy: ReplayPolicy) -> tuple[Callable[[DeadLetterRecord], bool] | None, FastReplayer | None]:
        """The selection's test (None: every record is selected) and, only without one, the fast path."""
        selection = self.options.selection
        matches = None if selection.everything else selection.matches
        return matches, fast_replayer(policy) if matches is None else None

    def _prepare(
        self, messages: Sequence[Any], positions: Mapping[int, int], ends: Mapping[int, int], policy: ReplayPolicy
    ) -> dict[Coordinates, Any]:
        """Before the batch's first record is decided: check the run's first record once, read pointers' originals."""
        if not self._first_checked:
            self._check_first_record(messages, positions, ends, policy)
        return self._originals(messages, positions, ends)

    def _fast_rare(
        self,
        done: Decision | tuple[Outgoing | None, BreakdownKey],
        message: Any,
        headers: Sequence[Header],
        policy: ReplayPolicy,
        counts: BatchCounts,
        written: Callable[[Outgoing], None],
    ) -> None:
        """Count and write what the fast path decided, for the records :meth:`decide` does not settle inline.

        Those are a record parked after its fix ran (a :class:`Decision`), one that writes
        nothing (dropped by its fix), one over a size limit, and any record of a batch read again
        after the broker refused some of its records for their size (``refused``). The record's
        coordinates are read from ``message`` again: this path is rare, the inline one is not.
        """
        partition, offset = message.partition(), message.offset()
        refused = self.sizes.refused
        oversize = self.sizes.oversize
        if isinstance(done, Decision):
            parked = done.record
            assert parked is not None
            out: Outgoing | None = outgoing(parked)
            assert out is not None
            if (refused and (partition, offset) in refused) or oversize(out[0], out[2], out[1], out[3]):
                self._too_large(out, parked.dead_letter, headers, policy, counts, written)
            else:
                counts.count(done, parked.dead_letter)
                written(out)
            return
        out = done[0]
        if out is not None and (
            (refused and (partition, offset) in refused) or oversize(out[0], out[2], out[1], out[3])
        ):
            kind, ts = message.timestamp()
            stamp = ts if kind and ts >= 0 else None
            letter = parse(
                headers,
                message.key(),
                message.value(),
                topic=self.options.dlq_topic,
                partition=partition,
                offset=offset,
                timestamp=stamp,
            )
            self._too_large(out, letter, headers, policy, counts, written)
            return
        if out is not None:
            written(out)
        counts.breakdown[done[1]] += 1

    def _decide_parsed(
        self,
        letter: DeadLetterRecord,
        headers: Sequence[Header],
        unreadable: Exception | None,
        policy: ReplayPolicy,
        originals: Mapping[Coordinates, Any],
        counts: BatchCounts,
        written: Callable[[Outgoing], None],
    ) -> None:
        """Decide one selected, parsed record in full: a pointer on its original, one too large is parked or dropped.

        A record whose headers cannot be read (``unreadable``) is parked without them, saying why.
        """
        if unreadable is not None:
            problem = f"the record's headers cannot be read ({describe_error(unreadable)}); parked without them"
            letter = replace(letter, malformed_headers={"headers": problem})
        if letter.is_pointer and not letter.malformed_headers:
            decision = self._resolve(letter, headers, policy, originals)
        else:
            decision = decide(letter, headers, policy)
        record = decision.record
        refused = self.sizes.refused
        if record is not None and (
            (refused and (letter.partition, letter.offset) in refused)
            or self.sizes.oversize(record.topic, record.key, record.value, record.headers)
        ):
            self._too_large(outgoing(record), letter, headers, policy, counts, written)
        else:
            counts.count(decision, letter)
            if record is not None:
                written(outgoing(record))

    def _check_first_record(
        self, messages: Sequence[Any], positions: Mapping[int, int], ends: Mapping[int, int], policy: ReplayPolicy
    ) -> None:
        """Fail before anything is written when the run's first record is header-less, selected, and no target is set.

        A header-less DLQ (Airflow's ``KafkaSharedStreamTrigger(dlq_topic=…)``, most hand-written
        producers) does not say where its records came from, and the replay never guesses:
        ``target_topic`` names it. A header-less record met later in a DLQ of another dialect
        is parked (``no_source_topic``) instead, so that one stray record does not stop a run.
        """
        for message in messages:
            partition, offset = message.partition(), message.offset()
            if message.error() is not None or not positions[partition] <= offset < ends[partition]:
                continue
            self._first_checked = True
            if policy.target_topic is not None:
                return
            try:
                headers = message.headers() or []
                if read_error_headers(headers).dialect is not None:
                    return
                letter = parse(headers, message.key(), message.value(), topic=message.topic(), offset=offset)
            except Exception:  # headers that cannot be read: the record is parked as malformed
                return
            selection = self.options.selection
            if selection.everything or selection.matches(letter):
                raise InvalidReplayOptions(
                    [
                        f"target_topic: not set, and the first dead letter read, {message.topic()}/{partition}/"
                        f"{offset}, carries no dead-letter headers, so it does not say which topic it came from "
                        "(a header-less DLQ, as Airflow's KafkaSharedStreamTrigger(dlq_topic=...) or a plain "
                        "producer writes it); set target_topic to the topic its records go back to. Nothing was "
                        "written."
                    ]
                )
            return

    def _originals(
        self, messages: Sequence[Any], positions: Mapping[int, int], ends: Mapping[int, int]
    ) -> dict[Coordinates, Any]:
        """The originals of the batch's pointer dead letters (no key, no value), read in one pass per partition."""
        wanted: list[Coordinates] = []
        for message in messages:
            if message.key() is not None or message.value() is not None or message.error() is not None:
                continue
            partition, offset = message.partition(), message.offset()
            if not positions[partition] <= offset < ends[partition]:
                continue
            try:
                letter = parse(message.headers() or [], None, None)
            except Exception:  # unreadable headers: parked as malformed in the loop
                continue
            if letter.is_pointer and not letter.malformed_headers:
                assert letter.source_topic is not None
                assert letter.source_partition is not None and letter.source_offset is not None
                wanted.append((letter.source_topic, letter.source_partition, letter.source_offset))
        if not wanted:
            return {}
        if self._pointers is None:
            self._pointers = PointerReader(self.kafka_config, timeout_s=self.timeout_s)
        return self._pointers.read(wanted)

    def _resolve(
        self,
        letter: DeadLetterRecord,
        headers: Sequence[Header],
        policy: ReplayPolicy,
        originals: Mapping[Coordinates, Any],
    ) -> Decision:
        """Decide a pointer dead letter on its original, or park it ``source_gone`` when that cannot be read."""
        assert letter.source_topic is not None
        assert letter.source_partition is not None and letter.source_offset is not None
        original = originals.get((letter.source_topic, letter.source_partition, letter.source_offset))
        if original is None or isinstance(original, Gone):
            detail = original.detail if isinstance(original, Gone) else "the original was not read"
            return park_source_gone(letter, headers, policy, detail)
        return decide(with_original(letter, original), headers, policy)

    def _too_large(
        self,
        out: Outgoing,
        letter: DeadLetterRecord,
        raw_headers: Sequence[Header],
        policy: ReplayPolicy,
        counts: BatchCounts,
        written: Callable[[Outgoing], None],
    ) -> None:
        """A record too large to write as decided: park it without its value, or, if even that is too large, drop it.

        Too large is what the pre-check finds against the producer's and the topic's limits, or
        what the client or the broker refused in an earlier attempt of this batch (then ``refused``
        says how far down it went). A drop is counted in ``dropped_too_large`` and logged with the
        record's DLQ coordinates once the batch commits: the run never stops at such a record.
        """
        sizes = self.sizes
        where = f"{letter.topic}/{letter.partition}/{letter.offset}"
        level, why = sizes.refused.get((letter.partition or 0, letter.offset or 0), (0, ""))
        if level == 0:
            why = sizes.oversize(out[0], out[2], out[1], out[3]) or "refused for its size"
        if level < NOT_WRITTEN:
            decision = park_too_large(letter, raw_headers, policy, why)
            parked = decision.record
            assert parked is not None
            still = sizes.oversize(parked.topic, None, None, parked.headers)
            if still is None:
                counts.count(decision, letter)
                written(outgoing(parked))
                return
            why = f"{why}; without its value still {still}"
        counts.dropped_too_large.append(f"{where}: too_large: {why}")
