"""Where a large DLQ's count starts: each partition's newest slice, shared out; a small DLQ from its start."""

from __future__ import annotations

from airflow_kerr.inspection.summary import _newest_slices


def test_a_small_dlq_is_counted_from_its_start() -> None:
    assert _newest_slices({0: (0, 30), 1: (5, 35)}, 30) == {}
    assert _newest_slices({0: (0, 1000)}, 0) == {}
    assert _newest_slices({0: (7, 7)}, 30) == {}


def test_the_budget_is_shared_out_over_non_empty_partitions() -> None:
    assert _newest_slices({0: (0, 100), 1: (50, 150), 2: (9, 9)}, 30) == {0: 85, 1: 135}


def test_a_partition_smaller_than_its_share_is_taken_whole() -> None:
    assert _newest_slices({0: (0, 1000), 1: (0, 4)}, 30) == {0: 985, 1: 0}


def test_every_partition_gets_at_least_one_record() -> None:
    slices = _newest_slices({p: (0, 100) for p in range(5)}, 3)
    assert slices == {p: 99 for p in range(5)}
