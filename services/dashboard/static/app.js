/* Fairshare dashboard: polls the API every few seconds and draws what it says. No build step.
   Sign-in: the form posts the token once to /dashboard/session, which keeps it in an HttpOnly,
   SameSite=Strict cookie that this page's reads carry; the script never stores the token (not
   in the URL, not in localStorage), so nothing it runs, or that is injected, can read it back.
   The page's policy (Content-Security-Policy) allows no inline script or style: styles are set
   through the CSSOM below, never in markup. Every time shown is UTC. */
"use strict";

const params = new URLSearchParams(window.location.search);
const REFRESH_MS = Math.max(500, 1000 * Number(params.get("refresh") || 3));
const RANGES = { hour: 3600, day: 86400, week: 7 * 86400 };
localStorage.removeItem("fairshare.token"); // where older versions kept it
let signedIn = false;
let pool = params.get("pool") || localStorage.getItem("fairshare.pool") || "";
// The time range of the charts: what the data covers (default), the last hour, day or week,
// or a custom one (?range=custom&from=2026-11-02T06:00&to=2026-11-02T12:00, UTC).
let range = { kind: params.get("range") || "data", from: params.get("from") || "",
  to: params.get("to") || "" };
if (!["data", "custom", ...Object.keys(RANGES)].includes(range.kind)) range.kind = "data";
let chartBudget = params.get("budget") || "";
let timeline = null;
let timelineKey = "";
let timelineAt = 0;
const charts = {};
let ticks = { every: 0, ticked: () => true }; // which bins get a tick label (see tickFilter)
let sparseTick = () => true; // at most five of them in the small charts
let inUse = null; // GPUs of the pool's nodes that are up, and how many are assigned, now
const opened = { queue: new Set(), preemptions: new Set() };
let busy = false;
let again = false;

