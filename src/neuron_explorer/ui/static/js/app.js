// Application shell: the profile list, the widget dashboard, the Add Widget and Device Profiles
// List modals, and the widgets themselves (System Trace Viewer, Event Details, Profile Overview,
// Device Trace Viewer). Widgets talk through a small event bus so Event Details can follow clicks in
// any trace viewer of its profile.

import { api, esc, fmtBytes, fmtCount, fmtDur } from "./api.js";
import { Timeline } from "./timeline.js";

const bus = new EventTarget();
const $ = (sel, root = document) => root.querySelector(sel);
const h = (html) => { const t = document.createElement("template"); t.innerHTML = html.trim(); return t.content.firstElementChild; };

let toastTimer = 0;
function toast(msg, error = false) {
  const t = $("#toast");
  t.textContent = msg;
  t.className = error ? "error" : "";
  t.style.display = "block";
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => { t.style.display = "none"; }, 5000);
}

const state = { profiles: [], widgets: [], nextId: 1, home: null };

// ---------------------------------------------------------------- widget registry
const WIDGETS = {
  "system-trace": { title: "System Trace Viewer", category: "System", tags: ["system"], wide: true,
    desc: "Timeline of runtime, framework and hardware events with counters, flows and grouping modes." },
  "event-details": { title: "Event Details", category: "System", tags: ["both"],
    desc: "Every property of the event last clicked in a trace viewer of this profile." },
  "profile-info": { title: "Profile Overview", category: "System", tags: ["system"],
    desc: "Processes, ranks, clocks and event counts of the profile." },
  "device-trace": { title: "Device Trace Viewer", category: "Device", tags: ["device"], wide: true,
    desc: "Op and kernel events of one device profile, by engine." },
};

function widgetKey(w) { return `${w.type}|${w.profile}|${w.deviceProfile ?? ""}`; }

function findDuplicate(type, profile, deviceProfile, exceptId) {
  return state.widgets.find((w) => w.id !== exceptId && widgetKey(w) === `${type}|${profile}|${deviceProfile ?? ""}`);
}

function refuseDuplicate(type, profile) {
  toast(`A ${WIDGETS[type].title} for profile "${profile}" is already open. Adding duplicate widgets for the same profile is not supported.`, true);
}

/** Add a widget unless one of the same type already shows that profile. Returns the widget or null. */
function addWidget(type, profile, deviceProfile = null) {
  const dup = findDuplicate(type, profile, deviceProfile);
  if (dup) { refuseDuplicate(type, profile); dup.el.scrollIntoView({ block: "nearest" }); return null; }
  const w = { id: state.nextId++, type, profile, deviceProfile };
  state.widgets.push(w);
  mountWidget(w);
  return w;
}

function removeWidget(w) {
  w.destroy?.();
  w.el.remove();
  state.widgets = state.widgets.filter((x) => x !== w);
}

function profileOptions(selected) {
  return state.profiles.map((p) => `<option value="${esc(p.name)}" ${p.name === selected ? "selected" : ""}>${esc(p.display_name || p.name)}</option>`).join("");
}

function mountWidget(w) {
  const def = WIDGETS[w.type];
  const el = h(`<section class="widget ${def.wide ? "wide" : ""}" data-testid="widget" data-type="${w.type}" data-profile="${esc(w.profile)}">
    <header><span class="title">${def.title}</span>
      <select class="profile-select" data-testid="profile-select" title="Profile">${profileOptions(w.profile)}</select>
      <span class="extra toolbar"></span><span class="spacer"></span>
      <button class="close" title="Close widget" data-testid="close-widget">×</button></header>
    <div class="body"></div></section>`);
  w.el = el;
  $("#widgets").appendChild(el);
  $(".close", el).onclick = () => removeWidget(w);
  $(".profile-select", el).onchange = (ev) => {
    const p = ev.target.value;
    if (findDuplicate(w.type, p, w.deviceProfile, w.id)) { refuseDuplicate(w.type, p); ev.target.value = w.profile; return; }
    w.destroy?.();
    w.profile = p;
    el.dataset.profile = p;
    render(w);
  };
  render(w);
}

function render(w) {
  const body = $(".body", w.el);
  const extra = $(".extra", w.el);
  body.innerHTML = "";
  extra.innerHTML = "";
  ({ "system-trace": renderSystemTrace, "event-details": renderEventDetails, "profile-info": renderProfileInfo,
     "device-trace": renderDeviceTrace })[w.type](w, body, extra);
}

