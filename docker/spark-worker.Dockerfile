# syntax=docker/dockerfile:1
# The Spark worker: apache/spark, the release of the master and of the provider's pyspark pin,
# with a Python 3.11 for the executors. Build it from this folder (docker compose does):
#   docker build -f docker/spark-worker.Dockerfile -t airflow-provider-kerr-spark-worker:0.1.0 docker
#
# PySpark runs a job's Python on the executors with the driver's minor version, and the driver
# runs in the Airflow image (Python 3.11); apache/spark's own Python is Ubuntu 22.04's 3.10.
# The executors run the interpreter the driver names in PYSPARK_PYTHON ("python" in the Airflow
# image), looked up on the worker's PATH, so the 3.11 environment comes first on PATH here.
# The provider's code reaches the executors with each job (--py-files); they need only the
# libraries that code imports, at the versions the provider's spark extra allows.
FROM apache/spark:4.2.0-scala2.13-java17-python3-ubuntu

USER root
RUN set -ex; \
    apt-get update; \
    apt-get install -y --no-install-recommends python3.11 python3.11-venv; \
    rm -rf /var/lib/apt/lists/*; \
    python3.11 -m venv /opt/kerr-python; \
    /opt/kerr-python/bin/pip install --no-cache-dir "confluent-kafka==2.16.1" "pyarrow==26.0.1" "pandas==2.3.3"; \
    /opt/kerr-python/bin/python -c "import sys, confluent_kafka, pyarrow, pandas; assert sys.version_info[:2] == (3, 11)"

ENV PATH="/opt/kerr-python/bin:${PATH}" \
    PYSPARK_PYTHON=python

USER spark
