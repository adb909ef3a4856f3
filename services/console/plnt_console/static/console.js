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
    box.append(el("h4", {}, `saga ${saga.sagaId}`), grid);
  }
}

async function renderPlayground(key) {
  const [ns, name] = key.split(/\.(.*)/s);
  const fields = $("#input-fields");
  fields.replaceChildren();
  const answer = await fetch(`/api/runs/${encodeURIComponent(ns)}/${encodeURIComponent(name)}`);
  if (!answer.ok) return;
  const schema = ((await answer.json()).spec || {}).input;
  if (!schema || schema.type !== "object") return;
  for (const [prop, def] of Object.entries(schema.properties || {})) {
    const id = `input-${prop}`;
    const input = el("input", { id, name: prop, type: def.type === "number" || def.type === "integer" ? "number" : "text" });
    input.addEventListener("input", () => {
      const body = {};
      for (const field of fields.querySelectorAll("input")) {
        if (field.value !== "") body[field.name] = field.type === "number" ? Number(field.value) : field.value;
      }
      $("#invoke-body").value = JSON.stringify(body, null, 2);
    });
    fields.append(el("label", { for: id }, def.title || prop), input);
  }
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
  runs.set(`${run.namespace}.${run.name}`, run);
  renderRuns();
});
source.addEventListener("run-removed", (e) => { runs.delete(JSON.parse(e.data).key); renderRuns(); });
source.addEventListener("figures", (e) => onFigures(JSON.parse(e.data).figures));
