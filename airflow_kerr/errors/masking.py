"""The one masking rule: what is hidden wherever text leaves the process.

Every exit uses :func:`mask_secrets` (or :func:`mask_text` for one string, :func:`mask_named`
for a named one such as a record header, :func:`mask_credentials` for a configuration): the DLQ
view's responses, the sensors' XComs, the triggers' and watchers' event payloads, the
breach notifier's message, the error context a failed record carries, and the log lines
we write with exception text. Two rules make it up:

* **by key** (:func:`is_sensitive_key`): a configuration key whose value may be a
  credential, librdkafka's and the Java clients' alike, also behind a prefix
  (``kafka.``, ``producer.override.``, ``schema.registry.``);
* **in text** (:func:`mask_text`): whole PEM blocks (``-----BEGIN … -----`` to its END,
  or to the end of the text when cut short), ``Authorization``/``Bearer``/``Basic``
  credentials, the user-info of a URL (``scheme://user:password@host``), and the value
  after a sensitive key written as ``name=value``, ``name: value`` or a JSON or Python
  member (``"name": "value"``, ``'name': 'value'``, ``\\"name\\": \\"value\\"``), the
  ``password="…"`` inside a ``sasl.jaas.config`` included.

It errs towards hiding: a certificate's PEM is hidden like a key's, and ``Basic``
followed by a word loses the word. It runs on every string of a DLQ summary, so the
patterns are compiled once, a cheap scan skips text that cannot hold a secret, and a key's
verdict is cached. Pure Python: this module imports nothing else of ours.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any

#: What a hidden value is replaced by.
MASK = "[hidden]"

# ------------------------------------------------------------------------------------------ by key

# How a configuration key says its value is a credential. Checked against librdkafka's own list of
# sensitive properties and the Java clients' PASSWORD-typed ones (tests/unit/errors/data/).
#: Anywhere in the key, even inside a word (``clientSecret``, ``keystorepassword``); the contract
#: (SPEC-errors §4) names password, secret, token and sasl.jaas; ``authorization`` is an HTTP header's.
_SECRET_FRAGMENTS = ("password", "passwd", "passphrase", "secret", "token", "jaas", "authorization")
#: Whole words: PEM text (private keys, and certificates alike: the value is not read), user names.
_SECRET_WORDS = frozenset({"pem", "username", "userinfo", "credential", "apikey"})
#: ``key`` qualified by anything is key material (``ssl.key.pem``, ``ssl_key``, ``private.key.file``,
#: ``api.key``); first, or before one of these, it is the record key (``key.converter``, ``kafka.key.serializer``).
_RECORD_KEY_ROLES = frozenset({"serializer", "deserializer", "converter", "format", "schema", "subject"})
#: A key or trust store's content is secret; where it lives and its type are not.
_STORES = frozenset({"keystore", "truststore"})
_STORE_PUBLIC = frozenset({"location", "type", "algorithm"})
_WORD = re.compile(r"[a-z0-9]+")


@functools.lru_cache(maxsize=4096)
def is_sensitive_key(key: str) -> bool:
    """True for a configuration key whose value may hold a credential, so it is never printed.

    The rule covers librdkafka's sensitive properties (passwords, private keys and their
    PEMs, ``sasl.username``/``sasl.password``, OAuth client secrets and assertion keys,
    ``sasl.oauthbearer.config``), the Java clients' (``sasl.jaas.config``, key and trust
    store passwords and contents) and Schema Registry clients' (``basic.auth.user.info``,
    ``bearer.auth.token``, ``bearer.auth.client.secret``), also under a prefix such as
    ``kafka.`` or ``producer.override.``. A key is sensitive when a word names a secret
    (password, passphrase, secret, token, JAAS, PEM, username, credential, API key, user
    info, authorization), when ``key`` follows a qualifier (key material, not the record
    key), when it is a SASL mechanism's ``config`` string, or when it holds a key or trust
    store's content. It errs towards hiding: a certificate's PEM and a token endpoint's URL
    are hidden too. Cached: the same few keys recur in every record of a DLQ.
    """
    lowered = str(key).lower()
    if any(fragment in lowered for fragment in _SECRET_FRAGMENTS):
        return True
    words = _WORD.findall(lowered)
    if not words:
        return False
    if not _SECRET_WORDS.isdisjoint(words):
        return True
    if words[-1] == "config" and "sasl" in words:
        return True
    if not _STORES.isdisjoint(words) and words[-1] not in _STORE_PUBLIC:
        return True
    pairs = list(zip(words, [*words[1:], ""], strict=True))
    if ("user", "info") in pairs:
        return True
    return any(word == "key" and following not in _RECORD_KEY_ROLES for word, following in pairs[1:])


# ----------------------------------------------------------------------------------------- in text

#: Whether a text may hold anything the rules below hide: one C-level scan before any regex work.
_MAY_HOLD_SECRET = re.compile(r"[=:@]|-----BEGIN|(?i:bearer|basic)")

#: A PEM block, whole: its label kept (what it was is useful), the body hidden; without an END line
#: (a message cut short) everything after BEGIN is hidden.
_PEM = re.compile(
    r"-----BEGIN (?P<label>[A-Z0-9 ]{1,40})-----(?:.*?(?P<end>-----END [A-Z0-9 ]{1,40}-----)|.*\Z)", re.DOTALL
)
#: An HTTP credential after its scheme, wherever it appears (``Authorization: Bearer eyJ…``, a curl line).
_SCHEME_CREDENTIAL = re.compile(
    r"(?<![A-Za-z0-9_])(?P<scheme>(?i:bearer)|Basic|BASIC|basic)(?P<space>[ \t]+)(?!\[hidden)[^\s,;\"'}\])<>]+"
)
#: The user-info of a URL: ``scheme://user:password@`` (a password with ``@`` unescaped too: up to the last ``@``).
#: The scheme starts at a word start, so a long run of letters before ``://`` is scanned once, not once per letter.
_URL_USERINFO = re.compile(
    r"(?<![A-Za-z0-9+.\-])(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*+://)(?!\[hidden\]@)[^\s/?#\"'<>\[\]{}]+@"
)

#: A key and its separator: ``key=``, ``"key": ``, ``'key': ``, ``\\"key\\": `` (JSON quoted inside a string).
#: Only at a word start, and possessive, so a long identifier-like run costs one pass.
_KEY = re.compile(r"""(?<![A-Za-z0-9_.\-])(?P<open>\\?["']?)(?P<key>[A-Za-z_][A-Za-z0-9_.\-]*+)(?P=open)\s*[=:]\s*""")
#: The value after a sensitive key: the mask already (a masked PEM block too), an HTTP credential with
#: its scheme, a quoted string (escaped quotes too), or a bare word.
_VALUE = re.compile(
    rf"""-----BEGIN [A-Z0-9 ]{{1,40}}-----{re.escape(MASK)}(?:-----END [A-Z0-9 ]{{1,40}}-----)?"""
    rf"""|{re.escape(MASK)}"""
    rf"""|(?i:bearer|basic|digest|negotiate|token)[ \t]+(?:{re.escape(MASK)}|[^\s,;"'}}\])<>]+)"""
    r"""|\\"(?:[^"\\]|\\[^"])*\\"|"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|[^\s,;&}\])"']+"""
)


def _pem(found: re.Match[str]) -> str:
    return f"-----BEGIN {found['label']}-----{MASK}{found['end'] or ''}"


def _scheme_credential(found: re.Match[str]) -> str:
    return f"{found['scheme']}{found['space']}{MASK}"


def _url_userinfo(found: re.Match[str]) -> str:
    return f"{found['scheme']}{MASK}@"


def _mask_pairs(text: str) -> str:
    """The value of every sensitive ``key=value``/``key: value``/JSON member hidden; other pairs kept."""
    parts: list[str] = []
    done = 0
    search = _KEY.search
    position = 0
    while (found := search(text, position)) is not None:
        position = found.end()
        if not is_sensitive_key(found["key"]):
            continue
        value = _VALUE.match(text, position)
        if value is None:
            continue
        shown_value = value[0]
        if shown_value.startswith('\\"'):
            masked = f'\\"{MASK}\\"'
        elif shown_value[0] in "\"'":
            masked = f"{shown_value[0]}{MASK}{shown_value[0]}"
        else:
            masked = MASK
        parts.append(text[done:position])
        parts.append(masked)
        done = position = value.end()
    if not parts:
        return text
    parts.append(text[done:])
    return "".join(parts)


def mask_text(text: str) -> str:
    """``text`` with every credential the rule knows hidden (see the module's docstring); idempotent.

    For free text a failed record carries: an exception message quoting its configuration
    (``ssl.key.password=abc``), a stack trace printing a dict, JSON inside a string, a key's
    PEM, a URL with a password in it. A pair inside another pair's value (``config:
    sasl.password=x``) is found too: only a sensitive key's value is consumed.
    """
    if not _MAY_HOLD_SECRET.search(text):
        return text
    if "-----BEGIN " in text:
        text = _PEM.sub(_pem, text)
    if "://" in text:
        text = _URL_USERINFO.sub(_url_userinfo, text)
    text = _SCHEME_CREDENTIAL.sub(_scheme_credential, text)
    if "=" in text or ":" in text:
        text = _mask_pairs(text)
    return text


def mask_secrets(value: Any, *, by_key: bool = True) -> Any:
    """A JSON-like value (mappings, lists, tuples, strings at any depth) with every credential hidden.

    Every string, and every string key, goes through :func:`mask_text`. With ``by_key``
    (configurations, record values) the whole value under a sensitive key is hidden too,
    whatever it is. Exits whose keys are data rather than settings (a trigger's counts by
    exception class, a summary's counts by topic) pass ``by_key=False``, so a count under
    ``InvalidTokenError`` stays readable while every string in it is still masked. Tuples
    come back as lists (what JSON makes of them anyway); other values are returned as they are.
    """
    if isinstance(value, str):
        return mask_text(value)
    if isinstance(value, Mapping):
        return {
            (mask_text(key) if isinstance(key, str) else key): (
                MASK if by_key and is_sensitive_key(str(key)) else mask_secrets(item, by_key=by_key)
            )
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [mask_secrets(item, by_key=by_key) for item in value]
    return value


def mask_named(name: str, text: str | None) -> str | None:
    """A named text (a record header, a setting) as it may be shown: hidden whole under a sensitive name.

    A header named like a credential (``sasl.password``) is hidden whatever it holds, even
    unset; any other header's text goes through :func:`mask_text`, since a trace or a
    message header may quote a secret too.
    """
    if is_sensitive_key(name):
        return MASK
    return None if text is None else mask_text(text)


def mask_credentials(config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``config`` with credential values replaced by ``[hidden]``.

    :func:`mask_secrets` for a configuration: nested mappings are masked too, also inside
    lists (a list of client configs), and credentials inside string values (a URL's
    password, a PEM, ``password="…"`` in a JAAS line) are hidden, so a credential is hidden
    however deep the configuration holds it.
    """
    masked: dict[str, Any] = mask_secrets(config)
    return masked
