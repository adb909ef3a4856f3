// The console's page: runs pushed over server-sent events, a run's detail on demand.
const runs = new Map();
const history = new Map(); // "<ns>.<name>" -> revision -> [figures windows]
let selected = null;

const $ = (sel) => document.querySelector(sel);
const el = (tag, attrs = {}, ...children) => {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
  node.append(...children);
  return node;
};

function age(since) {
  if (!since) return "";
  const s = Math.max(0, (Date.now() - Date.parse(since)) / 1000);
  return s < 120 ? `${s.toFixed(0)}s` : s < 7200 ? `${(s / 60).toFixed(0)}m` : `${(s / 3600).toFixed(0)}h`;
}

function renderRuns() {
  const body = $("#runs tbody");
  body.replaceChildren();
  for (const run of [...runs.values()].sort((a, b) => (a.namespace + a.name).localeCompare(b.namespace + b.name))) {
    const key = `${run.namespace}.${run.name}`;
    const open = el("button", { type: "button", "aria-label": `Open ${run.name}` }, "Open");
    open.addEventListener("click", () => select(key));
    const row = el("tr", { "data-run": key },
      el("td", {}, run.namespace), el("td", {}, run.name),
      el("td", { class: `phase phase-${run.phase}` }, run.phase),
      el("td", { class: "revision" }, run.revision),
      el("td", {}, run.canaryRevision ? `${run.canaryWeight}% → ${run.canaryRevision}` : ""),
      el("td", {}, age(run.since)), el("td", { class: "trace" }, run.traceId || ""),
      el("td", {}, open));
    if (key === selected) row.classList.add("selected");
    body.append(row);
  }
}

function onFigures(figures) {
  for (const [workflow, revisions] of Object.entries(figures)) {
    const perRevision = history.get(workflow) || new Map();
    for (const [revision, window] of Object.entries(revisions)) {
      const points = perRevision.get(revision) || [];
      if (!points.length || points[points.length - 1].at !== window.at) points.push(window);
      perRevision.set(revision, points.slice(-60));
    }
    history.set(workflow, perRevision);
  }
  if (selected) renderFigures();
}

function sparkline(points, field, label, unit) {
  const values = points.map((p) => p[field] ?? 0);
  const max = Math.max(1e-9, ...values);
  const w = 240, h = 48;
  const path = values.map((v, i) => `${(i / Math.max(1, values.length - 1)) * w},${h - (v / max) * (h - 4)}`).join(" ");
  const last = values.length ? values[values.length - 1] : 0;
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("width", w); svg.setAttribute("height", h + 14);
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", `${label}: ${last.toFixed(2)} ${unit}`);
  svg.innerHTML = `<polyline fill="none" stroke="#0b5cad" stroke-width="2" points="${path}"/>` +
    `<text x="0" y="${h + 12}">${label}: ${last.toFixed(2)} ${unit}</text>`;
  return svg;
}

function renderFigures() {
  const box = $("#figures");
  const perRevision = history.get(selected);
  if (!perRevision || !perRevision.size) { box.replaceChildren(el("p", {}, "No calls seen yet.")); return; }
  box.replaceChildren();
  for (const [revision, points] of perRevision) {
    box.append(el("h4", {}, `revision ${revision}`),
      sparkline(points, "rate", "calls/s", ""), sparkline(points, "p50Ms", "p50", "ms"),
      sparkline(points, "p95Ms", "p95", "ms"), sparkline(points, "errorPercent", "errors", "%"));
  }
}

async function renderTimeline(key) {
  const [ns, name] = key.split(/\.(.*)/s);
  const box = $("#timeline");
  const answer = await fetch(`/api/runs/${encodeURIComponent(ns)}/${encodeURIComponent(name)}/timeline`);
  const data = await answer.json();
  if (!answer.ok) { box.replaceChildren(el("p", { class: "error" }, data.error)); return; }
  box.replaceChildren();
  for (const saga of data.sagas) {
    const end = Math.max(...saga.steps.map((s) => s.start + s.durationS), saga.start + 0.001);
    const span = end - saga.start;
    const grid = el("div", { class: "gantt", role: "table", "aria-label": `saga ${saga.sagaId}` });
    for (const step of saga.steps) {
      const bar = el("div", { class: step.deadLetters ? "bar dead" : "bar" });
      bar.style.marginLeft = `${((step.start - saga.start) / span) * 100}%`;
      bar.style.width = `${(step.durationS / span) * 100}%`;
      const facts = `+${(step.start - saga.start).toFixed(3)}s, ${(step.durationS * 1000).toFixed(0)} ms` +
        `, ${step.retries} retries, ${step.deadLetters} dead letters`;
      grid.append(el("div", { class: "step", role: "rowheader" }, step.step), el("div", { role: "cell" }, bar),
        el("div", { role: "cell" }, facts));
    }
    const heading = el("h4", {}, `saga ${saga.sagaId}`);
    if (saga.traceId) heading.append(" ", el("span", { class: "saga-trace" }, `trace id ${saga.traceId}`));
    box.append(heading, grid);
  }
}

