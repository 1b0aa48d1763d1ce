"""A fanned-out replay: partitions split into even groups, the form's limits shared out, the pieces added up."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_kerr.replay.fanout import merge_summaries, replay_tasks_of, split_partitions, task_arguments
from airflow_kerr.replay.options import InvalidReplayOptions, ReplayOptions


@given(st.sets(st.integers(0, 500), min_size=1, max_size=120), st.integers(1, 64))
def test_groups_cover_every_partition_once_contiguously_and_evenly(partitions: set[int], tasks: int) -> None:
    groups = split_partitions(sorted(partitions), tasks)

    assert [p for group in groups for p in group] == sorted(partitions), "each partition once, in order"
    assert len(groups) == min(tasks, len(partitions)) and all(groups), "never an empty group"
    assert max(map(len, groups)) - min(map(len, groups)) <= 1


def test_eight_partitions_over_four_tasks_are_pairs_and_the_limits_are_shared_out() -> None:
    arguments = task_arguments(list(range(8)), 4, max_records_per_second=500, max_records=10)

    assert [a["partitions"] for a in arguments] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert [a["max_records_per_second"] for a in arguments] == [125, 125, 125, 125]
    assert [a["max_records"] for a in arguments] == [3, 3, 2, 2] and sum(a["max_records"] for a in arguments) == 10


def test_one_task_keeps_the_form_as_it_is_and_fewer_records_than_tasks_means_fewer_tasks() -> None:
    assert task_arguments([], 1, max_records_per_second=500) == [
        {"partitions": None, "max_records_per_second": 500, "max_records": None}
    ]
    fewer = task_arguments(list(range(8)), 4, max_records=2)
    assert [a["partitions"] for a in fewer] == [[0, 1, 2, 3], [4, 5, 6, 7]] and [a["max_records"] for a in fewer] == [
        1,
        1,
    ]


@pytest.mark.parametrize("value", [0, 65, -1, "four", 2.5, True, None, [4]])
def test_a_bad_number_of_tasks_names_the_key_the_value_and_the_range(value: object) -> None:
    with pytest.raises(InvalidReplayOptions, match=r"replay_tasks=.*: expected an integer between 1 and 64"):
        replay_tasks_of(value, 64)


def test_the_number_of_tasks_may_be_rendered_text() -> None:
    assert replay_tasks_of(" 4 ", 64) == 4 and replay_tasks_of(64, 64) == 64


@pytest.mark.parametrize(
    ("value", "expected"),
    [("0-3,7", (0, 1, 2, 3, 7)), ([5, 1, 1], (1, 5)), (3, (3,)), ("", None), ([], None), (None, None)],
)
def test_partitions_are_a_list_or_ranges_text(value: object, expected: tuple[int, ...] | None) -> None:
    assert ReplayOptions.build(dlq_topic="orders.dlq", partitions=value).partitions == expected


@pytest.mark.parametrize("value", ["3-1", "3-", "-2", "x", [-1], [True], {"a": 1}, "0-200000"])
def test_bad_partitions_name_the_key_and_the_value(value: object) -> None:
    with pytest.raises(InvalidReplayOptions, match=r"partitions="):
        ReplayOptions.build(dlq_topic="orders.dlq", partitions=value)


def _piece(partitions: dict[str, int], replayed: int, parked: int, status: str = "completed") -> dict[str, object]:
    return {
        "dlq_topic": "orders.dlq",
        "dry_run": False,
        "status": status,
        "transactional_id": f"kerr-replay.d.t.{min(partitions)}.orders.dlq",
        "scanned": replayed + parked,
        "selected": replayed + parked,
        "replayed": replayed,
        "parked": parked,
        "would_replay": 0,
        "seconds": 2.0 if status == "completed" else 4.0,
        "start_offsets": dict.fromkeys(partitions, 0),
        "end_offsets": partitions,
        "committed_offsets": partitions,
        "notes": [f"note of {min(partitions)}", "parking topic 'orders.dlq.parked' does not exist"],
        "park_examples": [f"orders.dlq/{min(partitions)}/0: target_not_allowed"],
        "breakdown": [
            {"action": "replay", "topic": "orders", "stage": "TRANSFORMATION", "exception_class": "E", "reason": "",
             "count": replayed},
            {"action": "park", "topic": "orders.dlq.parked", "stage": "TRANSFORMATION", "exception_class": "E",
             "reason": "target_not_allowed", "count": parked},
        ],
    }  # fmt: skip


def test_the_pieces_add_up_to_the_whole_replay() -> None:
    whole = merge_summaries([_piece({"0": 10, "1": 12}, 20, 2), _piece({"2": 5, "3": 9}, 10, 4, status="stopped")])

    assert (whole["replayed"], whole["parked"], whole["scanned"], whole["tasks"]) == (30, 6, 36, 2)
    assert whole["committed_offsets"] == {"0": 10, "1": 12, "2": 5, "3": 9}
    assert whole["status"] == "stopped", "the least finished piece says how the whole replay ended"
    assert whole["seconds"] == 4.0 and whole["records_per_second"] == 9.0, "side by side: the longest piece's time"
    assert [(row["action"], row["count"]) for row in whole["breakdown"]] == [("park", 6), ("replay", 30)]
    assert whole["notes"] == ["note of 0", "parking topic 'orders.dlq.parked' does not exist", "note of 2"]
    assert len(whole["park_examples"]) == 2
