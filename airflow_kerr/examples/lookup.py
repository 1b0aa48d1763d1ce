"""A transformation that enriches each record from an HTTP lookup service: what an outage takes down.

``lookup_customer`` asks ``$KERR_LOOKUP_URL/<customer>`` for the record's customer and adds the
answer's JSON to the value. When the service is down or stops answering, every record fails
with the same class at the same stage: the pattern ``errors.outage.*`` tells from poison.
The URL comes from the environment because executors import the function by its dotted path.
"""

from __future__ import annotations

import json
import os
import urllib.request
from dataclasses import replace

from airflow_kerr.spark.stages import PipelineRecord

LOOKUP_URL_ENV = "KERR_LOOKUP_URL"
#: Seconds a lookup waits for the service's answer.
LOOKUP_TIMEOUT_ENV = "KERR_LOOKUP_TIMEOUT_S"


def lookup_customer(record: PipelineRecord) -> PipelineRecord:
    """The record with ``value["customer_info"]`` from the lookup service; raises when the service fails."""
    base = os.environ[LOOKUP_URL_ENV].rstrip("/")
    timeout = float(os.environ.get(LOOKUP_TIMEOUT_ENV, "2"))
    with urllib.request.urlopen(f"{base}/{record.value['customer']}", timeout=timeout) as answer:
        info = json.loads(answer.read())
    return replace(record, value={**record.value, "customer_info": info})
