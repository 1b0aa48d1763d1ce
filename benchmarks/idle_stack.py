"""CPU an idle ``kerr local up`` or ``make ui`` stack uses, per process.

``--stack local-up`` (the default) compares noida-db bare with noida-db behind the fetch
shim; ``--stack ui`` measures ``make ui`` (see below). Each writes its own part of
``benchmarks/results/idle_stack.json`` and keeps the other's.

noida-db 0.2.3 answers an empty Fetch at once, ignoring ``fetch.max.wait.ms``, so the
idle Kafka Connect worker's consumers spin on it (``idle_fetch.py``).
``airflow_kerr/local/fetch_shim.py`` holds such answers as a real broker does. For each
run and each mode (alternating), the stack of ``kerr local up`` (its detached broker with a
data directory and its detached Connect worker, started with the same classes and flags;
``KERR_FETCH_SHIM=0`` for ``direct``) is started in a fresh directory, left to settle for
``--settle`` seconds, then the CPU time (utime + stime from ``/proc/<pid>/stat``) of each
of its processes is read over ``--seconds`` seconds of idling; then it is stopped. The
processes: the broker (in ``shim`` mode the shim process, with noida-db as its child,
counted apart) and the Connect JVM.

The machine's load is recorded as ``machine_load.py`` does (``/proc/stat`` busy time
minus the stack's): the cores other processes used during the span. Figures are the
median with min and max over the runs. Writes ``benchmarks/results/idle_stack.json``
and ``idle_stack.png``.

    .venv/bin/python benchmarks/idle_stack.py --runs 3 --seconds 60

``--stack ui``: the stack of ``make ui`` is started by the same call ``make ui`` makes,
:func:`airflow_kerr.local.ui.start_local_ui` (embedded broker behind the shim, a Connect
worker with the orders sink, ``airflow standalone`` with the repo's example DAGs), which
returns once every component is healthy and ``dlq_replay`` is parsed. After ``--settle``
seconds the CPU of each process tree is read over ``--seconds`` seconds: the shim,
noida-db, the Connect JVM, and each component of standalone (api-server, scheduler,
dag-processor, triggerer, with what they start), counting the children they have reaped
(the dag-processor parses each file in a short-lived child). Two variants alternate:
``local`` is ``ui.py`` as it is, ``before`` sets back the Airflow settings of
``ui.IDLE_SETTINGS`` to their values before they were added (``BEFORE_IDLE_SETTINGS``).
One Airflow home is kept for all runs, as a second ``make ui`` keeps ``.kerr/ui``.

    .venv/bin/python benchmarks/idle_stack.py --stack ui --runs 3 --seconds 60
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

from graceful import exit_on_sigterm
from machine_load import spread

from airflow_kerr.local.fetch_shim import HOLD_CAP_MS

RESULTS = Path(__file__).resolve().parent / "results"
MODES = ("direct", "shim")
UI_VARIANTS = ("before", "local")
#: ``ui.IDLE_SETTINGS``' keys as ``ui.py`` had them: Airflow's defaults, but the refresh interval it set.
BEFORE_IDLE_SETTINGS = {
    "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "1",
    "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "5",
    "AIRFLOW__SCHEDULER__POOL_METRICS_INTERVAL": "5.0",
    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "10.0",
    "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "30",
    "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "30",
    "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "2",
    "AIRFLOW__DAG_PROCESSOR__BUNDLE_REFRESH_CHECK_INTERVAL": "5",
    "AIRFLOW__DAG_PROCESSOR__PRINT_STATS_INTERVAL": "30",
    "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "5",
}
#: Words of a standalone component's command line, and the part it is counted in.
UI_COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
HZ = os.sysconf("SC_CLK_TCK")


def process_ticks() -> dict[int, tuple[int, int, str]]:
    """Every process: pid to (parent pid, its own utime + stime, its name)."""
    found: dict[int, tuple[int, int, str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "stat").read_text()
        except OSError:
            continue
        name = raw[raw.index("(") + 1 : raw.rindex(")")]
        fields = raw.rsplit(")", 1)[1].split()
        found[int(entry.name)] = (int(fields[1]), int(fields[11]) + int(fields[12]), name)
    return found


def tree_ticks(table_pids: list[int]) -> int:
    """utime + stime + cutime + cstime of the live ``table_pids``: a reaped child counts in its parent, once."""
    total = 0
    for pid in table_pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        total += sum(int(value) for value in fields[11:15])
    return total


def descendants(root: int, table: dict[int, tuple[int, int, str]]) -> list[int]:
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    pending, pids = [root], []
    while pending:
        pid = pending.pop()
        pids.append(pid)
        pending.extend(children.get(pid, []))
    return pids


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def ui_parts(roots: dict[str, int]) -> dict[str, list[int]]:
    """The ``make ui`` stack's parts: shim, noida-db, Connect, standalone itself and each of its components."""
    table = process_ticks()
    parts = stack_parts({"broker": roots["broker"], "connect": roots["connect"]}, table)
    standalone = roots["standalone"]
    parts["standalone"] = [standalone]
    for child in [pid for pid, (ppid, _, _) in table.items() if ppid == standalone]:
        words = command_line(child).replace("_", "-").split()  # the api-server calls itself "airflow api_server"
        name = next((c for c in UI_COMPONENTS if c in words), "standalone-other")
        parts.setdefault(name, []).extend(descendants(child, table))
    if roots.get("execution-api"):  # the tasks' own api-server, beside standalone (see start_execution_api)
        parts["execution-api"] = descendants(roots["execution-api"], table)
    return parts


