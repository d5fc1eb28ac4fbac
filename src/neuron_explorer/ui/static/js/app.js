// Application shell: the profile list, the widget dashboard, the Add Widget and Device Profiles
// List modals, and the widgets themselves (System Trace Viewer with its docked panel, Event Details,
// Profile Overview, Device Trace Viewer). Widgets talk through a small event bus so Event Details can
// follow clicks in any trace viewer of its profile. The dashboard's state (widgets, view range, area,
// selected event and search) lives in the URL, so a view survives a reload or a restart and can be shared.

import { absNs, api, encodeRows, esc, fmtBytes, fmtCount, fmtDur, fmtDurExact, fmtNs, stats } from "./api.js";
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

const state = { profiles: [], widgets: [], nextId: 1, home: null, restoring: null, sync: false };

// ---------------------------------------------------------------- widget registry
const WIDGETS = {
  "system-trace": { title: "System Trace Viewer", category: "System", tags: ["system"], wide: true,
    desc: "Timeline of runtime, framework and hardware events with counters, flows and grouping modes." },
  "event-details": { title: "Event Details", category: "System", tags: ["both"],
    desc: "Every property of the event last clicked in a trace viewer of this profile." },
  "profile-info": { title: "Profile Overview", category: "System", tags: ["system"],
    desc: "Processes, ranks, clocks and event counts of the profile." },
  "diff": { title: "Diff", category: "System", tags: ["system"], wide: true,
    desc: "Compare this profile with another (neuron-explorer diff): what got faster or slower, and is it real; a row moves both timelines to the item." },
  "device-trace": { title: "Device Trace Viewer", category: "Device", tags: ["device"], wide: true,
    desc: "Op and kernel events of one device profile, by engine, on the system timeline's time axis." },
};

function widgetKey(w) { return `${w.type}|${w.profile}|${w.deviceProfile ?? ""}`; }
/** The second name a widget item carries after "!": a device trace's profile id, a diff's candidate. */
const secondOf = (w) => (w.type === "device-trace" || w.type === "diff" ? w.deviceProfile : null);

function findDuplicate(type, profile, deviceProfile, exceptId) {
  return state.widgets.find((w) => w.id !== exceptId && widgetKey(w) === `${type}|${profile}|${deviceProfile ?? ""}`);
}

function refuseDuplicate(type, profile) {
  toast(`A ${WIDGETS[type].title} for profile "${profile}" is already open. Adding duplicate widgets for the same profile is not supported.`, true);
}

/** Add a widget unless one of the same type already shows that profile. Returns the widget or null.
 * ``opts.dock``: a system trace widget whose docked panel holds the new widget (the drill-down). */
function addWidget(type, profile, deviceProfile = null, opts = {}) {
  const dup = findDuplicate(type, profile, deviceProfile);
  if (dup) { refuseDuplicate(type, profile); dup.el.scrollIntoView({ block: "nearest" }); return null; }
  const w = { id: state.nextId++, type, profile, deviceProfile, ...opts.init };
  state.widgets.push(w);
  mountWidget(w, opts.dock);
  // a second System Trace Viewer goes side by side with the first (each half the width)
  const traces = state.widgets.filter((x) => x.type === "system-trace" && !x.dockedIn);
  if (type === "system-trace" && traces.length === 2 && !state.restoring) traces.forEach((x) => setHalf(x, true));
  saveUrl();
  return w;
}

function removeWidget(w) {
  w.destroy?.();
  w.el.remove();
  state.widgets = state.widgets.filter((x) => x !== w);
  if (w.dockedIn) w.dockedIn.dock?.removed(w);
  saveUrl();
}

function profileOptions(selected) {
  return state.profiles.map((p) => `<option value="${esc(p.name)}" ${p.name === selected ? "selected" : ""}>${esc(p.display_name || p.name)}</option>`).join("");
}

function mountWidget(w, dock) {
  const def = WIDGETS[w.type];
  const el = h(`<section class="widget ${def.wide ? "wide" : ""}" data-testid="widget" data-type="${w.type}" data-profile="${esc(w.profile)}">
    <header><span class="grip" title="Drag onto another widget to reorder" data-testid="widget-grip">⠿</span><span class="title">${def.title}</span>
      <select class="profile-select" data-testid="profile-select" title="Profile">${profileOptions(w.profile)}</select>
      <span class="extra toolbar"></span><span class="spacer"></span>
      ${def.wide ? `<button class="half" title="Half width (side by side) / full width" data-testid="side-by-side">⇔</button>` : ""}
      <button class="close" title="Close widget" data-testid="close-widget">×</button></header>
    <div class="body"></div></section>`);
  w.el = el;
  if (dock) { dock.dock.add(w); w.dockedIn = dock; } else $("#widgets").appendChild(el);
  $(".close", el).onclick = () => removeWidget(w);
  if (def.wide) { $(".half", el).onclick = () => { setHalf(w, !w.half); saveUrl(); }; if (w.half) setHalf(w, true); }
  $(".profile-select", el).onchange = (ev) => {
    const p = ev.target.value;
    if (findDuplicate(w.type, p, w.deviceProfile, w.id)) { refuseDuplicate(w.type, p); ev.target.value = w.profile; return; }
    w.destroy?.();
    w.profile = p;
    el.dataset.profile = p;
    render(w);
    saveUrl();
  };
  // reorder: drag a widget's grip and drop it on another widget (it goes before that one)
  $(".grip", el).addEventListener("mousedown", (ev) => {
    if (w.dockedIn) return;
    ev.preventDefault();
    document.body.classList.add("reordering");
    let over = null;
    const target = (e) => document.elementFromPoint(e.clientX, e.clientY)?.closest("#widgets > [data-testid=widget]");
    const mv = (e) => { const t = target(e); if (over && over !== t) over.classList.remove("drop-target"); over = t && t !== el ? t : null; over?.classList.add("drop-target"); };
    const up = (e) => {
      window.removeEventListener("mousemove", mv);
      window.removeEventListener("mouseup", up);
      document.body.classList.remove("reordering");
      over?.classList.remove("drop-target");
      const t = target(e);
      const dst = t && state.widgets.find((x) => x.el === t);
      if (dst && dst !== w) moveWidget(w, dst);
    };
    window.addEventListener("mousemove", mv);
    window.addEventListener("mouseup", up);
  });
  render(w);
}

/** Half width: two widgets side by side (the grid puts them on one row when the window is wide enough). */
function setHalf(w, half) {
  w.half = half;
  w.el.classList.toggle("wide", !half);
  w.el.classList.toggle("half", half);
}

/** Put widget ``src`` before ``before`` (the page order and the URL's order). */
function moveWidget(src, before) {
  before.el.before(src.el);
  state.widgets = state.widgets.filter((x) => x !== src);
  state.widgets.splice(state.widgets.indexOf(before), 0, src);
  saveUrl();
}

function render(w) {
  const body = $(".body", w.el);
  const extra = $(".extra", w.el);
  body.innerHTML = "";
  extra.innerHTML = "";
  ({ "system-trace": renderSystemTrace, "event-details": renderEventDetails, "profile-info": renderProfileInfo, diff: renderDiff,
     "device-trace": renderDeviceTrace })[w.type](w, body, extra);
}

// ---------------------------------------------------------------- URL state
const LAYOUTS = ["tracks", "names"];