const runPath = (key) => {
  const [ns, name] = key.split(/\.(.*)/s);
  return `/api/runs/${encodeURIComponent(ns)}/${encodeURIComponent(name)}`;
};

// The playground's form: one field per property of the workflow's input schema the
// console could turn into a field; every change rewrites those keys of the JSON body and
// leaves the others (objects, arrays) to the textarea.
function formValue(field, input) {
  if (field.kind === "boolean") return input.checked;
  if (input.value === "") return undefined;
  if (field.kind === "number" || field.kind === "integer") return Number(input.value);
  if (field.kind === "enum") return field.options[Number(input.value)];
  return input.value;
}

function fieldInput(field) {
  const id = `input-${field.name}`;
  let input;
  if (field.kind === "enum") {
    input = el("select", { id, name: field.name }, el("option", { value: "" }, "—"));
    field.options.forEach((option, i) => input.append(el("option", { value: String(i) }, String(option))));
  } else if (field.kind === "boolean") {
    input = el("input", { id, name: field.name, type: "checkbox" });
  } else {
    const numeric = field.kind === "number" || field.kind === "integer";
    input = el("input", { id, name: field.name, type: numeric ? "number" : "text" });
    if (field.kind === "integer") input.setAttribute("step", "1");
    if (field.kind === "number") input.setAttribute("step", "any");
  }
  if (field.required) { input.required = true; input.setAttribute("aria-required", "true"); }
  if (field.description) input.setAttribute("title", field.description);
  return input;
}

function renderForm(form) {
  const box = $("#input-fields");
  box.replaceChildren();
  if (!form || !form.length) return;
  const sync = () => {
    let body;
    try { body = JSON.parse($("#invoke-body").value || "{}"); } catch { body = {}; }
    if (body === null || typeof body !== "object" || Array.isArray(body)) body = {};
    for (const field of form) {
      const value = formValue(field, box.querySelector(`[name="${CSS.escape(field.name)}"]`));
      if (value === undefined) delete body[field.name]; else body[field.name] = value;
    }
    $("#invoke-body").value = JSON.stringify(body, null, 2);
  };
  for (const field of form) {
    const input = fieldInput(field);
    input.addEventListener("input", sync);
    input.addEventListener("change", sync);
    const label = el("label", { for: input.id }, field.title + (field.required ? " (required)" : ""));
    box.append(label, input);
  }
}

// The workflow's DAG: one box per step, in columns by depth (a step sits right of every
// step it needs); each box names what it needs and, after an invoke, its timing and output.
function depths(steps) {
  const byId = new Map(steps.map((s) => [s.id, s]));
  const memo = new Map();
  const depth = (id) => {
    if (!memo.has(id)) memo.set(id, Math.max(-1, ...(byId.get(id)?.needs || []).map(depth)) + 1);
    return memo.get(id);
  };
  return new Map(steps.map((s) => [s.id, depth(s.id)]));
}

function renderDag(steps) {
  const box = $("#dag");
  box.replaceChildren();
  if (!steps || !steps.length) return;
  const level = depths(steps);
  const columns = Math.max(...level.values()) + 1;
  box.style.gridTemplateColumns = `repeat(${columns}, minmax(10rem, 1fr))`;
  const rows = new Map();
  for (const step of steps) {
    const column = level.get(step.id);
    const row = (rows.get(column) || 0) + 1;
    rows.set(column, row);
    const node = el("div", { class: "node", "data-step": step.id, role: "group", "aria-label": `step ${step.id}` },
      el("strong", {}, step.id), el("div", { class: "tool" }, step.tool),
      el("div", { class: "needs" }, step.needs.length ? `needs ${step.needs.join(", ")}` : "first"),
      el("div", { class: "timing" }), el("div", { class: "output" }));
    node.style.gridColumn = String(column + 1);
    node.style.gridRow = String(row);
    box.append(node);
  }
}

