"""Airflow provider for Kafka, Spark and Kafka Connect pipelines that keep running when records go bad.

This module imports neither Airflow nor Spark: ``airflow_kerr.errors`` and
``airflow_kerr.spark`` run on Spark executors, where Airflow is not installed.
"""

__version__ = "0.1.0"
