// The DLQ view's page: lists DLQ topics, adds up the bounded summary chunks the server returns, shows the newest
// dead letters, and triggers the replay DAG with the selection through Airflow's REST API (the user's own session).
// Every value from Kafka is put on the page as text (textContent), never as HTML.
"use strict";

const KERR = location.pathname.replace(/\/dead-letters\/?$/, "");
const AIRFLOW = KERR.replace(/\/kerr$/, "");
const DIMENSIONS = ["exception_class", "stage", "source_topic", "pipeline", "header_set"];
// The dialects the server counts and selects by (its header_set names), as a person knows their writers.
const DIALECTS = {
  connect: "Kafka Connect",
  dlq: "KIP-1191 share group",
  streams: "Kafka Streams",
  spring: "Spring Kafka",
  schema_registry: "Schema Registry rule",
  none: "No error headers",
};
const $ = (selector) => document.querySelector(selector);

const state = {
  settings: null, topic: null, generation: 0, known: {}, counts: {}, timeline: {}, chunk: null, run: null, formats: null,
};
// A run's tab (Airflow's Dead letters tab of a task instance or DAG run): the page names the run in every request,
// and the server narrows counts and samples to exactly the DLQ offsets that run wrote.
const RUN_KEYS = ["dag_id", "run_id", "task_id", "map_index"];

function element(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (name === "text") node.textContent = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value);
  }
  for (const child of children) node.append(child);
  return node;
}

function showError(message) {
  const box = $("#error");
  box.textContent = message || "";
  box.hidden = !message;
}

// How many times a request the server answered 429 (busy) is asked again before the page shows the error.
const BUSY_TRIES = 30;

async function getJson(path, params = {}) {
  const query = new URLSearchParams(
    Object.entries({ kafka_config_id: $("#conn").value, ...(state.run ? state.run.query : {}), ...params }).filter(
      ([, v]) => v !== "" && v != null,
    ),
  );
  let response = await fetch(`${KERR}${path}?${query}`, { credentials: "same-origin" });
  // 429: the server is reading Kafka for as many questions as it allows at once; wait as it says, ask again.
  for (let tries = 1; response.status === 429 && tries < BUSY_TRIES; tries++) {
    const wait = Math.max(1, Number(response.headers.get("Retry-After")) || 2);
    await new Promise((resolve) => setTimeout(resolve, wait * 1000));
    response = await fetch(`${KERR}${path}?${query}`, { credentials: "same-origin" });
  }
  const body = await response.json().catch(() => ({ detail: `${response.status} ${response.statusText}` }));
  if (!response.ok) throw new Error(typeof body.detail === "string" ? body.detail : JSON.stringify(body.detail));
  return body;
}

