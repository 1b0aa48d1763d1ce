"""The one masking rule (issue #24, point 3): no credential survives, in any syntax an exception message uses.

Hypothesis writes secrets inside arbitrary text in each syntax a failed record's message
carries them: whole PEM blocks (also cut short), ``Authorization``/``Bearer``/``Basic``
credentials, a URL's user-info, ``name=value``, ``name: value`` and JSON/Python members
for every secret-bearing client property, and the ``password="…"`` inside a JAAS line.
The same cases are pushed through the real exits in
``tests/integration/test_masking_exits.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_kerr.errors import MASK, is_sensitive_key, mask_credentials, mask_secrets, mask_text
from airflow_kerr.errors.masking import is_sensitive_key as masking_is_sensitive_key

DATA = Path(__file__).parent / "data"


def _sensitive_properties() -> list[str]:
    """librdkafka's sensitive properties, the Java clients' PASSWORD configs, Schema Registry clients' secrets."""
    rows = [line.split("\t") for line in (DATA / "librdkafka-properties.txt").read_text().splitlines()]
    librdkafka = [row[0] for row in rows if row[0] and not row[0].startswith("#") and row[2].startswith("yes")]
    java = [
        line
        for line in (DATA / "kafka-java-password-configs.txt").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    schema_registry = [
        "basic.auth.user.info",
        "schema.registry.basic.auth.user.info",
        "bearer.auth.token",
        "schema.registry.bearer.auth.token",
        "bearer.auth.client.secret",
        "schema.registry.oauth.secret",
    ]
    return sorted({*librdkafka, *java, *schema_registry, "Authorization", "password", "token"})


SENSITIVE_KEYS = _sensitive_properties()
PREFIXES = ("", "kafka.", "producer.override.", "spark.kerr.kafka.")
#: What a secret is made of: anything a bare value can hold (a bare value ends at a space, a comma, a quote …).
SECRET_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.~!$*%+"
BASE64 = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+/"
PEM_LABELS = ("PRIVATE KEY", "RSA PRIVATE KEY", "ENCRYPTED PRIVATE KEY", "EC PRIVATE KEY", "CERTIFICATE")

secrets = st.text(SECRET_CHARS, min_size=6, max_size=40).map(lambda s: f"Zq{s}")
users = st.text("abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=12)


@st.composite
def pem_blocks(draw: st.DrawFn) -> tuple[str, str]:
    label = draw(st.sampled_from(PEM_LABELS))
    lines = draw(st.lists(st.text(BASE64, min_size=8, max_size=64), min_size=1, max_size=4))
    body = "ZqPEM" + draw(st.text(BASE64, min_size=8, max_size=40))
    newline = draw(st.sampled_from(["\n", "\\n", "\r\n"]))
    text = f"-----BEGIN {label}-----{newline}{body}{newline}{newline.join(lines)}"
    if draw(st.booleans()):  # whole; else cut short, as a message of limited length cuts it
        text += f"{newline}-----END {label}-----"
    return text, body


@st.composite
def http_credentials(draw: st.DrawFn) -> tuple[str, str]:
    secret = draw(secrets)
    scheme = draw(st.sampled_from(["Bearer", "bearer", "BEARER", "Basic", "basic"]))
    form = draw(
        st.sampled_from(
            [
                "Authorization: {scheme} {secret}",
                "authorization={scheme} {secret}",
                '"Authorization": "{scheme} {secret}"',
                "'Proxy-Authorization': '{scheme} {secret}'",
                "{scheme} {secret}",
                "-H 'Authorization: {scheme} {secret}'",
            ]
        )
    )
    return form.format(scheme=scheme, secret=secret), secret


@st.composite
def url_user_info(draw: st.DrawFn) -> tuple[str, str]:
    secret = draw(secrets)
    scheme = draw(st.sampled_from(["https", "http", "SASL_SSL", "jdbc:postgresql", "kafka", "s3a"]))
    host = draw(st.sampled_from(["registry.example.com:8081", "10.0.0.1", "broker-1"]))
    path = draw(st.sampled_from(["", "/", "/subjects?x=1", "#f"]))
    return f"{scheme}://{draw(users)}:{secret}@{host}{path}", secret


@st.composite
def sensitive_pairs(draw: st.DrawFn) -> tuple[str, str]:
    secret = draw(secrets)
    key = draw(st.sampled_from(PREFIXES)) + draw(st.sampled_from(SENSITIVE_KEYS))
    form = draw(
        st.sampled_from(
            [
                "{key}={secret}",
                "{key} = {secret}",
                "{key}: {secret}",
                '{key}="{secret}"',
                '"{key}": "{secret}"',
                '"{key}":"{secret}"',
                "'{key}': '{secret}'",
                '\\"{key}\\": \\"{secret}\\"',
                "{{{key}={secret}, retries=3}}",
                '{{"{key}": "{secret}", "id": 1}}',
            ]
        )
    )
    return form.format(key=key, secret=secret), secret


@st.composite
def jaas_lines(draw: st.DrawFn) -> tuple[str, str]:
    secret = draw(secrets)
    module = draw(
        st.sampled_from(
            [
                "org.apache.kafka.common.security.plain.PlainLoginModule",
                "org.apache.kafka.common.security.scram.ScramLoginModule",
            ]
        )
    )
    key = draw(
        st.sampled_from(["sasl.jaas.config", "kafka.sasl.jaas.config", "listener.name.sasl_ssl.sasl.jaas.config"])
    )
    quote = draw(st.sampled_from(['"', "'"]))
    inner = f"{module} required username={quote}{draw(users)}{quote} password={quote}{secret}{quote};"
    form = draw(st.sampled_from(["{key}={inner}", '"{key}": "{escaped}"', "{key}: {inner}"]))
    return form.format(key=key, inner=inner, escaped=inner.replace('"', '\\"')), secret


#: One secret in one syntax: (its text, the secret that must not survive).
secret_cases = st.one_of(pem_blocks(), http_credentials(), url_user_info(), sensitive_pairs(), jaas_lines())
#: Arbitrary text around it, kept a word apart (glued to a letter, ``Bearer`` would be another word).
surroundings = st.text(max_size=40)


@st.composite
def messages(draw: st.DrawFn) -> tuple[str, list[str]]:
    """An exception message holding one to four secrets, each in its own syntax, amid arbitrary text."""
    cases = draw(st.lists(secret_cases, min_size=1, max_size=4))
    parts = [draw(surroundings)]
    for text, _ in cases:
        parts += [text, draw(surroundings)]
    return " \n".join(parts), [secret for _, secret in cases]


def assert_hidden(masked: str, hidden: list[str]) -> None:
    for secret in hidden:
        assert secret not in masked, f"{secret!r} survived masking: {masked!r}"


@settings(max_examples=400)
@given(messages())
def test_no_secret_survives_in_any_syntax(message: tuple[str, list[str]]) -> None:
    text, hidden = message
    masked = mask_text(text)
    assert_hidden(masked, hidden)
    assert MASK in masked
    assert mask_text(masked) == masked, "masking twice changes nothing"


@given(messages())
def test_the_walker_masks_strings_keys_and_sensitive_members_at_any_depth(message: tuple[str, list[str]]) -> None:
    text, hidden = message
    value = {"outer": [{"message": text}, (text,)], text: 1, "sasl.password": {"any": "Zqwhole-object"}}
    masked = mask_secrets(value)
    dumped = json.dumps(masked)
    assert_hidden(dumped, [*hidden, "Zqwhole-object"])
    # Exits whose keys are data keep a count under a key that only looks sensitive, and still mask text.
    by_text = mask_secrets({"InvalidTokenError": 3, "sample": [text]}, by_key=False)
    assert by_text["InvalidTokenError"] == 3
    assert_hidden(json.dumps(by_text), hidden)


@given(messages())
def test_mask_credentials_is_the_same_walker(message: tuple[str, list[str]]) -> None:
    text, hidden = message
    config = {"bootstrap.servers": "b:9092", "note": text, "nested": [{"ssl.key.password": "Zqpw123"}]}
    masked = mask_credentials(config)
    assert masked == mask_secrets(config)
    assert masked["bootstrap.servers"] == "b:9092"
    assert_hidden(json.dumps(masked), [*hidden, "Zqpw123"])


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (
            "ssl.key.pem=-----BEGIN PRIVATE KEY-----\nMIIEvQ\n-----END PRIVATE KEY----- rejected",
            f"ssl.key.pem={MASK} rejected",
        ),
        (
            "bad key -----BEGIN RSA PRIVATE KEY-----\nMIIEow",
            f"bad key -----BEGIN RSA PRIVATE KEY-----{MASK}",
        ),
        ("401 for Authorization: Bearer eyJhbGciOi.x.y", f"401 for Authorization: {MASK}"),
        ("GET https://bob:pw@reg:8081/subjects failed", f"GET https://{MASK}@reg:8081/subjects failed"),
        (
            'sasl.jaas.config=org.example.PlainLoginModule required username="u" password="p";',
            f'sasl.jaas.config={MASK} required username="{MASK}" password="{MASK}";',
        ),
    ],
)
def test_what_a_person_reads_instead(text: str, shown: str) -> None:
    """The key or the PEM's label stays, so the reader still learns what was wrong."""
    assert mask_text(text) == shown


