"""The masking rule on the texts the DLQ view shows: pairs, JSON at any depth, never a secret, always fast."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_kerr.errors import MASK
from airflow_kerr.errors.masking import mask_named, mask_secrets, mask_text


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("ssl.key.password=abc", f"ssl.key.password={MASK}"),
        ("bad config: sasl.password=s3cr3t, retries=3", f"bad config: sasl.password={MASK}, retries=3"),
        ('{"sasl.password": "abc", "id": 1}', f'{{"sasl.password": "{MASK}", "id": 1}}'),
        ("{'token': 'abc'}", f"{{'token': '{MASK}'}}"),
        ('payload "{\\"api_key\\": \\"xyz\\"}"', f'payload "{{\\"api_key\\": \\"{MASK}\\"}}"'),
        ("client_secret: abc def", f"client_secret: {MASK} def"),
        ("ValueError: amount=-12.5 at line 3", "ValueError: amount=-12.5 at line 3"),
        (f"password={MASK}", f"password={MASK}"),
    ],
)
def test_text_masking_hides_sensitive_pairs(text: str, shown: str) -> None:
    """An exception message quoting a config shows the key but never the credential."""
    assert mask_text(text) == shown


def test_json_masking_is_recursive() -> None:
    """A credential nested anywhere in a JSON value, or quoted in one of its strings, is hidden."""
    value = {
        "id": 1,
        "client": {"sasl.jaas.config": "x", "nested": [{"password": "p", "ok": "fine"}]},
        "note": "retry with token=abc",
        "ssl_key": {"whole": "object hidden"},
    }
    assert mask_secrets(value) == {
        "id": 1,
        "client": {"sasl.jaas.config": MASK, "nested": [{"password": MASK, "ok": "fine"}]},
        "note": f"retry with token={MASK}",
        "ssl_key": MASK,
    }


@given(st.text(max_size=60), st.sampled_from(["password", "sasl.jaas.config", "ssl.key.password", "api_key"]))
def test_a_sensitive_value_never_survives_masking(secret: str, key: str) -> None:
    """Whatever the secret looks like, a sensitive key's value does not appear after masking."""
    secret = "".join(c for c in secret if c.isalnum()) or "x"
    secret = f"Zq{secret}"
    masked = mask_text(f"failed: {key}={secret} while connecting")
    assert secret not in masked and MASK in masked
    assert mask_text(masked) == masked  # idempotent


def test_a_long_identifier_is_masked_whole() -> None:
    """A 1 MB run of identifier characters (a hex dump in a message) is read as one key, secrets after it masked.

    How long that takes (linear in the text: the key pattern is possessive) is measured by
    ``benchmarks/masking_cost.py``; a regex that backtracks over the run would hang this test.
    """
    run = "a" * 1_000_000
    assert mask_text(run + ": b") == run + ": b", "an identifier that is no credential keeps its value"
    assert mask_text(run + " password=hunter2") == f"{run} password={MASK}"


def test_a_header_named_like_a_credential_is_hidden_whatever_it_holds() -> None:
    """A ``sasl.password`` header is hidden even unset; another header keeps its text, with secrets in it masked."""
    assert mask_named("sasl.password", "hunter2") == MASK
    assert mask_named("sasl.password", None) == MASK
    assert mask_named("trace-id", "abc") == "abc"
    assert mask_named("trace-id", None) is None
    assert mask_named("note", "retry with token=abc") == f"retry with token={MASK}"
