"""Pause the downstream connectors the moment a breach is seen, before any DAG run exists.

A breach seen by a watcher or a sensor used to reach Kafka Connect through Airflow: the
asset event, a DAG run, a task process that parses the DAG file, then the REST call;
seconds during which a flood of bad records kept reaching the sink. The code that sees
the breach (``ToleranceTransitionStream`` on the triggerer, ``ToleranceSensor`` in its
poke or its trigger) now asks Connect to pause first and says so in the event; the DAG's
pause task then only follows up: it asks again (pausing is idempotent) and waits until
every task reads PAUSED, retrying under Airflow's rules if this first ask failed.

The watches of one process that pause through the same Kafka Connect connection share one
client (:data:`_CONNECT_CLIENTS`): an HTTP client holds an SSL context and a connection pool,
close to a megabyte each, and a thousand watches made a thousand of them. The share is keyed
by the connection id and its resolved settings (URL, auth, TLS, timeout, headers), digested so
no secret is held in the key, so a changed connection gets a client of its own.
``KERR_SHARED_WATCH_CLIENTS=0`` gives each watch its own client again.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Sequence
from typing import Any

from airflow_kerr.errors.masking import mask_text
from airflow_kerr.hooks.kafka_connect import KafkaConnectHook
from airflow_kerr.kafka.sharing import Shares, settings_key, sharing_enabled

#: How long a rebalancing worker (409) is retried here: the breach event is not held back for longer;
#: the DAG's pause task retries with its own, longer budget.
REBALANCE_BUDGET_S = 2.0

log = logging.getLogger(__name__)

#: Per (process id, connection id and settings key): the hook, with its HTTP client made, the pausers share.
#: Keyed by process, not event loop: the client is synchronous (pauses are asked from worker threads, which
#: have no loop), and httpx's ``Client`` with its connection pool is safe to use from several threads at once;
#: the process id keeps a forked child from using its parent's sockets.
_CONNECT_CLIENTS: Shares[KafkaConnectHook] = Shares()


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

    Pausers on the same connection settings in one process share one client (see the module
    docstring); :meth:`close` releases this pauser's share, and the last one closes the client.
    """

    def __init__(self, kafka_connect_conn_id: str, connectors: Sequence[str]) -> None:
        self.kafka_connect_conn_id = kafka_connect_conn_id
        self.connectors = list(connectors)
        self._hook: KafkaConnectHook | None = None
        #: Where this pauser's share of the client is held, or None when the client is its own (sharing off).
        self._share: tuple[int, str] | None = None

    def prepare(self) -> None:
        """Read the connection and make the client now; a problem is logged and met again at :meth:`pause`."""
        if not self.connectors or self._hook is not None:
            return
        try:
            self._hook = self._new_hook()
        except Exception as error:
            log.warning("could not prepare the pause of %s: %s", self.connectors, mask_text(f"{error}"))

    def _new_hook(self) -> KafkaConnectHook:
        """The client to pause with: the connection read now, the client shared unless sharing is off."""
        hook = KafkaConnectHook(self.kafka_connect_conn_id, rebalance_retry_budget_s=REBALANCE_BUDGET_S)
        settings = hook.settings  # read now: a changed connection has another key, so a client of its own
        if not sharing_enabled():
            hook.get_conn()
            return hook
        owner = os.getpid()
        key = settings_key({"conn_id": self.kafka_connect_conn_id, **dataclasses.asdict(settings)})

        def make() -> KafkaConnectHook:
            hook.get_conn()
            return hook

        shared = _CONNECT_CLIENTS.acquire(owner, key, make)
        self._share = (owner, key)
        return shared

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
        """Drop the client: release this pauser's share of it (the last share closes it), or close its own."""
        if self._hook is None:
            return
        hook, self._hook = self._hook, None
        share, self._share = self._share, None
        last = hook if share is None else _CONNECT_CLIENTS.release(*share)
        if last is not None:
            last.close()


def _pause_one(hook: KafkaConnectHook, connector: str) -> dict[str, Any]:
    try:
        hook.pause(connector)
    except Exception as error:
        problem = mask_text(f"{type(error).__name__}: {error}")
        log.warning("could not pause %s on the breach: %s", connector, problem)
        return {"asked_at_ms": None, "error": problem}
    log.info("breach: asked Kafka Connect to pause %s", connector)
    return {"asked_at_ms": int(time.time() * 1000), "error": None}
