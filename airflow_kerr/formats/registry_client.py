"""A Schema Registry client over the REST API, with a bounded cache of schemas by id (one client per process).

Why not confluent-kafka's ``SchemaRegistryClient``: its module imports ``authlib`` and
``httpx``, and a Spark executor needs only four requests. The settings are the same keys
(``url``, ``basic.auth.user.info``, ``ssl.*.location``, ``timeout``, ``cache.capacity``), the
answers the same JSON.
"""

from __future__ import annotations

import base64
import http.client
import json
import ssl
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any, Final

from airflow_kerr.errors import mask_text
from airflow_kerr.formats.exceptions import RegistryRequestError, RegistryUnavailable
from airflow_kerr.formats.registry_settings import RegistrySettings, split_user_info
from airflow_kerr.formats.schema_cache import SchemaCache

#: Answers worth retrying: Confluent's ``toKafkaException`` makes 408, 500, 503 and 504 a TimeoutException,
#: 502 a DisconnectException and 429 a quota exception, all retriable in Kafka's terms.
RETRIABLE_STATUSES: Final = frozenset({408, 429, 500, 502, 503, 504})
CONTENT_TYPE: Final = "application/vnd.schemaregistry.v1+json"

_CLIENTS: dict[tuple[tuple[str, str], ...], RegistryClient] = {}


def registry_client_for(settings: RegistrySettings) -> RegistryClient:
    """The process's client for these settings: a Spark worker reuses it, and its cache, for every task."""
    key = settings.cache_key()
    client = _CLIENTS.get(key)
    if client is None:
        client = _CLIENTS[key] = RegistryClient(settings)
    return client


