"""Where a webhook's URL lives in an Airflow connection, so it need not be written in a DAG file.

A Slack incoming-webhook URL is a credential (its path is the secret), so the breach
notifier reads it from a connection when the task runs: an ``http`` connection or the
slack provider's ``slack_webhook`` one, read by the slack provider's own rule
(``SlackWebhookHook``) so one connection serves both ``SlackWebhookNotifier`` and our
plain webhook:

* a password holding ``://`` is the whole URL;
* otherwise the host (a URL, or a host name joined with ``schema`` (default ``https``)
  and ``port``) followed by the password as the path's last part (Slack's
  ``T…/B…/<secret>`` token), or the host alone when there is no password;
* a ``slack_webhook`` connection with no host means ``https://hooks.slack.com/services``.
"""

from __future__ import annotations

from typing import Any

#: The slack provider's connection type (its hook's ``conn_type``, and the name its docs use).
SLACK_CONN_TYPES = frozenset({"slackwebhook", "slack_webhook"})
#: Where a slack_webhook connection without a host points, as ``SlackWebhookHook`` reads it.
SLACK_HOST = "https://hooks.slack.com/services"


def webhook_url_of(conn: Any, conn_id: str) -> str:
    """The webhook URL a connection holds; ``ValueError`` naming the connection when it holds none."""
    password = str(conn.password or "").strip()
    if "://" in password:
        return password
    host = str(conn.host or "").strip()
    if not host and password and getattr(conn, "conn_type", None) in SLACK_CONN_TYPES:
        host = SLACK_HOST
    if not host:
        raise ValueError(
            f"webhook_conn_id={conn_id!r}: the connection holds no webhook URL; accepted: the whole URL as its "
            "password, or a host (a URL such as https://hooks.slack.com/services, or a host name with schema and "
            "port) with the token as its password"
        )
    if "://" not in host:
        port = f":{conn.port}" if conn.port else ""
        host = f"{conn.schema or 'https'}://{host}{port}"
    return (host.rstrip("/") + "/" + password.lstrip("/")).rstrip("/") if password else host