// ---------------------------------------------------------------- System Trace Viewer
async function renderSystemTrace(w, body, extra) {
  const ov = await api.overview(w.profile).catch((e) => { body.innerHTML = `<p class="pad">${esc(e.message)}</p>`; });
  if (!ov) return;
  let mode = w.mode || ov.default_mode;
  extra.innerHTML = `
    <input type="search" placeholder="Search event name…" data-testid="search" />
    <button data-act="prev" title="Previous match">◀</button><button data-act="next" title="Next match">▶</button>
    <button data-act="select" title="Range selection tool (or Shift+drag)" data-testid="select-tool">Select range</button>
    <button data-act="reset" title="Show the whole profile (0)">Reset zoom</button>
    <button data-act="settings" data-testid="settings">Settings</button>
    <button data-act="devices" data-testid="device-profiles-list">Device Profiles List</button>`;
  const tlHost = h(`<div class="timeline" data-testid="system-timeline"></div>`);
  const status = h(`<div class="statusbar"><span class="st">preparing…</span><span class="search-info"></span><span class="mode-info"></span></div>`);
  const summary = h(`<div class="selection-summary" data-testid="selection-summary"><span class="muted">Shift+drag (or drag in the time ruler, or the Select range tool) to summarize a time range.</span></div>`);
  body.append(tlHost, status, summary);
  const src = {
    duration: ov.duration_ns,
    window: (rows, t0, t1, px, sig) => api.window(w.profile, mode, rows, t0, t1, px, sig),
    counters: (rows, t0, t1, px, sig) => api.counters(w.profile, mode, rows, t0, t1, px, sig),
    flows: (t0, t1, sig) => api.flows(w.profile, mode, t0, t1, sig),
  };
  const tl = new Timeline(tlHost, src, {
    onStatus: (s) => { $(".st", status).textContent = s; },
    onEventClick: (it) => openEvent(w, it),
    onSelect: (r) => showSummary(r),
  });
  w.timeline = tl;
  w.destroy = () => tl.destroy();
  const loadRows = async () => {
    const t = await api.tracks(w.profile, mode);
    tl.setRows(t.rows);
    $(".mode-info", status).textContent = `grouping: ${ov.modes[mode]} · ${t.rows.length} tracks · ${fmtCount(ov.events)} events`;
    w.el.dataset.mode = mode;
  };
  await loadRows();

  async function showSummary(r) {
    if (!r) { summary.innerHTML = `<span class="muted">No range selected.</span>`; return; }
    summary.innerHTML = `<span class="muted">Summarizing…</span>`;
    const s = await api.summary(w.profile, mode, r.a, r.b);
    summary.innerHTML = `<div><b data-testid="summary-count">${fmtCount(s.count)}</b> events starting in ${fmtDur(r.b - r.a)}
      (${fmtDur(r.a)} – ${fmtDur(r.b)})${s.approximate ? " · approximate at the range edges" : ""}</div>
      <table data-testid="summary-table"><thead><tr><th>Event name</th><th class="num">Count</th><th class="num">Total duration</th><th class="num">Mean duration</th></tr></thead>
      <tbody>${s.by_name.map((x) => `<tr><td>${esc(x.name)}</td><td class="num">${fmtCount(x.count)}</td><td class="num">${fmtDur(x.total_ns)}</td><td class="num">${fmtDur(x.mean_ns)}</td></tr>`).join("")}</tbody></table>`;
  }

  // search
  const input = $("input[type=search]", extra);
  let q = "";
  const runSearch = async () => {
    q = input.value.trim();
    if (!q) { tl.match = null; tl.queueDraw(); $(".search-info", status).textContent = ""; return; }
    const r = await api.search(w.profile, mode, q);
    tl.match = new Set(r.rows);
    tl.queueDraw();
    const total = r.names.reduce((a, [, n]) => a + n, 0);
    $(".search-info", status).textContent = r.names.length ? `search "${q}": ${fmtCount(total)} events in ${r.names.map(([n]) => n).join(", ")}` : `search "${q}": no event names match`;
    if (r.rows.length) tl.scrollToRow(r.rows[0]);
  };
  input.addEventListener("keydown", (ev) => { if (ev.key === "Enter") runSearch(); ev.stopPropagation(); });
  input.addEventListener("search", runSearch);
  const jump = async (dir) => {
    if (!q) await runSearch();
    if (!q) return;
    const center = tl.selected?.s ?? (dir > 0 ? tl.t0 : tl.t1);
    const r = await api.searchNext(w.profile, q, center, dir);
    if (!r.found) { toast(`no ${dir > 0 ? "later" : "earlier"} "${q}" event`); return; }
    const span = tl.t1 - tl.t0;
    const span2 = Math.max(span, (r.e - r.s) * 3);
    tl.setView(r.s - span2 / 2, r.s + span2 / 2);
    const row = tl.leafToRow.get(r.leaf);
    if (row !== undefined) tl.scrollToRow(row);
    tl.selected = { id: r.id, row, s: r.s };
    openEvent(w, { id: r.id, leaf: r.leaf, c: 1, name: r.name });
  };
  extra.querySelector("[data-act=next]").onclick = () => jump(1);
  extra.querySelector("[data-act=prev]").onclick = () => jump(-1);
  const selBtn = extra.querySelector("[data-act=select]");
  selBtn.onclick = () => { tl.selectMode = !tl.selectMode; selBtn.classList.toggle("on", tl.selectMode); };
  extra.querySelector("[data-act=reset]").onclick = () => tl.resetView();
  extra.querySelector("[data-act=devices]").onclick = () => openDeviceProfilesList(w.profile);
  extra.querySelector("[data-act=settings]").onclick = (ev) => {
    ev.stopPropagation();
    const old = $(".popover", w.el);
    if (old) { old.remove(); return; }
    const pop = h(`<div class="popover" data-testid="settings-popover"><h4>Grouping</h4>
      ${Object.entries(ov.modes).map(([k, label]) => `<label><input type="radio" name="grp-${w.id}" value="${k}" data-testid="mode-${k}" ${k === mode ? "checked" : ""}> ${esc(label)}${k === ov.default_mode ? " (default)" : ""}</label>`).join("")}
      <h4 style="margin-top:8px">Display</h4>
      <label><input type="checkbox" data-opt="flows" ${tl.showFlows ? "checked" : ""}> Flow arrows</label>
      <label><input type="checkbox" data-opt="counters" ${tl.showCounters ? "checked" : ""}> Counter tracks (CPU, memory)</label>
      <div class="hint">Keys: W/S or ↑/↓ zoom · A/D or ←/→ pan · 0 reset · Esc clears the selection</div></div>`);
    w.el.appendChild(pop);
    pop.addEventListener("click", (e) => e.stopPropagation());
    pop.querySelectorAll("input[type=radio]").forEach((r) => r.addEventListener("change", async () => {
      mode = r.value;
      w.mode = mode;
      await loadRows();
      if (q) runSearch();
      if (tl.sel) showSummary(tl.sel);
    }));
    pop.querySelector("[data-opt=flows]").onchange = (e) => { tl.showFlows = e.target.checked; tl.refresh(); };
    pop.querySelector("[data-opt=counters]").onchange = (e) => { tl.showCounters = e.target.checked; tl.relayout(); tl.refresh(); };
    setTimeout(() => document.addEventListener("click", () => pop.remove(), { once: true }));
  };
}

