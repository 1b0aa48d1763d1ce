"""load_source: the planned offset ranges are split once, with the spec's split settings."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_kerr.spark.driver import load_source
from airflow_kerr.spark.kafka_source import KafkaSourceReader, OffsetRange, register
from airflow_kerr.spark.spec import PipelineSpec


class FakeFrameReader:
    """Stands in for ``spark.read``: records the format and options a ``load()`` would get.

    A fake because Spark's own ``kafka`` format needs the spark-sql-kafka jar, which this
    machine's registries do not offer, and because the pieces the reader is handed are not
    visible through real Spark; how many partitions real Spark plans is checked with the
    ``spark`` fixture.
    """

    def __init__(self) -> None:
        self.source_format = ""
        self.options_given: dict[str, str] = {}

    def format(self, name: str) -> FakeFrameReader:
        self.source_format = name
        return self

    def option(self, key: str, value: str) -> FakeFrameReader:
        self.options_given[key] = value
        return self

    def options(self, **options: str) -> FakeFrameReader:
        self.options_given.update(options)
        return self

    def load(self) -> FakeFrameReader:
        return self

    def selectExpr(self, *columns: str) -> FakeFrameReader:
        return self


class FakeSpark:
    """Just enough of a SparkSession for load_source: a parallelism and a reader."""

    def __init__(self, parallelism: int) -> None:
        self.sparkContext = type("Context", (), {"defaultParallelism": parallelism})()
        self.read = FakeFrameReader()


def make_spec(source_format: str, max_records_per_partition: int) -> PipelineSpec:
    return PipelineSpec.from_dict(
        {
            "name": "orders",
            "source": {
                "topics": ["orders"],
                "group_id": "g",
                "format": source_format,
                "max_records_per_partition": max_records_per_partition,
            },
            "sink": {"kind": "jsonl", "path": "/tmp/out"},
            "kafka": {"bootstrap.servers": "broker:9092"},
        }
    )


def kerr_kafka_partitions(spark: Any, spec: PipelineSpec, ranges: list[OffsetRange]) -> int:
    """How many input partitions real Spark plans for the DataFrame load_source returns (no record is read)."""
    register(spark)
    return int(load_source(spark, spec, ranges).rdd.getNumPartitions())


@pytest.mark.spark
def test_kerr_kafka_honours_a_max_records_per_partition_above_the_reader_default(spark: Any) -> None:
    spec = make_spec("kerr_kafka", max_records_per_partition=5_000_000)

    assert kerr_kafka_partitions(spark, spec, [OffsetRange("orders", 0, 0, 5_000_000)]) == 2


@pytest.mark.spark
def test_kerr_kafka_splits_by_the_spec_and_the_cluster_parallelism(spark: Any) -> None:
    spec = make_spec("kerr_kafka", max_records_per_partition=100)
    ranges = [OffsetRange("orders", 0, 0, 250), OffsetRange("orders", 1, 10, 10), OffsetRange("orders", 2, 5, 55)]

    assert kerr_kafka_partitions(spark, spec, ranges) == 4


def test_the_reader_splits_what_load_source_passes_once() -> None:
    """The pieces themselves, from the options load_source hands the reader."""
    fake = FakeSpark(parallelism=4)
    spec = make_spec("kerr_kafka", max_records_per_partition=100)
    ranges = [OffsetRange("orders", 0, 0, 250), OffsetRange("orders", 1, 10, 10), OffsetRange("orders", 2, 5, 55)]

    load_source(fake, spec, ranges)

    assert fake.read.source_format == "kerr_kafka"
    assert list(KafkaSourceReader(fake.read.options_given).partitions()) == [
        OffsetRange("orders", 0, 0, 63),
        OffsetRange("orders", 0, 63, 126),
        OffsetRange("orders", 0, 126, 189),
        OffsetRange("orders", 0, 189, 250),
        OffsetRange("orders", 2, 5, 55),
    ]


def test_kafka_format_asks_for_as_many_partitions_as_the_split_gives() -> None:
    spark = FakeSpark(parallelism=2)
    spec = make_spec("kafka", max_records_per_partition=1_000_000)

    load_source(spark, spec, [OffsetRange("orders", 0, 0, 1_000_000)])

    given: dict[str, Any] = spark.read.options_given
    assert spark.read.source_format == "kafka"
    assert given["minPartitions"] == "2"
    assert given["startingOffsets"] == '{"orders": {"0": 0}}'
    assert given["endingOffsets"] == '{"orders": {"0": 1000000}}'
    assert given["kafka.bootstrap.servers"] == "broker:9092"
