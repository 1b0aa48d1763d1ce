"""Airflow triggers: the async twins of the sensors and connector waits, for deferrable mode."""