async function openEvent(w, it) {
  if (it.c > 1) {
    bus.dispatchEvent(new CustomEvent("event", { detail: { profile: w.profile, merged: it, source: w } }));
    return;
  }
  try {
    const ev = await api.event(w.profile, it.id, it.leaf);
    bus.dispatchEvent(new CustomEvent("event", { detail: { profile: w.profile, event: ev, source: w } }));
    if (ev.name === "nc_exec_running" && ev.device_profile) {
      const dp = ev.device_profile.profile_id;
      const open = findDuplicate("device-trace", w.profile, String(dp));
      if (open) open.el.scrollIntoView({ block: "nearest" });
      else addWidget("device-trace", w.profile, String(dp));
    }
  } catch (e) {
    toast(e.message, true);
  }
}

// ---------------------------------------------------------------- Event Details
function propsTable(obj) {
  return `<table>${Object.entries(obj).map(([k, v]) => `<tr><th>${esc(k)}</th><td>${esc(typeof v === "object" && v !== null ? JSON.stringify(v) : v ?? "—")}</td></tr>`).join("")}</table>`;
}

function renderEventDetails(w, body) {
  body.innerHTML = `<div class="details" data-testid="event-details"><p class="muted">Click an event in a trace viewer of this profile to see its properties.</p></div>`;
  const box = $(".details", body);
  const onEvent = (e) => {
    const d = e.detail;
    const mine = d.profile === w.profile;
    const anyMine = state.widgets.some((x) => x.type === "event-details" && x.profile === d.profile);
    if (!mine && anyMine) return;
    const from = mine ? "" : `<div class="note">From profile "${esc(d.profile)}" (no Event Details widget is open for it).</div>`;
    if (d.merged) {
      const m = d.merged;
      box.innerHTML = `${from}<h3>${esc(m.name)} — ${fmtCount(m.c)} merged events</h3>
        <table><tr><th>span</th><td>${fmtDur(m.s)} – ${fmtDur(m.e)}</td></tr><tr><th>total duration</th><td>${fmtDur(m.d)}</td></tr>
        <tr><th>mean duration</th><td>${fmtDur(m.d / m.c)}</td></tr></table>
        <p><button data-testid="zoom-bucket">Zoom to these events</button></p>`;
      $("button", box).onclick = () => d.source.timeline?.zoomTo(m.s, m.e);
      return;
    }
    const ev = d.event;
    const dev = ev.name === "nc_exec_running"
      ? (ev.device_profile
        ? `<div class="note">Device profile <b>${esc(ev.device_profile.profile_id)}</b> covers this execution; it opened in a Device Trace Viewer.</div>`
        : `<div class="note" data-testid="device-note">${esc(ev.device_note || "No device profile was captured for this execution.")}</div>`)
      : "";
    box.innerHTML = `${from}<h3 data-testid="event-name">${esc(ev.name)}</h3>${dev}
      <table><tr><th>start (from profile start)</th><td>${fmtDur(ev.relative.start)}</td></tr><tr><th>duration</th><td>${fmtDur(ev.relative.end - ev.relative.start)}</td></tr></table>
      <h3>Properties</h3>${propsTable(ev.properties)}
      ${Object.keys(ev.attributes || {}).length ? `<h3>Attributes</h3>${propsTable(ev.attributes)}` : ""}
      ${ev.model ? `<h3>Model</h3>${propsTable(ev.model)}` : ""}
      ${ev.process ? `<h3>Process</h3>${propsTable(ev.process)}` : ""}`;
  };
  bus.addEventListener("event", onEvent);
  w.destroy = () => bus.removeEventListener("event", onEvent);
}