// A widget in the URL: TYPE[@PROFILE][!DEVICE_PROFILE][~h] (another profile than the page's, the device
// profile a Device Trace Viewer shows, half width). Names are percent-encoded, the separators and the
// list's comma included (encodeURIComponent keeps ! ~ ' ( ) *), so that any profile name comes back.
const encPart = (x) => encodeURIComponent(x).replace(/[!'()*~]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
const decPart = (x) => { try { return decodeURIComponent(x); } catch { return x; } };

function widgetItem(w) {
  return w.type + (w.profile !== state.home ? `@${encPart(w.profile)}` : "")
    + (secondOf(w) !== null && secondOf(w) !== undefined ? `!${encPart(String(secondOf(w)))}` : "")
    + (w.half ? "~h" : "");
}

function parseWidgetItem(item) {
  const [head, half] = item.split("~");
  const [rest, dev] = head.split("!");
  const [type, prof] = rest.split("@");
  return { type, profile: prof === undefined ? null : decPart(prof), deviceProfile: dev === undefined ? null : decPart(dev),
           half: half === "h" };
}
// #/p/NAME?w=system-trace,event-details&mode=..&t0=..&t1=..&a0=..&a1=..&rows=..&ev=leaf:id:start&q=search
//   &order=late|compute|cc (rank order) &ranks=0-3,37 (rank filter) &devfold=INST|PID|NC,... (folded device lanes)
let urlTimer = 0;
function saveUrl() {
  if (state.restoring || !state.home) return;
  clearTimeout(urlTimer);
  urlTimer = setTimeout(() => {
    const q = new URLSearchParams();
    q.set("w", state.widgets.filter((w) => !w.dockedIn).map(widgetItem).join(","));
    const st = state.widgets.find((w) => w.type === "system-trace" && w.profile === state.home && w.timeline);
    if (st) {
      const tl = st.timeline;
      q.set("mode", st.mode);
      q.set("layout", st.layout);
      q.set("t0", String(Math.round(tl.t0)));
      q.set("t1", String(Math.round(tl.t1)));
      if (tl.sel) { q.set("a0", String(Math.round(tl.sel.a))); q.set("a1", String(Math.round(tl.sel.b))); if (tl.sel.rows) q.set("rows", tl.sel.rows.join(".")); }
      if (tl.selected && tl.selected.leaf !== null && tl.selected.leaf !== undefined) q.set("ev", `${tl.selected.leaf}:${tl.selected.id}:${tl.selected.s}`);
      if (st.dockH) q.set("dock", String(st.dockH));
      if (st.query) q.set("q", st.query);
      if (st.order && st.order !== "rank") q.set("order", st.order);
      if (st.rankFilter) q.set("ranks", encodeRows(st.rankFilter.ranks));
      if (tl.devFolded.size) q.set("devfold", [...tl.devFolded].map(encPart).join(","));
    }
    if (state.sync) q.set("sync", "1");
    history.replaceState(null, "", `#/p/${encodeURIComponent(state.home)}?${q}`);
  }, 150);
}

function readUrl() {
  const hsh = location.hash;
  const i = hsh.indexOf("?");
  return new URLSearchParams(i >= 0 ? hsh.slice(i + 1) : "");
}

// ---------------------------------------------------------------- System Trace Viewer
/** While the event index builds, the timeline shows the coarse level: say so, follow the build, and
 *  fetch the view again from the index once it is ready (no reload). */
async function detailLoading(w, tl, statusEl) {
  const note = h(`<span class="detail-loading" data-testid="detail-loading">Detail is still loading (coarse view)…</span>`);
  statusEl.prepend(note);
  tl.host.dataset.detail = "coarse";
  for (;;) {
    await new Promise((r) => setTimeout(r, 400));
    if (!tl.host.isConnected) return;
    const st = await api.status(w.profile).catch(() => null);
    if (!st) continue;
    if (st.state === "error") { note.textContent = `Detail failed to load: ${st.error}`; return; }
    if (st.state === "ready") break;
    note.textContent = `Detail is still loading (coarse view): ${st.phase} · ${Math.round(st.fraction * 100)}%`;
  }
  note.remove();
  w.coarse = false;
  const ov = await api.overview(w.profile).catch(() => null);
  if (ov) w.overview = ov;
  tl.host.dataset.detail = "1";
  tl.refresh();
}

async function waitReady(w, body) {
  // a cold open scans the profile first (its tracks and a coarse view): show its progress instead of a
  // blank widget; the event index then builds in the background while the coarse timeline is shown
  // the server holds each answer until the timeline can paint (or 250 ms): no polling interval to wait out
  let st = await api.status(w.profile, 250);
  w.coarse = st.state === "preparing";
  if (st.state === "ready" || st.coarse) return true;
  const bar = h(`<div class="progress pad" data-testid="prepare-progress"><div>Preparing "${esc(w.profile)}" (first open builds the index; cached afterwards)…</div>
    <div class="bar"><span></span></div><div class="muted phase"></div></div>`);
  body.append(bar);
  stats.progressShownMs = stats.progressShownMs ?? performance.now(); // (bench: progress within 0.5 s of a cold open)
  stats.progress = stats.progress || [];
  while (st.state === "preparing" && !st.coarse) {
    stats.progress.push(st.fraction);
    $(".bar span", bar).style.width = `${Math.round(st.fraction * 100)}%`;
    $(".phase", bar).textContent = `${st.phase}${st.total ? ` ${st.done}/${st.total}` : ""} · ${Math.round(st.fraction * 100)}% · ${st.elapsed_s ?? 0} s`;
    bar.dataset.fraction = String(st.fraction);
    st = await api.status(w.profile, 250);
  }
  bar.remove();
  if (st.state === "error") { body.innerHTML = `<p class="pad">${esc(st.error)}</p>`; return false; }
  return true;
}

async function renderSystemTrace(w, body, extra) {
  if (!(await waitReady(w, body))) return;
  const ov = await api.overview(w.profile, w.coarse).catch((e) => { body.innerHTML = `<p class="pad">${esc(e.message)}</p>`; });
  if (!ov) return;
  w.overview = ov;
  const url = state.restoring && w.profile === state.home ? state.restoring : null;
  // a link's grouping and layout only when this server knows them (else the widget could not paint)
  const urlMode = url?.get("mode"), urlLayout = url?.get("layout");
  w.mode = w.mode || (urlMode && Object.hasOwn(ov.modes, urlMode) ? urlMode : null) || ov.default_mode;
  w.layout = w.layout || (LAYOUTS.includes(urlLayout) ? urlLayout : null) || "tracks";
  w.urlDropped = [urlMode && urlMode !== w.mode ? `grouping "${urlMode}"` : null,
                  urlLayout && urlLayout !== w.layout ? `layout "${urlLayout}"` : null].filter(Boolean);
  extra.innerHTML = `
    <input type="search" placeholder="Search names, model, op… (Ctrl+F)" data-testid="search" />
    <button data-act="prev" title="Previous match">◀</button><button data-act="next" title="Next match">▶</button>
    <span class="search-k" data-testid="search-k"></span>
    <button data-act="select" title="Area selection tool (or Shift+drag)" data-testid="select-tool">Select<span class="long"> area</span></button>
    <button data-act="work" title="Where the work is: the span of the cores' executions and collectives (the view a profile opens on)" data-testid="zoom-work">Steps</button>
    <button data-act="activity" title="Zoom to where the events are (skips start-up)" data-testid="zoom-activity">Activity</button>
    <button data-act="reset" title="Show the whole profile, start-up included (0)" data-testid="whole-profile">Whole<span class="long"> profile</span></button>
    <button data-act="settings" data-testid="settings">Settings</button>
    <button data-act="devices" data-testid="device-profiles-list" title="Device Profiles List">Device<span class="long"> Profiles List</span></button>
    <button data-act="help" title="Keys (?)" data-testid="help-button">?</button>`;
  const tlHost = h(`<div class="timeline fill" data-testid="system-timeline"></div>`);
  const status = h(`<div class="statusbar"><span class="st">preparing…</span><span class="rank-filter" data-testid="rank-filter-status"></span><span class="search-info"></span><span class="mode-info"></span><span class="dev-info" data-testid="device-lanes-info"></span></div>`);
  const dockEl = h(`<div class="dock" data-testid="dock">
      <div class="splitter" data-testid="dock-splitter" title="Drag to resize"></div>
      <div class="dock-tabs"><button data-tab="details" class="on" data-testid="tab-details">Details</button><button data-tab="range" data-testid="tab-range">Area</button><button data-tab="flows" data-testid="tab-flows">Flows</button><button data-tab="insights" data-testid="tab-insights">Insights</button><button data-tab="device" data-testid="tab-device-trace" hidden>Device trace</button></div>
      <div class="dock-body">
        <div class="pane details" data-pane="details" data-testid="event-details"><p class="muted">Click an event to see its properties; its flows are drawn on the timeline.</p></div>
        <div class="pane selection-summary" data-pane="range" data-testid="selection-summary" hidden><span class="muted">Shift+drag over tracks (or drag in the time ruler for every track) to summarize an area.</span></div>
        <div class="pane" data-pane="flows" data-testid="flows-pane" hidden></div>
        <div class="pane" data-pane="device" data-testid="device-pane" hidden></div>
        <div class="pane pad-s" data-pane="insights" data-testid="insights-pane" hidden><p class="muted">Loading the insights…</p></div>
      </div></div>`);
  body.append(tlHost, status, dockEl);
  w.dockH = w.dockH || Number(url?.get("dock")) || 280;
  body.style.setProperty("--dock-h", `${w.dockH}px`);
  const panes = (name) => $(`[data-pane=${name}]`, dockEl);
  const showTab = (name) => {
    dockEl.querySelectorAll(".dock-tabs button").forEach((b) => b.classList.toggle("on", b.dataset.tab === name));
    dockEl.querySelectorAll(".pane").forEach((p) => { p.hidden = p.dataset.pane !== name; });
  };
  dockEl.querySelectorAll(".dock-tabs button").forEach((b) => b.onclick = () => showTab(b.dataset.tab));
  // the docked panel: resizable by its splitter, and home of drilled-down device traces
  const split = $(".splitter", dockEl);
  split.addEventListener("mousedown", (ev) => {
    ev.preventDefault();
    const y0 = ev.clientY, h0 = w.dockH;
    const mv = (e) => { w.dockH = Math.max(120, Math.min(window.innerHeight - 260, h0 - (e.clientY - y0))); body.style.setProperty("--dock-h", `${w.dockH}px`); };
    const up = () => { window.removeEventListener("mousemove", mv); window.removeEventListener("mouseup", up); saveUrl(); };
    window.addEventListener("mousemove", mv);
    window.addEventListener("mouseup", up);
  });
  w.dock = {
    add: (child) => {
      const pane = panes("device");
      pane.innerHTML = "";
      pane.appendChild(child.el);
      $("[data-tab=device]", dockEl).hidden = false;
      showTab("device");
    },
    removed: () => { $("[data-tab=device]", dockEl).hidden = true; showTab("details"); },
    showTab,
  };
  let leafName = [];
  const src = {
    duration: ov.duration_ns,
    nameOf: (leaf) => leafName[leaf],
    window: (rows, t0, t1, px, sig) => api.window(w.profile, w.mode, w.layout, rows, t0, t1, px, sig),
    counters: (rows, t0, t1, px, sig) => api.counters(w.profile, w.mode, w.layout, rows, t0, t1, px, sig),
    busy: (groups, t0, t1, px, sig) => api.busy(w.profile, w.mode, w.layout, groups, t0, t1, px, sig),
    flows: (t0, t1, sig) => api.flows(w.profile, w.mode, t0, t1, sig),
    deviceWindow: (pid, rows, t0, t1, px, sig) => api.deviceWindow(w.profile, pid, "system", rows, t0, t1, px, sig),
  };
  const tl = new Timeline(tlHost, src, {
    onStatus: (s) => { $(".st", status).textContent = s; },
    onEventClick: (it) => { openEvent(w, it); saveUrl(); },
    onSelect: (r) => { showArea(r); saveUrl(); },
    onView: (t0, t1) => { saveUrl(); syncViews(w, t0, t1); followDock(w, t0, t1); },
    onDeviceClick: (it) => showDeviceOp(w, it),
    onLayout: () => saveUrl(),
  });
  w.timeline = tl;
  w.destroy = () => { tl.destroy(); bus.removeEventListener("event", onBusEvent); };
  // the link's folded device lanes, rank order and rank filter (ranks this profile has)
  if (url?.get("devfold")) tl.devFolded = new Set(url.get("devfold").split(",").filter(Boolean).map(decPart));
  const urlOrder = ORDERS.includes(url?.get("order")) ? url.get("order") : null;
  if (url?.get("ranks")) {
    const f = parseRankList(url.get("ranks"), profileRanks(ov));
    if (f.error || f.missing.length) w.urlDropped.push(`ranks ${f.error ? url.get("ranks") : f.missing.join(",")}`);
    if (!f.error && f.ranks.length) w.rankFilter = { ranks: f.ranks, how: "" };
  }
  // w.mode and w.layout always describe the rows the timeline holds: every request sends them with
  // row numbers. A new grouping is committed with its rows, and an answer overtaken by a later
  // choice (two clicks in quick succession) is dropped.
  let rowsAsked = 0;
  const wanted = { mode: w.mode, layout: w.layout };
  const loadRows = async () => {
    const ask = ++rowsAsked;
    const { mode, layout } = wanted;
    const t = await api.tracks(w.profile, mode, layout);
    if (ask !== rowsAsked) return false;
    w.mode = mode;
    w.layout = layout;
    leafName = t.leaf_name.map((i) => t.names[i]);
    const again = w.tracks !== undefined, keepOrder = w.order;
    w.tracks = t;
    // many processes: start with each process collapsed to its summary track (utilization over time)
    const keys = new Map();
    for (const r of t.rows) { const g = r.group || []; if (g.length >= 2) keys.set(g.slice(0, 2).join("\u0001"), 1); }
    const collapse = keys.size > 8 ? [...keys.keys()] : [];
    // compact unless chosen in Settings: when more than 24 processes are shown (the rank filter counts)
    if (w.compact === undefined || w.compactAuto) { w.compactAuto = true; w.compact = shownProcesses(t.rows, filteredRows(w, t.rows, t)) > 24; }
    tl.compact = w.compact;
    tl.baseOrder = null;
    w.order = "rank";
    tl.filtered = filteredRows(w, t.rows, t); // the rank filter holds across groupings (it names ranks)
    tl.setRows(t.rows, collapse);
    renderRankStatus(w);
    attachDeviceLanes(w, tl, t);
    if (again && keepOrder && keepOrder !== "rank") orderRanks(w, keepOrder, true);
    $(".mode-info", status).textContent = `grouping: ${ov.modes[w.mode]} · ${t.rows.length} tracks · ${fmtCount(ov.events)} events`;
    w.el.dataset.mode = w.mode;
    w.el.dataset.layout = w.layout;
    return true;
  };
  // open where the work is before the first window is asked (a ready index answers at once): painting
  // the whole profile first and then the steps grew the tracks' lanes under the user's first click
  const urlRange = url && url.get("t0") !== null && url.get("t1") !== null;
  const other = state.sync && state.widgets.find((x) => x !== w && x.type === "system-trace" && x.timeline?.painted);
  if (!urlRange && !other && !w.coarse) await openOnWork(w);
  else if (urlRange || other) tl.host.dataset.opened = urlRange ? "link" : "sync";
  await loadRows();
  if (w.coarse) detailLoading(w, tl, status);

  // ---- insights: marks on the time axis and the Insights tab, each opening its range
  insightsOf(w.profile).then((si) => {
    const pane = panes("insights");
    if (!si || !si.available) { pane.innerHTML = `<p class="muted" data-testid="no-insights">${esc(si ? si.reason : "No summary for this profile.")}</p>`; return; }
    tl.insights = si.insights.filter((x) => x.t0 !== null && x.t1 !== null).map((x) => ({ a: x.t0, b: x.t1, n: x.rank_order, title: x.title }));
    tl.queueDraw();
    pane.innerHTML = `<div class="verdict" data-testid="insights-verdict">${esc(si.verdict || "")} · <a href="#/s/${encodeURIComponent(w.profile)}">Summary page</a></div>${insightList(si, w.profile)}`;
    pane.querySelectorAll("[data-insight]").forEach((a) => a.onclick = (ev) => { ev.preventDefault(); const x = si.insights[Number(a.dataset.insight)]; tl.zoomTo(x.t0, x.t1, 0.03); });
  });
  tl.cb.onInsight = (m) => { tl.zoomTo(m.a, m.b, 0.03); showTab("insights"); };

  // ---- details in the dock
  const onBusEvent = (e) => {
    const d = e.detail;
    if (d.source !== w) return;
    showTab("details");
    renderDetailsInto(panes("details"), d);
    renderFlowsPane();
  };
  bus.addEventListener("event", onBusEvent);

  function renderFlowsPane() {
    const pane = panes("flows");
    const f = tl.selFlows;
    pane.innerHTML = `<div class="flow-mode">Draw: ${[["selected", "the selected event's flows"], ["all", "all flows in view"], ["none", "no flows"]].map(([k, l]) =>
      `<label><input type="radio" name="fm-${w.id}" value="${k}" data-testid="flow-mode-${k}" ${tl.flowMode === k ? "checked" : ""}> ${l}</label>`).join(" ")}</div>
      ${f ? flowsHtml(f, w) : `<p class="muted">Select an event to list its flows.</p>`}`;
    pane.querySelectorAll("input[type=radio]").forEach((r) => r.onchange = () => { tl.flowMode = r.value; tl.refresh(); });
    bindFlowLinks(pane, w);
  }
  renderFlowsPane();
  w.renderFlowsPane = renderFlowsPane;

  // ---- area selection: per-track / per-rank / per-name statistics and the collectives' stragglers
  async function showArea(r) {
    const summary = panes("range");
    showTab("range");
    if (!r) { summary.innerHTML = `<span class="muted">No area selected.</span>`; return; }
    summary.innerHTML = `<span class="muted">Summarizing…</span>`;
    // a time range over every track: with a rank filter, every track shown
    const rows = r.rows && r.rows.length ? r.rows : w.rankFilter ? shownEventRows(tl) : null;
    let s, cc;
    try {
      [s, cc] = await Promise.all([api.area(w.profile, w.mode, w.layout, rows, r.a, r.b),
                                   api.collectives(w.profile, w.mode, w.layout, rows, r.a, r.b)]);
    } catch (e) {
      summary.innerHTML = `<p class="muted" data-testid="area-error">Cannot summarize this area: ${esc(e.message)}</p>`;
      return;
    }
    const span = r.b - r.a;
    const pct = (x) => (x === null || x === undefined ? "—" : `${x.toFixed(1)}%`);
    const d = (x) => (x === null || x === undefined ? "—" : fmtDur(x));
    // rows with no event in the area are left out (a table of zeros hides the rows that matter)
    const some = (items) => items.filter((x) => x.count > 0);
    const covered = [["count", "Count", fmtCount], ["busy_pct", "Covered %", pct], ["busy_ns", "Covered", d], ["min_ns", "Min", d], ["p50_ns", "p50", d], ["p99_ns", "p99", d], ["max_ns", "Max", d]];
    // a rank's time: compute (its core executions), exposed collectives, idle; host calls and regions apart
    const rankCols = [["rank", "Rank", String], ["compute_pct", "Compute %", pct], ["cc_exposed_pct", "Exposed coll. %", pct], ["idle_pct", "Idle %", pct],
      ["host_pct", "Host calls %", pct], ["region_pct", "Regions %", pct], ["count", "Count", fmtCount], ["instance", "Instance", esc], ["pid", "PID", String]];
    const sm = cc.summary;
    const ccName = (v, x) => esc(x.op ? `${x.op}${x.group ? ` [${x.group}]` : ""}${x.seq !== null && x.seq !== undefined ? ` #${x.seq}` : ""}` : v);
    const ccRows = cc.collectives.slice(0, 200).map((x, i) => ({ ...x, i }));
    summary.innerHTML = `<div class="area-head" data-testid="area-head"><b data-testid="summary-count">${fmtCount(s.count)}</b> events on ${rows ? `${rows.length} tracks` : "every track"} from <b>${fmtNs(r.a)}</b> to <b>${fmtNs(r.b)}</b> (${fmtDurExact(span)})${s.approximate ? " · approximate: the area holds too many events for exact figures" : ""}
      <div class="muted">Busy is compute: the union of a rank's core executions. Collectives count as exposed only where no execution overlaps them. Host calls and framework regions are shown apart and never counted as busy.</div></div>
      <div class="area-grid">
      <div><h4>By rank</h4>${sortable("area-ranks", rankCols, some(s.ranks))}</div>
      <div><h4>Collectives: who arrived last <span class="muted">(click a row: that collective on every rank)</span></h4>
        <div class="muted" data-testid="straggler-summary">${sm.collectives_compared ? `${fmtCount(sm.collectives_compared)} collectives compared · slowest rank <b data-testid="slowest-rank">${sm.slowest_rank}</b> (last to enter ${sm.last_to_enter[String(sm.slowest_rank)]}×) · median spread ${fmtDur(sm.spread_ns_median)} · largest ${fmtDur(sm.spread_ns_max)}` : "no collective in this area is seen on two ranks"}</div>
        ${sortable("collectives-table", [["name", "Collective", ccName], ["bytes", "Bytes", (v) => (v === null || v === undefined ? "—" : fmtBytes(v))], ["ranks", "Ranks", String], ["last_rank", "Last rank", String], ["spread_ns", "Late by", d], ["first_rank", "First rank", String], ["last_start", "Last start", (v) => fmtNs(v)]], ccRows, (x) => `data-cc="${x.i}" class="link"`)}</div>
      <div><h4>By event name</h4>${sortable("summary-table", [["name", "Event name", esc], ["count", "Count", fmtCount], ["total_in_range_ns", "Total duration", d], ["mean_ns", "Mean duration", d], ["busy_pct", "Covered %", pct], ["p50_ns", "p50", d], ["p99_ns", "p99", d], ["max_ns", "Max", d]],
        some(s.names).map((x) => ({ ...x, mean_ns: x.count ? (x.total_in_range_ns ?? x.busy_ns) / x.count : null })))}</div>
      <div><h4>By track</h4>${sortable("area-tracks", [["label", "Track", (v, x) => esc([...(x.group || []).slice(1), v].join(" › "))], ...covered], some(s.tracks))}</div>
      </div>`;
    summary.querySelectorAll("[data-testid=collectives-table] tr[data-cc]").forEach((tr) => tr.onclick = () => selectCollective(w, ccRows[Number(tr.dataset.cc)]));
    bindSortable(summary);
  }
  w.showArea = showArea;

  // ---- search over names and arguments, stepped "k of N"
  const input = $("input[type=search]", extra);
  let q = "";
  const runSearch = async () => {
    q = input.value.trim();
    w.query = q;
    saveUrl();
    if (!q) { tl.match = null; tl.queueDraw(); $(".search-info", status).textContent = ""; $(".search-k", extra).textContent = ""; return; }
    const r = await api.search(w.profile, w.mode, w.layout, q);
    tl.match = new Set(r.rows);
    tl.queueDraw();
    w.searchN = r.n;
    $(".search-k", extra).textContent = r.n ? `– of ${fmtCount(r.n)}` : "0 of 0";
    const what = [...r.names.map(([n]) => n), ...r.args.map((a) => `${a.column}=${a.value}`)];
    $(".search-info", status).textContent = what.length ? `search "${q}": ${fmtCount(r.n)} events (${what.slice(0, 6).join(", ")}${what.length > 6 ? ", …" : ""})` : `search "${q}": nothing matches`;
  };
  input.addEventListener("keydown", (ev) => { if (ev.key === "Enter") (q === input.value.trim() && q ? jump(ev.shiftKey ? -1 : 1) : runSearch().then(() => jump(1))); if (ev.key === "Escape") input.blur(); ev.stopPropagation(); });
  input.addEventListener("search", () => { if (!input.value) runSearch(); }); // the clear button
  const jump = async (dir) => {
    if (!q) await runSearch();
    if (!q) return;
    const cur = tl.selected;
    const r = cur && cur.leaf !== null && cur.leaf !== undefined
      ? await api.searchNext(w.profile, q, cur.s, dir, cur.leaf, cur.id)
      : await api.searchNext(w.profile, q, dir > 0 ? tl.t0 - 1 : tl.t1 + 1, dir); // matches starting at t0 count
    if (!r.found) { toast(`no ${dir > 0 ? "later" : "earlier"} "${q}" event`); return; }
    $(".search-k", extra).textContent = `${fmtCount(r.k)} of ${fmtCount(r.n)}`;
    goToEvent(w, { id: r.id, leaf: r.leaf, s: r.s, e: r.e, name: r.name });
  };
  extra.querySelector("[data-act=next]").onclick = () => jump(1);
  extra.querySelector("[data-act=prev]").onclick = () => jump(-1);
  w.focusSearch = () => { input.focus(); input.select(); };
  w.search = (text) => { input.value = text; return runSearch(); };
  const selBtn = extra.querySelector("[data-act=select]");
  selBtn.onclick = () => { tl.selectMode = !tl.selectMode; selBtn.classList.toggle("on", tl.selectMode); };
  extra.querySelector("[data-act=reset]").onclick = () => tl.resetView();
  extra.querySelector("[data-act=activity]").onclick = async () => { const a = await api.activity(w.profile); tl.setView(a.t0, a.t1); };
  extra.querySelector("[data-act=work]").onclick = async () => {
    const si = await insightsOf(w.profile);
    if (si?.available && si.steps.t0 !== null) { tl.zoomTo(si.steps.t0, si.steps.t1, 0.02); return; }
    const a = await api.activity(w.profile); tl.setView(a.work.t0, a.work.t1);
  };
  extra.querySelector("[data-act=devices]").onclick = () => openDeviceProfilesList(w.profile, w);
  extra.querySelector("[data-act=help]").onclick = () => toggleHelp();
  extra.querySelector("[data-act=settings]").onclick = (ev) => {
    ev.stopPropagation();
    const old = $(".popover", w.el);
    if (old) { old.remove(); return; }
    const pop = h(`<div class="popover" data-testid="settings-popover"><h4>Grouping</h4>
      ${Object.entries(ov.modes).map(([k, label]) => `<label><input type="radio" name="grp-${w.id}" value="${k}" data-testid="mode-${k}" ${k === w.mode ? "checked" : ""}> ${esc(label)}${k === ov.default_mode ? (ov.stored_grouping?.secondary ? ` (default: the view's --system-trace-secondary-group ${esc(ov.stored_grouping.secondary)})` : " (default)") : ""}</label>`).join("")}
      <h4 style="margin-top:8px">Tracks</h4>
      <label><input type="radio" name="lay-${w.id}" value="tracks" data-testid="layout-tracks" ${w.layout === "tracks" ? "checked" : ""}> One track per thread / core, overlapping events in lanes</label>
      <label><input type="radio" name="lay-${w.id}" value="names" data-testid="layout-names" ${w.layout === "names" ? "checked" : ""}> One row per event name</label>
      <h4 style="margin-top:8px">Display</h4>
      <label><input type="checkbox" data-opt="allflows" data-testid="all-flows" ${tl.flowMode === "all" ? "checked" : ""}> All flows in view (default: the selected event's)</label>
      <label><input type="checkbox" data-opt="counters" ${tl.showCounters ? "checked" : ""}> Counter tracks (CPU, memory)</label>
      <label><input type="checkbox" data-opt="sync" data-testid="sync-time" ${state.sync ? "checked" : ""}> Synchronise the time axis of every System Trace Viewer</label>
      <label><input type="checkbox" data-opt="compact" data-testid="compact-ranks" ${tl.compact ? "checked" : ""}> Compact ranks (collapsed processes 8 px high: 64 on one screen)</label>
      <h4 style="margin-top:8px">Order ranks by (over the view)</h4>
      ${[["rank", "rank"], ["late", "lateness in collectives (latest first)"], ["compute", "compute share (busiest first)"], ["cc", "exposed collective share (largest first)"]].map(([k, l]) =>
        `<label><input type="radio" name="ord-${w.id}" value="${k}" data-testid="order-${k}" ${(w.order || "rank") === k ? "checked" : ""}> ${l}</label>`).join("")}
      <h4 style="margin-top:8px">Show ranks</h4>
      ${profileRanks(ov).length ? `<div class="rank-form"><input data-testid="rank-filter-input" placeholder="e.g. 0-3,37" size="14" value="${esc(w.rankFilter ? encodeRows(w.rankFilter.ranks) : "")}"> <button data-act="rank-keep" data-testid="rank-filter-apply">Keep these</button></div>
      <div class="rank-form"><button data-act="rank-worst" data-testid="rank-filter-worst">Keep the</button> <input type="number" min="1" max="${profileRanks(ov).length}" value="${Math.min(5, profileRanks(ov).length)}" data-testid="rank-filter-k" style="width:4em"> worst (first in the order above)</div>
      <div class="rank-form"><button data-act="rank-all" data-testid="rank-filter-all" ${w.rankFilter ? "" : "disabled"}>Show all ranks</button></div>`
      : `<div class="hint" style="margin-left:0">This profile has no ranks (not a distributed job).</div>`}
      <button data-act="expand">Expand all</button> <button data-act="collapse">Collapse processes</button>
      <div style="margin-top:6px"><button data-act="hide-empty" data-testid="hide-empty">Hide tracks empty in this view</button> <button data-act="show-all">Show all tracks</button></div>
      <div class="hint">Keys: ? lists them all</div></div>`);
    w.el.appendChild(pop);
    // under its own button (not over it), kept inside the widget
    const br = ev.currentTarget.getBoundingClientRect(), wr = w.el.getBoundingClientRect();
    pop.style.top = `${br.bottom - wr.top + 4}px`;
    pop.style.right = `${Math.max(8, wr.right - br.right)}px`;
    pop.addEventListener("click", (e) => e.stopPropagation());
    pop.querySelectorAll("input[name^=grp-]").forEach((r) => r.addEventListener("change", async () => {
      wanted.mode = r.value;
      if (!(await loadRows())) return;
      if (q) runSearch();
      if (tl.sel) showArea(tl.sel);
      saveUrl();
    }));
    pop.querySelectorAll("input[name^=lay-]").forEach((r) => r.addEventListener("change", async () => {
      wanted.layout = r.value;
      if (!(await loadRows())) return;
      if (q) runSearch();
      saveUrl();
    }));
    pop.querySelector("[data-opt=allflows]").onchange = (e) => { tl.flowMode = e.target.checked ? "all" : "selected"; tl.refresh(); renderFlowsPane(); };
    pop.querySelector("[data-opt=counters]").onchange = (e) => { tl.showCounters = e.target.checked; tl.relayout(); tl.refresh(); };
    pop.querySelectorAll("input[name^=ord-]").forEach((r) => r.addEventListener("change", () => orderRanks(w, r.value)));
    const keepList = () => {
      const inp = pop.querySelector("[data-testid=rank-filter-input]");
      const f = parseRankList(inp.value, profileRanks(ov));
      if (f.error) { toast(f.error, true); return; }
      if (f.missing.length) toast(`Not in this profile: rank${f.missing.length > 1 ? "s" : ""} ${f.missing.join(", ")}.`, true);
      if (!f.ranks.length) return;
      setRankFilter(w, f.ranks, "");
      pop.remove();
    };
    pop.querySelector("[data-act=rank-keep]")?.addEventListener("click", keepList);
    pop.querySelector("[data-testid=rank-filter-input]")?.addEventListener("keydown", (e) => { if (e.key === "Enter") keepList(); });
    pop.querySelector("[data-act=rank-worst]")?.addEventListener("click", () => {
      const k = Math.max(1, Math.floor(Number(pop.querySelector("[data-testid=rank-filter-k]").value) || 0));
      const order = ranksInOrder(w);
      setRankFilter(w, order.slice(0, k), `${Math.min(k, order.length)} ${w.order && w.order !== "rank" ? `worst by ${ORDER_LABEL[w.order]}` : "first by rank"}`);
      pop.remove();
    });
    pop.querySelector("[data-act=rank-all]")?.addEventListener("click", () => { setRankFilter(w, null); pop.remove(); });
    pop.querySelector("[data-opt=compact]").onchange = (e) => { w.compactAuto = false; w.compact = tl.compact = e.target.checked; tl.relayout(); tl.refresh(); };
    pop.querySelector("[data-opt=sync]").onchange = (e) => { state.sync = e.target.checked; syncViews(w, tl.t0, tl.t1); saveUrl(); };
    pop.querySelector("[data-act=hide-empty]").onclick = async () => {
      const r = await api.nonempty(w.profile, w.mode, w.layout, tl.t0, tl.t1);
      tl.hideExcept(r.rows);
      $(".mode-info", status).textContent = `grouping: ${ov.modes[w.mode]} · ${tl.rows.length - tl.hidden.size} of ${tl.rows.length} tracks shown · ${fmtCount(ov.events)} events`;
    };
    pop.querySelector("[data-act=show-all]").onclick = () => tl.hideExcept(null);
    pop.querySelector("[data-act=expand]").onclick = () => { tl.collapsed.clear(); tl.relayout(); tl.refresh(); };
    pop.querySelector("[data-act=collapse]").onclick = () => {
      for (const [k, d] of tl.groupKeys()) if (d === 1) tl.collapsed.add(k);
      tl.relayout(); tl.refresh();
    };
    setTimeout(() => document.addEventListener("click", () => pop.remove(), { once: true }));
  };
  // the URL's view, area, selected event and search are restored last: they use this widget's area
  // summary and search, defined above (restored before them, an area threw and lost the event too)
  if (url) restoreView(w, url);
  else if (other) tl.setView(other.timeline.t0, other.timeline.t1); // synchronised: joins the other's view
  if (urlOrder && urlOrder !== "rank") orderRanks(w, urlOrder, true); // over the restored view
  // once the index is ready, unless the user moved; asked after the first paint, since asking for
  // the index starts its build at once, and the build then took the cores from the first paint
  if (!urlRange && !other && w.coarse) tl.firstPaint.then(() => openOnWork(w));
}

/** A profile opens where the work is (the cores' executions and collectives, not the start-up before
 *  them; decision 0124), unless the user moved the view before the answer came (a cold open waits for
 *  the index). "Whole profile" (or 0) is one click away. */
async function openOnWork(w) {
  const tl = w.timeline;
  const t0 = tl.t0, t1 = tl.t1;
  const [a, si] = await Promise.all([api.activity(w.profile).catch(() => null), insightsOf(w.profile)]);
  if (!a || !tl.host.isConnected) return;
  // the steps view found (summary.json), else the span of the cores' work
  const steps = si?.available && si.steps.t0 !== null && si.steps.t1 > si.steps.t0 ? { t0: si.steps.t0, t1: si.steps.t1, basis: "steps" } : null;
  const work = steps || a.work;
  if (work) { const pad = (work.t1 - work.t0) * (steps ? 0.02 : 0); work.t0 -= pad; work.t1 += pad; }
  if (tl.t0 === t0 && tl.t1 === t1 && work && (work.t1 - work.t0) < 0.9 * (t1 - t0)) tl.setView(work.t0, work.t1);
  tl.host.dataset.opened = work ? work.basis : "events";
}

// ---------------------------------------------------------------- Summary page and insights
const insightCache = new Map();
/** The profile's summary (view's summary.json on the viewer's axis), asked once per page load. */
function insightsOf(profile) {
  if (!insightCache.has(profile)) insightCache.set(profile, api.insights(profile).catch(() => null));
  return insightCache.get(profile);
}

const fmtImpact = (x) => (x.impact_ns_per_step === null || x.impact_ns_per_step === undefined ? (String(x.id || "").startsWith("memory") ? "memory (no time estimate)" : "correctness") : `~${fmtDur(x.impact_ns_per_step)} per step${x.impact_share ? ` (${(x.impact_share * 100).toFixed(0)}%)` : ""}`);

/** Insights, ranked, each a link opening its range in the System Trace Viewer (``href`` on the Summary page). */
function insightList(si, profile, href = false) {
  if (!si.insights.length) return `<p data-testid="insights-none">Nothing stands out: ${esc(si.verdict || "no finding above the noise threshold")}.</p>`;
  return `<ol class="insights" data-testid="insights">${si.insights.map((x, i) => {
    const c = x.confidence || {};
    const open = x.t0 !== null ? (href ? `#/p/${encodeURIComponent(profile)}?w=system-trace&t0=${Math.round(x.t0 - (x.t1 - x.t0) * 0.03)}&t1=${Math.round(x.t1 + (x.t1 - x.t0) * 0.03)}` : "#") : null;
    return `<li data-testid="insight"><div class="ititle"><span class="imark">${i + 1}</span> <b>${esc(x.title)}</b> · <span class="impact">${esc(fmtImpact(x))}</span>
      · <span class="muted">confidence ${esc(c.level ?? "?")} (${c.steps ?? "?"} of ${c.steps_total ?? "?"} steps, ${c.ranks ?? "?"} of ${c.ranks_total ?? "?"} ranks${c.p_value !== null && c.p_value !== undefined ? `, chance ${esc(String(c.p_value))}` : ""})</span></div>
      <div>${esc(x.recommendation || "")}</div>
      ${open ? `<a href="${open}" data-insight="${i}" data-testid="insight-open">Open in the System Trace Viewer: step ${esc((x.evidence?.steps || []).join(", "))}${x.evidence?.ranks?.length ? `, rank ${esc(x.evidence.ranks.join(", "))}` : ""} (${fmtDur(x.t1 - x.t0)})</a>` : ""}</li>`;
  }).join("")}</ol>`;
}

/** The Summary page a profile opens on: verdict, utilisation, ranked insights, and the per-step table
 *  (the region highlighter) that sorts, exports CSV and opens a step in the timeline. */
async function showSummary(name) {
  state.home = null;
  for (const w of [...state.widgets]) removeWidget(w);
  if (!state.profiles.length) state.profiles = (await api.profiles()).profiles;
  $("#crumb").textContent = `› ${name} › Summary`;
  $("#actions").innerHTML = `<a class="button primary" href="#/p/${encodeURIComponent(name)}" data-testid="open-timeline">System Trace Viewer</a>`;
  $("#main").innerHTML = `<p class="pad muted">Loading the summary…</p>`;
  const si = await api.insights(name);
  const tl = (t0, t1) => `#/p/${encodeURIComponent(name)}?w=system-trace&t0=${Math.round(t0)}&t1=${Math.round(t1)}`;
  if (!si.available) {
    $("#main").innerHTML = `<div class="summary-page" data-testid="summary-page"><h1>Summary of "${esc(name)}"</h1><p class="pad" data-testid="summary-unavailable">${esc(si.reason)}</p><p class="pad"><a href="#/p/${encodeURIComponent(name)}">Open the System Trace Viewer</a></p></div>`;
    return;
  }
  const u = si.utilisation || {};
  const st = si.steps;
  const d = (x) => (x === null || x === undefined ? "—" : fmtDur(x));
  const cols = [["number", "Step", String], ["ranks", "Ranks", String], ["wall_ns", "Wall (median)", d], ["wall_ns_max", "Wall (slowest)", d], ["slowest_rank", "Slowest rank", String],
    ...st.columns.map((c) => [c, c.replace(/_ns$/, "").replace(/_/g, " "), d]), ["outlier", "Outlier", (v) => (v ? "yes" : "")]];
  const rows = st.per_step.map((r, i) => ({ ...r, i }));
  $("#main").innerHTML = `<div class="summary-page" data-testid="summary-page"><h1>Summary of "${esc(name)}"</h1>
    <div class="cards">
      <div class="card"><div class="k">Verdict</div><div class="v" data-testid="summary-verdict">${esc(si.verdict || "")}</div></div>
      <div class="card"><div class="k">Steps</div><div class="v">${st.count ?? 0} <span class="muted">(${esc(st.method || "none")})</span></div><div class="muted">median ${d(st.variation?.wall_ns_median)} · p90 ${d(st.variation?.wall_ns_p90)} · cv ${st.variation?.cv ?? "—"}</div></div>
      <div class="card"><div class="k">Achieved FLOP/s</div><div class="v">${u.achieved_flops_per_s ? Number(u.achieved_flops_per_s).toExponential(3) : "—"}</div><div class="muted">MFU ${u.mfu !== null && u.mfu !== undefined ? `${(u.mfu * 100).toFixed(1)}%` : `unknown: ${esc(u.reason || "")}`}</div></div>
    </div>
    <h2>Insights, ranked by the time they would save per step</h2>${insightList(si, name, true)}
    <h2>Steps <span class="muted">(medians over ranks; click a row to open that step)</span> <button data-testid="export-csv">Export CSV</button>
      ${st.t0 !== null ? `<a href="${tl(st.t0, st.t1)}" data-testid="open-steps">Open every step</a>` : ""}</h2>
    <div class="step-table">${sortable("steps-table", cols, rows, (x) => `data-step="${x.i}" class="link${x.outlier ? " outlier" : ""}"`)}</div></div>`;
  bindSortable($("#main"));
  $("#main").querySelectorAll("[data-testid=steps-table] tr[data-step]").forEach((tr) => tr.onclick = () => {
    const r = rows[Number(tr.dataset.step)];
    if (r.t0 !== null) location.hash = tl(r.t0 - (r.t1 - r.t0) * 0.02, r.t1 + (r.t1 - r.t0) * 0.02);
  });
  $("[data-testid=export-csv]").onclick = () => {
    // the table as shown (its current sort order), figures in nanoseconds
    const order = [...$("#main").querySelectorAll("[data-testid=steps-table] tbody tr")].map((tr) => rows[Number(tr.dataset.step)]);
    const keys = ["number", "ranks", "wall_ns", "wall_ns_max", "slowest_rank", ...st.columns, "outlier", "t0", "t1"];
    const q = (v) => (v === null || v === undefined ? "" : /[",\n]/.test(String(v)) ? `"${String(v).replace(/"/g, '""')}"` : String(v));
    const csv = [keys.map((k) => (k === "t0" ? "start_rel_ns" : k === "t1" ? "end_rel_ns" : k)).join(","), ...order.map((r) => keys.map((k) => q(r[k])).join(","))].join("\n") + "\n";
    const a = document.createElement("a");
    a.href = URL.createObjectURL(new Blob([csv], { type: "text/csv" }));
    a.download = `${name}-steps.csv`;
    a.click();
    setTimeout(() => URL.revokeObjectURL(a.href), 1000);
  };
}

/** With "synchronise", every other System Trace Viewer follows this one's view range. */
let syncing = false;
function syncViews(from, t0, t1) {
  if (!state.sync || syncing) return;
  syncing = true;
  try {
    for (const o of state.widgets) if (o !== from && o.type === "system-trace" && o.timeline) o.timeline.setView(t0, t1);
  } finally { syncing = false; }
}

/** The URL's view, area, selected event and search. What the profile no longer has (a link made before
 *  it was ingested again, or from another workspace: its tracks and events are numbered anew) is left
 *  out, with one note, rather than asked for and failing. */
function restoreView(w, url) {
  const tl = w.timeline;
  const dropped = [...(w.urlDropped || [])];
  const t0 = Number(url.get("t0")), t1 = Number(url.get("t1"));
  if (url.get("t0") !== null && url.get("t1") !== null && t1 > t0) tl.setView(t0, t1);
  const a0 = Number(url.get("a0")), a1 = Number(url.get("a1"));
  if (url.get("a0") !== null && a1 > a0) {
    const rows = url.get("rows") ? url.get("rows").split(".").map(Number) : null;
    if (rows && !rows.every((r) => Number.isInteger(r) && r >= 0 && r < tl.rows.length)) dropped.push("area");
    else {
      tl.sel = { a: a0, b: a1, rows, ...tl.rowsExtent(rows) };
      tl.queueDraw();
      w.showArea(tl.sel);
    }
  }
  const ev = url.get("ev");
  if (ev) {
    const [leaf, id, s] = ev.split(":");
    const row = tl.leafToRow.get(Number(leaf));
    if (row === undefined || !/^-?\d+$/.test(id || "")) dropped.push("selected event");
    else {
      const sel = { id: /^\d+$/.test(id) && Number(id) <= Number.MAX_SAFE_INTEGER ? Number(id) : id, leaf: Number(leaf), row, s: Number(s) };
      tl.selected = sel;
      openEvent(w, { id, leaf: Number(leaf), c: 1, s: Number(s) }).then((ok) => {
        if (!ok && tl.selected === sel) { tl.selected = null; tl.queueDraw(); saveUrl(); } // not in this profile
      });
    }
  }
  const q = url.get("q");
  if (q) w.search(q);
  if (dropped.length) toast(`Left out of this link: its ${dropped.join(", ")} (not in profile "${w.profile}" as it is now).`, true);
}

/** Jump to an event: keep the zoom if it fits, centre it, show its track, select it and open its details. */
function goToEvent(w, it) {
  const tl = w.timeline;
  const span = tl.t1 - tl.t0;
  const span2 = Math.max(Math.min(span, Math.max((it.e - it.s) * 40, 2000)), (it.e - it.s) * 3);
  tl.setView(it.s - span2 / 2, it.s + span2 / 2);
  const row = tl.leafToRow.get(it.leaf);
  if (row !== undefined && tl.filtered.has(row)) toast("This event is on a rank the rank filter hides (Show all ranks, in the status bar).");
  if (row !== undefined) tl.scrollToRow(row);
  tl.selected = { id: it.id, row, s: it.s, e: it.e, leaf: it.leaf, c: 1 };
  openEvent(w, { id: it.id, leaf: it.leaf, c: 1, name: it.name, s: it.s, e: it.e });
  saveUrl();
}

/** A collective of the area's table on every rank: the view spans its arrivals (first start to the
 *  last arrival's end), its last arrival is selected (Details, its flow across the ranks) and every
 *  rank's event of it is outlined as selected. */
function selectCollective(w, c) {
  const tl = w.timeline;
  const a = c.first_start, b = Math.max(c.last_end ?? c.last_start, c.last_start + 1);
  tl.zoomTo(a, b, 0.25);
  const row = tl.leafToRow.get(c.last_leaf);
  tl.scrollToRows([...(c.arrivals || []).map((x) => tl.leafToRow.get(x[2])), row]);
  tl.selected = { id: c.last_id, row, s: c.last_start, e: c.last_end, leaf: c.last_leaf, c: 1 };
  tl.peers = new Set((c.arrivals || []).map((x) => `${x[2]}:${x[1]}`));
  tl.queueDraw();
  openEvent(w, { id: c.last_id, leaf: c.last_leaf, c: 1, s: c.last_start, e: c.last_end });
  saveUrl();
}

/** Each device profile's ops as lanes under its core's execution track, on the system axis: the
 *  profile is matched to the track holding its process's and core's nc_exec_running. */
function attachDeviceLanes(w, tl, t) {
  const gen = tl.rowsGen;
  // asked once the timeline has painted: the answer waits for the index, and a request waiting for
  // it starts the build at once, which then took the cores from a cold open's first paint (0185)
  return tl.relayingOut(async () => { await tl.firstPaint; return lookUpDeviceLanes(w, tl, t, gen); });
}

async function lookUpDeviceLanes(w, tl, t, gen) {
  // every device profile's core, span and engines in one answer (no per-profile overviews, no cap
  // of 256 profiles; decision 0137)
  const sp = await api.deviceSpans(w.profile).catch(() => null);
  if (!sp || !sp.profiles.length || !t.leaf_core) return;
  if (tl.rowsGen !== gen) return; // another grouping was chosen meanwhile
  // a core's execution track: the row holding its process's and core's nc_exec_running
  const coreRow = new Map();
  for (const r of tl.rows) {
    if (r.kind !== "events") continue;
    for (const lf of r.leaves || []) {
      if (t.names[t.leaf_name[lf]] !== "nc_exec_running") continue;
      const c = t.leaf_core[lf];
      coreRow.set(`${c[0]}|${Number(c[1])}|${Number(c[2])}`, r.idx);
    }
  }
  const lanes = new Map();
  let unplaced = 0;
  for (const d of sp.profiles) {
    const core = `${d.instance_id}|${Number(d.process_id)}|${Number(d.nc_idx)}`;
    const idx = coreRow.get(core);
    if (idx === undefined) { unplaced++; continue; }
    const l = lanes.get(idx) || { engines: [], dps: [], cores: [] };
    if (!l.cores.includes(core)) l.cores.push(core);
    for (const e of d.tracks) if (!l.engines.includes(e)) l.engines.push(e);
    l.dps.push({ pid: String(d.profile_id), a: d.start_ns, b: d.end_ns, rows: d.tracks });
    lanes.set(idx, l);
  }
  tl.setDeviceLanes(lanes);
  tl.host.dataset.deviceLanes = String(lanes.size);
  const laned = sp.profiles.length - unplaced, beyond = sp.total - sp.profiles.length;
  tl.host.dataset.devicesLaned = String(laned);
  // what is not laned is said on screen, never lost silently
  const info = $(".dev-info", w.el);
  if (info) {
    info.textContent = `device lanes: ${fmtCount(laned)} device profile${laned === 1 ? "" : "s"} under ${lanes.size} track${lanes.size === 1 ? "" : "s"}`
      + (beyond > 0 ? ` · ${fmtCount(beyond)} not laned (more than ${fmtCount(sp.limit)}): open them from the Device Profiles List` : "")
      + (unplaced ? ` · ${fmtCount(unplaced)} not laned: no execution track of their core in this grouping` : "");
    info.classList.toggle("warn", beyond > 0 || unplaced > 0);
  }
}

// ---------------------------------------------------------------- rank order and rank filter
const ORDERS = ["rank", "late", "compute", "cc"];
const ORDER_LABEL = { late: "lateness in collectives", compute: "compute share", cc: "exposed collective share" };

/** The profile's global ranks (ProfileMetadata), ascending. */
function profileRanks(ov) {
  return [...new Set(ov.processes.map((p) => p.rank).filter((r) => r !== null && r !== undefined && r !== "").map(Number)
    .filter((r) => Number.isInteger(r) && r >= 0))].sort((a, b) => a - b);
}

/** "0-3, 37" -> the profile's ranks it names. Ranges are tested against the ranks the profile has
 *  (never expanded: "0-999999999" costs nothing); a rank the profile lacks is reported in ``missing``. */
function parseRankList(text, known) {
  const ranks = new Set(), missing = [];
  const toks = String(text).split(/[\s,]+/).filter(Boolean);
  if (!toks.length) return { error: "Name some ranks, like 0-3,37.", ranks: [], missing };
  for (const tok of toks) {
    const m = /^(\d{1,9})(?:-(\d{1,9}))?$/.exec(tok);
    if (!m) return { error: `"${tok.slice(0, 40)}" is not a rank or a range of ranks (like 0-3,37).`, ranks: [], missing };
    const a = Number(m[1]), b = m[2] === undefined ? a : Number(m[2]);
    if (b < a) return { error: `"${tok}": a range goes from the lower rank to the higher.`, ranks: [], missing };
    const hit = known.filter((r) => r >= a && r <= b);
    if (!hit.length) missing.push(tok);
    hit.forEach((r) => ranks.add(r));
  }
  return { ranks: [...ranks].sort((x, y) => x - y), missing };
}

/** The ranks a track holds: its events' processes (``leaf_rank``), or a counter track's "rank N" group. */
function rowRanks(r, t) {
  if (r.kind === "events") return [...new Set((r.leaves || []).map((lf) => t.leaf_rank?.[lf]).filter((k) => k !== undefined && k >= 0))];
  const m = (r.group || []).map((g) => /^rank (\d+)/.exec(g) || / rank (\d+)/.exec(g)).find(Boolean);
  return m ? [Number(m[1])] : [];
}

/** Row numbers the rank filter leaves out: tracks of other ranks, and the rankless tracks (an
 *  instance's host counters) of instances with no rank kept. */
function filteredRows(w, rows, t) {
  const out = new Set();
  if (!w.rankFilter || !t) return out;
  const keep = new Set(w.rankFilter.ranks);
  const instKept = new Set();
  const rr = new Map(rows.map((r) => [r.idx, rowRanks(r, t)]));
  for (const r of rows) if (rr.get(r.idx).some((k) => keep.has(k))) instKept.add((r.group || [])[0]);
  for (const r of rows) {
    const rk = rr.get(r.idx);
    if (rk.length ? !rk.some((k) => keep.has(k)) : !instKept.has((r.group || [])[0])) out.add(r.idx);
  }
  return out;
}

/** Processes (instance > process groups) with a track the rank filter keeps. */
function shownProcesses(rows, filtered) {
  const keys = new Set();
  for (const r of rows) { const g = r.group || []; if (g.length >= 2 && !filtered.has(r.idx)) keys.add(`${g[0]}\u0001${g[1]}`); }
  return keys.size;
}

/** Event tracks on screen (not left out by the rank filter or hidden): an area over "every track". */
function shownEventRows(tl) {
  return tl.rows.filter((r) => r.kind === "events" && !tl.filtered.has(r.idx) && !tl.hidden.has(r.idx)).map((r) => r.idx);
}

/** Every rank, in the order the tracks show them now (the rank order chosen in Settings). */
function ranksInOrder(w) {
  const seen = new Set();
  for (const r of w.timeline.rows) for (const k of rowRanks(r, w.tracks)) seen.add(k);
  return [...seen];
}

/** Keep only ``ranks`` (null: every rank again, the one-step undo). Only the kept ranks' tracks are
 *  laid out, so only their windows, busy shading and device ops are asked. */
function setRankFilter(w, ranks, how = "") {
  const tl = w.timeline;
  w.rankFilter = ranks && ranks.length ? { ranks: [...new Set(ranks)].sort((a, b) => a - b), how } : null;
  tl.filtered = filteredRows(w, tl.rows, w.tracks);
  if (w.compactAuto) w.compact = tl.compact = shownProcesses(tl.rows, tl.filtered) > 24;
  tl.relayout();
  tl.refresh();
  renderRankStatus(w);
  if (tl.sel && !tl.sel.rows) w.showArea?.(tl.sel); // an area over every track: now the shown ones
  saveUrl();
}

/** The status bar's "showing 5 of 64 ranks" with its one-click undo. */
function renderRankStatus(w) {
  const el = $(".rank-filter", w.el);
  const tl = w.timeline;
  tl.host.dataset.rankFilter = w.rankFilter ? encodeRows(w.rankFilter.ranks) : "";
  if (!el) return;
  if (!w.rankFilter) { el.innerHTML = ""; return; }
  const all = profileRanks(w.overview).length;
  const shown = w.rankFilter.ranks.length;
  el.innerHTML = `<b>showing ${shown} of ${all} ranks</b>${w.rankFilter.how ? ` (${esc(w.rankFilter.how)})` : ""}: ${esc(encodeRows(w.rankFilter.ranks))} <button class="link-button" data-testid="rank-filter-clear" title="Show every rank again">Show all ranks</button>`;
  $("button", el).onclick = () => setRankFilter(w, null);
}

/** Order the processes of each instance (and the instances, by their first process) by a figure of
 *  the current view: mean lateness in collectives (from the collectives table's arrivals), compute
 *  share or exposed collective share (the area's By rank table); "rank" restores the server's order.
 *  Only the drawing order changes: rows keep their numbers, so requests are unchanged. */
async function orderRanks(w, by, quiet = false) {
  const tl = w.timeline;
  try {
    await tl.relayingOut(() => orderRanksNow(w, tl, by, quiet)); // the tracks move when the figures come
  } finally {
    saveUrl();
  }
}

async function orderRanksNow(w, tl, by, quiet) {
  w.order = by;
  tl.baseOrder = tl.baseOrder || tl.rows.slice();
  const base = tl.baseOrder;
  if (by === "rank") { tl.rows = base.slice(); tl.relayout(); tl.refresh(); tl.host.dataset.order = by; return; }
  const [a, cc] = await Promise.all([api.area(w.profile, w.mode, w.layout, null, tl.t0, tl.t1),
                                     api.collectives(w.profile, w.mode, w.layout, null, tl.t0, tl.t1)]);
  if (tl.baseOrder !== base || w.order !== by) return; // another grouping or order was chosen meanwhile
  const score = new Map(); // "rank N" -> larger first
  if (by === "late") {
    const sum = new Map(), n = new Map();
    for (const c of cc.collectives) {
      const first = Math.min(...c.arrivals.map((x) => x[3]));
      for (const [r, , , s0] of c.arrivals) { sum.set(r, (sum.get(r) || 0) + s0 - first); n.set(r, (n.get(r) || 0) + 1); }
    }
    for (const [r, v] of sum) score.set(r, v / n.get(r));
  } else for (const r of a.ranks) score.set(r.rank, by === "compute" ? r.compute_pct : r.cc_exposed_pct);
  const rankOf = (label) => { const m = /rank (\d+)/.exec(label || ""); return m ? Number(m[1]) : null; };
  const key = (r) => { const g = r.group || []; const k = rankOf(g[1]); return k === null || !score.has(k) ? -Infinity : score.get(k); };
  const instBest = new Map();
  for (const r of base) { const i = (r.group || [])[0]; instBest.set(i, Math.max(instBest.get(i) ?? -Infinity, key(r))); }
  const pos = new Map(base.map((r, i) => [r, i]));
  const procFirst = new Map(); // a process's rows stay together, in their order
  for (const r of base) { const g = r.group || []; const pk = `${g[0]}\u0001${g[1]}`; if (!procFirst.has(pk)) procFirst.set(pk, pos.get(r)); }
  tl.rows = base.slice().sort((x, y) => {
    const gx = x.group || [], gy = y.group || [];
    if (gx[0] !== gy[0]) return (instBest.get(gy[0]) - instBest.get(gx[0])) || (pos.get(x) - pos.get(y));
    const cx = rankOf(gx[1]) === null, cy = rankOf(gy[1]) === null; // the instance's counters stay first
    if (cx !== cy) return cx ? -1 : 1;
    const kx = key(x), ky = key(y);
    if (kx !== ky) return ky > kx ? 1 : -1;
    const px = procFirst.get(`${gx[0]}\u0001${gx[1]}`), py = procFirst.get(`${gy[0]}\u0001${gy[1]}`);
    return px - py || pos.get(x) - pos.get(y);
  });
  tl.relayout();
  tl.refresh();
  tl.host.dataset.order = by;
  if (!quiet) toast(`Ranks ordered by ${by === "late" ? "mean lateness in collectives" : by === "compute" ? "compute share" : "exposed collective share"} over the view${score.size ? "" : " (no figure in this view: order kept)"}.`);
}

/** A device op clicked on the system timeline: its properties in the Details tab. */
async function showDeviceOp(w, it) {
  const ev = await api.deviceEvent(w.profile, it.dp.pid, "system", it.drow, it.s).catch((e) => { toast(e.message, true); return null; });
  if (!ev) return;
  const box = w.el.querySelector("[data-pane=details]");
  w.dock?.showTab("details");
  box.innerHTML = `<h3 data-testid="device-op-name">${esc(ev.name)} <span class="muted">device op · engine ${esc(it.engine)} · device profile ${esc(it.dp.pid)}</span></h3>
    <table><tr><th>start (from profile start)</th><td data-testid="device-op-start">${fmtNs(ev.relative.start)}</td></tr>
    <tr><th>start (absolute, ns)</th><td>${esc(absNs(ev.origin_ns, ev.relative.start))}</td></tr>
    <tr><th>duration</th><td>${fmtDurExact(ev.relative.end - ev.relative.start)}</td></tr></table>
    <h3>Properties</h3>${propsTable(ev.properties)}${Object.keys(ev.attributes || {}).length ? `<h3>Attributes</h3>${propsTable(ev.attributes)}` : ""}`;
  box.scrollTop = 0;
}

/** The docked Device trace follows the system timeline's range (one axis for both). */
function followDock(w, t0, t1) {
  for (const d of state.widgets) if (d.dockedIn === w && d.type === "device-trace" && d.timeline && d.frame === "system") d.timeline.setView(t0, t1);
}

/** Show an event's details and flows (a merged bucket's summary); false when the event could not be read. */
async function openEvent(w, it) {
  if (it.c > 1 || (w.coarse && String(it.id) === "-1")) { // coarse buckets carry no event id
    bus.dispatchEvent(new CustomEvent("event", { detail: { profile: w.profile, merged: it, source: w } }));
    return true;
  }
  try {
    const [ev, fl] = await Promise.all([api.event(w.profile, it.id, it.leaf),
      it.leaf !== null && it.leaf !== undefined ? api.eventFlows(w.profile, it.id, it.leaf, it.s).catch(() => null) : null]);
    const tl = w.timeline;
    if (tl && fl) {
      tl.setSelectedFlows({ ...fl, chainIds: new Set(fl.chain.map((c) => `${c[1]}:${c[0]}`)) });
      // a collective is selected on every rank: each rank's event of it is outlined as selected
      const coll = fl.flows.find((x) => x.kind === "collective");
      tl.peers = coll ? new Set(coll.ends.map((e) => `${e[1]}:${e[0]}`)) : null;
      if (tl.selected) tl.selected.e = ev.relative.end;
    }
    bus.dispatchEvent(new CustomEvent("event", { detail: { profile: w.profile, event: ev, flows: fl, source: w } }));
    if (ev.name === "nc_exec_running" && ev.device_profile) drillDown(w, ev);
    return true;
  } catch (e) {
    toast(e.message, true);
    return false;
  }
}

/** Open the execution's device trace in the docked panel (in view), on system time, zoomed to the
 * execution, and shade the execution on the system timeline. */
function drillDown(w, ev) {
  const dp = String(ev.device_profile.profile_id);
  const exec = { a: ev.relative.start, b: ev.relative.end };
  if (w.timeline) { w.timeline.highlight = exec; w.timeline.queueDraw(); }
  let dw = findDuplicate("device-trace", w.profile, dp);
  if (dw) {
    if (w.timeline) dw.timeline?.setView(w.timeline.t0, w.timeline.t1); else dw.focusRange?.(exec.a, exec.b);
    if (dw.dockedIn) dw.dockedIn.dock.showTab("device");
  } else {
    // on the system timeline's own range: the panel and the timeline share one axis
    const init = w.timeline ? { a: w.timeline.t0, b: w.timeline.t1, exact: true } : exec;
    dw = addWidget("device-trace", w.profile, dp, { dock: w.dock ? w : null, init: { frame: "system", initial: init } });
  }
  dw?.el.scrollIntoView({ block: "nearest" });
  w.el.querySelector("[data-testid=dock]")?.scrollIntoView({ block: "nearest" });
}

// ---------------------------------------------------------------- Event Details
function propsTable(obj) {
  return `<table>${Object.entries(obj).map(([k, v]) => `<tr><th>${esc(k)}</th><td>${esc(typeof v === "object" && v !== null ? JSON.stringify(v) : v ?? "—")}</td></tr>`).join("")}</table>`;
}

function flowsHtml(f, w) {
  if (!f.flows.length && !f.chain.length) return `<p class="muted">This event has no flow.</p>`;
  const tl = w.timeline;
  const label = (e) => {
    const row = tl?.rows.find((r) => r.idx === tl.leafToRow.get(e[1]));
    const where = row ? [...(row.group || []), row.label].join(" › ") : `leaf ${e[1]}`;
    return `${esc(tl?.source.nameOf?.(e[1]) || row?.name || "event")} · ${esc(where)} · ${fmtNs(e[2])}`;
  };
  const me = f.event;
  const rankOf = (e) => { const r = tl?.rows.find((x) => x.idx === tl.leafToRow.get(e[1])); const m = r && [...(r.group || [])].join(" ").match(/rank (\d+)/); return m ? m[1] : "?"; };
  // a collective's ends in arrival order: each rank's lateness against the first to arrive
  const late = (fl, e) => (fl.kind === "collective" ? ` <span class="late" data-testid="late-by">rank ${rankOf(e)} · late by ${fmtDur(e[2] - Math.min(...fl.ends.map((x) => x[2])))}</span>` : "");
  const link = (e, fl) => `<li><a href="#" data-testid="flow-end" data-leaf="${e[1]}" data-id="${esc(e[0])}" data-s="${e[2]}" data-e="${e[3]}">${label(e)}</a>${fl ? late(fl, e) : ""}${String(e[0]) === String(me[0]) && e[1] === me[1] ? " <span class=\"tag\">this event</span>" : ""}</li>`;
  return `${f.flows.map((fl) => `<h3>Flow ${esc(fl.flow_id)} · ${esc(fl.kind)} · ${fl.ends.length} events${fl.truncated ? " (first shown)" : ""}</h3><ol class="flow-ends">${fl.ends.map((e) => link(e, fl)).join("")}</ol>`).join("")}
    ${f.chain.length ? `<h3>Framework chain (enclosing events)</h3><ol class="flow-ends">${f.chain.map((e) => link(e, null)).join("")}</ol>` : ""}`;
}

function bindFlowLinks(root, w) {
  root.querySelectorAll("[data-testid=flow-end]").forEach((a) => a.onclick = (ev) => {
    ev.preventDefault();
    const id = /^\d+$/.test(a.dataset.id) && Number(a.dataset.id) <= Number.MAX_SAFE_INTEGER ? Number(a.dataset.id) : a.dataset.id;
    goToEvent(w, { id, leaf: Number(a.dataset.leaf), s: Number(a.dataset.s), e: Number(a.dataset.e) });
  });
}

/** One event's details (or a merged bucket's), with full-precision times and links along its flows. */
function renderDetailsInto(box, d, from = "") {
  if (d.merged) {
    const m = d.merged;
    box.innerHTML = `${from}<h3>${esc(m.name)} — ${fmtCount(m.c)} merged events</h3>
      <table><tr><th>span</th><td>${fmtNs(m.s)} – ${fmtNs(m.e)}</td></tr><tr><th>total duration</th><td>${fmtDurExact(m.d)}</td></tr>
      <tr><th>mean duration</th><td>${fmtDur(m.d / m.c)}</td></tr></table>
      <p><button data-testid="zoom-bucket">Zoom to these events</button></p>`;
    $("button", box).onclick = () => d.source.timeline?.zoomTo(m.s, m.e);
    return;
  }
  const ev = d.event;
  const dev = ev.name === "nc_exec_running"
    ? (ev.device_profile
      ? `<div class="note">Device profile <b>${esc(ev.device_profile.profile_id)}</b> covers this execution: its ops are the lanes under this core's track, and the Device trace tab shows them by engine, on the same time axis.</div>`
      : `<div class="note" data-testid="device-note">${esc(ev.device_note || "No device profile was captured for this execution.")}${ev.profiled_execution && ev.profiled_execution.leaf !== null
        ? ` <a href="#" data-testid="profiled-execution" data-leaf="${ev.profiled_execution.leaf}" data-id="${esc(ev.profiled_execution.id)}" data-s="${ev.profiled_execution.start}" data-e="${ev.profiled_execution.end}">Go to the profiled execution ${esc(ev.profiled_execution.exec_id)}</a>` : ""}</div>`)
    : "";
  box.innerHTML = `${from}<h3 data-testid="event-name">${esc(ev.name)}</h3>${dev}
    <table><tr><th>start (from profile start)</th><td data-testid="event-start">${fmtNs(ev.relative.start)}</td></tr>
    <tr><th>start (absolute, ns)</th><td data-testid="event-start-abs">${esc(absNs(ev.origin_ns, ev.relative.start))}</td></tr>
    <tr><th>duration</th><td>${fmtDurExact(ev.relative.end - ev.relative.start)}</td></tr></table>
    ${d.flows ? `<div class="flows-in-details">${flowsHtml(d.flows, d.source)}</div>` : ""}
    <h3>Properties</h3>${propsTable(ev.properties)}
    ${Object.keys(ev.attributes || {}).length ? `<h3>Attributes</h3>${propsTable(ev.attributes)}` : ""}
    ${ev.model ? `<h3>Model</h3>${propsTable(ev.model)}` : ""}
    ${ev.process ? `<h3>Process</h3>${propsTable(ev.process)}` : ""}`;
  bindFlowLinks(box, d.source);
  const pe = box.querySelector("[data-testid=profiled-execution]");
  if (pe) pe.onclick = (e) => { e.preventDefault(); goToEvent(d.source, { id: /^\d+$/.test(pe.dataset.id) && Number(pe.dataset.id) <= Number.MAX_SAFE_INTEGER ? Number(pe.dataset.id) : pe.dataset.id, leaf: Number(pe.dataset.leaf), s: Number(pe.dataset.s), e: Number(pe.dataset.e) }); };
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
    renderDetailsInto(box, d, from);
  };
  bus.addEventListener("event", onEvent);
  w.destroy = () => bus.removeEventListener("event", onEvent);
}

// ---------------------------------------------------------------- sortable tables
function sortable(id, cols, items, rowAttrs = null) {
  return `<table class="sortable" data-testid="${id}"><thead><tr>${cols.map(([k, l], i) => `<th data-col="${i}" class="${i ? "num" : ""}" title="Sort">${esc(l)}</th>`).join("")}</tr></thead>
    <tbody>${items.map((x) => `<tr ${rowAttrs ? rowAttrs(x) : ""}>${cols.map(([k, , f], i) => `<td class="${i ? "num" : ""}" data-v="${esc(x[k] ?? "")}">${f(x[k], x)}</td>`).join("")}</tr>`).join("")}</tbody></table>`;
}

function bindSortable(root) {
  root.querySelectorAll("table.sortable th").forEach((th) => th.onclick = () => {
    const table = th.closest("table");
    const i = Number(th.dataset.col);
    const dir = th.dataset.dir === "asc" ? "desc" : "asc";
    table.querySelectorAll("th").forEach((x) => delete x.dataset.dir);
    th.dataset.dir = dir;
    const rows = [...table.tBodies[0].rows];
    const key = (r) => { const v = r.cells[i].dataset.v; const n = Number(v); return v !== "" && !Number.isNaN(n) ? n : v; };
    rows.sort((a, b) => { const x = key(a), y = key(b); const c = typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y)); return dir === "asc" ? c : -c; });
    table.tBodies[0].append(...rows);
  });
}

// ---------------------------------------------------------------- Profile Overview
async function renderProfileInfo(w, body) {
  const ov = await api.overview(w.profile);
  body.innerHTML = `<div class="details" data-testid="profile-info">
    <table><tr><th>events</th><td>${fmtCount(ov.events)}</td></tr><tr><th>duration</th><td>${fmtDurExact(ov.duration_ns)}</td></tr>
    <tr><th>origin (ns)</th><td>${esc(ov.origin_ns)}</td></tr>
    <tr><th>instances</th><td>${ov.instances.map(esc).join(", ")}</td></tr><tr><th>device profiles</th><td>${ov.device_profiles}</td></tr></table>
    <h3>Processes</h3><table><tr><th>instance / pid</th><td><b>rank · device · events · clock offset</b></td></tr>
    ${ov.processes.map((p) => `<tr><th>${esc(p.instance_id)} / ${esc(p.process_id)}</th><td>${esc(p.rank)} · ${esc(p.device_kind)} · ${fmtCount(p.events ?? 0)} · ${fmtDur(p.clock_offset_ns ?? 0)} (${esc(p.clock_offset_method)})</td></tr>`).join("")}</table>
    <h3>Events by name</h3><table>${ov.names.map(([n, c]) => `<tr><th>${esc(n)}</th><td>${fmtCount(c)}</td></tr>`).join("")}</table>
    ${ov.warnings.length ? `<h3>Warnings</h3>${ov.warnings.map((m) => `<div class="note">${esc(m)}</div>`).join("")}` : ""}</div>`;
}

// ---------------------------------------------------------------- Diff (compare mode)
const DIFF_VERDICT = { slower: "▲ slower", faster: "▼ faster", larger: "▲ larger", smaller: "▼ smaller",
  "more compiles": "▲ more compiles", "fewer compiles": "▼ fewer compiles", new: "+ new", vanished: "− vanished" };

/** The Diff widget: ``neuron-explorer diff`` of its profile (baseline) against another (the
 *  candidate, ``w.deviceProfile``: the widget item's second name), docked under the two timelines;
 *  a row opens the candidate's System Trace Viewer beside the baseline's if it is not open, and
 *  moves each timeline to that item's occurrence nearest its median. */
async function renderDiff(w, body, extra) {
  const others = state.profiles.filter((p) => p.name !== w.profile);
  if (!others.some((p) => p.name === w.deviceProfile)) w.deviceProfile = others[0]?.name ?? null;
  extra.innerHTML = others.length ? `<span class="muted">baseline · candidate</span> <select data-testid="diff-against" title="Candidate: the profile after the change">${others.map((p) => `<option value="${esc(p.name)}" ${p.name === w.deviceProfile ? "selected" : ""}>${esc(p.display_name || p.name)}</option>`).join("")}</select>
    <label class="muted"><input type="checkbox" data-testid="diff-all" ${w.diffAll ? "checked" : ""}> every aligned row</label>` : "";
  if (!others.length) { body.innerHTML = `<p class="pad" data-testid="diff-unavailable">This workspace holds one profile: ingest another (<code>neuron-explorer view -d DIR --ingest-only --data-path WORKSPACE</code>) to compare.</p>`; return; }
  $("[data-testid=diff-against]", extra).onchange = (ev) => { w.deviceProfile = ev.target.value; render(w); saveUrl(); };
  $("[data-testid=diff-all]", extra).onchange = (ev) => { w.diffAll = ev.target.checked; drawDiff(w, body); };
  const cand = w.deviceProfile;
  body.innerHTML = `<p class="pad muted" data-testid="diff-loading">Comparing "${esc(w.profile)}" with "${esc(cand)}" (neuron-explorer diff)…</p>`;
  let d;
  try { d = await api.diff(w.profile, cand); } catch (e) { d = { available: false, reason: e.message }; }
  if (w.deviceProfile !== cand || !body.isConnected) return;
  w.diffDoc = d;
  drawDiff(w, body);
}

function drawDiff(w, body) {
  const d = w.diffDoc;
  if (!d) return;
  if (!d.available) { body.innerHTML = `<p class="pad note" data-testid="diff-unavailable">${esc(d.reason)}</p>`; return; }
  const pct = (x) => (x === null || x === undefined ? "—" : `${x > 0 ? "+" : ""}${Number(x).toFixed(1)}%`);
  const dur = (x) => (x === null || x === undefined ? "—" : fmtDur(x));
  const st = d.step || {};
  const rows = d.rows.map((r, i) => ({ ...r, i, base_med: r.baseline?.median_ns ?? null, cand_med: r.candidate?.median_ns ?? null,
    shown: r.significant || r.kind === "step" }))
    .filter((r) => w.diffAll || r.shown);
  const cols = [["kind", "Kind", esc], ["label", "Item", esc], ["base_med", "Baseline median", dur], ["cand_med", "Candidate median", dur],
    ["delta_ns", "Change", (v) => (v === null || v === undefined ? "—" : (v > 0 ? "+" : "") + fmtDur(v))], ["delta_pct", "%", pct],
    ["verdict", "Verdict", (v) => esc(DIFF_VERDICT[v] || v || "")]];
  body.innerHTML = `<div class="diff" data-testid="diff">
    <div class="pad" data-testid="diff-headline">${st.baseline_median_ns !== null && st.baseline_median_ns !== undefined
      ? `Step time ${dur(st.baseline_median_ns)} → ${dur(st.candidate_median_ns)} (${pct(st.delta_pct)}${st.ci_pct ? `, 95% interval ${pct(st.ci_pct[0])} to ${pct(st.ci_pct[1])}` : ""}): <b data-testid="diff-step-verdict">${esc(st.verdict ?? "")}</b> · ` : ""}
      <b data-testid="diff-count">${d.changes.length}</b> significant change${d.changes.length === 1 ? "" : "s"}${d.noise ? ` · verdicts need ${d.noise.bar_pct}%${d.noise.item_shift_pct !== null && d.noise.item_shift_pct !== undefined ? ` (this pair's items moved ${d.noise.item_shift_pct}% typically)` : ""}` : ""}
      <span class="muted">· click a row to move both timelines to it</span></div>
    ${d.warnings.map((m) => `<div class="note">${esc(m)}</div>`).join("")}
    ${rows.length ? sortable("diff-table", cols, rows, (x) => `data-row="${x.i}" class="link${x.significant ? " changed" : ""}" data-testid="diff-row" data-kind="${esc(x.kind)}" data-key="${esc(x.key)}"`)
      : `<p class="pad" data-testid="diff-none">No aligned item changed beyond the pair's noise.</p>`}</div>`;
  bindSortable(body);
  body.querySelectorAll("tr[data-row]").forEach((tr) => tr.onclick = () => diffJump(w, d.rows[Number(tr.dataset.row)]));
}

/** Both timelines to a diff row's item: the baseline's trace viewer to the baseline's occurrence,
 *  the candidate's (opened beside it when missing) to the candidate's. */
async function diffJump(w, r) {
  const pairs = [[w.profile, r.baseline?.at], [w.deviceProfile, r.candidate?.at]];
  let opened = 0;
  for (const [profile, at] of pairs) {
    if (!at || at.t0 === null || at.t1 === null) continue;
    let tw = state.widgets.find((x) => x.type === "system-trace" && x.profile === profile && !x.dockedIn);
    if (!tw) {
      tw = addWidget("system-trace", profile);
      if (!tw) continue;
      w.el.before(tw.el); // the timelines above, the table docked under them
      state.widgets = state.widgets.filter((x) => x !== tw);
      state.widgets.splice(state.widgets.indexOf(w), 0, tw);
    }
    await waitFor(() => tw.timeline && tw.timeline.painted);
    if (!tw.timeline) continue;
    tw.timeline.zoomTo(at.t0, Math.max(at.t1, at.t0 + 1), 0.25);
    tw.el.dataset.diffJump = `${r.kind}:${r.key}`;
    opened++;
  }
  if (!opened) toast("Neither profile has an occurrence of this item to show.", true);
  saveUrl();
}

// ---------------------------------------------------------------- Device Trace Viewer
async function renderDeviceTrace(w, body, extra) {
  const list = (await api.deviceProfiles(w.profile)).device_profiles;
  if (!list.length) {
    body.innerHTML = `<p class="pad muted" data-testid="no-device-profiles">No device profiles were captured for "${esc(w.profile)}".</p>`;
    return;
  }
  if (w.deviceProfile === null || !list.some((d) => String(d.profile_id) === String(w.deviceProfile))) w.deviceProfile = String(list[0].profile_id);
  w.frame = w.frame || "system";
  extra.innerHTML = `<select data-testid="device-profile-select">${list.map((d) => `<option value="${esc(d.profile_id)}" ${String(d.profile_id) === w.deviceProfile ? "selected" : ""}>${esc(d.model_name ?? "")} · NC ${esc(d.nc_idx)} · ${esc(d.profile_id)}</option>`).join("")}</select>
    <button data-act="reset">Reset zoom</button>`;
  $("select", extra).onchange = (ev) => {
    const v = ev.target.value;
    if (findDuplicate("device-trace", w.profile, v, w.id)) { refuseDuplicate("device-trace", `${w.profile}/${v}`); ev.target.value = w.deviceProfile; return; }
    w.destroy?.();
    w.deviceProfile = v;
    w.initial = null;
    render(w);
  };
  const ov = await api.deviceOverview(w.profile, w.deviceProfile, w.frame);
  const tlHost = h(`<div class="timeline" style="height:${w.dockedIn ? 220 : 360}px" data-testid="device-timeline"></div>`);
  const status = h(`<div class="statusbar"><span class="st"></span><span>${fmtCount(ov.events)} device events · ${ov.rows.length} engines · time axis: ${w.frame === "system" ? "system profile (same as the System Trace Viewer)" : "from the first op"}</span></div>`);
  const details = h(`<div class="details" data-testid="device-event-details" style="border-top:1px solid var(--line)"><span class="muted">Click an op or kernel for its details.</span></div>`);
  body.append(tlHost, status, details);
  const pid = w.deviceProfile;
  const start = ov.start_ns || 0;
  const tl = new Timeline(tlHost, {
    duration: start + ov.duration_ns,
    window: (rows, t0, t1, px, sig) => api.deviceWindow(w.profile, pid, w.frame, rows, t0, t1, px, sig),
  }, {
    onStatus: (s) => { $(".st", status).textContent = s; },
    onEventClick: async (it) => {
      if (it.c > 1) { tl.zoomTo(it.s, it.e); return; }
      const ev = await api.deviceEvent(w.profile, pid, w.frame, it.row, it.s);
      details.innerHTML = `<h3 data-testid="device-event-name">${esc(ev.name)}</h3>
        <table><tr><th>start (system time)</th><td>${fmtNs(ev.relative.start)}</td></tr><tr><th>duration</th><td>${fmtDurExact(ev.relative.end - ev.relative.start)}</td></tr></table>
        <h3>Properties</h3>${propsTable(ev.properties)}${Object.keys(ev.attributes).length ? `<h3>Attributes</h3>${propsTable(ev.attributes)}` : ""}`;
    },
  });
  w.timeline = tl;
  w.destroy = () => tl.destroy();
  tl.setRows(ov.rows);
  w.focusRange = (a, b) => tl.zoomTo(a, b, 0.03);
  const home = () => (w.initial ? (w.initial.exact ? tl.setView(w.initial.a, w.initial.b) : tl.zoomTo(w.initial.a, w.initial.b, 0.03)) : tl.zoomTo(start, start + ov.duration_ns, 0.03));
  home();
  $("[data-act=reset]", extra).onclick = home;
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

const DP_COLS = [["model_name", "Model"], ["nc_idx", "Core"], ["executions", "Executions"], ["flops", "FLOPs"], ["achieved_flops_per_s", "FLOP/s"], ["mfu", "MFU"], ["total_time_ns", "Time"]];

async function openDeviceProfilesList(profile, sw) {
  const list = (await api.deviceProfiles(profile)).device_profiles;
  if (!list.length) {
    modal("Device Profiles", `<p data-testid="device-profiles-empty">No device profiles were captured for "${esc(profile)}". Device profiles hold the op and kernel events of executions on a NeuronCore; they are captured with the device profiling mode.</p>`);
    return;
  }
  // lead with what a user picks a device profile by; ids and paths follow, smaller
  const lead = DP_COLS.filter(([k]) => list.some((d) => d[k] !== undefined && d[k] !== null));
  const rest = Object.keys(list[0]).filter((k) => !lead.some(([c]) => c === k));
  const fmtv = (k, v) => (v === null || v === undefined ? "—" : k === "total_time_ns" ? fmtDur(Number(v)) : k.includes("flops") ? Number(v).toExponential(3) : k === "mfu" ? `${(Number(v) * 100).toFixed(1)}%` : esc(v));
  const content = h(`<div><table class="grid dp-list" style="margin:0" data-testid="device-profiles-table"><thead><tr><th></th>${lead.map(([, l]) => `<th>${esc(l)}</th>`).join("")}${rest.map((c) => `<th class="minor">${esc(c)}</th>`).join("")}</tr></thead>
    <tbody>${list.map((d, i) => `<tr><td><input type="radio" name="dp" value="${esc(d.profile_id)}" ${i ? "" : "checked"}></td>${lead.map(([k]) => `<td>${fmtv(k, d[k])}</td>`).join("")}${rest.map((c) => `<td class="minor">${esc(d[c])}</td>`).join("")}</tr>`).join("")}</tbody></table></div>`);
  const m = modal("Device Profiles", content, `<button class="primary" data-act="submit" data-testid="device-profiles-submit">Submit</button>`);
  $("[data-act=submit]", m.el).onclick = () => {
    const v = $("input[name=dp]:checked", m.el).value;
    if (addWidget("device-trace", profile, String(v), { dock: sw && sw.dock ? sw : null, init: { frame: "system" } })) m.close();
  };
}

// ---------------------------------------------------------------- keys and help
const KEYS = [["W / S", "zoom in / out at the mouse"], ["A / D", "pan left / right"], ["wheel", "scroll tracks"], ["Ctrl + wheel", "zoom at the mouse"],
  ["Shift + wheel", "pan"], ["drag", "pan (and scroll)"], ["Shift + drag", "select an area (tracks × time)"], ["drag in the ruler", "select a time range over every track"],
  ["click a group name", "collapse / expand (collapsed: utilization summary)"], ["F", "focus: zoom to the selected event or area"], ["M", "mark the selected event's (or area's) time range"],
  ["Ctrl + F", "search names and arguments"], ["Enter / Shift+Enter", "next / previous match (in the search box)"], ["0", "whole profile"], ["PgUp / PgDn", "scroll a page of tracks"],
  ["Esc", "clear the area selection; close this help"], ["?", "this help"]];

function toggleHelp(force) {
  const old = $("[data-testid=help-overlay]");
  if (old) { old.remove(); if (force !== true) return; }
  if (force === false) return;
  const el = h(`<div class="help-back" data-testid="help-overlay"><div class="help"><h2>Keys</h2><table>${KEYS.map(([k, d]) => `<tr><th><kbd>${esc(k)}</kbd></th><td>${esc(d)}</td></tr>`).join("")}</table><p class="muted">Keys act on the timeline under the mouse (else the last one used) as soon as the page has focus.</p></div></div>`);
  el.onclick = () => el.remove();
  document.body.appendChild(el);
}

document.addEventListener("keydown", (ev) => {
  const t = ev.target;
  const typing = t && (t.tagName === "INPUT" || t.tagName === "TEXTAREA" || t.tagName === "SELECT");
  if ((ev.ctrlKey || ev.metaKey) && ev.key.toLowerCase() === "f") {
    const w = state.widgets.find((x) => x.type === "system-trace" && x.focusSearch);
    if (w) { ev.preventDefault(); w.focusSearch(); }
    return;
  }
  // Escape closes an open Settings popover, even from one of its inputs (and goes no further: the
  // area selection stays)
  if (ev.key === "Escape" && $(".popover")) { document.querySelectorAll(".popover").forEach((p) => p.remove()); ev.stopImmediatePropagation(); ev.preventDefault(); return; }
  if (typing) return;
  if (ev.key === "?") { ev.preventDefault(); toggleHelp(); return; }
  if (ev.key === "Escape" && $("[data-testid=help-overlay]")) { toggleHelp(false); }
}, true);

// ---------------------------------------------------------------- pages
async function showHome() {
  state.home = null;
  $("#crumb").textContent = "";
  $("#actions").innerHTML = "";
  const r = await api.profiles();
  state.profiles = r.profiles;
  $("#main").innerHTML = `<h1>Profiles</h1><p class="muted" style="margin:0 16px 10px">Workspace ${esc(r.workspace)} · ingest more with <code>neuron-explorer view -d DIR --ingest-only --data-path WORKSPACE</code></p>
    ${r.profiles.length ? `<table class="grid" data-testid="profiles"><thead><tr><th>Profile</th><th>Type</th><th class="num">Processes</th><th class="num">Instances</th><th class="num">Events</th><th>Captured</th></tr></thead><tbody>
    ${r.profiles.map((p) => `<tr class="link" data-name="${esc(p.name)}" data-testid="profile-row"><td><a href="#/s/${encodeURIComponent(p.name)}">${esc(p.display_name || p.name)}</a> <a class="muted small" href="#/p/${encodeURIComponent(p.name)}" data-testid="open-trace">timeline</a></td><td>${p.types.map((t) => `<span class="tag ${t}">${t}</span>`).join("")}</td><td class="num">${p.processes}</td><td class="num">${p.instances}</td><td class="num">${fmtCount(p.events)}</td><td>${p.start_wall_ns ? new Date(Number(BigInt(p.start_wall_ns) / 1000000n)).toISOString().replace("T", " ").slice(0, 19) : ""}</td></tr>`).join("")}
    </tbody></table>` : `<p class="pad">No profiles yet in this workspace.</p>`}`;
  document.querySelectorAll("tr.link").forEach((tr) => tr.onclick = (ev) => { if (ev.target.closest("a")) return; location.hash = `#/s/${encodeURIComponent(tr.dataset.name)}`; });
}

async function showDashboard(name, url) {
  for (const w of [...state.widgets]) removeWidget(w);
  if (!state.profiles.length) state.profiles = (await api.profiles()).profiles;
  if (!state.profiles.some((p) => p.name === name)) { $("#main").innerHTML = `<p class="pad">Profile "${esc(name)}" not found. <a href="#/">All profiles</a></p>`; return; }
  state.home = name;
  state.sync = url.get("sync") === "1";
  $("#crumb").textContent = `› ${name}`;
  $("#actions").innerHTML = `<button class="primary" data-testid="add-widget">Add Widget</button>`;
  $("[data-testid=add-widget]").onclick = openAddWidget;
  $("#main").innerHTML = `<div id="widgets"></div>`;
  const list = (url.get("w") || "system-trace").split(",").filter(Boolean);
  state.restoring = url;
  const gone = new Set();
  try {
    for (const item of list) {
      const it = parseWidgetItem(item);
      if (!WIDGETS[it.type]) continue;
      if (it.profile !== null && !state.profiles.some((x) => x.name === it.profile)) { gone.add(it.profile); continue; }
      const p = it.profile ?? name;
      // already open: the selected execution's device trace, drilled down into while restoring
      if (findDuplicate(it.type, p, it.deviceProfile)) continue;
      const w = addWidget(it.type, p, it.deviceProfile, { init: { half: it.half } });
      if (w && it.type === "system-trace" && p === name) await waitFor(() => w.timeline && w.timeline.painted);
    }
    if (gone.size) toast(`Left out of this link: the widgets of ${[...gone].map((x) => `"${x}"`).join(", ")} (no longer in the workspace).`, true);
  } finally {
    state.restoring = null;
  }
  saveUrl();
}

function waitFor(cond, ms = 60000) {
  return new Promise((resolve) => {
    const t0 = performance.now();
    const tick = () => (cond() || performance.now() - t0 > ms ? resolve() : setTimeout(tick, 50));
    tick();
  });
}

let lastRoute = null;
function route() {
  const sm = location.hash.match(/^#\/s\/([^?]+)$/);
  if (sm) {
    lastRoute = null;
    showSummary(decodeURIComponent(sm[1])).catch((e) => { $("#main").innerHTML = `<p class="pad">Error: ${esc(e.message)}</p>`; });
    return;
  }
  const m = location.hash.match(/^#\/p\/([^?]+)(\?.*)?$/);
  const key = m ? decodeURIComponent(m[1]) : "";
  if (m && key === lastRoute && state.home === key) return; // our own URL updates
  lastRoute = key;
  const go = m ? showDashboard(key, readUrl()) : showHome();
  go.catch((e) => { $("#main").innerHTML = `<p class="pad">Error: ${esc(e.message)}</p>`; });
}

window.addEventListener("hashchange", route);
route();
window.__nx = { state, addWidget, WIDGETS, goToEvent, parseRankList };
void fmtBytes;
