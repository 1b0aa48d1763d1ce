"""A dry run's summary says what would happen, never that records were replayed; a real run's says what happened.

The XCom (``ReplaySummary.to_dict``) is read by people and by the run page that renders it,
so both shapes carry the same keys and a dry run's ``replayed`` is 0.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
from structlog.testing import capture_logs

from airflow_kerr.errors import Stage
from airflow_kerr.operators.dlq_replay import DeadLetterQueueReplayOperator
from airflow_kerr.replay.policy import Action, ParkReason
from airflow_kerr.replay.summary import BatchCounts, BreakdownKey, ReplaySummary

BREAKDOWN: Counter[BreakdownKey] = Counter(
    {
        (Action.REPLAY, "orders", Stage.TRANSFORMATION, "InvalidOrder", None): 16,
        (Action.PARK, "orders.dlq.parked", Stage.TRANSFORMATION, "InvalidOrder", ParkReason.MAX_REPLAYS): 3,
        (Action.DROP, None, Stage.VALUE_CONVERTER, "ValueError", None): 1,
    }
)
COUNT_KEYS = {"replayed", "parked", "dropped", "would_replay", "would_park", "would_drop"}


def summary_of(dry_run: bool) -> ReplaySummary:
    """A run that read 25 records and selected 20: 16 to replay, 3 to park, 1 to drop."""
    summary = ReplaySummary("run", "orders.dlq", "kerr-replay.orders.dlq", "kerr-replay.x.p0", dry_run)
    summary.add(BatchCounts(scanned=25, selected=20, breakdown=Counter(BREAKDOWN)))
    return summary


def test_a_dry_run_reports_would_counts_and_replayed_zero() -> None:
    data = summary_of(dry_run=True).to_dict()

    assert data["dry_run"] is True
    assert {key: data[key] for key in COUNT_KEYS} == {
        "replayed": 0,
        "parked": 0,
        "dropped": 0,
        "would_replay": 16,
        "would_park": 3,
        "would_drop": 1,
    }
    assert (data["scanned"], data["selected"], data["skipped"]) == (25, 20, 5)
    json.dumps(data)


def test_a_real_run_reports_done_counts_and_would_zero() -> None:
    data = summary_of(dry_run=False).to_dict()

    assert data["dry_run"] is False
    assert {key: data[key] for key in COUNT_KEYS} == {
        "replayed": 16,
        "parked": 3,
        "dropped": 1,
        "would_replay": 0,
        "would_park": 0,
        "would_drop": 0,
    }


def test_both_shapes_carry_the_same_keys_and_the_breakdown_rows() -> None:
    dry, real = summary_of(dry_run=True).to_dict(), summary_of(dry_run=False).to_dict()

    assert list(dry) == list(real)
    expected_rows = [
        {"action": "drop", "topic": "", "stage": "VALUE_CONVERTER", "exception_class": "ValueError", "reason": ""},
        {
            "action": "park",
            "topic": "orders.dlq.parked",
            "stage": "TRANSFORMATION",
            "exception_class": "InvalidOrder",
            "reason": "max_replays",
        },
        {
            "action": "replay",
            "topic": "orders",
            "stage": "TRANSFORMATION",
            "exception_class": "InvalidOrder",
            "reason": "",
        },
    ]
    for data in (dry, real):
        assert [{k: v for k, v in row.items() if k != "count"} for row in data["breakdown"]] == expected_rows
        assert [row["count"] for row in data["breakdown"]] == [1, 3, 16]
        assert sum(row["count"] for row in data["breakdown"]) == data["selected"]


def test_the_object_keeps_the_decided_counts_the_progress_line_reads() -> None:
    """The engine's progress line reads ``replayed`` etc. in a dry run too ("would replay 16, park 3, drop 1")."""
    dry = summary_of(dry_run=True)
    assert (dry.replayed, dry.parked, dry.dropped) == (16, 3, 1)
    assert (dry.would_replay, dry.would_park, dry.would_drop) == (16, 3, 1)
    assert [dry.decided(action) for action in (Action.REPLAY, Action.PARK, Action.DROP)] == [16, 3, 1]
    real = summary_of(dry_run=False)
    assert (real.would_replay, real.would_park, real.would_drop) == (0, 0, 0)


def logged_summary(dry_run: bool) -> list[str]:
    operator = DeadLetterQueueReplayOperator(task_id="replay", dlq_topic="orders.dlq")
    summary = summary_of(dry_run)
    summary.park_examples = ["orders.dlq/0/7: max_replays: replayed 3 times already"]
    with capture_logs() as logs:
        operator._log_summary(summary)
    return [str(entry["event"]) for entry in logs]


def test_a_dry_run_logs_would_replay_park_and_drop_and_never_replayed() -> None:
    lines = logged_summary(dry_run=True)

    assert lines[0] == (
        "DRY RUN orders.dlq: 25 read, 20 selected, would replay 16, would park 3, would drop 1, skipped 5 "
        "(status completed, nothing written or committed)"
    )
    assert any(line.lstrip().startswith("would replay") and "-> orders " in line for line in lines)
    assert any(line.lstrip().startswith("would park") and "reason=max_replays" in line for line in lines)
    assert any(line.lstrip().startswith("would drop") for line in lines)
    assert "  would park orders.dlq/0/7: max_replays: replayed 3 times already" in lines
    assert "  ... and 2 more would-be-parked records" in lines
    summary_lines = [line for line in lines if "orders.dlq/0/7" not in line]  # the reason quotes the header
    assert not any("replayed" in line or " parked" in line or "dropped" in line for line in summary_lines)


def test_a_real_run_logs_what_it_did() -> None:
    lines = logged_summary(dry_run=False)

    assert lines[0] == (
        "replay orders.dlq: 25 read, 20 selected, replayed 16, parked 3, dropped 1, skipped 5 "
        "(status completed, 0 transactions, 0 aborted batches)"
    )
    assert any(line.lstrip().startswith("replayed") and "-> orders " in line for line in lines)
    assert not any("would" in line for line in lines)


@pytest.mark.parametrize("dry_run", [True, False])
def test_the_summary_is_plain_json(dry_run: bool) -> None:
    data: dict[str, Any] = json.loads(json.dumps(summary_of(dry_run).to_dict()))
    assert data["status"] == "completed" and data["records_per_second"] == 0.0
