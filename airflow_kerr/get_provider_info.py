"""Provider metadata read by Airflow's ProvidersManager through the ``apache_airflow_provider`` entry point."""

from __future__ import annotations

from typing import Any

from airflow_kerr import __version__

INTEGRATION = "Kerr"

#: How the ``kafka_connect`` connection form looks; the hook's classmethods return the same data.
KAFKA_CONNECT_UI_FIELD_BEHAVIOUR: dict[str, Any] = {
    "hidden-fields": [],
    "relabeling": {"host": "Host or URL", "schema": "Protocol", "login": "Username"},
    "placeholders": {
        "host": "connect.example.com (or https://gateway.example.com/connect)",
        "port": "8083",
        "schema": "http or https",
        "login": "basic-auth user (optional)",
        "password": "basic-auth password (optional)",
        "extra": '{"verify": "/etc/ssl/certs/connect-ca.pem", "timeout": 100, "headers": {"X-Team": "data"}}',
    },
}

#: Extra fields of the ``kafka_connect`` connection, declared as Airflow 3.2+ reads them.
KAFKA_CONNECT_CONN_FIELDS: dict[str, Any] = {
    "verify": {
        "label": "Verify TLS",
        "description": "true, false, or the path of a CA bundle on the workers and the triggerer",
        "schema": {"type": ["string", "null"], "default": "true"},
    },
    "timeout": {
        "label": "Request timeout (seconds)",
        "description": "Longer than Connect's own 90 s, so the worker's 'Request timed out' answer arrives",
        "schema": {"type": ["number", "null"], "default": 100},
    },
    "headers": {
        "label": "Extra headers",
        "description": "JSON object of headers sent with every request, e.g. a gateway's tenant header",
        "schema": {"type": ["object", "null"]},
    },
}


#: How the ``schema_registry`` connection form looks; the hook's classmethods return the same data.
SCHEMA_REGISTRY_UI_FIELD_BEHAVIOUR: dict[str, Any] = {
    "hidden-fields": [],
    "relabeling": {"host": "Registry URL", "schema": "Protocol (when the URL has none)", "login": "Username"},
    "placeholders": {
        "host": "https://registry.example.com:8081 (several: comma-separated)",
        "port": "8081 (when the URL has none)",
        "schema": "http or https",
        "login": "basic-auth user (optional)",
        "password": "basic-auth password (optional)",
        "extra": '{"ssl.ca.location": "/etc/ssl/certs/registry-ca.pem", "timeout": 10}',
    },
}

#: Extra fields of the ``schema_registry`` connection (confluent-kafka's ``SchemaRegistryClient`` names).
SCHEMA_REGISTRY_CONN_FIELDS: dict[str, Any] = {
    "ssl.ca.location": {
        "label": "CA certificate file",
        "description": "Path of the CA bundle that signed the registry's certificate, on every worker",
        "schema": {"type": ["string", "null"]},
    },
    "ssl.certificate.location": {
        "label": "Client certificate file",
        "description": "Path of the client certificate for mutual TLS, on every worker",
        "schema": {"type": ["string", "null"]},
    },
    "ssl.key.location": {
        "label": "Client key file",
        "description": "Path of the client certificate's private key, on every worker",
        "schema": {"type": ["string", "null"]},
    },
}


def get_provider_info() -> dict[str, Any]:
    """Describe the provider: package, versions and the modules Airflow should list."""
    return {
        "package-name": "airflow-provider-kerr",
        "name": "Kerr (error-tolerant Kafka, Spark and Kafka Connect pipelines)",
        "description": "Kafka Connect's errors.* contract (retry, tolerance, error context, dead-letter "
        "queue) for PySpark jobs, with sensors, connector control, DLQ replay and alerts.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": INTEGRATION,
                "external-doc-url": "https://kafka.apache.org/documentation/#connect",
                "tags": ["apache"],
            }
        ],
        "hooks": [
            {
                "integration-name": INTEGRATION,
                "python-modules": [
                    "airflow_kerr.hooks.kafka_connect",
                    "airflow_kerr.hooks.kafka",
                    "airflow_kerr.hooks.schema_registry",
                ],
            }
        ],
        "operators": [
            {
                "integration-name": INTEGRATION,
                "python-modules": [
                    "airflow_kerr.operators.connector_control",
                    "airflow_kerr.operators.dlq_replay",
                    "airflow_kerr.operators.error_aware_spark",
                ],
            }
        ],
        "sensors": [
            {
                "integration-name": INTEGRATION,
                "python-modules": [
                    "airflow_kerr.sensors.connector_state",
                    "airflow_kerr.sensors.dead_letter_queue",
                    "airflow_kerr.sensors.tolerance",
                ],
            }
        ],
        "triggers": [
            {
                "integration-name": INTEGRATION,
                "python-modules": [
                    "airflow_kerr.triggers.connector_state",
                    "airflow_kerr.triggers.dead_letter_queue",
                    "airflow_kerr.triggers.tolerance",
                ],
            }
        ],
        # common.messaging's MessageQueueTrigger(scheme="kerr+dlq" / "kerr+tolerance"); skipped without that provider.
        "queues": [
            "airflow_kerr.queues.dead_letter_queue.DeadLetterQueueMessageQueueProvider",
            "airflow_kerr.queues.tolerance.ToleranceMessageQueueProvider",
        ],
        "notifications": ["airflow_kerr.notifiers.tolerance_breach.ToleranceBreachNotifier"],
        # The DLQ view (Browse → Dead letters), Replay summary tab of DAG runs, Dead letters tab of runs and tasks.
        "plugins": [
            {"name": "kerr_dead_letters", "plugin-class": "airflow_kerr.plugins.dead_letter_view.DeadLetterViewPlugin"}
        ],
        "connection-types": [
            {
                "hook-class-name": "airflow_kerr.hooks.kafka_connect.KafkaConnectHook",
                "hook-name": "Kafka Connect",
                "connection-type": "kafka_connect",
                "ui-field-behaviour": KAFKA_CONNECT_UI_FIELD_BEHAVIOUR,
                "conn-fields": KAFKA_CONNECT_CONN_FIELDS,
            },
            {
                "hook-class-name": "airflow_kerr.hooks.schema_registry.SchemaRegistryHook",
                "hook-name": "Schema Registry",
                "connection-type": "schema_registry",
                "ui-field-behaviour": SCHEMA_REGISTRY_UI_FIELD_BEHAVIOUR,
                "conn-fields": SCHEMA_REGISTRY_CONN_FIELDS,
            },
        ],
    }