const $ = (sel) => document.querySelector(sel);
const gpuh = (seconds) => (seconds / 3600).toFixed(1);
const pct = (x) => (x * 100).toFixed(1) + "%";
const pct0 = (x) => `${Math.round(x * 100)}%`;
const esc = (s) => String(s ?? "").replace(/[&<>"']/g,
  (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
const shortTime = (iso) => (iso ? iso.replace("T", " ").replace(/:\d\d(\.\d+)?Z$/, "Z") : "");
const duration = (s) => (s === 0 ? "burst" : s % 3600 === 0 ? `${s / 3600}h` : `${Math.round(s / 60)}m`);
const pad = (n) => String(n).padStart(2, "0");
const sum = (xs) => xs.reduce((t, x) => t + (x || 0), 0);

// 06:05:12 on the day of asOf, 11-01 06:05 before it.
function clock(iso, asOf) {
  const text = shortTime(iso);
  return iso && asOf && iso.slice(0, 10) === asOf.slice(0, 10)
    ? iso.slice(11, 19) : text.slice(5, 16);
}

function since(iso, asOf) {
  const s = Math.round((Date.parse(asOf) - Date.parse(iso)) / 1000);
  if (!Number.isFinite(s)) return "";
  const a = Math.abs(s);
  const text = a < 90 ? `${a}s` : a < 5400 ? `${Math.round(a / 60)}m` : a < 172800
    ? `${Math.round(a / 3600)}h` : `${Math.round(a / 86400)}d`;
  return s >= 0 ? `${text} ago` : `in ${text}`;
}

// Replace a part of the page only when what it shows changed: an unchanged table keeps its
// elements (and the reader's selection, hover and scroll) across refreshes.
const shown = new WeakMap();
function setHTML(el, html) {
  if (shown.get(el) === html) return false;
  el.innerHTML = html;
  shown.set(el, html);
  return true;
}

class SignedOut extends Error {}

async function api(path) {
  const response = await fetch(path, { credentials: "same-origin" });
  if (response.status === 401) {
    showSignIn("signed out (unknown or expired session): sign in with a token");
    throw new SignedOut();
  }
  if (!response.ok) {
    let detail = response.statusText;
    try {
      const body = await response.json();
      detail = Array.isArray(body.detail) ? body.detail.map((d) => d.msg).join("; ") : body.detail;
    } catch (_) { /* not JSON */ }
    throw new Error(`${path.split("?")[0]}: HTTP ${response.status} ${detail}`);
  }
  return response.json();
}

function setStatus(text, error) {
  const el = $("#status");
  el.textContent = text;
  el.className = error ? "error" : "muted";
}

// -- signing in ----------------------------------------------------------------------------
function showSignIn(message) {
  signedIn = false;
  $("#sign-in").hidden = false;
  $("#signed-in").hidden = true;
  setStatus(message || "sign in with a token", Boolean(message));
}

function showSignedIn(me) {
  signedIn = true;
  $("#sign-in").hidden = true;
  $("#signed-in").hidden = false;
  $("#who").textContent = `signed in as ${me.user}${me.admin ? " (admin)" : ""}`;
}

async function signIn(event) {
  event.preventDefault();
  const input = $("#token");
  const token = input.value.trim();
  input.value = "";
  let response;
  try {
    response = await fetch("/dashboard/session", {
      method: "POST", credentials: "same-origin", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ token }),
    });
  } catch (error) {
    showSignIn(`sign-in failed: ${error.message || error}`);
    return;
  }
  if (!response.ok) {
    showSignIn(response.status === 401 ? "unknown token" : `sign-in failed: HTTP ${response.status}`);
    return;
  }
  showSignedIn(await response.json());
  refresh();
}

async function signOut() {
  await fetch("/dashboard/session", { method: "DELETE", credentials: "same-origin" });
  window.location.reload(); // nothing shown survives the session
}

// -- budgets -------------------------------------------------------------------------------
function depthFirst(budgets) {
  const byParent = new Map();
  for (const b of budgets) {
    const key = b.parent || "";
    if (!byParent.has(key)) byParent.set(key, []);
    byParent.get(key).push(b);
  }
  const out = [];
  const walk = (parent) => {
    for (const b of (byParent.get(parent) || []).sort((x, y) => x.budget.localeCompare(y.budget))) {
      out.push(b);
      walk(b.budget);
    }
  };
  walk("");
  return out;
}

function ratioBar(delivered, owed) {
  if (owed === null || owed === undefined) return '<div class="bar"><em class="muted">no share</em></div>';
  if (!owed) return '<div class="bar"><em class="muted">nothing owed (no demand)</em></div>';
  const ratio = delivered / owed;
  const level = ratio >= 0.95 ? "ok" : ratio >= 0.5 ? "warn" : "bad";
  return `<div class="bar"><span class="${level}" data-width="${Math.min(1, ratio) * 100}"></span>` +
    `<em class="ratio">${pct(ratio)}</em></div>`;
}

// widths through the CSSOM: the policy refuses style attributes in markup
function sizeBars(root) {
  for (const bar of root.querySelectorAll("span[data-width]")) bar.style.width = `${bar.dataset.width}%`;
}

function renderBudgets(report) {
  const rows = depthFirst(report.budgets).map((b) => {
    const f = b.pools[pool] || {};
    const closed = b.closed ? ' <span class="code">closed</span>' : "";
    const delivered = f.delivered_gpu_s;
    return `<tr data-budget="${esc(b.budget)}" class="lvl${Math.min(b.depth, 4)} ${b.leaf ? "leaf" : "inner"}">` +
      `<td class="name" title="${esc(b.budget)}">${esc(b.budget.split("/").pop())}${closed}</td>` +
      `<td class="num weight">${b.weight}</td>` +
      `<td class="num share">${f.share == null ? "-" : pct(f.share)}</td>` +
      `<td class="num rank">${f.rank ?? ""}</td>` +
      `<td class="num demand">${f.demand_gpus ?? 0}</td>` +
      `<td class="num delivered">${delivered == null ? "-" : gpuh(delivered)}</td>` +
      `<td class="num owed">${f.owed_gpu_s == null ? "-" : gpuh(f.owed_gpu_s)}</td>` +
      `<td>${delivered == null ? '<div class="bar"><em class="muted">no read models</em></div>'
        : ratioBar(delivered, f.owed_gpu_s)}</td></tr>`;
  });
  if (setHTML($("#budgets tbody"), rows.join(""))) sizeBars($("#budgets tbody"));
}

// -- the timeline's charts -----------------------------------------------------------------
const PALETTE = ["#3566d6", "#e07b39", "#2e9d5b", "#9c4fd6", "#d2453d", "#1fa2b5", "#b59a1f",
  "#6b7385", "#d65aa0", "#4c8c2b", "#8a5a2b", "#2b4c8c"];

function chart(id, config, canvas) {
  const existing = charts[id];
  if (!existing) {
    charts[id] = new Chart(canvas || $(`#${id}`), config);
  } else {
    existing.data = config.data;
    existing.options = config.options;
    existing.update("none");
  }
}

function chartOptions(yTitle, stacked, legend = true) {
  return {
    animation: false, responsive: true, maintainAspectRatio: false, normalized: true,
    interaction: { mode: "index", intersect: false },
    plugins: {
      legend: { display: legend, position: "bottom", labels: { boxWidth: 12, boxHeight: 8, font: { size: 10 } } },
      tooltip: { callbacks: { label: (c) => `${c.dataset.label}: ${c.parsed.y == null ? "-" : c.parsed.y.toFixed(1)} GPUs` } },
    },
    scales: {
      x: { stacked, grid: { display: false }, ticks: { autoSkip: false, maxRotation: 0, font: { size: 10 },
        callback(value, index) { return ticks.ticked(index) ? tickText(this.getLabelForValue(value)) : null; } } },
      y: { stacked, beginAtZero: true, title: { display: Boolean(yTitle), text: yTitle },
        ticks: { font: { size: 10 } } },
    },
  };
}

function binLabel(iso, binS, spanS) {
  const d = new Date(iso);
  const date = `${pad(d.getUTCMonth() + 1)}-${pad(d.getUTCDate())}`;
  const time = `${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}` + (binS < 60 ? `:${pad(d.getUTCSeconds())}` : "");
  if (binS >= 86400) return date;
  return spanS > 86400 ? `${date} ${time}` : time;
}

// Ticks on round times, at most a dozen: every 10 or 30 seconds, 1, 5, 10, 15 or 30 minutes,
// 1, 2, 3, 6 or 12 hours, 1 or 2 days, or on Mondays every 1, 2 or 4 weeks.
const TICKS = [10, 30, 60, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800,
  604800, 1209600, 2419200];
const MONDAY = 4 * 86400; // 1970-01-05, the first Monday after the epoch

function tickFilter(t) {
  const span = Date.parse(t.end) / 1000 - Date.parse(t.start) / 1000;
  const every = TICKS.find((s) => s >= t.bin_s && s % t.bin_s === 0 && span / s <= 12) || t.bin_s;
  const starts = t.bins.map((b) => Date.parse(b) / 1000);
  const offset = every >= 604800 ? MONDAY : 0;
  return { every, ticked: (index) => ((starts[index] - offset) % every === 0) };
}

// A tick's text: the bin's label, without the time when ticks fall on midnights.
const tickText = (label) => (ticks.every >= 86400 ? label.slice(0, 5) : label);

function binName(s) {
  if (s < 60) return `${s}-second`;
  if (s < 3600) return `${s / 60}-minute`;
  if (s < 86400) return s === 3600 ? "hourly" : `${s / 3600}-hour`;
  return s === 86400 ? "daily" : "weekly";
}

// A round axis maximum at or above x.
function niceMax(x) {
  if (!(x > 0)) return 1;
  const step = 10 ** Math.floor(Math.log10(x));
  for (const m of [1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10]) if (m * step >= x) return m * step;
  return 10 * step;
}
const peak = (xs) => xs.reduce((m, x) => (x != null && x > m ? x : m), 0);

const line = (label, data, color, extra) => ({
  type: "line", label, data, borderColor: color, backgroundColor: color, pointRadius: data.length < 3 ? 3 : 0,
  borderWidth: 1.5, spanGaps: false, ...extra,
});
// Owed, capacity and demand are outlines in the legend (dashed where the line is dashed).
const outline = (label, data, color, dash, extra) =>
  line(label, data, color, { borderDash: dash, backgroundColor: "rgba(0,0,0,0)", ...extra });
const bars = (label, data, color, stack) => ({
  type: "bar", label, data, stack, backgroundColor: color, barPercentage: 1, categoryPercentage: 1,
  borderWidth: 0, order: 5,
});

function renderOccupancy(t, labels) {
  const busy = t.allocated_gpus.map((a, i) => (a == null ? null : a + (t.unallocated_gpus[i] || 0)));
  const top = Math.max(peak(t.capacity_gpus), peak(busy));
  const demand = peak(t.demand_gpus);
  const datasets = [
    bars("allocated", t.allocated_gpus, "#3566d6", "use"),
    bars("burst (unallocated)", t.unallocated_gpus, "#9bb7f0", "use"),
    outline("capacity", t.capacity_gpus, "#1d2330", [], { stack: "capacity", stepped: "middle", order: 1, borderWidth: 2 }),
    outline("demand of funded work", t.demand_gpus, "#e07b39", [5, 3], { stack: "demand", order: 2 }),
  ];
  const options = chartOptions("GPUs", true);
  // A backlog many times the pool would flatten what is in use: the axis then stops at twice
  // the capacity and the summary says how high demand went.
  const clipped = demand > 3 * top && top > 0;
  if (clipped) options.scales.y.max = niceMax(2 * top);
  chart("occupancy-chart", { data: { labels, datasets }, options });
  summarizeOccupancy(t);
}

function summarizeOccupancy(t) {
  const parts = [];
  if (inUse) parts.push(`now ${inUse.used} of ${inUse.gpus} GPUs in use`);
  if (t.occupancy_over_range != null) parts.push(`${pct0(t.occupancy_over_range)} busy over the range`);
  const busy = Math.max(peak(t.capacity_gpus), peak(t.allocated_gpus.map((a, i) => (a || 0) + (t.unallocated_gpus[i] || 0))));
  const demand = peak(t.demand_gpus);
  if (demand > 3 * busy && busy > 0) parts.push(`demand peaks at ${demand.toFixed(0)} GPUs (above the axis)`);
  $("#occupancy-summary").textContent = parts.join("; ");
}

function budgetOptions(t) {
  const select = $("#chart-budget");
  const ordered = depthFirst(t.budgets);
  const options = [["", "by budget"], ...ordered.map((b) => [b.budget,
    `${"\u00a0\u00a0".repeat(b.budget.split("/").length - 1)}${b.budget}${b.leaf ? "" : " \u25b8"}`])];
  const key = options.map((o) => o[0]).join("|");
  if (select.dataset.key !== key) {
    select.innerHTML = options.map(([v, text]) => `<option value="${esc(v)}">${esc(text)}</option>`).join("");
    select.dataset.key = key;
  }
  if (chartBudget && !ordered.some((b) => b.budget === chartBudget)) chartBudget = "";
  select.value = chartBudget;
}

// The budgets to compare: the one chosen if it is a leaf, else its children; by default the
// children of the first level with more than one budget (a lab with one top-level budget
// shows its groups).
function comparedBudgets(t) {
  const chosen = t.budgets.find((b) => b.budget === chartBudget);
  if (chosen && chosen.leaf) return [chosen];
  const byParent = new Map();
  for (const b of t.budgets) {
    const key = b.parent || "";
    if (!byParent.has(key)) byParent.set(key, []);
    byParent.get(key).push(b);
  }
  let parent = chosen ? chosen.budget : "";
  if (!chosen) {
    while ((byParent.get(parent) || []).length === 1 && byParent.has(byParent.get(parent)[0].budget)) {
      parent = byParent.get(parent)[0].budget;
    }
  }
  const volume = (b) => sum(b.owed_gpus) + sum(b.delivered_gpus) + sum(b.unallocated_gpus);
  return (byParent.get(parent) || []).slice()
    .sort((x, y) => volume(y) - volume(x) || x.budget.localeCompare(y.budget)).slice(0, 9)
    .sort((x, y) => x.budget.localeCompare(y.budget));
}

function ratioOver(t, b) {
  const w = t.covered_s;
  const d = b.delivered_gpus.reduce((s, v, i) => s + (v || 0) * w[i], 0);
  const o = b.owed_gpus.reduce((s, v, i) => s + (v || 0) * w[i], 0);
  return o > 0 ? d / o : null;
}

// Small multiples: one chart per budget compared, on one scale.
function renderDelivered(t, labels) {
  budgetOptions(t);
  const compared = comparedBudgets(t);
  const box = $("#delivered-charts");
  const key = compared.map((b) => b.budget).join("|");
  if (box.dataset.key !== key) {
    for (const id of Object.keys(charts)) {
      if (id.startsWith("delivered-")) { charts[id].destroy(); delete charts[id]; }
    }
    box.innerHTML = compared.map((b, i) =>
      `<figure class="multiple" data-budget="${esc(b.budget)}"><figcaption><b>${esc(b.budget)}</b> ` +
      `<small class="muted ratio"></small></figcaption><div class="chart small">` +
      `<canvas id="delivered-${i}"></canvas></div></figure>`).join("");
    box.dataset.key = key;
  }
  const top = niceMax(Math.max(...compared.map((b) => Math.max(
    peak(b.owed_gpus), peak(b.entitled_gpus),
    peak(b.delivered_gpus.map((d, i) => (d || 0) + (b.unallocated_gpus[i] || 0))))), 0));
  compared.forEach((b, i) => {
    const datasets = [
      bars("delivered", b.delivered_gpus, "#3566d6", "use"),
      bars("burst (free)", b.unallocated_gpus, "#c9d3e6", "use"),
      outline("owed", b.owed_gpus, "#d2453d", [], { stack: "owed", borderWidth: 2, order: 1 }),
      outline("entitlement (share × capacity)", b.entitled_gpus, "#6b7385", [2, 3],
        { stack: "entitled", stepped: "middle", order: 2 }),
    ];
    const options = chartOptions(i % 3 === 0 ? "GPUs" : "", true, false);
    options.scales.y.max = top;
    options.scales.x.ticks.callback = function sparse(value, index) {
      return sparseTick(index) ? tickText(this.getLabelForValue(value)) : null;
    };
    chart(`delivered-${i}`, { data: { labels, datasets }, options }, $(`#delivered-${i}`));
    const ratio = ratioOver(t, b);
    const text = ratio == null ? "nothing owed in this range" : `delivered ${pct0(ratio)} of owed`;
    box.querySelector(`figure[data-budget="${CSS.escape(b.budget)}"] .ratio`).textContent = text;
  });
  $("#delivered-summary").textContent = compared.length
    ? `${compared.length} budget${compared.length === 1 ? "" : "s"}, ${binName(t.bin_s)} bins` : "no budget yet";
}

function renderTimeline(t) {
  timeline = t;
  const span = (Date.parse(t.end) - Date.parse(t.start)) / 1000;
  const labels = t.bins.map((b) => binLabel(b, t.bin_s, span));
  ticks = tickFilter(t);
  const marks = t.bins.map((_, i) => i).filter((i) => ticks.ticked(i));
  const step = Math.max(1, Math.ceil(marks.length / 5));
  const kept = new Set(marks.filter((_, k) => k % step === 0));
  sparseTick = (i) => kept.has(i);
  renderOccupancy(t, labels);
  renderDelivered(t, labels);
  $("#range-info").textContent = `${shortTime(t.start)} to ${shortTime(t.end)}, ` +
    `${binName(t.bin_s)} bins; ${t.source}`;
  document.body.dataset.timelineFrom = t.start;
  document.body.dataset.timelineTo = t.end;
  document.body.dataset.timelineBin = String(t.bin_s);
  document.body.dataset.timelines = String(Number(document.body.dataset.timelines || 0) + 1);
}

function timelinePath() {
  const q = new URLSearchParams({ pool });
  if (RANGES[range.kind]) q.set("last", String(RANGES[range.kind]));
  if (range.kind === "custom") {
    q.set("from", range.from);
    q.set("to", range.to);
  }
  if (params.get("bin")) q.set("bin", params.get("bin"));
  return `/dashboard/api/timeline?${q}`;
}

// Long bins change slowly: a chart of 12-hour bins is read again every minute, not every 3 s.
function timelineDue(key) {
  if (key !== timelineKey || !timeline) return true;
  const period = Math.min(60000, Math.max(REFRESH_MS, (timeline.bin_s * 1000) / 6));
  return Date.now() - timelineAt >= period;
}

function showRange() {
  for (const button of document.querySelectorAll("#range-picker button")) {
    button.setAttribute("aria-pressed", String(button.dataset.range === range.kind));
  }
  $("#custom-range").hidden = range.kind !== "custom";
}

const toInput = (iso) => (iso ? iso.slice(0, 16) : "");

function pickRange(event) {
  const kind = event.target.closest("button")?.dataset.range;
  if (!kind) return;
  if (kind === "custom") {
    range = { kind, from: range.from || toInput(timeline?.start), to: range.to || toInput(timeline?.end) };
    $("#range-from").value = range.from;
    $("#range-to").value = range.to;
    showRange();
    return; // drawn once "show" is pressed
  }
  range = { kind, from: "", to: "" };
  showRange();
  refresh();
}

function pickCustom(event) {
  event.preventDefault();
  range = { kind: "custom", from: $("#range-from").value, to: $("#range-to").value };
  refresh();
}

// -- cost ----------------------------------------------------------------------------------
// Money per budget over the whole months the range touches (GET /statements per month, the
// API's one computation of a budget's money), stacked by pool, and the forecast of the month
// of now. Money changes by the hour: read again when the months change, else once a minute.
const COST_MS = 60000;
const MAX_COST_MONTHS = 24;
let costs = { key: "", at: 0, busy: false, data: null };

const monthOf = (iso) => iso.slice(0, 7);
function nextMonth(month) {
  const [y, m] = month.split("-").map(Number);
  return m === 12 ? `${y + 1}-01` : `${y}-${pad(m + 1)}`;
}

// The months from the range's start to its end (exclusive), the latest MAX_COST_MONTHS.
function rangeMonths(t, asOf) {
  if (!t) return [monthOf(asOf)];
  const last = monthOf(new Date(Date.parse(t.end) - 1000).toISOString());
  const months = [];
  for (let m = monthOf(t.start); m <= last; m = nextMonth(m)) months.push(m);
  return months.slice(-MAX_COST_MONTHS);
}

const money = (m) => Number(m.exact);
const statementLink = (budget, month) =>
  `/dashboard/statement?${new URLSearchParams({ budget, month })}`;

async function refreshCosts(asOf) {
  const months = rangeMonths(timeline, asOf);
  const now = monthOf(asOf);
  const key = `${months.join(",")}|${now}`;
  if (costs.busy || (key === costs.key && Date.now() - costs.at < COST_MS)) {
    if (costs.data) renderCosts(costs.data);
    return;
  }
  costs.busy = true;
  try {
    const wanted = months.includes(now) ? months : [...months, now];
    const answers = await Promise.all(wanted.map((m) =>
      api(`/statements?${new URLSearchParams({ month: m, workloads: "false" })}`)));
    costs = { key, at: Date.now(), busy: false,
      data: { months, now, byMonth: Object.fromEntries(wanted.map((m, i) => [m, answers[i]])) } };
    renderCosts(costs.data);
  } catch (error) {
    costs.busy = false;
    if (!(error instanceof SignedOut)) setStatus(String(error.message || error), true);
  }
}

// The budgets the chart compares: those of "Delivered vs owed", else the top level.
function costBudgets(names) {
  const compared = timeline ? comparedBudgets(timeline).map((b) => b.budget) : [];
  const shown = compared.filter((b) => names.includes(b));
  return shown.length ? shown : names.filter((b) => !b.includes("/"));
}

function renderCosts(data) {
  const { months, now, byMonth } = data;
  const current = byMonth[now];
  const currency = Object.values(byMonth).map((a) => a.currency).find(Boolean) || "";
  const names = current.statements.map((s) => s.budget);
  const inRange = {}; // budget -> pool -> money over the range's months
  const pools = new Set();
  for (const month of months) {
    for (const s of byMonth[month].statements) {
      const mine = inRange[s.budget] || (inRange[s.budget] = {});
      for (const [p, m] of Object.entries(s.by_pool)) {
        pools.add(p);
        mine[p] = (mine[p] || 0) + money(m);
      }
    }
  }
  const compared = costBudgets(names);
  const poolList = [...pools].sort();
  const datasets = poolList.map((p, i) => ({
    ...bars(p, compared.map((b) => (inRange[b] || {})[p] || 0), PALETTE[i % PALETTE.length], "pools"),
    barPercentage: 0.7, categoryPercentage: 0.8, maxBarThickness: 90,
  }));
  const options = chartOptions(currency, true);
  options.scales.x.ticks.callback = function label(value) { return this.getLabelForValue(value); };
  options.plugins.tooltip.callbacks.label = (c) => `${c.dataset.label}: ${c.parsed.y.toFixed(2)} ${currency}`;
  chart("cost-chart", { data: { labels: compared, datasets }, options });
  const total = (b) => Object.values(inRange[b] || {}).reduce((t, x) => t + x, 0);
  const span = months.length > 1 ? `${months[0]} to ${months[months.length - 1]}` : months[0];
  $("#cost-range-head").textContent = `billed ${span}`;
  // Within the month of now the range's money is the month's spent: one column, not two.
  $("#costs").classList.toggle("this-month-only", months.length === 1 && months[0] === now);
  const rows = depthFirst(current.statements.map((s) => ({
    ...s, parent: s.budget.includes("/") ? s.budget.slice(0, s.budget.lastIndexOf("/")) : "",
  }))).map((s) => {
    const depth = s.budget.split("/").length - 1;
    const f = s.forecast;
    return `<tr data-budget="${esc(s.budget)}" class="lvl${Math.min(depth, 4)}">` +
      `<td class="name" title="${esc(s.budget)}">${esc(s.budget.split("/").pop())}</td>` +
      `<td class="num range">${total(s.budget).toFixed(2)}</td>` +
      `<td class="num spent">${esc(f.spent.display)}</td>` +
      `<td class="num at-rate">${esc(f.at_current_rate.display)}</td>` +
      `<td class="num at-entitlement">${esc(f.at_entitlement.display)}</td>` +
      `<td><a href="${esc(statementLink(s.budget, now))}">${esc(now)}</a></td></tr>`;
  });
  setHTML($("#costs tbody"), rows.join(""));
  $("#cost-summary").textContent = currency
    ? `${currency}; ${span}; forecast of ${now} as of ${shortTime((current.statements[0] || {}).forecast?.as_of || "")}`
    : "no price set: nothing is billed (fairshare prices set)";
  document.body.dataset.costs = String(Number(document.body.dataset.costs || 0) + 1);
}

// -- queue, preemptions, nodes -------------------------------------------------------------
const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;

// One short phrase per reason, from its typed fields (the full sentence is in the details).
function shortReason(r, w, asOf) {
  if (!r) return "";
  switch (r.code) {
    case "fair-share": {
      const ahead = r.budgets_ahead || [];
      const jobs = sum(ahead.map((b) => b.workloads_ahead));
      const names = ahead.slice(0, 2).map((b) => b.budget).join(", ") + (ahead.length > 2 ? ` +${ahead.length - 2}` : "");
      return `behind ${plural(jobs, "job")} of higher-ranked ${names || "budgets"}`;
    }
    case "funded-first": return `funded work first (${plural(r.workloads_ahead, "job")})`;
    case "budget-queue": return `behind ${(r.workloads_ahead || []).length}${(r.workloads_ahead || []).length >= 20 ? "+" : ""} of its budget's own jobs`;
    case "too-large": return r.largest_node_gpus && !r.needs_whole_nodes && w.gpus > r.largest_node_gpus
      ? `needs ${w.gpus} GPUs on one node; largest has ${r.largest_node_gpus}`
      : `needs ${w.gpus} GPUs; the pool has ${r.capacity} up`;
    case "fits-now": return "fits now: the next pass places it";
    case "insufficient-capacity": return r.needs_whole_nodes
      ? `needs ${w.gpus} GPUs on idle nodes; ${r.free_gpus_on_idle_nodes ?? 0} idle`
      : `needs ${w.gpus} GPUs on one node; largest free block ${r.largest_free_gpus}`;
    case "contract": return `waits for ${r.waits_on}'s contract (ends ${since(r.contract_ends_at, asOf)})`;
    case "starting": return "waits for placed work to start";
    case "ranks-ahead": return "running work ranks ahead: nothing to preempt";
    case "cordoned-nodes": return `${plural((r.nodes || []).length, "node")} cordoned (${r.gpus} GPUs)`;
    case "down-nodes": return `${plural((r.nodes || []).length, "node")} down`;
    case "unallocated": return "burst: waits for idle GPUs";
    case "no-share": return "its budget has no share: considered last";
    case "no-nodes": return "no node in this pool";
    default: return r.message || r.code;
  }
}

// Re-rendering every few seconds keeps a row's details open while the user reads them.
function keepOpen(table, which) {
  $(table).addEventListener("toggle", (event) => {
    const row = event.target.closest("tr");
    if (!row) return;
    if (event.target.open) opened[which].add(row.dataset.key);
    else opened[which].delete(row.dataset.key);
  }, true);
}
const openAttr = (which, key) => (opened[which].has(key) ? " open" : "");

function renderQueue(queue) {
  const entry = queue.pools.find((p) => p.pool === pool) || queue.pools[0];
  if (!entry) { setHTML($("#queue tbody"), ""); return; }
  $("#queue-summary").textContent =
    `${entry.queue_length} pending in ${entry.pool}; ${entry.free_gpus} of ${entry.capacity} GPUs free`;
  setHTML($("#queue tbody"), entry.pending.slice(0, 100).map((w) => {
    const reasons = w.reasons || [];
    const code = w.reason || (reasons[0] && reasons[0].code) || "";
    const short = w.summary || shortReason(reasons[0], w, queue.as_of);
    const more = reasons.length > 1 ? ` <span class="muted">+${reasons.length - 1}</span>` : "";
    const details = reasons.map((r) => `<li><span class="code">${esc(r.code)}</span> ${esc(r.message)}</li>`).join("");
    const facts = `submitted ${esc(shortTime(w.submitted_at))} by ${esc(w.submitter)}; priority ${w.priority}; ` +
      `budget rank ${w.budget_rank ?? "-"}, usage ratio ${w.usage_ratio == null ? "-" : Number(w.usage_ratio).toFixed(3)}`;
    const key = w.workload_id;
    return `<tr data-workload="${esc(w.workload_id)}" data-key="${esc(key)}"><td class="num position">${w.position}</td>` +
      `<td title="${esc(w.workload_id)}">${esc(w.workload_id)}</td><td title="${esc(w.budget)}">${esc(w.budget)}</td>` +
      `<td class="num">${w.gpus}</td><td>${duration(w.min_runtime_s)}</td>` +
      `<td class="why"><details${openAttr("queue", key)}><summary title="${esc(short)}">` +
      `${code ? `<span class="code">${esc(code)}</span> ` : ""}${esc(short)}${more}</summary>` +
      `<div class="more"><ul>${details}</ul><p class="muted">${facts}</p></div></details></td></tr>`;
  }).join(""));
}

function standings(budgets) {
  if (!budgets || !budgets.length) return "";
  return `<table class="inner"><thead><tr><th>budget</th><th class="num">rank</th><th class="num">share</th>` +
    `<th class="num">usage ratio</th></tr></thead><tbody>` + budgets.map((b) =>
    `<tr><td>${esc(b.budget)}</td><td class="num">${b.rank}</td><td class="num">${pct(b.share)}</td>` +
    `<td class="num">${Number(b.usage_ratio).toFixed(3)}</td></tr>`).join("") + "</tbody></table>";
}

function renderPreemptions(data) {
  const rows = data.preemptions.slice(0, 30);
  $("#preemptions-summary").textContent = rows.length ? `newest first, ${rows.length} shown` : "none yet";
  setHTML($("#preemptions tbody"), rows.map((p) => {
    const summary = p.summary || p.reason;
    const key = `${p.workload_id}|${p.time}`;
    const positions = (p.input_position || []).map((x) => `${x.topic}/${x.partition}@${x.offset}`).join(", ");
    const record = [
      p.detail ? `<p>${esc(p.detail)}</p>` : "",
      `<p>attempt ${p.attempt}; ${p.requeue ? "requeued with its original submit time" : "not requeued"}; ` +
        `grace ${p.grace_period_s ?? "-"} s; now ${esc(p.status ?? "unknown")}</p>`,
      standings(p.budgets),
      `<p class="muted">pass ${p.pass_id ?? "-"}${positions ? `; decided at log positions ${esc(positions)}` : ""}</p>`,
    ].join("");
    return `<tr data-workload="${esc(p.workload_id)}" data-key="${esc(key)}">` +
      `<td class="time" title="${esc(p.time)}">${esc(clock(p.time, data.as_of))}</td>` +
      `<td title="${esc(p.workload_id)}">${esc(p.workload_id)}</td><td title="${esc(p.budget)}">${esc(p.budget)}</td>` +
      `<td class="why"><details${openAttr("preemptions", key)}><summary title="${esc(summary)}">` +
      `<span class="code">${esc(p.reason)}</span> ${esc(summary)}</summary>` +
      `<div class="more">${record}</div></details></td></tr>`;
  }).join(""));
}

function foreignNote(n) {
  if (!n.foreign_gpus) return "";
  const holders = (n.foreign_holders || []).map((h) => `${h.name} (${h.gpus})`);
  const title = holders.length ? holders.join(", ") : "holders not reported";
  return `<div class="note foreign" title="${esc(title)}">${plural(n.foreign_gpus, "GPU")} held outside Fairshare</div>`;
}

function nodeNote(n, asOf) {
  if (n.cordoned || ["cordoned", "draining", "drained"].includes(n.state)) {
    // cordon_reason is "" when none was given; absent from an API that does not say
    const reason = n.cordon_reason ? esc(n.cordon_reason) : `<span class="muted">${
      "cordon_reason" in n ? "no reason given" : "reason not reported by the API"}</span>`;
    const who = [n.cordoned_by ? `by ${n.cordoned_by}` : "", n.cordoned_at ? since(n.cordoned_at, asOf) : ""].filter(Boolean).join(", ");
    const title = `cordoned${n.cordoned_by ? ` by ${n.cordoned_by}` : ""}${n.cordoned_at ? ` at ${n.cordoned_at}` : ""}` +
      `${n.cordon_reason ? `: ${n.cordon_reason}` : ""}`;
    return `<div class="note cordon" title="${esc(title)}"><span class="reason">${reason}</span>` +
      `${who ? `<span class="muted who">${esc(who)}</span>` : ""}</div>`;
  }
  if (n.down) {
    return `<div class="note down">no heartbeat since ${esc(shortTime(n.last_heartbeat) || "-")}</div>`;
  }
  return "";
}

function renderNodes(data, asOf) {
  const counts = {};
  const mine = data.nodes.filter((n) => n.pool === pool && !n.down);
  inUse = { used: sum(mine.map((n) => n.used_gpus)), gpus: sum(mine.map((n) => n.gpus)) };
  setHTML($("#nodes"), data.nodes.filter((n) => !pool || n.pool === pool).map((n) => {
    counts[n.state] = (counts[n.state] || 0) + 1;
    // GPUs held by work Fairshare did not place: the last ones, as the agents count them
    const foreign = n.foreign_gpus || 0;
    const gpus = Array.from({ length: n.gpus }, (_, i) =>
      `<i class="${i < n.used_gpus ? "used" : i >= n.gpus - foreign ? "foreign" : ""}"></i>`);
    const title = n.workloads.length ? `running: ${n.workloads.join(", ")}` : "nothing running";
    return `<div class="node state-${esc(n.state)}" data-node="${esc(n.node)}" title="${esc(title)}">` +
      `<div class="node-head"><b>${esc(n.node)}</b><span class="state">${esc(n.state)}</span>` +
      `<span class="muted">${n.used_gpus}/${n.gpus}</span></div>` +
      `<div class="gpus">${gpus.join("")}</div>${foreignNote(n)}${nodeNote(n, asOf)}</div>`;
  }).join(""));
  $("#nodes-summary").textContent = Object.entries(counts).map(([k, v]) => `${v} ${k}`).join(", ");
}

// -- the loop ------------------------------------------------------------------------------
async function refresh() {
  if (!signedIn) return;
  if (busy) { again = true; return; }
  busy = true;
  try {
    const all = await api("/budgets");
    const pools = all.pools.map((p) => p.pool);
    if (!pools.includes(pool)) pool = pools[0] || "";
    const select = $("#pool");
    if (select.options.length !== pools.length) {
      select.innerHTML = pools.map((p) => `<option>${esc(p)}</option>`).join("");
    }
    select.value = pool;
    const key = timelinePath();
    const due = pool && timelineDue(key);
    const [queue, nodes, preemptions, series] = await Promise.all([
      api(`/queue?pool=${encodeURIComponent(pool)}`), api("/nodes"),
      api("/dashboard/api/preemptions?limit=30"), due ? api(key) : Promise.resolve(null),
    ]);
    renderBudgets(all);
    renderQueue(queue);
    renderPreemptions(preemptions);
    renderNodes(nodes, all.as_of);
    if (series && key !== timelinePath()) {
      again = true; // the range or pool changed while this was read: read the new one
    } else if (series) {
      timelineKey = key;
      timelineAt = Date.now();
      renderTimeline(series);
    } else if (timeline) {
      summarizeOccupancy(timeline);
    }
    refreshCosts(all.as_of); // not awaited: its own pace, and the page does not wait for it
    $("#as-of").textContent = `as of ${shortTime(all.as_of)}`;
    document.body.dataset.asOf = all.as_of;
    document.body.dataset.refreshes = String(Number(document.body.dataset.refreshes || 0) + 1);
    setStatus(`refreshed every ${REFRESH_MS / 1000}s`, false);
  } catch (error) {
    if (!(error instanceof SignedOut)) setStatus(String(error.message || error), true);
  } finally {
    busy = false;
    if (again) {
      again = false;
      refresh();
    }
  }
}

async function start() {
  $("#sign-in").addEventListener("submit", signIn);
  $("#sign-out").addEventListener("click", signOut);
  $("#pool").addEventListener("change", (event) => {
    pool = event.target.value;
    localStorage.setItem("fairshare.pool", pool);
    refresh();
  });
  $("#range-picker").addEventListener("click", pickRange);
  $("#custom-range").addEventListener("submit", pickCustom);
  $("#chart-budget").addEventListener("change", (event) => {
    chartBudget = event.target.value;
    if (timeline) renderTimeline(timeline);
    if (costs.data) renderCosts(costs.data);
  });
  keepOpen("#queue", "queue");
  keepOpen("#preemptions", "preemptions");
  if (range.kind === "custom") {
    $("#range-from").value = range.from;
    $("#range-to").value = range.to;
  }
  showRange();
  setInterval(refresh, REFRESH_MS);
  const response = await fetch("/dashboard/session", { credentials: "same-origin" });
  const session = response.ok ? await response.json() : { user: null };
  if (session.user) {
    showSignedIn(session);
    refresh();
  } else {
    showSignIn(response.ok ? "" : `HTTP ${response.status} from /dashboard/session`);
  }
}

document.addEventListener("DOMContentLoaded", start);
