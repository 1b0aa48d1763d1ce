"""A ``jsonl`` sink's task against the real broker, without Spark: each good record's line, the bad one dead-lettered.

The processor is driven with Arrow batches made from the topic's records, as the
``kerr_kafka`` source hands them over. A clean batch's lines are written by msgspec from
its columns; a batch msgspec refuses goes record by record; no record is lost either way.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from airflow_kerr.errors import parse_dead_letter
from airflow_kerr.kafka.offsets import read_to_end
from airflow_kerr.spark import partition
from airflow_kerr.spark.kafka_source import messages_to_arrow
from airflow_kerr.spark.spec import PipelineSpec

#: The first batch: non-ASCII, a null, NaN and an infinity (json.loads reads them, msgspec does not), bad JSON.
FIRST = [
    b'{"note": "caf\\u00e9", "gone": null}',
    b'{"amount": NaN}',
    b'{"big": 1e400}',
    b"{not json",
    b'"\xe2\x98\x83"',
]
#: The second: a lone surrogate, which UTF-8 cannot hold, so the batch is put record by record.
SECOND = [b'{"id": 6}', b'"\\ud800"']


def test_every_good_record_has_its_line_and_the_bad_one_its_dlq_record(
    kafka_config: dict[str, Any], create_topic: Callable[..., str], unique_topic: str, tmp_path: Path
) -> None:
    topic = create_topic(unique_topic)
    for suffix in (".dlq", ".metrics"):
        create_topic(topic + suffix)
    producer = Producer(kafka_config)
    for index, value in enumerate(FIRST + SECOND):
        producer.produce(topic, key=f"k-{index}".encode() if index % 2 else None, value=value)
    assert producer.flush(30) == 0
    spec = PipelineSpec.from_dict(
        {
            "name": "orders_pipeline",
            "source": {"topics": [topic], "group_id": f"{topic}-group"},
            "key_converter": "string",
            "value_converter": "json",
            "sink": {"kind": "jsonl", "path": str(tmp_path)},
            "kafka": kafka_config,
            "metrics_topic": f"{topic}.metrics",
            "errors": {
                "errors.tolerance": "all",
                "errors.deadletterqueue.topic.name": f"{topic}.dlq",
                "errors.deadletterqueue.context.headers.enable": "true",
            },
        }
    )
    processor = partition.PartitionProcessor(spec, run_id="jsonl", part_name="part-0")
    batch = messages_to_arrow(read_to_end(kafka_config, topic))
    try:
        processor.process(batch.slice(0, len(FIRST)))
        processor.process(batch.slice(len(FIRST)))
        summary = processor.finish()
    finally:
        processor.close()

    good = [(offset, value) for offset, value in enumerate(FIRST + SECOND) if value != b"{not json"]
    text = (tmp_path / "part-0.jsonl").read_bytes().decode("utf-8")
    lines = [json.loads(line) for line in text.splitlines()]
    assert [(line["offset"], json.dumps(line["value"])) for line in lines] == [
        (offset, json.dumps(json.loads(value))) for offset, value in good
    ]
    assert [line["key"] for line in lines] == [f"k-{offset}" if offset % 2 else None for offset, _ in good]
    assert summary["records_out"] == len(good)
    assert '"note":"café"' in text  # msgspec's line: UTF-8, not \u escapes
    assert '{"amount":NaN}' in text and '{"big":Infinity}' in text  # never null
    dead = read_to_end(kafka_config, f"{topic}.dlq")
    assert [parse_dead_letter(m.headers() or [], m.key(), m.value()).source_offset for m in dead] == [3]