def measure_ui(variant: str, home: Path, settle_s: float, seconds: float) -> dict[str, Any]:
    """One idle span of the stack ``make ui`` starts, with ``ui.py``'s settings or the ones before."""
    from airflow_kerr.local.ui import start_local_ui

    environment = dict(BEFORE_IDLE_SETTINGS) if variant == "before" else {}
    started = time.monotonic()
    ui = start_local_ui(home, environment=environment)
    try:
        ready_s = time.monotonic() - started
        assert ui.broker is not None and ui.connect is not None and ui.process is not None
        roots = {"broker": int(ui.broker.pid or 0), "connect": int(ui.connect.pid or 0), "standalone": ui.process.pid}
        if ui.execution_api is not None:
            roots["execution-api"] = ui.execution_api.pid
        time.sleep(settle_s)
        parts = ui_parts(roots)
        busy0, t0 = machine_busy(), time.monotonic()
        before = {name: tree_ticks(pids) for name, pids in parts.items()}
        time.sleep(seconds)
        # Children started during the span (a parse) were reaped into their component: counted there.
        busy1, elapsed = machine_busy(), time.monotonic() - t0
        after = {name: tree_ticks(pids) for name, pids in parts.items()}
    finally:
        ui.stop()
    cores = {name: max(0, after[name] - before[name]) / HZ / elapsed for name in parts}
    total = sum(cores.values())
    others = max(0.0, (busy1 - busy0) / HZ / elapsed - total)
    return {
        "variant": variant,
        "ready_s": round(ready_s, 1),
        "seconds": round(elapsed, 1),
        "cores": cores,
        "total_cores": total,
        "others_cores": others,
    }


