"""Airflow notifiers: tolerance-breach alerts (webhook, email, log)."""
