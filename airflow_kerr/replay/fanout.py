"""A replay fanned out over several tasks: the DLQ's partitions split into groups, and the pieces added up again.

Each group is replayed by its own task (in Airflow, one mapped task instance), with its own
transactional producer (the group and the task's map index are in its ``transactional.id``)
and the replay group's committed offsets of its own partitions only. Groups never share a
partition, so the tasks never commit the same offset and their transactions never fence each
other; a retried task has the same group and id, so it fences its killed try and resumes from
the offsets that try committed. Exactly once holds over the whole replay because it holds per
partition.

The groups are contiguous runs of partitions (``0-1``, ``2-3``...), the same for the same
partitions and number of tasks, so a re-run with the same settings uses the same
``transactional.id`` values and fences whatever an earlier run left open. No Airflow imports.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_kerr.errors.dead_letter import shown
from airflow_kerr.replay.options import InvalidReplayOptions
from airflow_kerr.replay.summary import MAX_PARK_EXAMPLES

#: Statuses of a piece, from the one that best describes the whole replay when pieces differ.
_STATUS_ORDER = ("failed", "stopped", "idle", "max_records", "completed")
#: The summary's counts, added up over the pieces.
SUMMED = (
    "total",
    "scanned",
    "selected",
    "replayed",
    "parked",
    "dropped",
    "would_replay",
    "would_park",
    "would_drop",
    "dropped_too_large",
    "expired",
    "skipped",
    "transactions",
    "aborted_batches",
    "commit_retries",
)
_OFFSETS = ("start_offsets", "end_offsets", "committed_offsets")


def replay_tasks_of(value: Any, maximum: int) -> int:
    """The number of replay tasks from the form or a DAG (an int, or its decimal text), 1 to ``maximum``."""
    text = value.strip() if isinstance(value, str) else value
    number = int(text) if isinstance(text, str) and text.isascii() and text.isdigit() else text
    if isinstance(number, bool) or not isinstance(number, int) or not 1 <= number <= maximum:
        raise InvalidReplayOptions([f"replay_tasks={shown(value)}: expected an integer between 1 and {maximum}"])
    return number


def split_partitions(partitions: Sequence[int], tasks: int) -> list[list[int]]:
    """``partitions`` in at most ``tasks`` contiguous groups whose sizes differ by at most one.

    Never an empty group: with more tasks than partitions, each partition is its own group.
    """
    ordered = sorted(set(partitions))
    count = max(1, min(tasks, len(ordered)))
    size, extra = divmod(len(ordered), count)
    groups: list[list[int]] = []
    start = 0
    for index in range(count):
        end = start + size + (1 if index < extra else 0)
        groups.append(ordered[start:end])
        start = end
    return [group for group in groups if group]


def task_arguments(
    partitions: Sequence[int],
    tasks: int,
    *,
    max_records_per_second: float | None = None,
    max_records: int | None = None,
) -> list[dict[str, Any]]:
    """The arguments each mapped replay task gets: its ``partitions``, and its share of the rate and of ``max_records``.

    The form's rate limit and ``max_records`` are the whole replay's, so each of ``n`` tasks
    gets ``rate / n`` and about ``max_records / n`` (the remainder to the first ones). Fewer
    records than tasks: as many tasks as records, each with one. With one task the
    arguments are exactly the form's: ``partitions`` as given (None: every partition).
    """
    groups = split_partitions(partitions, tasks) if tasks > 1 else [list(partitions)]
    if max_records is not None and len(groups) > max_records:
        groups = split_partitions(partitions, max_records)
    n = len(groups)
    shares: list[int | None] = [None] * n
    if max_records is not None:
        shares = [max_records // n + (1 if i < max_records % n else 0) for i in range(n)]
    rate = None if max_records_per_second is None else max_records_per_second / n
    return [
        {
            "partitions": group if tasks > 1 else (list(partitions) or None),
            "max_records_per_second": rate,
            "max_records": share,
        }
        for group, share in zip(groups, shares, strict=True)
    ]


def merge_summaries(pieces: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One summary (the operator's XCom shape) for the whole replay, from the summaries of its tasks.

    Counts are added, offsets are joined (each task holds its own partitions), breakdown rows
    with the same action, topic, stage, exception and reason are added, notes (each once) and
    parked examples are listed in task order, and the status is the least finished piece's
    (``stopped`` over ``completed``). ``seconds`` is the longest piece's (they run side by
    side), so ``records_per_second`` is the whole replay's rate.
    """
    if not pieces:
        raise ValueError("merge_summaries needs at least one summary")
    first = pieces[0]
    merged: dict[str, Any] = {key: value for key, value in first.items() if key not in ("breakdown",)}
    for key in SUMMED:
        if any(key in piece for piece in pieces):
            merged[key] = sum(int(piece.get(key) or 0) for piece in pieces)
    for key in _OFFSETS:
        joined: dict[str, int] = {}
        for piece in pieces:
            joined.update({str(p): o for p, o in (piece.get(key) or {}).items()})
        merged[key] = dict(sorted(joined.items(), key=lambda item: int(item[0])))
    statuses = [str(piece.get("status", "completed")) for piece in pieces]
    merged["status"] = min(statuses, key=lambda s: _STATUS_ORDER.index(s) if s in _STATUS_ORDER else -1)
    merged["dry_run"] = any(bool(piece.get("dry_run")) for piece in pieces)
    merged["transactional_id"] = ", ".join(str(piece.get("transactional_id", "")) for piece in pieces)
    # A note every task made (the parking topic a dry run would create, say) is said once.
    merged["notes"] = list(dict.fromkeys(note for piece in pieces for note in piece.get("notes") or []))
    merged["park_examples"] = [ex for piece in pieces for ex in piece.get("park_examples") or []][:MAX_PARK_EXAMPLES]
    merged["seconds"] = max(float(piece.get("seconds") or 0.0) for piece in pieces)
    merged["records_per_second"] = round(merged["scanned"] / merged["seconds"], 1) if merged["seconds"] > 0 else 0.0
    rows: Counter[tuple[str, ...]] = Counter()
    for piece in pieces:
        for row in piece.get("breakdown") or []:
            row_key = tuple(
                str(row.get(name) or "") for name in ("action", "topic", "stage", "exception_class", "reason")
            )
            rows[row_key] += int(row.get("count") or 0)
    merged["breakdown"] = [
        {"action": a, "topic": t, "stage": s, "exception_class": e, "reason": r, "count": n}
        for (a, t, s, e, r), n in sorted(rows.items(), key=lambda item: (item[0][0], -item[1], item[0]))
    ]
    merged["tasks"] = len(pieces)
    return merged
