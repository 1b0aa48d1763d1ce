"""Reading our watchers' asset events inside a task, and alerting once per breach.

A watcher's trigger event becomes an asset event whose ``extra`` is
``{"from_trigger": True, "payload": <the trigger's payload>}``; a task's outlet
event carries its extra directly. Delivery is at least once, so a DAG run may see
an event repeated after a triggerer restart: :func:`alert_once_per_breach` keeps the
id of the last breach it alerted on in the asset's state store (Airflow 3.3), which
survives runs, so a repeat does not page anyone twice.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from airflow.sdk import Asset

from airflow_kerr.notifiers.tolerance_breach import ToleranceBreachNotifier

ALERTED_KEY = "kerr.alerted_breach_id"

log = logging.getLogger(__name__)


def event_payloads(triggering_asset_events: Mapping[Any, Iterable[Any]]) -> list[dict[str, Any]]:
    """Every triggering event's payload, oldest first (the watcher's payload, or an outlet event's extra)."""
    found: dict[tuple[str, str, str], tuple[Any, dict[str, Any]]] = {}
    for events in triggering_asset_events.values():
        for event in events:  # an event shows under its asset and under each alias it came through
            extra = dict(event.extra or {})
            payload = extra.get("payload") if extra.get("from_trigger") else extra
            key = (str(event.asset.uri), str(event.timestamp), json.dumps(extra, sort_keys=True, default=str))
            found[key] = (event.timestamp, dict(payload or {}))
    return [payload for _, payload in sorted(found.values(), key=lambda item: item[0])]


def alert_once_per_breach(
    context: Mapping[str, Any], breach_asset: Asset, notifier: Mapping[str, Any] | None = None
) -> dict[str, Any] | None:
    """Send the breach alert for the run's newest breach unless it was sent already; the details sent, or None.

    The task calling this needs ``inlets=[breach_asset]`` (for the asset state store).
    ``notifier`` holds :class:`ToleranceBreachNotifier` arguments (``notifiers``, ``webhook_conn_id``, ...).
    """
    breaches = [p for p in event_payloads(context["triggering_asset_events"]) if p.get("status") == "breach"]
    if not breaches:
        return None
    breach = breaches[-1]
    state = context["asset_state_store"][breach_asset]
    if state.get(ALERTED_KEY) == breach["breach_id"]:
        log.info("breach %s was alerted already; not again", breach["breach_id"])
        return None
    sender = ToleranceBreachNotifier(
        reading=breach, sample=breach.get("sample"), sample_error=breach.get("sample_error"), **dict(notifier or {})
    )
    sender.render_template_fields(context)  # type: ignore[arg-type]
    details = sender.details(context)  # type: ignore[arg-type]
    sender.send(details, context)
    state.set(ALERTED_KEY, breach["breach_id"])
    return details