@pytest.mark.parametrize(
    "text",
    [
        "bootstrap.servers=broker-1:9092,broker-2:9092",
        "2026-11-26T11:43:02Z offset=42 partition: 3",
        "key.converter=org.apache.kafka.connect.json.JsonConverter",
        "http://registry:8081/subjects/orders-value/versions",
        "json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)",
        "user alice@example.com has no quota",
    ],
)
def test_text_without_credentials_is_left_alone(text: str) -> None:
    assert mask_text(text) == text


def test_key_rule_is_one_rule() -> None:
    """The view, the error context and the Spark spec import the same function."""
    assert is_sensitive_key is masking_is_sensitive_key
    for key in ("Authorization", "bearer.auth.token", "schema.registry.basic.auth.user.info", "ssl.keystore.key"):
        assert is_sensitive_key(key), key
    for key in ("bearer.auth.credentials.source", "bootstrap.servers", "sasl.mechanism"):
        assert not is_sensitive_key(key), key


@pytest.mark.timeout(120)
def test_large_and_hostile_text_is_masked_in_linear_time() -> None:
    """A summary's worth of messages, and megabyte inputs shaped to make a backtracking pattern go quadratic.

    No stopwatch here (speed lives in benchmarks/): a quadratic pattern on these inputs
    takes hours, so the generous timeout catches it on any machine, loaded or not.
    """
    plain = [f"ValueError: amount=-{i} at 12:{i % 60:02d} in record {i}" for i in range(20_000)]
    assert mask_secrets(plain) == plain
    quiet = ["no separators in this message at all"] * 100_000
    assert mask_secrets(quiet) == quiet
    assert "A" * 100 not in mask_text("-----BEGIN PRIVATE KEY-----" + "A" * 1_000_000)
    assert mask_text("Bearer " * 100_000).count("Bearer") >= 1
    assert mask_text("a" * 1_000_000 + "://" + "b" * 1_000_000).startswith("a" * 1000)
