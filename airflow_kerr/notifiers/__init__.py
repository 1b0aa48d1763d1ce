"""Airflow notifiers: the tolerance-breach message, delivered through any Airflow notifier."""
