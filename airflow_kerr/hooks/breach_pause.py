"""Pause the downstream connectors the moment a breach is seen, before any DAG run exists.

A breach seen by a watcher or a sensor used to reach Kafka Connect through Airflow: the
asset event, a DAG run, a task process that parses the DAG file, then the REST call;
seconds during which a flood of bad records kept reaching the sink. The code that sees
the breach (``ToleranceTransitionStream`` on the triggerer, ``ToleranceSensor`` in its
poke or its trigger) now asks Connect to pause first and says so in the event; the DAG's
pause task then only follows up: it asks again (pausing is idempotent) and waits until
every task reads PAUSED, retrying under Airflow's rules if this first ask failed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from airflow_kerr.errors.masking import mask_text
from airflow_kerr.hooks.kafka_connect import KafkaConnectHook

#: How long a rebalancing worker (409) is retried here: the breach event is not held back for longer;
#: the DAG's pause task retries with its own, longer budget.
REBALANCE_BUDGET_S = 2.0

log = logging.getLogger(__name__)


def connectors_to_pause(pause_on_breach: str | Sequence[str]) -> tuple[list[str], list[str]]:
    """The connector names of a ``pause_on_breach`` argument (one name or several), and what is wrong with it."""
    names = [pause_on_breach] if isinstance(pause_on_breach, str) else list(pause_on_breach)
    if any(not isinstance(name, str) or not name.strip() for name in names):
        return names, [f"pause_on_breach={pause_on_breach!r}: expected Kafka Connect connector names"]
    return names, []


def pause_on_breach(kafka_connect_conn_id: str, connectors: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Ask Connect to pause each of ``connectors``; never raises: ``{name: {"asked_at_ms", "error"}}``.

    ``asked_at_ms`` is when Connect accepted the request (202), ``error`` why it did not
    (masked: a Connect URL may carry credentials), None when it did. A one-off: the
    connection is read and a client made for this call (:class:`BreachPauser` keeps them).
    """
    pauser = BreachPauser(kafka_connect_conn_id, connectors)
    try:
        return pauser.pause()
    finally:
        pauser.close()


class BreachPauser:
    """:func:`pause_on_breach` for a watch that lives on: the connection read and the client made beforehand.

    Reading the connection (on the triggerer, a round trip to its supervisor) and making the
    HTTP client took a tenth of a second or more of the watcher's path from the breach to the
    pause. :meth:`prepare` does both when the watch opens, so a breach costs only the PUT;
    the client's HTTP connection is kept between requests. After a failed ask the client is
    dropped and the next breach starts afresh (the connection may have been fixed).
    """

    def __init__(self, kafka_connect_conn_id: str, connectors: Sequence[str]) -> None:
        self.kafka_connect_conn_id = kafka_connect_conn_id
        self.connectors = list(connectors)
        self._hook: KafkaConnectHook | None = None

    def prepare(self) -> None:
        """Read the connection and make the client now; a problem is logged and met again at :meth:`pause`."""
        if not self.connectors or self._hook is not None:
            return
        try:
            self._hook = self._new_hook()
        except Exception as error:
            log.warning("could not prepare the pause of %s: %s", self.connectors, mask_text(f"{error}"))

    def _new_hook(self) -> KafkaConnectHook:
        hook = KafkaConnectHook(self.kafka_connect_conn_id, rebalance_retry_budget_s=REBALANCE_BUDGET_S)
        hook.get_conn()
        return hook

    def pause(self) -> dict[str, dict[str, Any]]:
        """Ask Connect to pause every connector; never raises (see :func:`pause_on_breach`)."""
        done: dict[str, dict[str, Any]] = {}
        if not self.connectors:
            return done
        try:
            if self._hook is None:
                self._hook = self._new_hook()
            for name in self.connectors:
                done[name] = _pause_one(self._hook, name)
        except Exception as error:  # the connection itself: missing, or not a kafka_connect one
            problem = mask_text(f"{type(error).__name__}: {error}")
            log.warning("could not pause %s on the breach: %s", self.connectors, problem)
            done.update({name: {"asked_at_ms": None, "error": problem} for name in self.connectors if name not in done})
        if any(result["error"] for result in done.values()):
            self.close()
        return done

    def close(self) -> None:
        if self._hook is not None:
            hook, self._hook = self._hook, None
            hook.close()


def _pause_one(hook: KafkaConnectHook, connector: str) -> dict[str, Any]:
    try:
        hook.pause(connector)
    except Exception as error:
        problem = mask_text(f"{type(error).__name__}: {error}")
        log.warning("could not pause %s on the breach: %s", connector, problem)
        return {"asked_at_ms": None, "error": problem}
    log.info("breach: asked Kafka Connect to pause %s", connector)
    return {"asked_at_ms": int(time.time() * 1000), "error": None}
