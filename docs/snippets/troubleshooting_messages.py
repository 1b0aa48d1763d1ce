"""The error messages quoted in docs/troubleshooting.md, produced by the code that raises them.

tests/unit/test_docs.py calls each function and checks that its message appears word for word
on the troubleshooting page, so the page cannot drift from what a user sees.
"""

from __future__ import annotations

from collections.abc import Callable

from airflow_kerr.errors.config import ErrorHandlingConfig
from airflow_kerr.operators.connector_control import PauseConnectorOperator
from airflow_kerr.operators.error_aware_spark import ErrorAwareSparkSubmitOperator
from airflow_kerr.replay.options import ReplayOptions


def bad_errors_config() -> str:
    """A value outside its domain and a misspelt key, in one ``errors`` dict."""
    try:
        ErrorHandlingConfig.from_properties({"errors.tolerance": "some", "errors.retry.timout": 30000})
    except ValueError as error:
        return str(error)
    raise AssertionError("the configuration was accepted")


def bad_pipeline() -> str:
    """A pipeline without a source and with an unknown sink kind."""
    try:
        ErrorAwareSparkSubmitOperator(
            task_id="orders_pipeline",
            pipeline={"name": "orders_pipeline", "sink": {"kind": "kafak", "topic": "orders.clean"}},
        )
    except ValueError as error:
        return str(error)
    raise AssertionError("the pipeline was accepted")


def bad_replay_settings() -> str:
    """A regular expression that does not compile and an inverted offset range."""
    try:
        ReplayOptions.build(dlq_topic="orders.dlq", exception_class_regex="(Timeout", start_offset=10, end_offset=5)
    except ValueError as error:
        return str(error)
    raise AssertionError("the replay settings were accepted")


def strimzi_refusal() -> str:
    """Pausing a connector that Strimzi manages through the REST API."""
    operator = PauseConnectorOperator(task_id="pause", connector="orders-sink", strimzi_managed=True)
    try:
        operator._refuse_if_strimzi()
    except Exception as error:
        return str(error)
    raise AssertionError("the pause was not refused")


MESSAGES: dict[str, Callable[[], str]] = {
    "bad_errors_config": bad_errors_config,
    "bad_pipeline": bad_pipeline,
    "bad_replay_settings": bad_replay_settings,
    "strimzi_refusal": strimzi_refusal,
}

if __name__ == "__main__":
    for name, produce in MESSAGES.items():
        print(f"--- {name}\n{produce()}\n")
