"""Kafka Connect REST API pieces under the hook: client settings and requests, status logic, typed errors."""
