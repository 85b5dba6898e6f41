/* A budget's printable monthly statement: GET /budgets/{path}/statement (the API's money, the
   one computation behind the CLI and the FOCUS export) and GET /budgets/{path} (its share,
   owed and delivered). Reads with the dashboard's session cookie; signing in happens on the
   dashboard. No inline script or style (the page's policy refuses them). */
"use strict";

const params = new URLSearchParams(window.location.search);
const $ = (sel) => document.querySelector(sel);
const esc = (s) => String(s ?? "").replace(/[&<>"']/g,
  (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
const gpuh = (seconds) => (seconds == null ? "-" : (seconds / 3600).toFixed(2));
const pathOf = (budget) => budget.split("/").map(encodeURIComponent).join("/");
const NAMES = {
  usage: "funded use",
  burst: "burst (billed 0; list value)",
  lost: "lost to preemption",
  idle: "idle capacity allocated",
  corrections: "corrections of sealed months",
};

function setStatus(text, error) {
  const el = $("#status");
  el.textContent = text;
  el.className = error ? "error" : "muted";
}

async function api(path) {
  const response = await fetch(path, { credentials: "same-origin" });
  if (!response.ok) {
    let detail = response.statusText;
    try {
      const body = await response.json();
      detail = Array.isArray(body.detail) ? body.detail.map((d) => d.msg).join("; ") : body.detail;
    } catch (_) { /* not JSON */ }
    const error = new Error(`HTTP ${response.status} ${detail}`);
    error.status = response.status;
    throw error;
  }
  return response.json();
}

function workloadsTable(line) {
  if (!line.workloads || !line.workloads.length) return '<p class="muted none">no workload</p>';
  return '<table class="inner workloads"><thead><tr><th>workload</th><th>budget</th><th>pool</th>' +
    '<th class="num">GPU&#8209;h</th><th class="num">billed</th><th class="num">list value</th>' +
    "</tr></thead><tbody>" + line.workloads.map((w) =>
    `<tr data-workload="${esc(w.workload_id)}"><td title="${esc(w.workload_id)}">${esc(w.workload_id)}</td>` +
    `<td>${esc(w.budget)}</td><td>${esc(w.pool)}</td><td class="num">${gpuh(w.gpu_s)}</td>` +
    `<td class="num">${esc(w.billed.display)}</td><td class="num">${esc(w.list_value.display)}</td></tr>`)
    .join("") + "</tbody></table>";
}

function render(s, detail) {
  const currency = s.currency || "";
  $("#title").textContent = `Statement of ${s.budget} for ${s.period.month}`;
  document.title = `Fairshare statement: ${s.budget}, ${s.period.month}`;
  const facts = [
    ["period", `${s.period.start} to ${s.period.end} (UTC)`],
    ["state", s.sealed ? "sealed (final)" : `open, billed to ${s.forecast.as_of}`],
    ["currency", currency || "no price set: nothing is billed"],
    ["idle allocated by", s.idle_method],
    ["as of", s.forecast.as_of],
  ];
  $("#position").textContent = "Read from the read models at log position " +
    (s.log_position || "(the start of the log)") +
    ": an audit re-derives these figures from the log up to there.";
  $("#idle-rule").textContent = s.idle_rule;
  $("#facts").innerHTML = facts.map(([k, v]) => `<dt>${esc(k)}</dt><dd>${esc(v)}</dd>`).join("");
  $("#share-part").hidden = !detail;
  if (detail) {
    $("#share-window").textContent = `over the fair-share window (${detail.window_s / 3600} h) to ${detail.as_of}`;
    $("#share tbody").innerHTML = Object.entries(detail.pools).map(([pool, f]) =>
      `<tr><td>${esc(pool)}</td><td class="num">${f.share == null ? "-" : (f.share * 100).toFixed(1) + "%"}</td>` +
      `<td class="num">${gpuh(f.owed_gpu_s)}</td><td class="num">${gpuh(f.delivered_gpu_s)}</td>` +
      `<td class="num">${f.delivered_ratio == null ? "-" : (f.delivered_ratio * 100).toFixed(1) + "%"}</td></tr>`)
      .join("");
  }
  $("#lines").innerHTML = s.lines.map((line) =>
    `<details class="kind" data-kind="${esc(line.kind)}"><summary class="line">` +
    `<span class="name">${esc(NAMES[line.kind] || line.kind)}` +
    ` <small class="muted">(${(line.workloads || []).length})</small></span>` +
    `<span class="num gpuh">${gpuh(line.gpu_s)}</span>` +
    `<span class="num unit" title="list ${esc(line.list_unit_price ? line.list_unit_price.display : "-")} per GPU-h">` +
    `${esc(line.unit_price ? line.unit_price.display : "-")}</span>` +
    `<span class="num billed">${esc(line.billed.display)}</span>` +
    `<span class="num list">${esc(line.list_value.display)}</span></summary>` +
    `${workloadsTable(line)}</details>`).join("");
  $("#total").textContent = s.billed.display;
  $("#total").title = `${s.billed.exact} ${currency}`;
  $("#currency").textContent = currency;
  $("#pools tbody").innerHTML = Object.entries(s.by_pool).map(([pool, m]) =>
    `<tr><td>${esc(pool)}</td><td class="num" title="${esc(m.exact)}">${esc(m.display)} ${esc(currency)}</td></tr>`)
    .join("") || '<tr><td colspan="2" class="muted">nothing billed</td></tr>';
  const f = s.forecast;
  $("#forecast tbody").innerHTML = [
    ["spent to " + f.as_of, f.spent],
    ["at the current rate, to " + f.month_end, f.at_current_rate],
    ["at entitlement, to " + f.month_end, f.at_entitlement],
  ].map(([k, m]) => `<tr><td>${esc(k)}</td><td class="num forecast" title="${esc(m.exact)}">${esc(m.display)} ${esc(currency)}</td></tr>`)
    .join("");
  $("#statement").hidden = false;
}

async function budgetsPicker(chosen) {
  const select = $("#budget");
  try {
    const all = await api("/budgets");
    const names = all.budgets.map((b) => b.budget);
    select.innerHTML = names.map((b) => `<option>${esc(b)}</option>`).join("");
    if (!$("#month").value) $("#month").value = all.as_of.slice(0, 7);
    if (!chosen) return names[0] || "";
  } catch (_) { /* the statement's own error says it */ }
  if (chosen && ![...select.options].some((o) => o.value === chosen)) {
    select.insertAdjacentHTML("beforeend", `<option>${esc(chosen)}</option>`);
  }
  return chosen;
}

async function start() {
  $("#print").addEventListener("click", () => window.print());
  $("#expand").addEventListener("click", () => { for (const d of document.querySelectorAll("details.kind")) d.open = true; });
  $("#collapse").addEventListener("click", () => { for (const d of document.querySelectorAll("details.kind")) d.open = false; });
  const session = await fetch("/dashboard/session", { credentials: "same-origin" })
    .then((r) => (r.ok ? r.json() : { user: null }), () => ({ user: null }));
  if (!session.user) {
    setStatus("not signed in: sign in on the dashboard (/dashboard), then come back", true);
    return;
  }
  const month = params.get("month") || "";
  $("#month").value = month;
  const budget = await budgetsPicker(params.get("budget") || "");
  $("#budget").value = budget;
  if (!budget) { setStatus("no budget yet", true); return; }
  const query = new URLSearchParams(month ? { month } : {});
  try {
    const [s, detail] = await Promise.all([
      api(`/budgets/${pathOf(budget)}/statement?${query}`),
      api(`/budgets/${pathOf(budget)}`).catch(() => null),
    ]);
    $("#month").value = s.period.month;
    render(s, detail);
    setStatus(`signed in as ${session.user}`, false);
    document.body.dataset.statement = "loaded";
  } catch (error) {
    setStatus(`statement of ${budget}: ${error.message || error}`, true);
    document.body.dataset.statement = "failed";
  }
}

document.addEventListener("DOMContentLoaded", start);