// ---------------------------------------------------------------- Profile Overview
async function renderProfileInfo(w, body) {
  const ov = await api.overview(w.profile);
  body.innerHTML = `<div class="details" data-testid="profile-info">
    <table><tr><th>events</th><td>${fmtCount(ov.events)}</td></tr><tr><th>duration</th><td>${fmtDur(ov.duration_ns)}</td></tr>
    <tr><th>instances</th><td>${ov.instances.map(esc).join(", ")}</td></tr><tr><th>device profiles</th><td>${ov.device_profiles}</td></tr></table>
    <h3>Processes</h3><table><tr><th>instance / pid</th><td><b>rank · device · events · clock offset</b></td></tr>
    ${ov.processes.map((p) => `<tr><th>${esc(p.instance_id)} / ${esc(p.process_id)}</th><td>${esc(p.rank)} · ${esc(p.device_kind)} · ${fmtCount(p.events ?? 0)} · ${fmtDur(p.clock_offset_ns ?? 0)} (${esc(p.clock_offset_method)})</td></tr>`).join("")}</table>
    <h3>Events by name</h3><table>${ov.names.map(([n, c]) => `<tr><th>${esc(n)}</th><td>${fmtCount(c)}</td></tr>`).join("")}</table>
    ${ov.warnings.length ? `<h3>Warnings</h3>${ov.warnings.map((m) => `<div class="note">${esc(m)}</div>`).join("")}` : ""}</div>`;
}

