"""The DLQ view under load (issue #44, point 3): many people asking is one read, and beyond the bound a 429.

The plugin's real FastAPI app, served in the test's own event loop (httpx's ASGI transport,
so the test can hold the view's read slots as another read would), reads the real broker.
Only Airflow's authentication is stood in for (a signed-in admin), as in
``test_dead_letter_view_requests.py``. How fast the view is under twenty users is measured by
``benchmarks/view_load.py``, not here.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from airflow_kerr.errors import SourceRecord, Stage
from airflow_kerr.local.dead_letters import Failure, write_dead_letters
from tests.clock import RECENT_MS

#: Dead letters in the DLQ: enough that a summary with max_records=100 takes several chunks.
RECORDS = 300
PEOPLE = 10


@pytest.fixture(scope="module")
def dlq(kafka_bootstrap: str) -> str:
    """A DLQ of RECORDS dead letters on two partitions: ValueError and KeyError, one in three a KeyError."""
    from confluent_kafka.admin import AdminClient, NewTopic

    config: dict[str, Any] = {"bootstrap.servers": kafka_bootstrap}
    topic = f"view-load-{uuid.uuid4().hex[:8]}.dlq"
    admin = AdminClient(config)  # kept until the topic exists: its futures fail once it is collected
    for future in admin.create_topics([NewTopic(topic, 2, 1)]).values():
        future.result(timeout=30)
    failures = [
        Failure(
            SourceRecord("orders", 0, i, RECENT_MS + i, key=b"k", value=b"{bad"),
            Stage.VALUE_CONVERTER,
            KeyError("id") if i % 3 == 0 else ValueError("bad json"),
        )
        for i in range(RECORDS)
    ]
    assert write_dead_letters(config, topic, failures) == RECORDS
    return topic


@pytest.fixture
def view(kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The plugin's module, kafka_default at the test broker, a signed-in admin, one read slot at a time."""
    from airflow.api_fastapi.app import init_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from airflow.api_fastapi.core_api.security import get_user

    from airflow_kerr.plugins import dead_letter_view

    monkeypatch.setenv(
        "AIRFLOW_CONN_KAFKA_DEFAULT",
        json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": kafka_bootstrap}}),
    )
    monkeypatch.setenv("AIRFLOW__KERR__DEAD_LETTER_VIEW_MAX_READS", "1")
    init_auth_manager()
    dead_letter_view.app.dependency_overrides[get_user] = lambda: SimpleAuthManagerUser(
        username="on-call", role="admin"
    )
    dead_letter_view.SHARED.forget()
    dead_letter_view._KEPT_CONFIGS.clear()
    try:
        yield dead_letter_view
    finally:
        dead_letter_view.app.dependency_overrides.clear()
        dead_letter_view.SHARED.forget()


@pytest.fixture
async def client(view: Any) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=view.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://view", timeout=120) as client:
        yield client


async def until(condition: Any) -> None:
    """Let the loop (and the requests on it) go on until ``condition()`` holds."""
    for _ in range(20_000):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("the condition never held")


async def ask_together(view: Any, client: httpx.AsyncClient, path: str, params: list[dict[str, Any]]) -> list[Any]:
    """One request per ``params``, all asked while another read holds the only slot: they wait for one read."""
    shared = view.SHARED
    async with shared.slot(1, 0.0):
        joined = shared.stats.joined
        asking = [asyncio.ensure_future(client.get(path, params=p)) for p in params]
        await until(lambda: shared.stats.joined == joined + len(params) - 1)
    return list(await asyncio.gather(*asking))


