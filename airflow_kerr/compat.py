"""Names whose home moved between Airflow 3.1 and 3.3, imported from wherever this Airflow keeps them.

The declared floor is Airflow 3.2.2 (``make matrix`` proves it), which keeps all of these in
the Task SDK (``airflow.sdk.exceptions``, ``airflow.sdk.configuration``) and ``DagBag`` in
``airflow.dag_processing``. Airflow 3.1 has them only in ``airflow.exceptions``,
``airflow.configuration`` and ``airflow.models``: the fallbacks below serve only a matrix run
on 3.1 (``--versions 3.1.8`` with the floor lowered), which falls short inside Airflow for other
reasons (docs/guides/upgrading.md, "Supported Airflow versions"). Every module of ours imports these names from
here, so one place knows the difference. mypy checks against the newest Airflow, so it sees the ``airflow.sdk`` names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow.dag_processing.dagbag import DagBag
    from airflow.sdk.configuration import conf
    from airflow.sdk.exceptions import (
        AirflowException,
        AirflowFailException,
        AirflowNotFoundException,
        AirflowSensorTimeout,
        AirflowSkipException,
        ParamValidationError,
    )
else:
    try:
        from airflow.sdk.exceptions import (
            AirflowException,
            AirflowFailException,
            AirflowNotFoundException,
            AirflowSensorTimeout,
            AirflowSkipException,
            ParamValidationError,
        )
    except ImportError:  # Airflow 3.1
        from airflow.exceptions import (
            AirflowException,
            AirflowFailException,
            AirflowNotFoundException,
            AirflowSensorTimeout,
            AirflowSkipException,
            ParamValidationError,
        )
    try:
        from airflow.sdk.configuration import conf
    except ImportError:  # Airflow 3.1
        from airflow.configuration import conf


def __getattr__(name: str) -> Any:
    """``DagBag`` on first use only (it pulls in Airflow's models): airflow.dag_processing from 3.2, models before."""
    if name == "DagBag":
        import importlib

        try:
            return importlib.import_module("airflow.dag_processing.dagbag").DagBag
        except ImportError:  # Airflow 3.1
            return importlib.import_module("airflow.models.dagbag").DagBag
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AirflowException",
    "AirflowFailException",
    "AirflowNotFoundException",
    "AirflowSensorTimeout",
    "AirflowSkipException",
    "DagBag",
    "ParamValidationError",
    "conf",
]
