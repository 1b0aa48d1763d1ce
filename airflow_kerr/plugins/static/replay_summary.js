// A DAG run's replay summary as a person reads it: what was (or, in a dry run, would be) replayed, parked and
// dropped, by exception class and action. It reads the run's task instances and their XCom through Airflow's REST
// API with the user's own session, so Airflow's permissions apply as on its own pages.
"use strict";

const AIRFLOW = location.pathname.replace(/\/kerr\/replay-summary\/?$/, "");
const REPLAY_OPERATOR = "DeadLetterQueueReplayOperator";
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

async function api(path) {
  const response = await fetch(`${AIRFLOW}/api/v2${path}`, { credentials: "same-origin" });
  if (!response.ok) throw Object.assign(new Error(`${response.status} ${response.statusText}`), { status: response.status });
  return response.json();
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

async function start() {
  const params = new URLSearchParams(location.search);
  const dag = params.get("dag_id");
  const run = params.get("run_id");
  const status = document.getElementById("status");
  if (!dag || !run) {
    status.textContent = "Open this tab from a DAG run.";
    return;
  }
  const base = `/dags/${encodeURIComponent(dag)}/dagRuns/${encodeURIComponent(run)}`;
  try {
    const { task_instances: tasks } = await api(`${base}/taskInstances`);
    const replays = tasks.filter((t) => t.operator === REPLAY_OPERATOR || t.operator_name === REPLAY_OPERATOR);
    if (!replays.length) {
      status.textContent = "This run has no DLQ replay task, so there is no replay summary.";
      return;
    }
    const found = [];
    for (const task of replays) {
      try {
        const xcom = await api(`${base}/taskInstances/${encodeURIComponent(task.task_id)}/xcomEntries/return_value`);
        const value = typeof xcom.value === "string" ? JSON.parse(xcom.value) : xcom.value;
        found.push(render(task.task_id, value));
      } catch (error) {
        found.push(element("p", { class: "note", text: `${task.task_id} (${task.state || "not started"}): no summary yet.` }));
      }
    }
    status.textContent = "";
    document.getElementById("summaries").replaceChildren(...found);
  } catch (error) {
    status.textContent = `The run could not be read: ${error.message}`;
  }
}

start();