const number = (n) => (n == null ? "–" : Number(n).toLocaleString("en-US"));
const when = (ms) => (ms == null ? "–" : new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC"));
// A count's key as the page shows it: a dialect by its writer's name, anything else as it is.
const shownKey = (dimension, key) => (dimension === "header_set" && DIALECTS[key] ? DIALECTS[key] : key);

// A long dotted name (a Java class, a topic) that may wrap after its dots, dashes and underscores; same text.
function breakable(text) {
  const node = element("span");
  for (const part of String(text).split(/(?<=[._$-])/)) node.append(part, element("wbr"));
  return node;
}

// A filter's options before any count arrives: "any", and every dialect (the server knows no others).
function resetOptions(dimension) {
  const options = [element("option", { value: "", text: "any" })];
  if (dimension === "header_set") {
    for (const [key, name] of Object.entries(DIALECTS)) options.push(element("option", { value: key, text: name }));
  }
  $(`#selection [name=${dimension}]`).replaceChildren(...options);
}

function selection() {
  const form = new FormData($("#selection"));
  const chosen = {};
  for (const key of DIMENSIONS) if (form.get(key)) chosen[key] = form.get(key);
  for (const key of ["start", "end"]) {
    const value = form.get(key);
    if (value) chosen[key] = String(Date.parse(`${value.length === 16 ? `${value}:00` : value}Z`));
  }
  return chosen;
}

async function loadTopics() {
  showError("");
  const body = $("#topics tbody");
  body.replaceChildren();
  $("#topics-note").textContent = "Reading the topics…";
  try {
    const { topics } = await getJson("/api/topics");
    $("#topics-note").textContent = topics.length
      ? "Click a topic to see its dead letters."
      : "No dead letter queue found: none is configured ([kerr] dead_letter_topics) and no topic carries error headers.";
    for (const topic of topics) {
      const why = [topic.configured && "configured", topic.discovered && "error headers"].filter(Boolean).join(", ");
      body.append(
        element(
          "tr",
          { onclick: () => openTopic(topic.name), "data-topic": topic.name },
          element("td", {}, element("a", { href: `?topic=${encodeURIComponent(topic.name)}`, text: topic.name,
            onclick: (event) => { event.preventDefault(); openTopic(topic.name); } })),
          element("td", { class: "num", text: topic.exists === false ? "does not exist" : number(topic.records) }),
          element("td", { text: why }),
        ),
      );
    }
  } catch (error) {
    $("#topics-note").textContent = "";
    showError(`Could not list the topics: ${error.message}`);
  }
}

function openTopic(topic) {
  state.topic = topic;
  state.known = Object.fromEntries(DIMENSIONS.map((d) => [d, new Set()]));
  const address = new URLSearchParams({ ...(state.run ? state.run.query : {}), topic });
  history.replaceState(null, "", `?${address}`);
  $("#dlq").hidden = false;
  $("#dlq-title").textContent = topic;
  $("#group").value = state.run ? runGroup(topic) : `kerr-replay.${topic}`;
  $("#selection").reset();
  for (const key of DIMENSIONS) resetOptions(key);
  refresh();
  loadBacklog();
}

function refresh() {
  const generation = ++state.generation;
  state.counts = Object.fromEntries(DIMENSIONS.map((d) => [d, {}]));
  state.timeline = {};
  state.matched = 0;
  state.chunk = null;
  state.formats = null;
  renderCounts();
  countAll(generation, selection());
  loadSamples(generation, selection());
}

// One chunk after another until the server says the count is complete; a newer selection stops an older loop.
async function countAll(generation, chosen) {
  let cursor = null;
  try {
    do {
      const chunk = await getJson(`/api/topics/${encodeURIComponent(state.topic)}/summary`, { ...chosen, cursor });
      if (generation !== state.generation) return;
      add(chunk);
      cursor = chunk.cursor;
    } while (cursor);
  } catch (error) {
    if (generation === state.generation) showError(`Could not count ${state.topic}: ${error.message}`);
  }
}

function add(chunk) {
  state.chunk = chunk;
  state.matched += chunk.matched;
  for (const dimension of DIMENSIONS) {
    for (const [key, n] of Object.entries(chunk.counts[dimension] || {})) {
      state.counts[dimension][key] = (state.counts[dimension][key] || 0) + n;
      state.known[dimension].add(key);
    }
  }
  for (const [bucket, n] of Object.entries(chunk.timeline || {})) state.timeline[bucket] = (state.timeline[bucket] || 0) + n;
  renderCounts();
}

function renderCounts() {
  const chunk = state.chunk;
  $("#total").textContent = state.run ? number(runRecords(state.topic)) : chunk ? number(chunk.total) : "–";
  $("#matched").textContent = chunk ? number(state.matched) : "–";
  $("#progress").textContent = !chunk
    ? "Counting…"
    : chunk.complete
      ? state.run
        ? `All ${number(runRecords(state.topic))} records the run wrote counted (offsets as it recorded them).`
        : `All ${number(chunk.total)} records counted.`
      : `Counted ${number(chunk.position)} of ${number(chunk.total)} records so far: the figures below are a sample ` +
        "until the count completes.";
  const chosen = selection();
  for (const dimension of DIMENSIONS) {
    const table = $(`#by-${dimension}`);
    const rows = Object.entries(state.counts[dimension] || {}).sort((a, b) => b[1] - a[1]);
    const top = rows.length ? rows[0][1] : 1;
    table.replaceChildren(
      ...rows.slice(0, 15).map(([key, n]) =>
        element(
          "tr",
          {
            class: chosen[dimension] === key ? "selected" : "",
            "data-key": key,
            onclick: () => choose(dimension, key),
          },
          element("td", {}, breakable(shownKey(dimension, key))),
          element("td", { class: "num", text: number(n) }),
          element("td", { class: "bar" }, element("span", { style: `width:${Math.max(2, (100 * n) / top)}%` })),
        ),
      ),
    );
    if (!rows.length) table.replaceChildren(element("tr", {}, element("td", { class: "note", text: "none" })));
    const select = $(`#selection [name=${dimension}]`);
    const present = new Set([...select.options].map((o) => o.value));
    for (const key of [...(state.known[dimension] || [])].sort()) {
      if (!present.has(key)) select.append(element("option", { value: key, text: shownKey(dimension, key) }));
    }
  }
  renderTimeline();
}

function choose(dimension, key) {
  const select = $(`#selection [name=${dimension}]`);
  select.value = select.value === key ? "" : key;
  refresh();
}

function renderTimeline() {
  const svg = $("#timeline");
  svg.replaceChildren();
  const chunk = state.chunk;
  const entries = Object.entries(state.timeline).map(([b, n]) => [Number(b), n]).sort((a, b) => a[0] - b[0]);
  if (!chunk || !entries.length) return;
  const step = chunk.bucket_ms;
  const first = Math.min(entries[0][0], Math.floor((chunk.oldest_ms ?? entries[0][0]) / step) * step);
  const last = Math.max(entries[entries.length - 1][0], Math.floor((chunk.newest_ms ?? first) / step) * step);
  const buckets = Math.round((last - first) / step) + 1;
  const width = svg.clientWidth || 800;
  const height = 140;
  const top = Math.max(...entries.map((e) => e[1]));
  const barWidth = Math.min(48, Math.max(1, (width - 10) / buckets - 1));
  $("#timeline-title").textContent = `Failures over time (per ${label(step)}, by the dead letter's timestamp)`;
  const ns = "http://www.w3.org/2000/svg";
  for (const [bucket, n] of entries) {
    const x = ((bucket - first) / step) * (barWidth + 1);
    const h = Math.max(1, ((height - 30) * n) / top);
    const rect = document.createElementNS(ns, "rect");
    rect.setAttribute("x", x);
    rect.setAttribute("y", height - 18 - h);
    rect.setAttribute("width", barWidth);
    rect.setAttribute("height", h);
    const tip = document.createElementNS(ns, "title");
    tip.textContent = `${when(bucket)}: ${number(n)}`;
    rect.append(tip);
    svg.append(rect);
  }
  for (const [x, ms, anchor] of [[0, first, "start"], [width, last + step, "end"]]) {
    const text = document.createElementNS(ns, "text");
    text.setAttribute("x", x);
    text.setAttribute("y", height - 4);
    text.setAttribute("text-anchor", anchor);
    text.textContent = when(ms);
    svg.append(text);
  }
}

function label(ms) {
  const units = [[86400000, "day"], [3600000, "hour"], [60000, "minute"], [1000, "second"]];
  for (const [size, name] of units) if (ms % size === 0) return ms === size ? name : `${ms / size} ${name}s`;
  return `${ms} ms`;
}

async function loadBacklog() {
  $("#unread").textContent = "–";
  const group = $("#group").value.trim();
  if (!group || state.run) return; // the group's backlog is the whole DLQ's, not the run's: not shown on a run's tab
  try {
    const backlog = await getJson(`/api/topics/${encodeURIComponent(state.topic)}/backlog`, { group });
    $("#unread").textContent = number(backlog.unread);
  } catch (error) {
    showError(`Could not read the group's offsets: ${error.message}`);
  }
}

async function loadSamples(generation, chosen) {
  const box = $("#samples");
  box.replaceChildren(element("p", { class: "note", text: "Reading the newest dead letters…" }));
  try {
    const sample = await getJson(`/api/topics/${encodeURIComponent(state.topic)}/samples`, {
      ...chosen,
      limit: 20,
      schema_registry_conn_id: $("#registry").value,
    });
    if (generation !== state.generation) return;
    // The replay's key/value format for this selection, as the server judged it from these samples.
    state.formats = { ...sample.replay_formats, of: sample.records.length };
    $("#samples-note").textContent = sample.complete
      ? `(${sample.records.length} shown)`
      : `(${sample.records.length} shown, from the newest ${number(sample.scanned)} records examined)`;
    box.replaceChildren(...sample.records.map(renderSample));
    if (!sample.records.length) box.replaceChildren(element("p", { class: "note", text: "None match." }));
  } catch (error) {
    if (generation === state.generation) box.replaceChildren(element("p", { class: "error", text: error.message }));
  }
}

// The registry formats' names, for the line saying which schema a value was decoded with.
const FORMATS = { avro: "Avro", protobuf: "Protobuf", json_schema: "JSON Schema" };

function payload(name, part) {
  if (!part || (part.text == null && part.base64 == null)) return element("div", { class: "note", text: `${name}: null` });
  const text = part.text != null ? part.text : `base64: ${part.base64}`;
  const more = part.truncated ? ` (first part of ${number(part.bytes)} bytes)` : "";
  const box = element("div", {}, element("div", { class: "note", text: `${name}${more}` }));
  if (part.schema) {
    const s = part.schema;
    const subject = s.subject != null ? `subject ${s.subject}, version ${s.version}, ` : "";
    box.append(element("div", { class: "note schema", text: `${FORMATS[s.format] || s.format}: ${subject}schema id ${s.id}` }));
  }
  if (part.error) box.append(element("div", { class: "error payload-error", role: "status", text: part.error }));
  box.append(element("pre", { text }));
  return box;
}

// What a dialect carries beyond Connect's fields, shown when the record has it.
function facts(record) {
  const rows = [
    ["Error handler received", record.wrapper_class],
    ["Consumer group", record.group],
    ["Rule", record.rule],
    ["Original record's time", record.source_timestamp_ms == null ? null : when(record.source_timestamp_ms)],
  ].filter(([, value]) => value != null && value !== "");
  if (!rows.length) return null;
  return element(
    "dl",
    { class: "facts" },
    ...rows.flatMap(([name, value]) => [element("dt", { text: name }), element("dd", { text: value })]),
  );
}

function renderSample(record) {
  const source = record.source || {};
  const dialect = record.header_set || "none";
  const where = [
    `DLQ ${record.partition}/${record.offset}`,
    `failed ${when(record.timestamp_ms)}`,
    source.topic != null ? `source ${source.topic}/${source.partition ?? "?"}/${source.offset ?? "?"}` : "no source topic",
    record.stage && `stage ${record.stage}`,
    record.pipeline && `pipeline ${record.pipeline}`,
  ].filter(Boolean).join(" · ");
  const headers = element(
    "table",
    {},
    ...record.headers.map((h) => element("tr", {}, element("td", { text: h.name }), element("td", { text: h.value ?? "null" }))),
  );
  const card = element(
    "article",
    { class: "sample", "data-offset": `${record.partition}/${record.offset}` },
    element(
      "div",
      { class: "where" },
      element("span", {
        class: "dialect",
        "data-header-set": dialect,
        title: "Whose error headers this dead letter carries",
        text: DIALECTS[dialect] || dialect,
      }),
      " ",
      element("span", { text: where }),
    ),
    element("div", { class: "exception", text: record.exception_class || "(no exception class)" }),
    element("div", { class: "message", text: record.exception_message || "" }),
  );
  const extra = facts(record);
  if (extra) card.append(extra);
  card.append(
    payload("Value", record.value),
    payload("Key", record.key),
    element("details", {}, element("summary", { text: `Headers (${record.headers.length})` }), headers),
  );
  if (record.stacktrace) {
    card.append(element("details", {}, element("summary", { text: "Stack trace" }), element("pre", { text: record.stacktrace })));
  }
  return card;
}

// The replay form, built from the same field list as the replay DAG's Params and prefilled with the selection.
function openReplay() {
  const chosen = selection();
  const prefill = {
    kafka_config_id: $("#conn").value,
    dlq_topic: state.topic,
    replay_group: $("#group").value.trim() || null,
    dlq_offsets: state.run ? runOffsets(state.topic) || null : null,
    source_topics: chosen.source_topic ? [chosen.source_topic] : [],
    stages: chosen.stage ? [chosen.stage] : [],
    exception_class_regex: chosen.exception_class ? `^${chosen.exception_class.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}$` : null,
    start_time: chosen.start ? new Date(Number(chosen.start)).toISOString() : null,
    end_time: chosen.end ? new Date(Number(chosen.end)).toISOString() : null,
    dry_run: true,
    // The registry this page decodes through, and the formats its samples were decoded in (bytes unless one).
    schema_registry_conn_id: $("#registry").value.trim() || state.settings.schema_registry_conn_id || null,
    key_format: state.formats ? state.formats.key_format : "bytes",
    value_format: state.formats ? state.formats.value_format : "bytes",
  };
  const box = $("#replay-fields");
  box.replaceChildren();
  $("#replay-problems").replaceChildren();
  for (const field of state.settings.replay_form) {
    const value = field.name in prefill ? prefill[field.name] : field.default;
    box.append(fieldInput(field, value));
  }
  const decoded = ["value", "key"].filter((part) => prefill[`${part}_format`] !== "bytes");
  if (decoded.length) {
    const named = decoded.map((part) => `${part}s ${FORMATS[prefill[`${part}_format`]]}`).join(", ");
    box.prepend(element("p", { class: "note", text: `Formats prefilled from the ${state.formats.of} samples shown ` +
      `(${named}): a fix receives them decoded, and a selected record in another format is parked as undecodable.` }));
  }
  if (chosen.pipeline) {
    box.prepend(element("p", { class: "note", text: `The replay has no pipeline setting: records of every pipeline ` +
      `that match the other fields are selected (the view's pipeline filter was ${chosen.pipeline}).` }));
  }
  if (chosen.header_set) {
    const dialect = shownKey("header_set", chosen.header_set);
    box.prepend(element("p", { class: "note", text: `The replay has no dialect setting: records of every dialect ` +
      `that match the other fields are selected (the view's dialect filter was ${dialect}).` }));
  }
  $("#replay-dialog").showModal();
}

function types(field) {
  const type = field.schema.type;
  return Array.isArray(type) ? type : [type];
}

function fieldInput(field, value) {
  const kinds = types(field);
  const title = element("span", { text: field.title });
  const help = element("span", { class: "help", text: field.description });
  let input;
  if (kinds.includes("boolean")) {
    input = element("input", { type: "checkbox", name: field.name, "aria-label": field.title });
    input.checked = Boolean(value);
    return element("label", {}, input, " ", title, help);
  }
  if (kinds.includes("array") || kinds.includes("object")) {
    input = element("textarea", { name: field.name, rows: "2" });
    input.value = kinds.includes("array") ? (value || []).join("\n") : value && Object.keys(value).length ? JSON.stringify(value) : "";
  } else if (field.schema.enum) {
    input = element("select", { name: field.name }, ...field.schema.enum.map((o) => element("option", { value: o ?? "", text: o ?? "" })));
    input.value = value ?? "";
  } else {
    const numeric = kinds.includes("integer") || kinds.includes("number");
    input = element("input", { type: numeric ? "number" : "text", name: field.name });
    if (numeric) input.setAttribute("step", kinds.includes("integer") ? "1" : "any");
    input.value = value ?? "";
  }
  input.setAttribute("aria-label", field.title);
  return element("label", {}, title, help, input);
}

// A text field's value as its schema types it (empty: the type's empty value, or null), its problems into `problems`.
function fromText(field, raw, problems) {
  const kinds = types(field);
  if (raw === "") return kinds.includes("array") ? [] : kinds.includes("object") ? {} : null;
  if (kinds.includes("array")) return raw.split(/\n|,/).map((s) => s.trim()).filter(Boolean);
  if (kinds.includes("object")) {
    try { return JSON.parse(raw); } catch { problems.push(`${field.title}: ${raw} is not a JSON object`); return raw; }
  }
  if (!kinds.includes("integer") && !kinds.includes("number")) return raw;
  const value = Number(raw);
  const s = field.schema;
  if (!Number.isFinite(value) || (kinds.includes("integer") && !Number.isInteger(value))) {
    problems.push(`${field.title}: ${raw} is not ${kinds.includes("integer") ? "a whole number" : "a number"}`);
  } else if (s.minimum != null && value < s.minimum) problems.push(`${field.title}: ${raw} is below ${s.minimum}`);
  else if (s.exclusiveMinimum != null && value <= s.exclusiveMinimum) problems.push(`${field.title}: must be above ${s.exclusiveMinimum}`);
  else if (s.maximum != null && value > s.maximum) problems.push(`${field.title}: ${raw} is above ${s.maximum}`);
  return value;
}

// What the form can check before Airflow does: required fields, numbers and their bounds, JSON, ordered ranges.
function readReplayForm() {
  const conf = {};
  const problems = [];
  for (const field of state.settings.replay_form) {
    const input = $(`#replay-fields [name=${field.name}]`);
    const value = input.type === "checkbox" ? input.checked : fromText(field, input.value.trim(), problems);
    if (value === null && !types(field).includes("null")) problems.push(`${field.title}: required`);
    conf[field.name] = value;
  }
  for (const [from, until, what] of [["start_time", "end_time", "time"], ["start_offset", "end_offset", "offset"]]) {
    const a = conf[from];
    const b = conf[until];
    if (a != null && b != null) {
      const [x, y] = what === "time" ? [Date.parse(a), Date.parse(b)] : [a, b];
      if (Number.isNaN(x) || Number.isNaN(y)) problems.push(`${what} range: ${a} / ${b} is not ISO-8601`);
      else if (x >= y) problems.push(`${what} range: the start ${a} must be before the end ${b}`);
    }
  }
  return { conf, problems };
}

async function triggerReplay(event) {
  event.preventDefault();
  const { conf, problems } = readReplayForm();
  const list = $("#replay-problems");
  list.replaceChildren(...problems.map((p) => element("li", { text: p })));
  if (problems.length) return;
  const dag = state.settings.replay_dag_id;
  const described = Object.entries(selectionForNote()).map(([k, v]) => `${k}=${v}`).join(", ") || "everything";
  const from = state.run ? `, the dead letters of ${state.run.dag_id} run ${state.run.run_id}` : "";
  const response = await fetch(`${AIRFLOW}/api/v2/dags/${encodeURIComponent(dag)}/dagRuns`, {
    method: "POST",
    credentials: "same-origin",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ logical_date: null, conf, note: `From the Dead letters view: ${state.topic}${from}, ${described}` }),
  });
  const body = await response.json().catch(() => ({}));
  if (!response.ok) {
    const detail = Array.isArray(body.detail) ? body.detail.map((d) => d.msg).join("; ") : body.detail || response.statusText;
    list.replaceChildren(element("li", { text: `Airflow refused the run: ${detail}` }));
    return;
  }
  openInAirflow(`${AIRFLOW}/dags/${encodeURIComponent(dag)}/runs/${encodeURIComponent(body.dag_run_id)}`);
}

