"""Pipeline stages, named exactly as Kafka Connect's ``Stage`` enum.

The names are written verbatim into the ``__connect.errors.stage`` DLQ header, so a
tool that reads Connect's DLQ reads ours too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum


class Stage(StrEnum):
    """A logical step of the record pipeline (Connect's ``org.apache.kafka.connect.runtime.errors.Stage``)."""

    KEY_CONVERTER = "KEY_CONVERTER"
    VALUE_CONVERTER = "VALUE_CONVERTER"
    HEADER_CONVERTER = "HEADER_CONVERTER"
    TRANSFORMATION = "TRANSFORMATION"
    TASK_PUT = "TASK_PUT"
    TASK_POLL = "TASK_POLL"
    KAFKA_PRODUCE = "KAFKA_PRODUCE"
    KAFKA_CONSUME = "KAFKA_CONSUME"


#: Stages where Connect tolerates any exception; elsewhere only retriable ones are tolerable
#: (``RetryWithToleranceOperator.TOLERABLE_EXCEPTIONS``).
TOLERATES_ANY_EXCEPTION: frozenset[Stage] = frozenset(
    {Stage.KEY_CONVERTER, Stage.VALUE_CONVERTER, Stage.HEADER_CONVERTER, Stage.TRANSFORMATION}
)


@dataclass(frozen=True, eq=False)
class PipelineStage:
    """One configured stage of a pipeline: its type, implementing class and configuration.

    The error context lists every stage of the pipeline and points at the failing one, as
    KIP-298's ``stages``/``index`` fields do. Instances compare by identity so two stages of
    the same type and class (two transformations, say) keep distinct positions.
    """

    type: Stage
    class_name: str
    config: Mapping[str, object] = field(default_factory=dict)