// ---------------------------------------------------------------- Device Trace Viewer
async function renderDeviceTrace(w, body, extra) {
  const list = (await api.deviceProfiles(w.profile)).device_profiles;
  if (!list.length) {
    body.innerHTML = `<p class="pad muted" data-testid="no-device-profiles">No device profiles were captured for "${esc(w.profile)}".</p>`;
    return;
  }
  if (w.deviceProfile === null || !list.some((d) => String(d.profile_id) === String(w.deviceProfile))) w.deviceProfile = String(list[0].profile_id);
  extra.innerHTML = `<select data-testid="device-profile-select">${list.map((d) => `<option value="${esc(d.profile_id)}" ${String(d.profile_id) === w.deviceProfile ? "selected" : ""}>${esc(d.profile_id)} · ${esc(d.model_name ?? "")} · NC ${esc(d.nc_idx)}</option>`).join("")}</select>
    <button data-act="reset">Reset zoom</button>`;
  $("select", extra).onchange = (ev) => {
    const v = ev.target.value;
    if (findDuplicate("device-trace", w.profile, v, w.id)) { refuseDuplicate("device-trace", `${w.profile}/${v}`); ev.target.value = w.deviceProfile; return; }
    w.destroy?.();
    w.deviceProfile = v;
    render(w);
  };
  const ov = await api.deviceOverview(w.profile, w.deviceProfile);
  const tlHost = h(`<div class="timeline" style="height:360px" data-testid="device-timeline"></div>`);
  const status = h(`<div class="statusbar"><span class="st"></span><span>${fmtCount(ov.events)} device events · ${ov.rows.length} engines</span></div>`);
  const details = h(`<div class="details" data-testid="device-event-details" style="border-top:1px solid var(--line)"><span class="muted">Click an op or kernel for its details.</span></div>`);
  body.append(tlHost, status, details);
  const pid = w.deviceProfile;
  const tl = new Timeline(tlHost, {
    duration: ov.duration_ns,
    window: (rows, t0, t1, px, sig) => api.deviceWindow(w.profile, pid, rows, t0, t1, px, sig),
  }, {
    onStatus: (s) => { $(".st", status).textContent = s; },
    onEventClick: async (it) => {
      if (it.c > 1) { tl.zoomTo(it.s, it.e); return; }
      const ev = await api.deviceEvent(w.profile, pid, it.row, it.s);
      details.innerHTML = `<h3 data-testid="device-event-name">${esc(ev.name)}</h3><h3>Properties</h3>${propsTable(ev.properties)}${Object.keys(ev.attributes).length ? `<h3>Attributes</h3>${propsTable(ev.attributes)}` : ""}`;
    },
  });
  w.timeline = tl;
  w.destroy = () => tl.destroy();
  tl.setRows(ov.rows);
  $("[data-act=reset]", extra).onclick = () => tl.resetView();
  w.el.dataset.deviceProfile = pid;
}

// ---------------------------------------------------------------- modals
function modal(title, content, footer = "") {
  const back = h(`<div class="modal-back"><div class="modal" role="dialog" aria-label="${esc(title)}"><header><h2>${esc(title)}</h2><span style="flex:1"></span><button data-act="x" aria-label="Close">×</button></header><div class="content"></div><footer>${footer}<button data-act="cancel">Close</button></footer></div></div>`);
  $(".content", back).append(...(typeof content === "string" ? [h(`<div>${content}</div>`)] : [content]));
  const close = () => back.remove();
  back.addEventListener("click", (e) => { if (e.target === back) close(); });
  $("[data-act=x]", back).onclick = close;
  $("[data-act=cancel]", back).onclick = close;
  $("#modal-root").appendChild(back);
  return { el: back, close };
}

function openAddWidget() {
  const cur = state.home;
  const content = h(`<div data-testid="add-widget-modal">
    <label>Profile: <select data-testid="add-widget-profile">${profileOptions(cur)}</select></label>
    <div class="tabs" style="margin-top:10px"><button class="on" data-cat="System" data-testid="tab-system">System widgets</button><button data-cat="Device" data-testid="tab-device">Device widgets</button></div>
    <div class="tiles"></div></div>`);
  const m = modal("Add Widget", content);
  let cat = "System";
  const draw = () => {
    $(".tiles", content).innerHTML = Object.entries(WIDGETS).filter(([, d]) => d.category === cat).map(([k, d]) =>
      `<button class="tile" data-type="${k}" data-testid="tile-${k}"><div class="t">${d.title}</div><div class="d">${d.desc}</div>${d.tags.map((t) => `<span class="tag ${t}">${t}</span>`).join("")}</button>`).join("");
    content.querySelectorAll(".tile").forEach((tile) => tile.onclick = async () => {
      const type = tile.dataset.type;
      const profile = $("[data-testid=add-widget-profile]", content).value;
      if (type === "device-trace") {
        const list = (await api.deviceProfiles(profile)).device_profiles;
        if (!list.length) { toast(`No device profiles were captured for "${profile}".`, true); return; }
        if (addWidget(type, profile, String(list.find((d) => !findDuplicate(type, profile, String(d.profile_id)))?.profile_id ?? list[0].profile_id))) m.close();
        return;
      }
      if (addWidget(type, profile)) m.close();
    });
  };
  content.querySelectorAll(".tabs button").forEach((b) => b.onclick = () => {
    cat = b.dataset.cat;
    content.querySelectorAll(".tabs button").forEach((x) => x.classList.toggle("on", x === b));
    draw();
  });
  draw();
}