// Airflow shows this page in an iframe sandboxed without top navigation, but of the same origin: the page asks
// Airflow's own router to go to the path, as its links do (history entry, then the popstate its router listens to).
function openInAirflow(path) {
  const top = window.top || window;
  if (top === window) {
    location.assign(path);
    return;
  }
  top.history.pushState({}, "", path);
  top.dispatchEvent(new PopStateEvent("popstate", { state: {} }));
}

function selectionForNote() {
  const chosen = selection();
  for (const key of ["start", "end"]) if (chosen[key]) chosen[key] = new Date(Number(chosen[key])).toISOString();
  return chosen;
}

// The tasks of the tab's run that wrote to `topic` (a DAG run's tasks may write to different DLQs).
const runTasks = (topic) => (state.run ? state.run.tasks.filter((task) => task.topic === topic) : []);
const runRecords = (topic) => runTasks(topic).reduce((sum, task) => sum + task.records, 0);
const runOffsets = (topic) => runTasks(topic).map((task) => task.offsets).filter(Boolean).join(", ");
// A replay group of the run's own, so "Replay these…" reads its offsets whatever the DLQ's usual group has read.
function runGroup(topic) {
  const tasks = runTasks(topic);
  const name = tasks.length === 1 && tasks[0].job_run_id ? tasks[0].job_run_id : `${state.run.dag_id}.${state.run.run_id}`;
  return `kerr-replay.${topic}.${name}`.replace(/[^A-Za-z0-9._-]+/g, "_").slice(0, 240);
}