const OUTPUT_CHARS = 400;

function showStep(id, step) {
  const node = $(`#dag [data-step="${CSS.escape(id)}"]`);
  if (!node) return;
  const ms = Number(step.duration_ms ?? 0);
  node.querySelector(".timing").textContent = `${ms.toFixed(1)} ms${step.cached ? ", cached" : ""}`;
  let text = typeof step.output === "string" ? step.output : JSON.stringify(step.output, null, 2);
  if (text.length > OUTPUT_CHARS) text = `${text.slice(0, OUTPUT_CHARS)}… (${text.length} chars)`;
  node.querySelector(".output").replaceChildren(
    el("details", {}, el("summary", {}, "output"), el("pre", {}, text)));
  node.classList.add("done");
}

function clearSteps() {
  for (const node of document.querySelectorAll("#dag .node")) {
    node.classList.remove("done");
    node.querySelector(".timing").textContent = "";
    node.querySelector(".output").replaceChildren();
  }
}

// The steps of an answer: the JSON body's `steps`, or a streamed answer's `step` events.
function answerSteps(text) {
  try {
    const body = JSON.parse(text);
    return Object.entries((body && body.steps) || {});
  } catch { /* server-sent events */ }
  const found = [];
  for (const frame of text.split(/\r?\n\r?\n/)) {
    const lines = frame.split(/\r?\n/);
    if (!lines.includes("event: step")) continue;
    const data = lines.filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trim()).join("\n");
    try { const step = JSON.parse(data); found.push([step.step, step]); } catch { /* a broken frame */ }
  }
  return found;
}

let drawnDigest = "";

async function renderPlayground(key) {
  drawnDigest = (runs.get(key) || {}).specDigest || "";
  renderForm(null);
  renderDag(null);
  $("#workflow-note").textContent = "";
  const answer = await fetch(`${runPath(key)}/workflow`);
  const data = await answer.json();
  if (key !== selected) return;
  if (!answer.ok) { $("#workflow-note").textContent = data.error; return; }
  $("#workflow-note").textContent = `workflow ${data.name}@${data.version}`;
  renderForm(data.form);
  renderDag(data.steps);
}

// Where a run's status has them: its placement over backends and its shadow figures,
// drawn from the status JSON as it comes (keys shown as they are named there).
function cellText(value) {
  if (value === null || value === undefined) return "";
  if (typeof value === "number") return Number.isInteger(value) ? String(value) : value.toFixed(3);
  return typeof value === "object" ? JSON.stringify(value) : String(value);
}

function table(rows, label) {
  const columns = [...new Set(rows.flatMap((row) => Object.keys(row)))];
  return el("table", { "aria-label": label },
    el("thead", {}, el("tr", {}, ...columns.map((c) => el("th", { scope: "col" }, c)))),
    el("tbody", {}, ...rows.map((row) => el("tr", {}, ...columns.map((c) => el("td", { "data-col": c }, cellText(row[c])))))));
}

function renderPlacement(placement) {
  const box = $("#placement");
  box.replaceChildren();
  box.hidden = !Array.isArray(placement) || !placement.length;
  if (box.hidden) return;
  box.append(el("h3", {}, "Placement over backends"), table(placement, "placement"));
}

function renderShadow(shadow) {
  const box = $("#shadow");
  box.replaceChildren();
  box.hidden = !shadow || typeof shadow !== "object";
  if (box.hidden) return;
  const figures = Object.entries(shadow).filter(([, v]) => v === null || typeof v !== "object");
  box.append(el("h3", {}, "Shadow figures"),
    el("dl", { class: "figures" }, ...figures.flatMap(([k, v]) => [el("dt", {}, k), el("dd", { "data-figure": k }, cellText(v))])));
  const examples = Array.isArray(shadow.examples) ? shadow.examples : [];
  if (!examples.length) return;
  box.append(el("h4", {}, "Least similar pairs"));
  for (const example of examples) {
    box.append(el("div", { class: "pair", role: "group", "aria-label": `pair scored ${cellText(example.score)}` },
      el("div", {}, el("h5", {}, "input"), el("pre", {}, cellText(example.input))),
      el("div", {}, el("h5", {}, "stable"), el("pre", { class: "stable" }, cellText(example.stable))),
      el("div", {}, el("h5", {}, "canary"), el("pre", { class: "canary" }, cellText(example.canary))),
      el("div", {}, el("h5", {}, "score"), el("p", { class: "score" }, cellText(example.score)))));
  }
}