async function openDeviceProfilesList(profile) {
  const list = (await api.deviceProfiles(profile)).device_profiles;
  if (!list.length) {
    modal("Device Profiles", `<p data-testid="device-profiles-empty">No device profiles were captured for "${esc(profile)}". Device profiles hold the op and kernel events of executions on a NeuronCore; they are captured with the device profiling mode.</p>`);
    return;
  }
  const cols = Object.keys(list[0]);
  const content = h(`<div><table class="grid dp-list" style="margin:0" data-testid="device-profiles-table"><thead><tr><th></th>${cols.map((c) => `<th>${esc(c)}</th>`).join("")}</tr></thead>
    <tbody>${list.map((d, i) => `<tr><td><input type="radio" name="dp" value="${esc(d.profile_id)}" ${i ? "" : "checked"}></td>${cols.map((c) => `<td>${esc(d[c])}</td>`).join("")}</tr>`).join("")}</tbody></table></div>`);
  const m = modal("Device Profiles", content, `<button class="primary" data-act="submit" data-testid="device-profiles-submit">Submit</button>`);
  $("[data-act=submit]", m.el).onclick = () => {
    const v = $("input[name=dp]:checked", m.el).value;
    if (addWidget("device-trace", profile, String(v))) m.close();
  };
}

// ---------------------------------------------------------------- pages
async function showHome() {
  $("#crumb").textContent = "";
  $("#actions").innerHTML = "";
  const r = await api.profiles();
  state.profiles = r.profiles;
  $("#main").innerHTML = `<h1>Profiles</h1><p class="muted" style="margin:0 16px 10px">Workspace ${esc(r.workspace)} · ingest more with <code>neuron-explorer view -d DIR --ingest-only --data-path WORKSPACE</code></p>
    ${r.profiles.length ? `<table class="grid" data-testid="profiles"><thead><tr><th>Profile</th><th>Type</th><th class="num">Processes</th><th class="num">Instances</th><th class="num">Events</th><th>Captured</th></tr></thead><tbody>
    ${r.profiles.map((p) => `<tr class="link" data-name="${esc(p.name)}" data-testid="profile-row"><td><a href="#/p/${encodeURIComponent(p.name)}">${esc(p.display_name || p.name)}</a></td><td>${p.types.map((t) => `<span class="tag ${t}">${t}</span>`).join("")}</td><td class="num">${p.processes}</td><td class="num">${p.instances}</td><td class="num">${fmtCount(p.events)}</td><td>${p.start_wall_ns ? new Date(Number(BigInt(p.start_wall_ns) / 1000000n)).toISOString().replace("T", " ").slice(0, 19) : ""}</td></tr>`).join("")}
    </tbody></table>` : `<p class="pad">No profiles yet in this workspace.</p>`}`;
  document.querySelectorAll("tr.link").forEach((tr) => tr.onclick = () => { location.hash = `#/p/${encodeURIComponent(tr.dataset.name)}`; });
}

async function showDashboard(name) {
  for (const w of [...state.widgets]) removeWidget(w);
  if (!state.profiles.length) state.profiles = (await api.profiles()).profiles;
  if (!state.profiles.some((p) => p.name === name)) { $("#main").innerHTML = `<p class="pad">Profile "${esc(name)}" not found. <a href="#/">All profiles</a></p>`; return; }
  state.home = name;
  $("#crumb").textContent = `› ${name}`;
  $("#actions").innerHTML = `<button class="primary" data-testid="add-widget">Add Widget</button>`;
  $("[data-testid=add-widget]").onclick = openAddWidget;
  $("#main").innerHTML = `<div id="widgets"></div>`;
  addWidget("system-trace", name);
  addWidget("event-details", name);
}

function route() {
  const m = location.hash.match(/^#\/p\/(.+)$/);
  const go = m ? showDashboard(decodeURIComponent(m[1])) : showHome();
  go.catch((e) => { $("#main").innerHTML = `<p class="pad">Error: ${esc(e.message)}</p>`; });
}

window.addEventListener("hashchange", route);
route();
window.__nx = { state, addWidget, WIDGETS };
void fmtBytes;