async def test_ten_people_counting_one_dlq_are_one_scan_whatever_they_filter_on(
    view: Any, client: httpx.AsyncClient, dlq: str
) -> None:
    """Ten pages counting at once, half of them filtering on KeyError: one read per chunk, the same cursors for all,
    and each filter's counts exact."""
    path = f"/api/topics/{dlq}/summary"
    filters: list[dict[str, Any]] = [{}, {"exception_class": "KeyError"}] * (PEOPLE // 2)
    counted: dict[str, Counter[str]] = {"": Counter(), "KeyError": Counter()}
    matched: Counter[str] = Counter()
    cursor: str | None = None
    chunks = 0
    while True:
        params = [{**f, "max_records": 100, **({"cursor": cursor} if cursor else {})} for f in filters]
        answers = await ask_together(view, client, path, params)
        assert {r.status_code for r in answers} == {200}, [r.text for r in answers if r.status_code != 200]
        pairs = list(zip(answers, filters, strict=True))
        by_filter = {f.get("exception_class", ""): {r.content for r, g in pairs if g == f} for f in filters}
        assert all(len(bodies) == 1 for bodies in by_filter.values()), "one answer per filter"
        chunk = {name: json.loads(next(iter(bodies))) for name, bodies in by_filter.items()}
        assert chunk[""]["cursor"] == chunk["KeyError"]["cursor"], "both filters follow one scan"
        for name, answer in chunk.items():
            counted[name].update(answer["counts"]["exception_class"])
            matched[name] += answer["matched"]
        chunks += 1
        cursor = chunk[""]["cursor"]
        if cursor is None:
            break
    assert chunks >= 3, "the count took several chunks, each shared"
    assert view.SHARED.stats.reads == chunks, "one read per chunk for ten people and two filters"
    assert counted[""] == {"KeyError": RECORDS // 3, "ValueError": RECORDS - RECORDS // 3}
    assert counted["KeyError"] == {"KeyError": RECORDS // 3}
    assert matched == {"": RECORDS, "KeyError": RECORDS // 3}


async def test_ten_people_opening_the_samples_are_one_read(view: Any, client: httpx.AsyncClient, dlq: str) -> None:
    answers = await ask_together(view, client, f"/api/topics/{dlq}/samples", [{"limit": 7}] * PEOPLE)
    assert {r.status_code for r in answers} == {200}
    assert len({r.content for r in answers}) == 1
    assert len(answers[0].json()["records"]) == 7 and view.SHARED.stats.reads == 1


async def test_beyond_the_bound_a_request_gets_429_with_retry_after_then_its_answer(
    view: Any, client: httpx.AsyncClient, dlq: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every slot taken for the whole wait: a 429 saying when to ask again (never a 5xx); asked again, the answer."""
    monkeypatch.setenv("AIRFLOW__KERR__DEAD_LETTER_VIEW_QUEUE_SECONDS", "0")
    routes = [f"/api/topics/{dlq}/samples", f"/api/topics/{dlq}/summary", f"/api/topics/{dlq}/backlog"]
    params: dict[str, Any] = {"group": "nobody", "limit": 5}
    async with view.SHARED.slot(1, 0.0):
        refused = [await client.get(route, params=params) for route in routes]
    for route, response in zip(routes, refused, strict=True):
        assert response.status_code == 429, (route, response.status_code, response.text)
        assert response.headers["Retry-After"] == "2"
        assert "ask again in 2 s" in response.json()["detail"]
    answered = [await client.get(route, params=params) for route in routes]
    assert [r.status_code for r in answered] == [200, 200, 200], [r.text for r in answered]
    assert len(answered[0].json()["records"]) == 5
    assert answered[2].json()["unread"] == RECORDS


@pytest.mark.parametrize(
    ("name", "value", "accepted"),
    [
        ("DEAD_LETTER_VIEW_MAX_READS", "0", "a whole number of reads at once, 1 or more"),
        ("DEAD_LETTER_VIEW_MAX_READS", "many", "a whole number of reads at once, 1 or more"),
        ("DEAD_LETTER_VIEW_QUEUE_SECONDS", "-1", "seconds to wait, 0 or more"),
        ("DEAD_LETTER_VIEW_QUEUE_SECONDS", "inf", "seconds to wait, 0 or more"),
    ],
)
async def test_a_limit_setting_gone_bad_after_the_plugin_loaded_is_logged_and_the_request_answers(
    client: httpx.AsyncClient,
    dlq: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    name: str,
    value: str,
    accepted: str,
) -> None:
    """A deployment's error, not the request's: the plugin refuses to load with it (tests/unit/plugins); one that
    went bad since (a ``_cmd`` setting, say) is a warning naming it, and the request is read with the default."""
    monkeypatch.setenv(f"AIRFLOW__KERR__{name}", value)
    with caplog.at_level("WARNING", logger="airflow_kerr.plugins.dead_letter_view"):
        response = await client.get(f"/api/topics/{dlq}/samples")
    assert response.status_code == 200
    assert len(response.json()["records"]) > 0
    warned = [r.getMessage() for r in caplog.records if r.name == "airflow_kerr.plugins.dead_letter_view"]
    assert f"[kerr] {name.lower()}={value!r}: expected {accepted}; using its default" in warned


async def test_a_connection_created_after_a_404_is_read_through_at_once(
    client: httpx.AsyncClient, dlq: str, kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The view keeps a connection's config a few seconds once read; a connection it did not find is not kept."""
    conn_id = f"view_load_{uuid.uuid4().hex[:8]}"
    params = {"kafka_config_id": conn_id, "group": "nobody"}
    missing = await client.get(f"/api/topics/{dlq}/backlog", params=params)
    assert missing.status_code == 404 and "no such connection" in missing.json()["detail"]
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{conn_id.upper()}",
        json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": kafka_bootstrap}}),
    )
    found = await client.get(f"/api/topics/{dlq}/backlog", params=params)
    assert found.status_code == 200 and found.json()["unread"] == RECORDS
