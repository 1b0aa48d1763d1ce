"""The error-aware PySpark job: Kafka Connect's ``errors.*`` contract, record by record, at batch speed.

Run by spark-submit (``ErrorAwareSparkSubmitOperator`` builds the command) with
``--spec-file PATH`` or ``--spec-b64 TEXT`` holding a :class:`PipelineSpec`. Imports no Airflow.

One run is a bounded batch:

1. The driver plans ``[start, end)`` per source partition: start at the consumer
   group's committed offset (or earliest / latest / a timestamp), end at the high
   watermark now; large partitions are split so both cores work.
2. Each Spark task reads its range (``kerr_kafka`` source, or Spark's ``kafka``
   format when the spec says so) and runs key converter, value converter,
   transformations and the sink put for every record under
   :class:`RetryWithTolerance`. Speed comes from batches: each stage is mapped over
   a whole Arrow batch in one C-level loop; only a record that raises leaves that
   loop, to be retried, tolerated, logged and written to the DLQ on its own, after
   which the loop resumes (see :mod:`airflow_kerr.spark.stages`). Nothing is
   computed twice and clean records pay no error-handling overhead.
3. Before a task reports success it flushes its sink output, its DLQ records and
   its metrics record; a record Kafka did not accept fails the task. Its counters
   go to a Spark accumulator merged with :meth:`ErrorMetrics.merge`.
4. Only when every task succeeded does the driver publish the run's metrics and
   commit the planned end offsets for the group. tolerance ``none`` (or a breached
   limit) fails a task, the driver prints the error context of the failure and
   exits non-zero, and nothing is committed. A run killed before the commit is
   re-read by the next run: at least once, nothing lost.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import uuid
from pathlib import Path

from airflow_kerr.spark.driver import OutageDetected, run_job
from airflow_kerr.spark.failures import failure_summary
from airflow_kerr.spark.spec import InvalidPipelineSpec, PipelineSpec

LOG = logging.getLogger("airflow_kerr.spark.job")
RESULT_PREFIX = "KERR_RESULT "


def load_spec(args: argparse.Namespace) -> PipelineSpec:
    if args.spec_file:
        return PipelineSpec.from_json(Path(args.spec_file).read_text())
    return PipelineSpec.from_base64(args.spec_b64)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run an error-aware pipeline over one bounded batch.")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--spec-file", help="path of the pipeline spec JSON")
    source.add_argument("--spec-b64", help="the pipeline spec JSON, URL-safe base64 encoded")
    parser.add_argument("--run-id", default=None, help="identifies this run in metrics records")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        spec = load_spec(args)
    except (InvalidPipelineSpec, ValueError, OSError) as exc:
        print(f"kerr job: {exc}", file=sys.stderr)
        return 2
    run_id = args.run_id or uuid.uuid4().hex
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName(f"kerr-{spec.name}").getOrCreate()
    try:
        summary = run_job(spark, spec, run_id)
    except Exception as exc:
        headline, *details = failure_summary(str(exc))
        if isinstance(exc, OutageDetected):
            LOG.error("run %s of pipeline %s stopped by an %s", run_id, spec.name, exc)
            return 1
        LOG.error("run %s of pipeline %s failed, no offsets committed: %s", run_id, spec.name, headline)
        for line in details:
            LOG.error(line)
        return 1
    finally:
        spark.stop()
    print(RESULT_PREFIX + json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
