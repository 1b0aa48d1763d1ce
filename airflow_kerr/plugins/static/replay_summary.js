// A DAG run's replay summary as a person reads it: what was (or, in a dry run, would be) replayed, parked and
// dropped, by exception class and action. It reads /kerr/api/replay-summary with the user's own session (the route
// asks Airflow whether the user may read the DAG's XCom): one summary per replay, a fanned-out replay's mapped
// tasks already added up, each task listed below it.
"use strict";

const KERR = location.pathname.replace(/\/replay-summary\/?$/, "");
const COUNTS = [
  ["scanned", "read"],
  ["selected", "selected"],
  ["would_replay", "would replay"],
  ["replayed", "replayed"],
  ["would_park", "would park"],
  ["parked", "parked"],
  ["would_drop", "would drop"],
  ["dropped", "dropped"],
  ["skipped", "not selected"],
  ["transactions", "transactions"],
];

// What a dry run did not do: it writes nothing, so only its "would …" figures are shown.
const DONE = ["replayed", "parked", "dropped", "transactions"];

function element(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (name === "text") node.textContent = value;
    else node.setAttribute(name, value);
  }
  for (const child of children) node.append(child);
  return node;
}

async function replaysOf(dag, run) {
  const query = new URLSearchParams({ dag_id: dag, run_id: run });
  const response = await fetch(`${KERR}/api/replay-summary?${query}`, { credentials: "same-origin" });
  if (!response.ok) {
    let detail = `${response.status} ${response.statusText}`;
    try {
      detail = (await response.json()).detail || detail;
    } catch (error) {
      // not JSON: the status line says enough
    }
    throw new Error(detail);
  }
  return (await response.json()).replays;
}

const number = (n) => Number(n).toLocaleString("en-US");

function render(taskId, summary) {
  const dry = Boolean(summary.dry_run);
  const heading = `${taskId}: ${dry ? "dry run" : "replay"} of ${summary.dlq_topic} (${summary.status})` +
    (dry ? ": nothing was written" : "");
  const figures = element(
    "div",
    { class: "totals" },
    ...COUNTS.filter(([key]) => summary[key] != null && !(dry && DONE.includes(key)))
      .map(([key, label]) => element("div", {}, element("span", { class: "big", text: number(summary[key]) }), element("span", { text: label }))),
  );
  const rows = (summary.breakdown || []).map((row) =>
    element(
      "tr",
      {},
      element("td", { text: dry && !String(row.action).startsWith("would") ? `would ${row.action}` : row.action }),
      element("td", { text: row.exception_class || "–" }),
      element("td", { text: row.stage || "–" }),
      element("td", { text: row.topic || "–" }),
      element("td", { text: row.reason || "" }),
      element("td", { class: "num", text: number(row.count) }),
    ),
  );
  const table = element(
    "table",
    { "aria-label": "Counts by exception class and action" },
    element("thead", {}, element("tr", {}, ...["Action", "Exception class", "Stage", "Target topic", "Reason", "Records"].map((t) => element("th", { text: t })))),
    element("tbody", {}, ...rows),
  );
  const section = element("section", {}, element("h2", { text: heading }), figures, element("h3", { text: "By exception class and action" }), table);
  if ((summary.park_examples || []).length) {
    section.append(element("h3", { text: dry ? "Would park, first of them" : "Parked, first of them" }),
      element("ul", {}, ...summary.park_examples.map((p) => element("li", { text: p }))));
  }
  for (const note of summary.notes || []) section.append(element("p", { class: "note", text: note }));
  return section;
}

// The mapped tasks of a fanned-out replay, one row each, below the whole replay's figures.
function piecesOf(replay) {
  const rows = replay.tasks.map((task) =>
    element(
      "tr",
      {},
      element("td", { text: `${replay.task_id}[${task.map_index}]` }),
      element("td", { text: task.partitions.length ? task.partitions.join(", ") : "–" }),
      element("td", { text: task.state || "not started" }),
      element("td", { class: "num", text: String(task.try_number) }),
      element("td", { text: task.status || "no summary yet" }),
    ),
  );
  const table = element(
    "table",
    { "aria-label": "Mapped replay tasks" },
    element("thead", {}, element("tr", {}, ...["Task", "DLQ partitions", "State", "Try", "Replay status"].map((t) => element("th", { text: t })))),
    element("tbody", {}, ...rows),
  );
  const nodes = [element("h3", { text: `${replay.tasks.length} mapped replay tasks` }), table];
  const reported = replay.tasks.filter((task) => task.status).length;
  if (reported < replay.tasks.length) {
    nodes.push(element("p", { class: "note", text: `${reported} of ${replay.tasks.length} tasks have reported; the figures above grow as the others finish.` }));
  }
  if (replay.tasks.some((task) => task.try_number > 1)) {
    nodes.push(element("p", { class: "note", text: "A retried task counts what its last try read; what an earlier try committed is behind the committed offsets and was not read again." }));
  }
  return nodes;
}

async function start() {
  const params = new URLSearchParams(location.search);
  const dag = params.get("dag_id");
  const run = params.get("run_id");
  const status = document.getElementById("status");
  if (!dag || !run) {
    status.textContent = "Open this tab from a DAG run.";
    return;
  }
  try {
    const replays = await replaysOf(dag, run);
    if (!replays.length) {
      status.textContent = "This run has no DLQ replay task, so there is no replay summary.";
      return;
    }
    const found = [];
    for (const replay of replays) {
      const mapped = replay.tasks.some((task) => task.map_index >= 0);
      if (!replay.summary) {
        const states = [...new Set(replay.tasks.map((task) => task.state || "not started"))].join(", ");
        found.push(element("p", { class: "note", text: `${replay.task_id} (${states}): no summary yet.` }));
        if (mapped) found.push(...piecesOf(replay));
        continue;
      }
      const section = render(replay.task_id, replay.summary);
      if (mapped) section.append(...piecesOf(replay));
      found.push(section);
    }
    status.textContent = "";
    document.getElementById("summaries").replaceChildren(...found);
  } catch (error) {
    status.textContent = `The run could not be read: ${error.message}`;
  }
}

start();
