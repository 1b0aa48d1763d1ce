"""The connection form of a hook, from the same declarations the provider info gives Airflow.

The ``kafka_connect`` and ``schema_registry`` hooks describe their forms the same way; one
piece turns those declarations into what older Airflow UIs ask a hook class for.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def ui_field_behaviour(behaviour: Mapping[str, Any]) -> dict[str, Any]:
    """``get_ui_field_behaviour``'s answer: hidden and relabelled fields and placeholders."""
    return {
        "hidden_fields": list(behaviour["hidden-fields"]),
        "relabeling": dict(behaviour["relabeling"]),
        "placeholders": dict(behaviour["placeholders"]),
    }


def form_widgets(fields: Mapping[str, Mapping[str, str]]) -> dict[str, Any]:
    """``get_connection_form_widgets``' answer: one text field a declared ``conn-field``."""
    from wtforms import StringField

    return {name: StringField(spec["label"], description=spec["description"]) for name, spec in fields.items()}