async function renderStatus(key) {
  const answer = await fetch(runPath(key));
  const status = answer.ok ? ((await answer.json()).status || {}) : {};
  if (key !== selected) return;
  renderPlacement(status.placement);
  renderShadow(status.shadow);
}

function select(key) {
  selected = key;
  const run = runs.get(key);
  $("#detail").hidden = false;
  $("#detail-title").textContent = `Run ${run ? `${run.namespace}/${run.name}` : key}`;
  $("#op-result").textContent = "";
  renderRuns();
  renderTimeline(key);
  renderFigures();
  renderPlayground(key);
  renderStatus(key);
}

function confirmAction(text) {
  const dialog = $("#confirm");
  $("#confirm-text").textContent = text;
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
    dialog.showModal();
  });
}

for (const button of document.querySelectorAll("[data-op]")) {
  button.addEventListener("click", async () => {
    const op = button.dataset.op;
    const [ns, name] = selected.split(/\.(.*)/s);
    if (!(await confirmAction(`${op} workflowrun ${ns}/${name}?`))) return;
    const result = $("#op-result");
    result.className = "";
    result.textContent = `${op}: waiting for the saga…`;
    const answer = await fetch(`/api/runs/${encodeURIComponent(ns)}/${encodeURIComponent(name)}/${op}`, { method: "POST" });
    const data = await answer.json();
    result.className = data.ok ? "" : "error";
    result.textContent = data.ok ? data.message : data.error;
    renderTimeline(selected);
  });
}

$("#playground").addEventListener("submit", async (event) => {
  event.preventDefault();
  const [ns, name] = selected.split(/\.(.*)/s);
  const out = $("#invoke-answer"), meta = $("#invoke-meta");
  out.textContent = ""; meta.textContent = "calling…";
  clearSteps();
  const stream = $("#invoke-stream").checked ? "?stream=1" : "";
  const started = performance.now();
  const answer = await fetch(`/api/runs/${encodeURIComponent(ns)}/${encodeURIComponent(name)}/invoke${stream}`,
    { method: "POST", headers: { "Content-Type": "application/json" }, body: $("#invoke-body").value });
  const reader = answer.body.getReader();
  const decoder = new TextDecoder();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    out.textContent += decoder.decode(value, { stream: true });
  }
  const trace = answer.headers.get("x-plnt-trace-id");
  meta.textContent = `HTTP ${answer.status}, revision ${answer.headers.get("x-plnt-revision") || "-"}` +
    `, ${(performance.now() - started).toFixed(0)} ms` + (trace ? `, trace id ${trace}` : "");
  for (const [id, step] of answerSteps(out.textContent)) showStep(id, step);
  try { out.textContent = JSON.stringify(JSON.parse(out.textContent), null, 2); } catch { /* streamed text */ }
});

const source = new EventSource("/api/events");
source.addEventListener("open", () => { $("#live").textContent = "live"; });
source.addEventListener("error", () => { $("#live").textContent = "reconnecting…"; });
source.addEventListener("runs", (e) => {
  runs.clear();
  for (const run of JSON.parse(e.data).runs) runs.set(`${run.namespace}.${run.name}`, run);
  renderRuns();
});
source.addEventListener("run", (e) => {
  const run = JSON.parse(e.data);
  const key = `${run.namespace}.${run.name}`;
  runs.set(key, run);
  renderRuns();
  if (key !== selected) return;
  renderStatus(key);
  // a new generation pulled another spec: its form and DAG replace the old ones
  if (run.specDigest && run.specDigest !== drawnDigest) renderPlayground(key);
});
source.addEventListener("run-removed", (e) => { runs.delete(JSON.parse(e.data).key); renderRuns(); });
source.addEventListener("figures", (e) => onFigures(JSON.parse(e.data).figures));