def main_ui(args: argparse.Namespace) -> int:
    from airflow_kerr.local.ui import IDLE_SETTINGS

    home = Path(tempfile.mkdtemp(prefix="kerr-idle-ui-"))
    rows: list[dict[str, Any]] = []
    variants = [v for v in UI_VARIANTS if v in args.variants.split(",")]
    for run in range(args.runs):
        for variant in variants if run % 2 == 0 else reversed(variants):
            row = {"run": run, **measure_ui(variant, home, args.settle, args.seconds)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    summary: dict[str, Any] = {}
    for variant in variants:
        mine = [row for row in rows if row["variant"] == variant]
        names = sorted({name for row in mine for name in row["cores"]})
        summary[variant] = {
            "total_cores": spread([row["total_cores"] for row in mine]),
            "others_cores": spread([row["others_cores"] for row in mine]),
            **{name: spread([row["cores"].get(name, 0.0) for row in mine]) for name in names},
        }
    path = RESULTS / "idle_stack.json"
    report: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    report["make_ui"] = {
        "goal_total_cores": 0.10,
        "seconds": args.seconds,
        "settle_s": args.settle,
        "idle_settings": IDLE_SETTINGS,
        "before_idle_settings": BEFORE_IDLE_SETTINGS,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "runs": rows,
        "summary": summary,
    }
    RESULTS.mkdir(exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
    if "summary" in report:
        chart(report["summary"], RESULTS / "idle_stack.png", report["make_ui"]["summary"])
    print(json.dumps(summary, indent=2))
    return 0


def machine_busy() -> int:
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(value) for value in fields[:8])
    return user + nice + system + irq + softirq + steal


def stack_parts(roots: dict[str, int], table: dict[int, tuple[int, int, str]]) -> dict[str, list[int]]:
    """Each part's pids: the root and its descendants; noida-db under the shim is a part of its own."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    parts: dict[str, list[int]] = {}
    for name, root in roots.items():
        pending, pids = [root], []
        while pending:
            pid = pending.pop()
            pids.append(pid)
            pending.extend(children.get(pid, []))
        parts[name] = pids
    if "broker" in parts:
        noida = [pid for pid in parts["broker"][1:] if table.get(pid, (0, 0, ""))[2].startswith("noida")]
        if noida:  # shim mode: the broker's pid is the shim's, noida-db its child
            parts["fetch-shim"] = [pid for pid in parts.pop("broker") if pid not in noida]
            parts["noida-db"] = noida
    return parts


def measure(mode: str, settle_s: float, seconds: float, hold_cap_ms: int | None = None) -> dict[str, Any]:
    """One idle span of the stack ``kerr local up`` starts: its broker and Connect worker, with its settings.

    The stack is started with the same classes and flags as ``kerr local up`` (detached
    broker with a data directory, detached Connect worker), but with a longer wait for
    Connect: in ``direct`` mode on a loaded machine the niced worker, its consumers spinning,
    was not ready within the CLI's 90 s.
    """
    from airflow_kerr.local.broker import FETCH_SHIM_ENV, LocalBroker
    from airflow_kerr.local.connect_worker import ConnectWorker

    home = Path(tempfile.mkdtemp(prefix=f"kerr-idle-{mode}-"))
    os.environ[FETCH_SHIM_ENV] = "0" if mode == "direct" else "1"
    if hold_cap_ms is not None:
        os.environ["KERR_FETCH_HOLD_MS"] = str(hold_cap_ms)
    broker = LocalBroker(log_path=home / "broker.log", detach=True, data_dir=home / "broker-data")
    worker: ConnectWorker | None = None
    try:
        broker.start()
        worker = ConnectWorker(broker.bootstrap_servers, home / "connect", detach=True, start_timeout_s=400).start()
        roots = {"broker": int(broker.pid or 0), "connect": int(worker.pid or 0)}
        time.sleep(settle_s)
        table = process_ticks()
        parts = stack_parts(roots, table)
        busy0, t0 = machine_busy(), time.monotonic()
        before = {name: sum(table[pid][1] for pid in pids if pid in table) for name, pids in parts.items()}
        time.sleep(seconds)
        table = process_ticks()
        busy1, elapsed = machine_busy(), time.monotonic() - t0
        after = {name: sum(table[pid][1] for pid in pids if pid in table) for name, pids in parts.items()}
    finally:
        if worker is not None:
            worker.stop()
        broker.stop()
    cores = {name: (after[name] - before[name]) / HZ / elapsed for name in parts}
    total = sum(cores.values())
    others = max(0.0, (busy1 - busy0) / HZ / elapsed - total)
    return {"mode": mode, "seconds": round(elapsed, 1), "cores": cores, "total_cores": total, "others_cores": others}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--settle", type=float, default=15.0)
    parser.add_argument("--hold-cap-ms", type=int, default=None, help="the shim's cap (default: HOLD_CAP_MS)")
    parser.add_argument("--stack", choices=("local-up", "ui"), default="local-up")
    parser.add_argument("--variants", default=",".join(UI_VARIANTS), help="--stack ui: before,local or one of them")
    args = parser.parse_args()
    if args.stack == "ui":
        return main_ui(args)
    rows: list[dict[str, Any]] = []
    failures: list[dict[str, Any]] = []
    for run in range(args.runs):
        for mode in MODES if run % 2 == 0 else reversed(MODES):
            for attempt in range(3):
                try:
                    row = {"run": run, **measure(mode, args.settle, args.seconds, args.hold_cap_ms)}
                    break
                except Exception:  # the broker or Connect did not start: recorded, then tried again
                    # Seen in direct mode on a loaded machine: the niced, spinning worker not ready in time.
                    failures.append({"run": run, "mode": mode, "attempt": attempt})
                    print(json.dumps({"start_failed": failures[-1]}), flush=True)
            else:
                continue
            rows.append(row)
            print(json.dumps(row), flush=True)
    summary: dict[str, Any] = {}
    for mode in MODES:
        mine = [row for row in rows if row["mode"] == mode]
        names = sorted({name for row in mine for name in row["cores"]})
        summary[mode] = {
            "total_cores": spread([row["total_cores"] for row in mine]),
            "others_cores": spread([row["others_cores"] for row in mine]),
            **{name: spread([row["cores"].get(name, 0.0) for row in mine]) for name in names},
        }
    path = RESULTS / "idle_stack.json"
    kept = json.loads(path.read_text()).get("make_ui") if path.exists() else None
    report = {
        "goal_total_cores": 0.10,
        "hold_cap_ms": args.hold_cap_ms or HOLD_CAP_MS,
        "seconds": args.seconds,
        "settle_s": args.settle,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "runs": rows,
        "start_failures": failures,
        "summary": summary,
        **({"make_ui": kept} if kept else {}),
    }
    RESULTS.mkdir(exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
    chart(summary, RESULTS / "idle_stack.png", kept["summary"] if kept else None)
    print(json.dumps(summary, indent=2))
    return 0


def chart(summary: dict[str, Any], path: Path, ui_summary: dict[str, Any] | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels: list[tuple[str, dict[str, Any], tuple[str, ...]]] = [("Idle `kerr local up`", summary, tuple(MODES))]
    if ui_summary:
        panels.append(("Idle `make ui`", ui_summary, tuple(v for v in UI_VARIANTS if v in ui_summary)))
    figure, axes = plt.subplots(len(panels), 1, figsize=(9, 4 * len(panels)), squeeze=False)
    for axis, (title, data, modes) in zip(axes[:, 0], panels, strict=True):
        parts = sorted({name for mode in modes for name in data[mode] if name not in ("total_cores", "others_cores")})
        width = 0.8 / len(modes)
        names = [*parts, "total_cores"]
        for index, mode in enumerate(modes):
            medians = [data[mode].get(name, {"median": 0.0})["median"] for name in names]
            low = [m - data[mode].get(n, {"min": 0.0})["min"] for n, m in zip(names, medians, strict=True)]
            high = [data[mode].get(n, {"max": 0.0})["max"] - m for n, m in zip(names, medians, strict=True)]
            axis.bar(
                [i + index * width for i in range(len(names))], medians, width, yerr=[low, high], capsize=4, label=mode
            )
        axis.axhline(0.10, color="red", linestyle="--", linewidth=1, label="goal: 0.10 core in total")
        axis.set_xticks([i + width * (len(modes) - 1) / 2 for i in range(len(names))], [*parts, "total"], fontsize=7)
        axis.set_ylabel("cores (CPU s per s)")
        axis.set_title(f"{title}: CPU per process, median, bars min to max", fontsize=9)
        axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


if __name__ == "__main__":
    exit_on_sigterm()
    raise SystemExit(main())
