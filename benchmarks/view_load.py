"""The DLQ view under load: ``--users`` people (default 20) paging a 1,000,000-record DLQ at once.

A DLQ of ``--records`` Connect dead letters (``dlq_summary.py``'s: ten ``__connect.errors.*``
headers, four exception classes, three stages, three source topics, six hours of timestamps)
is written once to the embedded broker (``--partitions``, default 3). A real ``airflow
api-server`` (one worker, as the local stack runs it; SQLite home; the provider's plugin
loaded; ``kafka_default`` pointing at the broker) serves the view on loopback.

Each round: ``--idle-s`` seconds of health probes alone (the baseline), then the load: each
of ``--users`` clients (httpx, asynchronous) makes ``--visits`` page visits, one after
another, as the page does: the 20 newest examples (``/samples``), then summary chunks chained
by cursor until the count is complete (``/summary``, the page's default bounds, except that round
``r`` asks for chunks of 200,000 - ``r`` records, so that no round is answered from what the view
kept for the previous one). Visit 0 looks at the whole DLQ; each later visit picks one
exception class (user ``i`` the ``(i + visit) % 4``-th), so the pages show five different
selections between them (counted by one scan, value filters applied to its tally; sampled
five times). Meanwhile a prober asks Airflow's own
``/api/v2/monitor/health`` every 0.2 s, and a sampler reads the api-server's RSS (its
process tree) every 0.5 s. A request that gets a 429 waits its ``Retry-After`` and asks
again, as the page does; the 429 is counted.

Recorded per round: each route's latency (p50, p99, max), the health endpoint's p99 idle and
loaded (target: loaded ≤ 1 s), the api-server's RSS before, peak and after, every status
code (no 5xx allowed), and whether every request ended within its stated bound
(``airflow_kerr.plugins.dead_letter_view.REQUEST_BOUND_S`` when the product defines one,
else ``--bound-s``). Figures are the median (min-max) over ``--rounds`` (default 5); before
each round the script waits for a quiet machine (``machine_load.CpuMeter``) and records what
others used during it. After the last round RSS is followed for ``--settle-s`` more (the view's
kept scan consumers close after 30 s unused). Nothing is asserted.

Writes ``benchmarks/results/view_load.json`` and ``view_load.png``.

    .venv/bin/python benchmarks/view_load.py                       # 1,000,000 records, 20 users, 5 rounds
    .venv/bin/python benchmarks/view_load.py --records 100000 --rounds 1 --quiet-timeout 0   # a quick look
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
from dlq_summary import CLASSES, write_dlq
from graceful import exit_on_sigterm
from machine_load import CpuMeter, spread

RESULTS = Path(__file__).resolve().parent / "results"
HEALTH = "/api/v2/monitor/health"
HEALTH_GOAL_S = 1.0
QUIET_CORES = 0.3
PROBE_EVERY_S = 0.2
RSS_EVERY_S = 0.5
#: The summary chunk size the page asks for (the route's default).
PAGE_MAX_RECORDS = 200_000
#: A chained count that has not completed after this many chunks is abandoned (it never happened so far).
MAX_CHUNKS = 500
#: Times one request is asked again after a 429 before the client gives up on it.
MAX_RETRIES = 60


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (nearest rank) of ``values``; 0 for none."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


def tree_rss_mib(root: int) -> float:
    """The resident memory of ``root`` and its descendants, in MiB (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    total_kib, pending = 0, [root]
    while pending:
        pid = pending.pop()
        pending.extend(children.get(pid, []))
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total_kib += int(line.split()[1])
        except OSError:
            continue
    return total_kib / 1024


class ApiServer:
    """``airflow api-server`` alone (one worker, SQLite home), with the provider's plugin and ``kafka_default``."""

    def __init__(self, home: Path, bootstrap: str, client_config: dict[str, Any]) -> None:
        from airflow_kerr.local.airflow_env import (
            PASSWORD,
            USERNAME,
            airflow_environment,
            connection_records,
            store_connections,
            write_password_file,
        )
        from airflow_kerr.local.broker import connection_variables, free_port

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.username, self.password = USERNAME, PASSWORD
        dags = home / "dags"
        dags.mkdir(parents=True, exist_ok=True)
        password_file = home / "passwords.json"
        write_password_file(password_file, USERNAME, PASSWORD)
        connections = connection_records(connection_variables(bootstrap, "127.0.0.1", 8083, kafka_extra=client_config))
        self.env = airflow_environment(
            home, host="127.0.0.1", port=self.port, password_file=password_file, dags=dags,
            stored_connections=connections,
        )  # fmt: skip
        self.log_path = home / "api-server.log"
        self.log_path.write_bytes(b"")
        store_connections(self.env, connections, self.log_path, timeout_s=300)
        self.home = home
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 180.0) -> ApiServer:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "airflow", "api-server"],
                cwd=self.home,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"api-server exited:\n{self.log_path.read_text()[-4000:]}")
            try:
                if httpx.get(self.url + HEALTH, timeout=5).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(1)
        raise RuntimeError(f"api-server not up after {timeout_s:.0f} s:\n{self.log_path.read_text()[-4000:]}")

    def token(self) -> str:
        response = httpx.post(
            f"{self.url}/auth/token", json={"username": self.username, "password": self.password}, timeout=30
        )
        response.raise_for_status()
        token: str = response.json()["access_token"]
        return token

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)