// A run's tab: what the run's error-aware tasks wrote, read from the XCom the operator left; then its first DLQ.
async function startRun(params) {
  state.run = { query: Object.fromEntries(RUN_KEYS.filter((k) => params.get(k)).map((k) => [k, params.get(k)])) };
  $("#topics-section").hidden = true;
  $("#replay").textContent = "Replay these…";
  $("#total-label").textContent = "written by this run";
  const note = $("#run-note");
  note.hidden = false;
  let body;
  try {
    body = await getJson("/api/run");
  } catch (error) {
    showError(`Could not read which dead letters this run wrote: ${error.message}`);
    return;
  }
  state.run.dag_id = body.dag_id;
  state.run.run_id = body.run_id;
  state.run.tasks = body.tasks;
  const who = body.task_id ? `Task ${body.task_id} of run ${body.run_id}` : `Run ${body.run_id}`;
  if (body.tasks.length && body.tasks.every((task) => task.running)) {
    note.textContent = `${who} is still running its job: the dead letters it writes show here once the job ends.`;
    return;
  }
  if (!body.tasks.length) {
    note.textContent = `${who} left no record of dead letters: it is not an error-aware task with a DLQ topic, ` +
      "or no try of it has finished yet.";
    return;
  }
  const topics = [...new Set(body.tasks.map((task) => task.topic))];
  const total = body.tasks.reduce((sum, task) => sum + task.records, 0);
  note.textContent = `${who} wrote ${number(total)} dead letters to ${topics.join(", ")}. Only those are shown ` +
    "here, found by the DLQ offsets the run recorded.";
  $("#conn").value = params.get("kafka_config_id") || body.tasks[0].kafka_config_id || $("#conn").value;
  if (total === 0) return;
  const chosen = params.get("topic");
  openTopic(topics.includes(chosen) ? chosen : topics.find((t) => runRecords(t) > 0) || topics[0]);
}

async function start() {
  try {
    state.settings = await (await fetch(`${KERR}/api/settings`, { credentials: "same-origin" })).json();
  } catch (error) {
    showError(`The view's settings could not be read: ${error.message}`);
    return;
  }
  const params = new URLSearchParams(location.search);
  $("#conn").value = params.get("kafka_config_id") || state.settings.kafka_config_id;
  $("#registry").value = params.get("schema_registry_conn_id") || state.settings.schema_registry_conn_id || "";
  $("#reload").addEventListener("click", () => { if (!state.run) loadTopics(); if (state.topic) openTopic(state.topic); });
  $("#selection").addEventListener("change", refresh);
  $("#clear").addEventListener("click", () => { $("#selection").reset(); refresh(); });
  $("#group").addEventListener("change", loadBacklog);
  $("#replay").addEventListener("click", openReplay);
  $("#replay-submit").addEventListener("click", triggerReplay);
  if (params.get("dag_id") || params.get("run_id")) {
    await startRun(params);
    return;
  }
  await loadTopics();
  if (params.get("topic")) openTopic(params.get("topic"));
}

start();
