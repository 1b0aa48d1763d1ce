"""Hand the breach message to any Airflow notifier (``SlackWebhookNotifier``, ``SmtpNotifier``, …).

A provider's notifier takes its message as template fields (``text``, ``blocks``,
``html_content``, ``subject``) that its ``__call__`` renders from the context before it
sends. Handing it our message through ``__call__`` would run the message through Jinja:
a dead letter's exception text is data, and ``{{`` in it would be evaluated or break the
render, so the alert would say something else or not go at all. So delivery works on a
copy of the user's notifier (the one in the DAG file stays as written, for the next
breach):

1. render the copy's own template fields with a context that carries the message as
   ``kerr_breach``, so a user's template may quote ``{{ kerr_breach.text }}`` or
   ``{{ kerr_breach.summary }}`` and its connection id or recipients may be templated;
2. fill each message field the user left empty with the rendered-once message (never
   rendered again: the values are final text);
3. call the copy's ``notify(context)``, the notifier's own sending code, with its own
   hook and connection.

Every message of one episode (the alert, reminders, "resolved") carries the same
``episode_key``; it fills an empty ``dedup_key`` (PagerDuty's), and a PagerDuty notifier
left at its default ``action="trigger"`` sends the "resolved" message as ``resolve``.

A field the user wrote is kept: ``SlackWebhookNotifier`` requires ``text``, and
``text=""`` or ``text="{{ kerr_breach.summary }}"`` both give the breach's summary.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping
from typing import Any

from airflow.sdk import BaseNotifier

from airflow_kerr.errors.masking import mask_text
from airflow_kerr.notifiers.breach_message import BreachMessage

#: The context key a notifier's templates read the message under.
CONTEXT_KEY = "kerr_breach"


def message_fields(notifier: BaseNotifier, message: BreachMessage) -> dict[str, Any]:
    """What goes in each message field this notifier templates (the slack, smtp, apprise and PagerDuty names).

    With ``blocks`` beside it, ``text`` is Slack's notification fallback, so it gets the
    one-line summary; alone it is the whole message.
    """
    fields = set(notifier.template_fields)
    forms: dict[str, Any] = {
        "text": message.summary if "blocks" in fields else message.text,
        "blocks": message.blocks,
        "html_content": message.html,
        "subject": message.subject,
        "body": message.text,
        "title": message.subject,
        "summary": message.summary,
        # PagerDuty's dedup key (and any notifier's field of that name): every message of one episode shares it.
        "dedup_key": message.details.get("episode_key"),
        # SmtpNotifier's extra headers: a mail filter or a ticket system can group one episode's mails by it.
        "custom_headers": message.headers or None,
    }
    return {name: value for name, value in forms.items() if name in fields and value is not None}


def _empty(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip()) or (value == [] or value == {})


def deliver(notifier: BaseNotifier, message: BreachMessage, context: Mapping[str, Any], reporter: BaseNotifier) -> bool:
    """Send ``message`` through a copy of ``notifier``; False (and a masked line in ``reporter``'s log) when it failed.

    A failing notifier never raises: an alert that cannot be delivered must not change the
    outcome of the task that raised it (the message is in the task log already).
    """
    log = reporter.log
    name = type(notifier).__name__
    if not isinstance(notifier, BaseNotifier):
        log.error("tolerance alert: %s is not an Airflow notifier (BaseNotifier); not sent through it", name)
        return False
    context = {**context, CONTEXT_KEY: message}
    try:
        sender = copy.copy(notifier)
        for klass in type(sender).__mro__:
            # A hook the original cached was built from its unrendered connection id: build it afresh.
            for attr, value in vars(klass).items():
                if isinstance(value, functools.cached_property):
                    sender.__dict__.pop(attr, None)
        sender.render_template_fields(context)  # type: ignore[arg-type]
        for field, value in message_fields(sender, message).items():
            if _empty(getattr(sender, field, None)):
                setattr(sender, field, value)
        if message.details.get("episode_event") == "resolved" and getattr(sender, "action", None) == "trigger":
            # PagerDuty's default action: the "resolved" message closes the incident its dedup key opened.
            sender.action = "resolve"  # type: ignore[attr-defined]
        sender.notify(context)  # type: ignore[arg-type]
    except Exception as exc:  # every notifier's hook raises its own types
        log.error("tolerance alert through %s was not delivered: %s", name, mask_text(f"{type(exc).__name__}: {exc}"))
        return False
    log.info("tolerance alert sent through %s", name)
    return True
