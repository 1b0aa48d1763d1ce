"""Airflow TaskGroup factories built from the operators and sensors: the tolerance guard."""