class Load:
    """One round's clients, prober and sampler, and what they saw."""

    def __init__(self, url: str, token: str, topic: str, users: int, visits: int, server_pid: int) -> None:
        self.url, self.token, self.topic = url, token, topic
        self.users, self.visits, self.server_pid = users, visits, server_pid
        #: The page's default chunk size, less the round's number: no round reads the answers the view kept
        #: for the previous one (a following chunk is kept 60 s), as each asks a question of its own.
        self.max_records = PAGE_MAX_RECORDS
        self.requests: list[dict[str, Any]] = []
        self.health: list[tuple[float, float, int]] = []
        self.rss: list[tuple[float, float]] = []
        self.visits_done: list[dict[str, Any]] = []
        self.started = time.monotonic()

    async def get(self, client: httpx.AsyncClient, route: str, params: dict[str, Any]) -> dict[str, Any]:
        """One request as the page makes it: a 429 waits its Retry-After and asks again (each try recorded)."""
        path = f"/kerr/api/topics/{self.topic}/{route}"
        for _attempt in range(MAX_RETRIES):
            sent = time.monotonic()
            try:
                response = await client.get(path, params=params)
                status, body = response.status_code, response.content
            except httpx.HTTPError as error:
                status, body, response = -1, str(error).encode(), None
            took = time.monotonic() - sent
            retry_after = float(response.headers.get("retry-after", "1")) if response is not None else 1.0
            self.requests.append(
                {
                    "route": route,
                    "status": status,
                    "s": took,
                    "at": sent - self.started,
                    "first": "cursor" not in params,
                }
            )
            if status == 429:
                await asyncio.sleep(retry_after)
                continue
            if status != 200:
                return {"error": status, "detail": body[:300].decode(errors="replace")}
            parsed: dict[str, Any] = json.loads(body)
            return parsed
        return {"error": 429, "detail": "gave up after retries"}

    async def user(self, index: int) -> None:
        async with httpx.AsyncClient(
            base_url=self.url, headers={"Authorization": f"Bearer {self.token}"}, timeout=120
        ) as client:
            for visit in range(self.visits):
                chosen = {} if visit == 0 else {"exception_class": CLASSES[(index + visit) % len(CLASSES)]}
                opened = time.monotonic()
                sample = await self.get(client, "samples", {**chosen, "limit": 20})
                chunk = await self.get(client, "summary", {**chosen, "max_records": self.max_records})
                chunks, matched = 1, chunk.get("matched", 0)
                while chunk.get("cursor") and chunks < MAX_CHUNKS:
                    chunk = await self.get(
                        client, "summary", {**chosen, "max_records": self.max_records, "cursor": chunk["cursor"]}
                    )
                    chunks += 1
                    matched += chunk.get("matched", 0)
                self.visits_done.append(
                    {
                        "user": index,
                        "visit": visit,
                        "selection": chosen,
                        "seconds": time.monotonic() - opened,
                        "chunks": chunks,
                        "complete": bool(chunk.get("complete")),
                        "matched": matched,
                        "samples": len(sample.get("records", [])),
                        "error": chunk.get("error") or sample.get("error"),
                    }
                )

    async def probe(self, stop: asyncio.Event) -> None:
        async with httpx.AsyncClient(base_url=self.url, timeout=60) as client:
            while not stop.is_set():
                sent = time.monotonic()
                try:
                    status = (await client.get(HEALTH)).status_code
                except httpx.HTTPError:
                    status = -1
                self.health.append((sent - self.started, time.monotonic() - sent, status))
                await asyncio.sleep(max(0.0, PROBE_EVERY_S - (time.monotonic() - sent)))

    async def sample_rss(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            self.rss.append((time.monotonic() - self.started, tree_rss_mib(self.server_pid)))
            await asyncio.sleep(RSS_EVERY_S)

    async def run(self, idle_s: float, settle_s: float) -> dict[str, float]:
        stop = asyncio.Event()
        background = [asyncio.create_task(self.probe(stop)), asyncio.create_task(self.sample_rss(stop))]
        await asyncio.sleep(idle_s)
        load_started = time.monotonic() - self.started
        await asyncio.gather(*(self.user(i) for i in range(self.users)))
        load_ended = time.monotonic() - self.started
        await asyncio.sleep(max(2.5, settle_s))  # the memory after the load (kept consumers close after 30 s)
        stop.set()
        await asyncio.gather(*background)
        return {"load_started": load_started, "load_ended": load_ended}


def view_settings() -> dict[str, Any]:
    """The view's limits this run had (its defaults: the benchmark sets none)."""
    from airflow_kerr.plugins import dead_letter_view, shared_reads

    return {
        name: getattr(module, name, None)
        for module, names in (
            (dead_letter_view, ("DEFAULT_MAX_READS", "DEFAULT_QUEUE_SECONDS", "CONNECTION_TTL_S")),
            (shared_reads, ("FIRST_CHUNK_TTL_S", "NEXT_CHUNK_TTL_S", "SHORT_TTL_S")),
        )
        for name in names
    }


def request_bounds(default_s: float) -> dict[str, float]:
    """Each route's stated bound: the product's ``REQUEST_BOUND_S`` when it defines one."""
    from airflow_kerr.plugins import dead_letter_view

    stated = getattr(dead_letter_view, "REQUEST_BOUND_S", None)
    if isinstance(stated, dict):
        return {str(route): float(s) for route, s in stated.items()}
    return {"summary": default_s, "samples": default_s}


def one_round(
    server: ApiServer, token: str, topic: str, args: argparse.Namespace, bounds: dict[str, float], index: int
) -> dict[str, Any]:
    assert server.process is not None
    load = Load(server.url, token, topic, args.users, args.visits, server.process.pid)
    load.max_records = PAGE_MAX_RECORDS - index
    last = index == args.rounds - 1
    marks = asyncio.run(load.run(args.idle_s, args.settle_s if last else 0.0))
    idle = [s for at, s, _ in load.health if at < marks["load_started"]]
    loaded = [s for at, s, _ in load.health if marks["load_started"] <= at < marks["load_ended"]]
    routes: dict[str, Any] = {}
    for route in ("samples", "summary"):
        done = [r for r in load.requests if r["route"] == route]
        seconds = [r["s"] for r in done]
        routes[route] = {
            "requests": len(done),
            "p50_s": percentile(seconds, 50),
            "p99_s": percentile(seconds, 99),
            "max_s": max(seconds, default=0.0),
            "first_chunk_p99_s": percentile([r["s"] for r in done if r["first"]], 99) if route == "summary" else None,
            "statuses": dict(Counter(str(r["status"]) for r in done)),
            "bound_s": bounds.get(route),
            "over_bound": sum(1 for r in done if r["s"] > bounds.get(route, float("inf"))),
        }
    before = [mib for at, mib in load.rss if at < marks["load_started"]]
    during = [mib for at, mib in load.rss if at >= marks["load_started"]]
    statuses = Counter(str(r["status"]) for r in load.requests)
    return {
        "load_s": marks["load_ended"] - marks["load_started"],
        "routes": routes,
        "statuses": dict(statuses),
        "server_errors": sum(n for code, n in statuses.items() if code.startswith("5") or code == "-1"),
        "throttled": statuses.get("429", 0),
        "over_bound": sum(r["over_bound"] for r in routes.values()),
        "health": {
            "idle_p99_s": percentile(idle, 99),
            "loaded_p50_s": percentile(loaded, 50),
            "loaded_p99_s": percentile(loaded, 99),
            "loaded_max_s": max(loaded, default=0.0),
            "probes_loaded": len(loaded),
            "not_200": sum(1 for at, _, status in load.health if status != 200),
        },
        "rss_mib": {
            "before": statistics.median(before) if before else 0.0,
            "peak": max(during, default=0.0),
            "after_2s": next((mib for at, mib in load.rss if at >= marks["load_ended"] + 2.0), load.rss[-1][1]),
            "after": load.rss[-1][1] if load.rss else 0.0,
            "after_s": (load.rss[-1][0] - marks["load_ended"]) if load.rss else 0.0,
        },
        "visits": {
            "count": len(load.visits_done),
            "complete": sum(1 for v in load.visits_done if v["complete"]),
            "errors": sum(1 for v in load.visits_done if v["error"]),
            "seconds": spread([v["seconds"] for v in load.visits_done]) if load.visits_done else None,
            "whole_dlq_matched": sorted({v["matched"] for v in load.visits_done if not v["selection"]}),
        },
        "series": {
            "health": [(round(at, 2), round(s, 4)) for at, s, _ in load.health],
            "rss": [(round(at, 2), round(mib, 1)) for at, mib in load.rss],
            "load_started": marks["load_started"],
            "load_ended": marks["load_ended"],
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--visits", type=int, default=2, help="page visits per user per round (default 2)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--idle-s", type=float, default=5.0, help="health probes alone before each round's load")
    parser.add_argument("--bound-s", type=float, default=30.0, help="a request's bound when the view states none")
    parser.add_argument(
        "--settle-s", type=float, default=40.0, help="after the last round, how long RSS is followed (default 40)"
    )
    parser.add_argument("--quiet-timeout", type=float, default=300.0)
    parser.add_argument("--provisional", action="store_true", help="mark the results as provisional")
    args = parser.parse_args()

    from airflow_kerr.local.broker import LocalBroker

    meter = CpuMeter()
    bounds = request_bounds(args.bound_s)
    broker = LocalBroker().start()
    server: ApiServer | None = None
    rounds: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="kerr-view-load-") as home:
        try:
            config = {"bootstrap.servers": broker.bootstrap_servers, **broker.client_config}
            topic = f"bench.view_load.{uuid.uuid4().hex[:8]}.dlq"
            written = write_dlq(config, topic, args.records, args.partitions)
            print(f"wrote {args.records:,} dead letters to {topic} in {written:.1f} s", flush=True)
            server = ApiServer(Path(home), broker.bootstrap_servers, broker.client_config).start()
            token = server.token()
            for index in range(args.rounds):
                waited, quiet = (0.0, -1.0)
                if args.quiet_timeout > 0:
                    waited, quiet = meter.wait_quiet(QUIET_CORES, args.quiet_timeout)
                before = meter.sample()
                row = one_round(server, token, topic, args, bounds, index)
                row.update(
                    round=index,
                    waited_for_quiet_s=waited,
                    others_cores_before=quiet,
                    others_cores=meter.foreign_cores(before, meter.sample()),
                    load_average_1m=os.getloadavg()[0],
                )
                rounds.append(row)
                print(round_line(row), flush=True)
        finally:
            if server is not None:
                server.stop()
            broker.stop()
    report = summarize_rounds(rounds, args, bounds, written)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "view_load.json").write_text(json.dumps(report, indent=2) + "\n")
    chart(report, RESULTS / "view_load.png")
    print(json.dumps(report["summary"], indent=1))
    return 0


def round_line(row: dict[str, Any]) -> str:
    """One round's figures on one line, as the run goes."""
    health, routes, rss = row["health"], row["routes"], row["rss_mib"]
    return (
        f"round {row['round']}: load {row['load_s']:.1f} s, health p99 loaded {health['loaded_p99_s']:.3f} s "
        f"(idle {health['idle_p99_s']:.3f}), summary p50/p99 {routes['summary']['p50_s']:.2f}/"
        f"{routes['summary']['p99_s']:.2f} s, samples p50/p99 {routes['samples']['p50_s']:.2f}/"
        f"{routes['samples']['p99_s']:.2f} s, RSS {rss['before']:.0f}->{rss['peak']:.0f}->{rss['after']:.0f} MiB, "
        f"statuses {row['statuses']}, over bound {row['over_bound']}, others {row['others_cores']:.2f} cores"
    )


def summarize_rounds(
    rounds: list[dict[str, Any]], args: argparse.Namespace, bounds: dict[str, float], written_s: float
) -> dict[str, Any]:
    def over(path: tuple[str, ...]) -> dict[str, float]:
        values = []
        for row in rounds:
            value: Any = row
            for key in path:
                value = value[key]
            values.append(float(value))
        return spread(values)

    summary = {
        "health_loaded_p99_s": over(("health", "loaded_p99_s")),
        "health_idle_p99_s": over(("health", "idle_p99_s")),
        "summary_p50_s": over(("routes", "summary", "p50_s")),
        "summary_p99_s": over(("routes", "summary", "p99_s")),
        "summary_first_chunk_p99_s": over(("routes", "summary", "first_chunk_p99_s")),
        "samples_p50_s": over(("routes", "samples", "p50_s")),
        "samples_p99_s": over(("routes", "samples", "p99_s")),
        "rss_before_mib": over(("rss_mib", "before")),
        "rss_peak_mib": over(("rss_mib", "peak")),
        "rss_after_2s_mib": over(("rss_mib", "after_2s")),
        "load_s": over(("load_s",)),
        "others_cores": over(("others_cores",)),
        "load_average_1m": over(("load_average_1m",)),
    }
    return {
        "benchmark": "view_load",
        "provisional": args.provisional,
        "records": args.records,
        "partitions": args.partitions,
        "users": args.users,
        "visits_per_user": args.visits,
        "rounds": args.rounds,
        "write_s": written_s,
        "request_bounds_s": bounds,
        "view_settings": view_settings(),
        "goals": {"health_loaded_p99_s": HEALTH_GOAL_S, "server_errors": 0, "over_bound": 0},
        "machine": {
            "cores": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
        "summary": summary,
        "rss_settled_mib": rounds[-1]["rss_mib"]["after"],
        "rss_settled_after_s": rounds[-1]["rss_mib"]["after_s"],
        "met": {
            "health_loaded_p99": summary["health_loaded_p99_s"]["median"] <= HEALTH_GOAL_S,
            "health_loaded_p99_every_round": all(r["health"]["loaded_p99_s"] <= HEALTH_GOAL_S for r in rounds),
            "no_5xx": all(r["server_errors"] == 0 for r in rounds),
            "within_bounds": all(r["over_bound"] == 0 for r in rounds),
            "every_visit_complete": all(r["visits"]["complete"] == r["visits"]["count"] for r in rounds),
        },
        "totals": {
            "requests": sum(sum(route["requests"] for route in r["routes"].values()) for r in rounds),
            "server_errors": sum(r["server_errors"] for r in rounds),
            "throttled": sum(r["throttled"] for r in rounds),
            "over_bound": sum(r["over_bound"] for r in rounds),
        },
        "runs": rounds,
    }


def chart(report: dict[str, Any], path: Path) -> None:
    """Per round: health latency over time (goal line), the api-server's RSS over time, route p50/p99."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (health, memory, routes) = plt.subplots(1, 3, figsize=(16, 4.5))
    for row in report["runs"]:
        series = row["series"]
        start = series["load_started"]
        health.plot([at - start for at, _ in series["health"]], [s for _, s in series["health"]],
                    linewidth=0.8, label=f"round {row['round']}")  # fmt: skip
        memory.plot([at - start for at, _ in series["rss"]], [m for _, m in series["rss"]], linewidth=0.8,
                    label=f"round {row['round']}")  # fmt: skip
    health.axhline(HEALTH_GOAL_S, color="tab:red", linestyle="--", linewidth=1, label="p99 goal 1 s")
    health.set_yscale("log")
    health.set_title("/api/v2/monitor/health latency (load starts at 0)", fontsize=9)
    health.set_xlabel("seconds since the load started")
    health.set_ylabel("seconds")
    health.legend(fontsize=7)
    memory.set_title("api-server RSS (process tree)", fontsize=9)
    memory.set_xlabel("seconds since the load started")
    memory.set_ylabel("MiB")
    memory.set_ylim(bottom=0)
    names, p50, p99 = [], [], []
    s = report["summary"]
    for label, key in (("samples", "samples"), ("summary chunk", "summary"), ("health, loaded", "health_loaded")):
        names.append(label)
        if key == "health_loaded":
            p50.append(statistics.median(r["health"]["loaded_p50_s"] for r in report["runs"]))
            p99.append(s["health_loaded_p99_s"]["median"])
        else:
            p50.append(s[f"{key}_p50_s"]["median"])
            p99.append(s[f"{key}_p99_s"]["median"])
    xs = range(len(names))
    routes.bar([x - 0.2 for x in xs], p50, width=0.4, label="p50")
    routes.bar([x + 0.2 for x in xs], p99, width=0.4, label="p99")
    routes.set_xticks(list(xs), names, fontsize=8)
    routes.set_ylabel("seconds (median over rounds)")
    routes.set_title("latency per route", fontsize=9)
    routes.legend(fontsize=7)
    provisional = " (PROVISIONAL)" if report["provisional"] else ""
    figure.suptitle(
        f"DLQ view under load{provisional}: {report['users']} users x {report['visits_per_user']} visits, "
        f"{report['records']:,} records, {report['partitions']} partitions, {report['rounds']} rounds; "
        f"5xx: {report['totals']['server_errors']}, 429: {report['totals']['throttled']}, "
        f"over bound: {report['totals']['over_bound']}; others used "
        f"{s['others_cores']['median']:.2f} cores (median)",
        fontsize=9,
    )
    figure.tight_layout()
    figure.savefig(path, dpi=110)


if __name__ == "__main__":
    exit_on_sigterm()
    sys.exit(main())