class RegistryClient:
    """The requests the converters and the sink make; schemas by id are cached (``cache.capacity``).

    ``requests`` counts the HTTP requests sent, so a test can see a schema fetched once.
    """

    def __init__(self, settings: RegistrySettings) -> None:
        self.settings = settings
        self.requests = 0
        self.schemas: SchemaCache[dict[str, Any]] = SchemaCache(settings.cache_capacity)
        #: Compiled codecs by (format, schema id), shared by every converter and sink of the process.
        self.codecs: SchemaCache[Any] = SchemaCache(settings.cache_capacity)
        self._headers = {"Accept": CONTENT_TYPE, "Content-Type": CONTENT_TYPE}
        #: Every URL the settings name (comma-separated), without credentials; a request that finds one out of reach
        #: tries the next.
        self.base_urls = [self._base_url(url.strip().rstrip("/")) for url in settings.url.split(",") if url.strip()]
        self._context = (
            self._ssl_context(settings.client) if any(u.startswith("https://") for u in self.base_urls) else None
        )
        #: Idle kept-alive connections by base URL, as Confluent's Java client and confluent-kafka's keep theirs:
        #: a new TCP (and TLS) connection per request cost more than the request itself.
        self._idle: dict[str, list[http.client.HTTPConnection]] = {}
        #: Each URL's parts, and whether the environment routes it through a proxy: read once, as urllib's
        #: opener reads the proxies once, not on every request.
        self._splits = {url: urllib.parse.urlsplit(url) for url in self.base_urls}
        self._proxied = {url: _proxied(split) for url, split in self._splits.items()}
        self._idle_lock = threading.Lock()

    def _base_url(self, url: str) -> str:
        """The URL without credentials; credentials become the Authorization header, as in Confluent's client.

        ``user:password@`` in a URL is basic auth (confluent-kafka's ``SchemaRegistryClient``
        reads it from the URL the same way), never part of the host: the request goes to the
        host, and every message names the URL without it. ``basic.auth.user.info`` is used
        instead when ``basic.auth.credentials.source`` is ``USER_INFO`` (the Java client's key,
        whose ``URL`` picks the URL's); with neither key, having both is refused by
        :meth:`RegistrySettings.problems`, as Confluent's client refuses it.
        """
        client = self.settings.client
        clean, from_url = split_user_info(url)
        source = str(client.get("basic.auth.credentials.source", "")).upper()
        user_info = client.get("basic.auth.user.info") if source != "URL" else None
        if user_info is None and source != "USER_INFO":
            user_info = from_url
        if user_info is not None:
            self._headers["Authorization"] = "Basic " + base64.b64encode(str(user_info).encode()).decode()
        return clean

    @staticmethod
    def _ssl_context(client: Mapping[str, Any]) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=client.get("ssl.ca.location"))
        if "ssl.certificate.location" in client:
            context.load_cert_chain(
                client["ssl.certificate.location"], client.get("ssl.key.location"), client.get("ssl.key.password")
            )
        return context

    def schema_by_id(self, schema_id: int, fmt: str | None = None) -> dict[str, Any]:
        """``GET /schemas/ids/{id}`` (``schema``, ``schemaType``, ``references``), once per id and format."""
        query = f"?format={fmt}" if fmt else ""
        return self.schemas.get_or_load(
            (schema_id, fmt), lambda: self.request("GET", f"/schemas/ids/{schema_id}{query}")
        )

    def version(self, subject: str, version: int | str = "latest", fmt: str | None = None) -> dict[str, Any]:
        """``GET /subjects/{subject}/versions/{version}``: ``id``, ``version``, ``schema``, ``schemaType``."""
        query = f"?format={fmt}" if fmt else ""
        return self.request("GET", f"/subjects/{_quote(subject)}/versions/{version}{query}")

    def register(self, subject: str, schema: str, schema_type: str, references: list[Any] | None = None) -> int:
        """``POST /subjects/{subject}/versions``: the schema's id (an existing one when the schema is known)."""
        body: dict[str, Any] = {"schema": schema}
        if schema_type != "AVRO":
            body["schemaType"] = schema_type
        if references:
            body["references"] = references
        answer = self.request("POST", f"/subjects/{_quote(subject)}/versions", body)
        return int(answer["id"])

    def lookup(self, subject: str, schema: str, schema_type: str) -> dict[str, Any]:
        """``POST /subjects/{subject}``: the version under which the subject holds this schema."""
        body: dict[str, Any] = {"schema": schema}
        if schema_type != "AVRO":
            body["schemaType"] = schema_type
        return self.request("POST", f"/subjects/{_quote(subject)}", body)

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """One request, to each URL in turn while they are out of reach; the last outage is raised.

        An error answer raises :class:`RegistryRequestError`, an outage :class:`RegistryUnavailable`.
        """
        for base_url in self.base_urls[:-1]:
            try:
                return self._request(base_url, method, path, body)
            except RegistryUnavailable:
                continue
        return self._request(self.base_urls[-1], method, path, body)

    def _request(self, base_url: str, method: str, path: str, body: Any) -> Any:
        self.requests += 1
        data = None if body is None else json.dumps(body).encode()
        where = f"{method} {mask_text(base_url)}{path}"
        if self._proxied[base_url]:
            return self._request_through_urllib(base_url, method, path, data, where)
        try:
            status, reason, payload = self._exchange(base_url, method, path, data)
        except (OSError, http.client.HTTPException) as error:
            raise RegistryUnavailable(f"{where}: {type(error).__name__}: {error}") from None
        if status >= 300:
            raise self._error_answer(status, reason, payload, where)
        return self._json(payload, where)

    def _exchange(self, base_url: str, method: str, path: str, data: bytes | None) -> tuple[int, str, bytes]:
        """One request and its answer on a kept-alive connection; a fresh one when a kept one was closed meanwhile.

        The server may close an idle connection at any time; only a connection that had served a request
        is retried, once, so a registry that is down still fails at once.
        """
        split = self._splits[base_url]
        for attempt in range(2):
            connection, reused = self._connection(base_url, split)
            try:
                connection.request(method, split.path + path, body=data, headers=self._headers)
                answer = connection.getresponse()
                payload = answer.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as error:
                connection.close()
                if reused and attempt == 0:
                    continue
                raise error
            except BaseException:
                connection.close()
                raise
            if answer.will_close:
                connection.close()
            else:
                with self._idle_lock:
                    self._idle.setdefault(base_url, []).append(connection)
            return answer.status, answer.reason, payload
        raise AssertionError("unreachable")  # pragma: no cover

    def _connection(self, base_url: str, split: urllib.parse.SplitResult) -> tuple[http.client.HTTPConnection, bool]:
        with self._idle_lock:
            idle = self._idle.get(base_url)
            if idle:
                return idle.pop(), True
        timeout = self.settings.timeout_s
        if split.scheme == "https":
            return http.client.HTTPSConnection(split.netloc, timeout=timeout, context=self._context), False
        return http.client.HTTPConnection(split.netloc, timeout=timeout), False

    def _request_through_urllib(self, base_url: str, method: str, path: str, data: bytes | None, where: str) -> Any:
        """A request through the proxy the environment names (``https_proxy`` and the like), as urllib makes it."""
        request = urllib.request.Request(base_url + path, data=data, method=method, headers=self._headers)
        try:
            with urllib.request.urlopen(request, timeout=self.settings.timeout_s, context=self._context) as answer:
                payload = answer.read()
        except urllib.error.HTTPError as error:
            raise self._error_answer(error.code, str(error.reason), error.read(), where) from None
        except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
            reason = getattr(error, "reason", error)
            raise RegistryUnavailable(f"{where}: {type(reason).__name__}: {reason}") from None
        return self._json(payload, where)

    @staticmethod
    def _json(payload: bytes, where: str) -> Any:
        try:
            return json.loads(payload)
        except ValueError as error:  # an answer that is not JSON: not a Schema Registry, or a proxy's page
            raise RegistryRequestError(200, 50001, f"{where}: the answer is not JSON ({error})") from None

    @staticmethod
    def _error_answer(status: int, reason: str, payload: bytes, where: str) -> Exception:
        try:
            answer = json.loads(payload or b"{}")
            code, message = int(answer.get("error_code", status)), str(answer.get("message", reason))
        except (ValueError, AttributeError, TypeError):
            code, message = status, reason
        if status in RETRIABLE_STATUSES:
            return RegistryUnavailable(f"{where}: HTTP {status}: {message}; error code: {code}")
        return RegistryRequestError(status, code, message)


def _proxied(split: urllib.parse.SplitResult) -> bool:
    """True when the environment routes this URL through a proxy (``http_proxy``, ``https_proxy``, ``no_proxy``)."""
    return split.scheme in urllib.request.getproxies() and not urllib.request.proxy_bypass(split.hostname or "")


def _quote(subject: str) -> str:
    return urllib.parse.quote(subject, safe="")
