"""Where DLQ inspection used to live; it is :mod:`airflow_kerr.inspection` now, one job per module.

Kept as re-exports only for the benchmarks (``benchmarks/dlq_summary.py``,
``benchmarks/dlq_count_ab.py``), which time the view's calls under this name and compare
against older checkouts; new code imports from :mod:`airflow_kerr.inspection` instead.
"""

from __future__ import annotations

from airflow_kerr.inspection.backlog import GroupBacklog, unread_for_group
from airflow_kerr.inspection.consumers import SCRATCH_GROUP, TopicNotFound
from airflow_kerr.inspection.discovery import DeadLetterQueueTopic, list_dead_letter_queues
from airflow_kerr.inspection.samples import DeadLetterSample, SampledDeadLetter, sample_dead_letters
from airflow_kerr.inspection.selection import NONE_KEY, InvalidSelection, ViewSelection
from airflow_kerr.inspection.summary import DeadLetterSummaryChunk, summarize

__all__ = [
    "NONE_KEY",
    "SCRATCH_GROUP",
    "DeadLetterQueueTopic",
    "DeadLetterSample",
    "DeadLetterSummaryChunk",
    "GroupBacklog",
    "InvalidSelection",
    "SampledDeadLetter",
    "TopicNotFound",
    "ViewSelection",
    "list_dead_letter_queues",
    "sample_dead_letters",
    "summarize",
    "unread_for_group",
]
