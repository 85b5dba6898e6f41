/* Fairshare dashboard: polls the API every few seconds and draws what it says. No build step.
   Sign-in: the form posts the token once to /dashboard/session, which keeps it in an HttpOnly,
   SameSite=Strict cookie that this page's reads carry; the script never stores the token (not
   in the URL, not in localStorage), so nothing it runs, or that is injected, can read it back.
   The page's policy (Content-Security-Policy) allows no inline script or style: styles are set
   through the CSSOM below, never in markup. */
"use strict";

const params = new URLSearchParams(window.location.search);
const REFRESH_MS = Math.max(500, 1000 * Number(params.get("refresh") || 3));
localStorage.removeItem("fairshare.token"); // where older versions kept it
let signedIn = false;
let pool = params.get("pool") || localStorage.getItem("fairshare.pool") || "";
let usageBudget = "";
let charts = {};
let timer = null;

const $ = (sel) => document.querySelector(sel);
const gpuh = (seconds) => (seconds / 3600).toFixed(1);
const pct = (x) => (x * 100).toFixed(1) + "%";
const esc = (s) => String(s ?? "").replace(/[&<>"']/g,
  (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
const shortTime = (iso) => (iso ? iso.replace("T", " ").replace(/:\d\dZ$/, "Z") : "");
const duration = (s) => (s === 0 ? "burst" : s % 3600 === 0 ? `${s / 3600}h` : `${Math.round(s / 60)}m`);

class SignedOut extends Error {}

async function api(path) {
  const response = await fetch(path, { credentials: "same-origin" });
  if (response.status === 401) {
    showSignIn("signed out (unknown or expired session): sign in with a token");
    throw new SignedOut();
  }
  if (!response.ok) {
    let detail = response.statusText;
    try { detail = (await response.json()).detail; } catch (_) { /* not JSON */ }
    throw new Error(`${path}: HTTP ${response.status} ${detail}`);
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
    return `<tr data-budget="${esc(b.budget)}" class="lvl${b.depth} ${b.leaf ? "leaf" : "inner"}">` +
      `<td class="name">${esc(b.budget.split("/").pop())}${closed}</td>` +
      `<td class="num weight">${b.weight}</td>` +
      `<td class="num share">${f.share == null ? "-" : pct(f.share)}</td>` +
      `<td class="num rank">${f.rank ?? ""}</td>` +
      `<td class="num demand">${f.demand_gpus ?? 0}</td>` +
      `<td class="num delivered">${gpuh(f.delivered_gpu_s || 0)}</td>` +
      `<td class="num owed">${f.owed_gpu_s == null ? "-" : gpuh(f.owed_gpu_s)}</td>` +
      `<td>${ratioBar(f.delivered_gpu_s || 0, f.owed_gpu_s || 0)}</td></tr>`;
  });
  $("#budgets tbody").innerHTML = rows.join("");
  sizeBars($("#budgets tbody"));
  const select = $("#usage-budget");
  const options = ["", ...depthFirst(report.budgets).map((b) => b.budget)];
  if (select.options.length !== options.length) {
    select.innerHTML = options.map((b) =>
      `<option value="${esc(b)}">${b ? esc(b) : "all budgets"}</option>`).join("");
    select.value = usageBudget;
  }
}

// -- charts --------------------------------------------------------------------------------
const PALETTE = ["#3566d6", "#e07b39", "#2e9d5b", "#9c4fd6", "#d2453d", "#1fa2b5", "#b59a1f",
  "#6b7385", "#d65aa0", "#4c8c2b", "#8a5a2b", "#2b4c8c"];

function chart(id, config) {
  if (!charts[id]) {
    charts[id] = new Chart($(id), config);
  } else {
    charts[id].data = config.data;
    charts[id].update("none");
  }
}

const baseOptions = (yTitle, stacked) => ({
  animation: false, responsive: true, maintainAspectRatio: false,
  interaction: { mode: "index", intersect: false },
  plugins: { legend: { position: "bottom", labels: { boxWidth: 10, font: { size: 10 } } } },
  scales: {
    x: { stacked, ticks: { maxTicksLimit: 12, font: { size: 10 } } },
    y: { stacked, beginAtZero: true, title: { display: true, text: yTitle } },
  },
});

function renderUsage(usage) {
  const labels = usage.hours.map((h) => h.slice(5, 13).replace("T", " ") + "h");
  const rows = usage.budgets.filter((b) => b.pool === pool);
  const under = (b) => !usageBudget || b.budget === usageBudget || b.budget.startsWith(usageBudget + "/");
  const sum = (list, key) => labels.map((_, i) => list.reduce((t, b) => t + b[key][i], 0));
  let datasets;
  if (!usageBudget) {
    datasets = rows.filter((b) => b.allocated_gpu_h.some((v) => v > 0)).map((b, i) => ({
      type: "bar", label: `${b.budget} allocated`, data: b.allocated_gpu_h, stack: "use",
      backgroundColor: PALETTE[i % PALETTE.length],
    }));
    datasets.push({ type: "bar", label: "unallocated (all)", data: sum(rows, "unallocated_gpu_h"),
      stack: "use", backgroundColor: "#c9d3e6" });
    const p = usage.pools.find((x) => x.pool === pool);
    datasets.push({ type: "line", label: "capacity", stack: "cap", pointRadius: 0, borderWidth: 1.5,
      borderColor: "#1d2330", data: labels.map(() => (p ? p.capacity_gpus : 0)) });
  } else {
    const mine = rows.filter(under);
    datasets = [
      { type: "bar", label: "allocated", data: sum(mine, "allocated_gpu_h"), stack: "use",
        backgroundColor: "#3566d6" },
      { type: "bar", label: "unallocated", data: sum(mine, "unallocated_gpu_h"), stack: "use",
        backgroundColor: "#9bb7f0" },
      { type: "line", label: "entitlement (share x capacity)", data: sum(mine, "entitlement_gpu_h"),
        stack: "ent", pointRadius: 0, borderWidth: 2, borderColor: "#d2453d", stepped: true },
    ];
  }
  chart("#usage-chart", { data: { labels, datasets }, options: baseOptions("GPU-hours per hour", true) });
  $("#usage-source").textContent = `source: ${usage.source}; as of ${shortTime(usage.as_of)}`;
  const occ = usage.pools.map((p, i) => ({
    type: "line", label: `${p.pool} (${p.capacity_gpus} GPUs)`, pointRadius: 0, borderWidth: 2,
    borderColor: PALETTE[i % PALETTE.length], spanGaps: true,
    data: p.occupancy.map((v) => (v == null ? null : Math.round(v * 1000) / 10)),
  }));
  const options = baseOptions("% of capacity busy", false);
  options.scales.y.suggestedMax = 100;
  chart("#occupancy-chart", { data: { labels, datasets: occ }, options });
}

// -- queue, preemptions, nodes -------------------------------------------------------------
function renderQueue(queue) {
  const entry = queue.pools.find((p) => p.pool === pool) || queue.pools[0];
  if (!entry) { $("#queue tbody").innerHTML = ""; return; }
  $("#queue-summary").textContent =
    `${entry.queue_length} pending in ${entry.pool}; ${entry.free_gpus} of ${entry.capacity} GPUs free`;
  $("#queue tbody").innerHTML = entry.pending.slice(0, 100).map((w) => {
    const why = (w.reasons || []).slice(0, 2).map((r) =>
      `<span class="code">${esc(r.code)}</span>${esc(r.message)}`).join("<br>");
    return `<tr data-workload="${esc(w.workload_id)}"><td class="num position">${w.position}</td>` +
      `<td>${esc(w.workload_id)}</td><td>${esc(w.budget)}</td><td class="num">${w.gpus}</td>` +
      `<td>${duration(w.min_runtime_s)}</td><td class="reason">${why}</td></tr>`;
  }).join("");
}

function renderPreemptions(data) {
  $("#preemptions tbody").innerHTML = data.preemptions.slice(0, 30).map((p) =>
    `<tr data-workload="${esc(p.workload_id)}"><td>${esc(shortTime(p.time))}</td>` +
    `<td>${esc(p.workload_id)}</td><td>${esc(p.budget)}</td>` +
    `<td><span class="code">${esc(p.reason)}</span></td><td class="reason">${esc(p.message)}</td></tr>`
  ).join("");
}

function renderNodes(data) {
  const counts = {};
  $("#nodes").innerHTML = data.nodes.filter((n) => !pool || n.pool === pool).map((n) => {
    counts[n.state] = (counts[n.state] || 0) + 1;
    const gpus = Array.from({ length: n.gpus }, (_, i) => `<i class="${i < n.used_gpus ? "used" : ""}"></i>`);
    return `<div class="node state-${esc(n.state)}" data-node="${esc(n.node)}"><b>${esc(n.node)}</b>` +
      `<span class="state">${esc(n.state)}</span> <span class="muted">${n.used_gpus}/${n.gpus}</span>` +
      `<div class="gpus">${gpus.join("")}</div></div>`;
  }).join("");
  $("#nodes-summary").textContent = Object.entries(counts).map(([k, v]) => `${v} ${k}`).join(", ");
}

// -- the loop ------------------------------------------------------------------------------
async function refresh() {
  if (!signedIn) return;
  try {
    const all = await api("/budgets");
    const pools = all.pools.map((p) => p.pool);
    if (!pools.includes(pool)) pool = pools[0] || "";
    const select = $("#pool");
    if (select.options.length !== pools.length) {
      select.innerHTML = pools.map((p) => `<option>${esc(p)}</option>`).join("");
    }
    select.value = pool;
    const [queue, nodes, preemptions, usage] = await Promise.all([
      api(`/queue?pool=${encodeURIComponent(pool)}`), api("/nodes"),
      api("/dashboard/api/preemptions?limit=30"), api("/dashboard/api/usage?hours=48"),
    ]);
    renderBudgets(all);
    renderQueue(queue);
    renderPreemptions(preemptions);
    renderNodes(nodes);
    renderUsage(usage);
    $("#as-of").textContent = `as of ${shortTime(all.as_of)}`;
    document.body.dataset.asOf = all.as_of;
    document.body.dataset.refreshes = String(Number(document.body.dataset.refreshes || 0) + 1);
    setStatus(`refreshed every ${REFRESH_MS / 1000}s`, false);
  } catch (error) {
    if (!(error instanceof SignedOut)) setStatus(String(error.message || error), true);
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
  $("#usage-budget").addEventListener("change", (event) => { usageBudget = event.target.value; refresh(); });
  timer = setInterval(refresh, REFRESH_MS);
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
