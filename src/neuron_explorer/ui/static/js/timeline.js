// The canvas timeline shared by the System and Device Trace Viewers.
//
// It never holds more than one screen of data: after every pan, zoom or scroll it asks its source for
// the visible rows over the visible time range at the canvas's pixel width, and the server answers
// with events at least a pixel long plus per-pixel buckets (with counts) for everything shorter.
// Until the answer arrives the previous answer is redrawn at the new scale, so interaction stays
// smooth while the query runs.
//
// Rows sit in a tree of groups (instance > process > CPU/Device ...). A collapsed group is one
// summary track: per pixel, how busy its tracks are (``/busy``), shaded from white to dark, so at
// whole-profile zoom a rank that works longer than the others stands out. Events that overlap or
// nest on one track are drawn in lanes. Times are relative ns (exact in a double); the ruler shows a
// base time with every nanosecond and ticks relative to it, at any zoom.

import { fmtDur, fmtDurExact, fmtBytes, fmtCount, fmtNs, fmtTick, release, stats } from "./api.js";

export const RULER = 26;
export const LABEL_W = 230;
const ROW_H = 18;
const CNT_H = 42;
const GROUP_H = 18;
const SUMMARY_H = 22;
const COMPACT_H = 7; // a collapsed rank in the compact view: 64 fit a 1000 px window, 512 scroll
const COMPACT_GROUP_H = 12; // an expanded instance header in the compact view
const MAX_LANES = 12;
// device profiles whose ops are asked per view: more in view on one track (or on the screen) and the
// track says so on its lanes ("zoom in") instead of sending that many requests
const DEV_PER_ROW = 16;
const DEV_PER_VIEW = 48;
const DEV_TOGGLE_X0 = LABEL_W - 68, DEV_TOGGLE_X1 = LABEL_W - 22; // the lanes' fold toggle in the label gutter
const MIN_SPAN = 100; // ns

// a memory track's limit line (a cgroup's memory limit, decision 0186): a colour no series takes
export const LIMIT_COLOR = "#d4148c";
const SERIES_COLORS = ["#2f7ed8", "#f28f43", "#8bbc21", "#910000", "#1aadce", "#492970", "#77a1e5", "#c42525", "#a6c96a", "#0d233a"];

/** What a limit is called on its track: the cgroup's memory limit (the only kind drawn yet). */
function limitName(limit) {
  return limit.source && limit.source.startsWith("cgroup") ? "cgroup limit" : "limit";
}

const COLORS = new Map();
export function colorFor(name) {
  let c = COLORS.get(name);
  if (c !== undefined) return c;
  let h = 0;
  for (let i = 0; i < name.length; i++) h = (h * 31 + name.charCodeAt(i)) >>> 0;
  c = `hsl(${h % 360}, 58%, 56%)`;
  if (COLORS.size < 4096) COLORS.set(name, c);
  return c;
}

/** A share byte (0..255) as a pixel: white to ``to`` ([r, g, b]), as RGBA in one little-endian word
 *  (what an ImageData's bytes read as a Uint32Array on every machine the viewer runs on). */
function shadeTable(to) {
  const t = new Uint32Array(256);
  for (let v = 0; v < 256; v++) {
    const [r, g, b] = to.map((c) => Math.round(255 - (v / 255) * (255 - c)));
    t[v] = ((255 << 24) | (b << 16) | (g << 8) | r) >>> 0;
  }
  return t;
}
const BUSY_RGBA = shadeTable([31, 78, 154]); // busy: white -> #1f4e9a
const CC_RGBA = shadeTable([224, 123, 0]); // exposed collectives: white -> #e07b00

function niceStep(raw) {
  if (raw <= 1) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const m of [1, 2, 5, 10]) if (m * p >= raw) return Math.round(m * p);
  return Math.round(10 * p);
}

// ---------------------------------------------------------------- keyboard: the page, not the canvas
// Perfetto's habit: W/A/S/D act as soon as the page has focus. Keys go to the timeline under the
// mouse, else the one last used, else the first on the page; never while typing in a field.
const all = new Set();
let active = null;
document.addEventListener("keydown", (ev) => {
  const t = ev.target;
  if (t && (t.tagName === "INPUT" || t.tagName === "TEXTAREA" || t.tagName === "SELECT" || t.isContentEditable)) return;
  const tl = (active && all.has(active)) ? active : [...all][0];
  if (tl) tl.onKey(ev);
});

/** The events of the last window answer, kept as its columns (decision 0181): one number per event
 *  and field in the answer's own typed arrays, plus each event's lane and the events of each track in
 *  drawing order. Why: one object per event ({s, e, c, d, id, leaf, name, lane}) was what the page
 *  allocated most (~0.6 MB per answer with every rank expanded); each answer's objects outlived a
 *  minor GC and were promoted, so the V8 heap grew by ~15 MB of garbage between full GCs.
 *
 *  Drawing and hit testing read the columns (``rowOf``); ``get(row)`` still gives a track's events as
 *  objects (made on demand and kept until the next answer), for the few callers that want them. */
class WindowItems {
  constructor() { this.clear(); }

  clear() {
    this.cols = null; // {s, e, c, d, id, leaf, name}: the answer's arrays, indexed by event
    this.lane = null; // Uint8Array: each event's lane
    this.ranges = new Map(); // row idx -> {k: Uint32Array of event indices in drawing order, a, b}
    this.made = new Map(); // row idx -> items made by ``get``
    this.extra = new Map(); // row idx -> items set by hand (``set``)
    this.count = 0;
  }

  get size() { return new Set([...this.ranges.keys(), ...this.extra.keys()]).size; }
  has(row) { return this.extra.has(row) || this.ranges.has(row); }
  keys() { return new Set([...this.ranges.keys(), ...this.extra.keys()]).values(); }

  /** A track's events as objects {row, s, e, c, d, id, leaf, name, lane}; undefined when none. */
  get(row) {
    if (this.extra.has(row)) return this.extra.get(row);
    const r = this.ranges.get(row);
    if (!r) return undefined;
    let out = this.made.get(row);
    if (!out) {
      out = [];
      for (let j = r.a; j < r.b; j++) out.push(this.item(row, r.k[j]));
      this.made.set(row, out);
    }
    return out;
  }

  /** Replace a track's events by ``items`` (objects as ``get`` gives them). */
  set(row, items) { this.extra.set(row, items); this.made.delete(row); return this; }

  item(row, i) {
    const c = this.cols;
    return { row, s: c.s[i], e: c.e[i], c: c.c[i], d: c.d[i], id: c.id[i], leaf: c.leaf ? c.leaf[i] : null,
             name: c.name ? c.name[i] : (c.nameOf && c.leaf ? c.nameOf(c.leaf[i]) : null), lane: this.lane[i] };
  }

  *values() { for (const r of this.keys()) yield this.get(r); }
  *entries() { for (const r of this.keys()) yield [r, this.get(r)]; }
  [Symbol.iterator]() { return this.entries(); }

  /** A track's events for drawing and hit testing, without objects: ``n`` events, the ``j``-th
   *  (0 <= j < n) at index ``k[a + j]`` of ``cols`` (or, for a track set by hand, ``items[j]``). */
  rowOf(row) {
    const it = this.extra.get(row);
    if (it) return { n: it.length, items: it };
    const r = this.ranges.get(row);
    return r ? { n: r.b - r.a, k: r.k, a: r.a, cols: this.cols, lane: this.lane } : null;
  }
}

/** One event of a track's ``rowOf`` view as the fields drawing needs, into ``out`` (reused). */
function fieldsOf(v, j, out) {
  if (v.items) {
    const it = v.items[j];
    out.s = it.s; out.e = it.e; out.c = it.c; out.d = it.d; out.id = it.id; out.leaf = it.leaf; out.name = it.name;
    out.lane = it.lane; out.i = -1;
    return out;
  }
  const i = v.k[v.a + j], c = v.cols;
  out.s = c.s[i]; out.e = c.e[i]; out.c = c.c[i]; out.d = c.d[i]; out.id = c.id[i];
  out.leaf = c.leaf ? c.leaf[i] : null;
  out.name = c.name ? c.name[i] : (c.nameOf && c.leaf ? c.nameOf(c.leaf[i]) : null);
  out.lane = v.lane[i]; out.i = i;
  return out;
}

export class Timeline {
  /**
   * @param {HTMLElement} host element to fill
   * @param {object} source {duration, window(rows,t0,t1,px,signal), counters?, flows?, busy?, nameOf?(leaf)}
   * @param {object} cb callbacks {onEventClick(item), onSelect(area|null), onStatus(text), onView(t0,t1),
   *                    onKey(ev) -> handled, onFlowsChanged()}
   */
  constructor(host, source, cb = {}) {
    this.host = host;
    this.source = source;
    this.cb = cb;
    this.canvas = document.createElement("canvas");
    this.canvas.setAttribute("data-testid", "timeline-canvas");
    host.appendChild(this.canvas);
    host.tabIndex = 0;
    this.ctx = this.canvas.getContext("2d");
    this.rows = [];
    this.layout = [];
    this.height = 0;
    this.scrollY = 0;
    this.t0 = 0;
    this.t1 = Math.max(source.duration, 1);
    this.events = new WindowItems(); // the last window answer's events, by row (columns)
    this.lanes = new Map(); // row idx -> lanes drawn (only grows: rows do not jump while panning)
    this.counterData = new Map();
    this.busyData = new Map(); // group key -> {busy, cc, mean}
    this.flowData = [];
    this.flowMode = "selected"; // "selected": the selected event's flows; "all": every flow in view; "none"
    this.selFlows = null; // {flows, chain} of the selected event
    this.level = null;
    this.sel = null; // area: {a, b, rows: [row idx] | null}
    this.selected = null; // {row, s, id, leaf}
    this.peers = null; // Set of "leaf:id": the selected collective's events on the other ranks
    this.marks = []; // [{a, b}] (M)
    this.insights = []; // [{a, b, n, title}]: the profile's ranked insights, marked on the time axis
    this.devLanes = new Map(); // row idx -> {engines: [name], dps: [{pid, a, b, rows: [engine row of the dp]}]}
    this.devEvents = new Map(); // row idx -> device ops {s, e, c, d, id, name, lane: engine index, dp, drow}
    this.devFolded = new Set(); // cores ("inst|pid|nc") whose device lanes are folded (toggle in the gutter)
    this.devCrowded = new Map(); // row idx -> device profiles in view, when too many to ask their ops
    this.layoutLoading = 0; // asynchronous layout changes under way (device lanes, rank order): ``pending``
    this.filtered = new Set(); // row idx left out by the rank filter (never laid out, never asked)
    this.highlight = null; // {a, b}: a range shaded on every track (the drill-down's execution)
    this.match = null; // Set of row idx matching the search
    this.collapsed = new Set(); // group keys
    this.pinned = []; // row idx pinned under the ruler (they do not scroll)
    this.pinLayout = [];
    this.pinH = 0;
    this.hidden = new Set(); // row idx hidden ("hide tracks empty in this view")
    this.showCounters = true;
    this.compact = false; // collapsed ranks 8 px high (set when a profile has many processes)
    this.hover = null;
    this.ticks = [];
    this.ctrl = null;
    this.painted = false;
    // resolved at the first paint: what can wait for it (a cold open's requests that need the index)
    this.firstPaint = new Promise((resolve) => { this._painted = resolve; });
    this.fetchTimer = 0;
    this.drawQueued = false;
    this._bind();
    all.add(this);
    this.resizeObs = new ResizeObserver(() => this.resize());
    this.resizeObs.observe(host);
    this.resize();
  }

  get showFlows() { return this.flowMode !== "none"; }

  destroy() {
    all.delete(this);
    if (active === this) active = null;
    this.resizeObs.disconnect();
    if (this.ctrl) this.ctrl.abort();
    window.removeEventListener("mouseup", this._up);
    window.removeEventListener("mousemove", this._move);
  }

  // ------------------------------------------------------------------ rows and layout
  setRows(rows, collapsed = null) {
    // an answer still on its way was asked for the previous rows: its row numbers mean other tracks
    if (this.ctrl) { this.ctrl.abort(); this.ctrl = null; }
    this.rows = rows;
    this.rowsGen = (this.rowsGen || 0) + 1; // answers asked for earlier rows are dropped by it
    this.leafToRow = new Map();
    for (const r of rows) for (const lf of r.leaves || []) this.leafToRow.set(lf, r.idx);
    this.dropWindow();
    this.lanes.clear();
    this.counterData.clear();
    this.busyData.clear();
    this.devLanes = new Map();
    this.devEvents = new Map();
    this.flowData = [];
    if (collapsed) this.collapsed = new Set(collapsed);
    this.relayout();
    this.refresh();
  }

  /** Group keys ("inst\u0001proc\u0001...") of every group node, with their depth. */
  groupKeys() {
    const out = new Map();
    for (const r of this.rows) {
      const g = r.group || [];
      for (let d = 0; d < g.length; d++) out.set(g.slice(0, d + 1).join("\u0001"), d);
    }
    return out;
  }

  toggleGroup(key) {
    if (this.collapsed.has(key)) this.collapsed.delete(key);
    else this.collapsed.add(key);
    this.relayout();
    this.refresh();
    this.cb.onLayout?.();
  }

  relayout() {
    const out = [];
    let prev = [];
    let y = 0;
    let hiddenUnder = null; // key of the collapsed group being skipped
    const groupEntry = new Map();
    for (const r of this.rows) {
      if (r.kind === "counter" && !this.showCounters) continue;
      if (this.hidden.has(r.idx) || this.filtered.has(r.idx)) continue;
      const g = r.group || [];
      if (hiddenUnder !== null) {
        const k = g.slice(0, hiddenUnder.depth + 1).join("\u0001");
        if (k === hiddenUnder.key) {
          if (r.kind === "events") hiddenUnder.entry.rows.push(r.idx);
          for (const lf of r.leaves || []) hiddenUnder.entry.leaves.push(lf);
          continue;
        }
        hiddenUnder = null;
      }
      let d = 0;
      while (d < g.length && d < prev.length && g[d] === prev[d]) d++;
      let collapsedHere = null;
      for (let k = d; k < g.length; k++) {
        const key = g.slice(0, k + 1).join("\u0001");
        const col = this.collapsed.has(key);
        const h = col ? (this.compact && k > 0 ? COMPACT_H : SUMMARY_H) : (this.compact && k === 0 ? COMPACT_GROUP_H : GROUP_H);
        const e = { type: "group", depth: k, text: g[k], key, path: g.slice(0, k + 1), y, h, collapsed: col, rows: [], leaves: [] };
        out.push(e);
        groupEntry.set(key, e);
        y += e.h;
        if (col) { collapsedHere = e; break; }
      }
      if (collapsedHere) {
        if (r.kind === "events") collapsedHere.rows.push(r.idx);
        for (const lf of r.leaves || []) collapsedHere.leaves.push(lf);
        hiddenUnder = { key: collapsedHere.key, depth: collapsedHere.depth, entry: collapsedHere };
        prev = g.slice(0, collapsedHere.depth + 1);
        continue;
      }
      prev = g;
      const h = r.kind === "counter" ? CNT_H : ROW_H * (Math.max(1, this.lanes.get(r.idx) || 1) + this.devLaneCount(r.idx));
      out.push({ type: "row", row: r, depth: g.length, y, h, path: g });
      y += h;
    }
    if (this.compact) {
      // the compact rank view leaves out collapsed groups of counters only (an instance's host
      // counters): 64 ranks then fit one screen; expanded, a process keeps its counters
      const kept = out.filter((e) => !(e.type === "group" && e.collapsed && !e.rows.length && !e.leaves.length));
      if (kept.length !== out.length) {
        y = 0;
        for (const e of kept) { e.y = y; y += e.h; }
        out.length = 0;
        out.push(...kept);
      }
    }
    this.layout = out;
    this.groupEntry = groupEntry;
    this.rowY = new Map(out.filter((e) => e.type === "row").map((e) => [e.row.idx, e]));
    // where a hidden row's events are drawn: its collapsed group's summary track
    this.rowHome = new Map();
    for (const e of out) if (e.type === "group" && e.collapsed) for (const r of e.rows) this.rowHome.set(r, e);
    this.height = y;
    let py = 0;
    this.pinLayout = [];
    for (const idx of this.pinned) {
      const r = this.rows.find((x) => x.idx === idx);
      if (!r || this.filtered.has(idx)) continue;
      const h = r.kind === "counter" ? CNT_H : ROW_H * Math.max(1, this.lanes.get(r.idx) || 1);
      this.pinLayout.push({ type: "row", row: r, depth: 0, y: py, h, path: r.group || [], pinned: true });
      py += h;
    }
    this.pinH = py ? py + 3 : 0;
    this.clampScroll();
  }

  /** Device-op lanes under a core's track: one per engine of its device profiles (0 without, or folded). */
  devLaneCount(idx) { return this.devShown(idx) ? this.devLanes.get(idx).engines.length : 0; }

  /** Whether a track's device lanes are drawn: it has some, and none of its cores is folded. */
  devShown(idx) {
    const dl = this.devLanes.get(idx);
    return !!dl && !dl.cores.some((c) => this.devFolded.has(c));
  }

  /** Fold or unfold a track's device lanes (its toggle in the label gutter): only the tracks below
   *  it move, by its lanes' height. */
  toggleDevLanes(idx) {
    const dl = this.devLanes.get(idx);
    if (!dl) return;
    const show = !this.devShown(idx);
    for (const c of dl.cores) if (show) this.devFolded.delete(c); else this.devFolded.add(c);
    this.host.dataset.devFolded = String(this.devFolded.size);
    this.relayout();
    this.refresh();
    this.cb.onLayout?.();
  }

  /** The track whose device-lane toggle is at canvas point (x, y), or null. */
  devToggleAt(x, y) {
    if (x < DEV_TOGGLE_X0 || x >= DEV_TOGGLE_X1) return null;
    const e = this.entryAt(y);
    if (!e || e.type !== "row" || e.pinned || !this.devLanes.has(e.row.idx)) return null;
    return y - this.entryY(e) < ROW_H ? e.row.idx : null;
  }

  /** The lane where a row's device lanes begin (under its own event lanes). */
  devBase(idx) { return Math.max(1, this.lanes.get(idx) || 1); }

  /** Device profiles' ops as lanes under their core's track (``lanes``: see ``devLanes``). */
  setDeviceLanes(lanes) {
    this.devLanes = lanes;
    this.devEvents = new Map();
    this.devCrowded = new Map();
    this.relayout();
    this.refresh();
  }

  /** Pin a track under the ruler (it stays while the others scroll), or unpin it. */
  togglePin(idx) {
    const i = this.pinned.indexOf(idx);
    if (i >= 0) this.pinned.splice(i, 1);
    else this.pinned.push(idx);
    this.host.dataset.pinned = String(this.pinned.length);
    this.relayout();
    this.refresh();
    this.cb.onLayout?.();
  }

  /** Hide the event tracks not in ``keep`` (an answer of ``/nonempty``); ``null`` shows every track again. */
  hideExcept(keep) {
    this.hidden = new Set(keep ? this.rows.filter((r) => r.kind === "events" && !keep.includes(r.idx)).map((r) => r.idx) : []);
    this.relayout();
    this.refresh();
  }

  resize() {
    const r = this.host.getBoundingClientRect();
    const dpr = window.devicePixelRatio || 1;
    this.w = Math.max(200, Math.floor(r.width));
    this.h = Math.max(100, Math.floor(r.height));
    this.canvas.width = this.w * dpr;
    this.canvas.height = this.h * dpr;
    this.ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    this.clampScroll();
    this.refresh();
  }

  /** Canvas y where the scrolling tracks begin: under the ruler and the pinned tracks. */
  get top() { return RULER + this.pinH; }
  get areaW() { return this.w - LABEL_W; }
  get npp() { return (this.t1 - this.t0) / this.areaW; }
  xOf(t) { return LABEL_W + (t - this.t0) / this.npp; }
  tOf(x) { return this.t0 + (x - LABEL_W) * this.npp; }

  clampScroll() {
    const maxS = Math.max(0, this.height - (this.h - this.top));
    this.scrollY = Math.min(Math.max(0, this.scrollY), maxS);
  }

  visibleRows() {
    const top = this.scrollY;
    const bot = this.scrollY + this.h - this.top;
    const ev = [];
    const cn = [];
    const groups = [];
    for (const e of this.pinLayout) (e.row.kind === "counter" ? cn : ev).push(e.row.idx);
    for (const e of this.layout) {
      if (e.y + e.h < top || e.y > bot) continue;
      if (e.type === "group") { if (e.collapsed && e.rows.length) groups.push(e); continue; }
      (e.row.kind === "counter" ? cn : ev).push(e.row.idx);
    }
    return { ev, cn, groups };
  }

  /** Event rows drawn between canvas y0 and y1 (an area selection's tracks), collapsed groups' rows included. */
  rowsBetween(y0, y1) {
    const a = Math.min(y0, y1) - this.top + this.scrollY, b = Math.max(y0, y1) - this.top + this.scrollY;
    const out = [];
    for (const e of this.layout) {
      if (e.y + e.h <= a || e.y >= b) continue;
      if (e.type === "group") { if (e.collapsed) out.push(...e.rows); continue; }
      if (e.row.kind === "events") out.push(e.row.idx);
    }
    return out;
  }

  /** The vertical extent of tracks ``rows`` in an area's coordinates (canvas y + scroll), so that an
   *  area restored from the URL is drawn over its tracks, as the drag that made it was; {} when none
   *  of them is laid out (it is then drawn over every track). */
  rowsExtent(rows) {
    if (!rows || !rows.length) return {};
    const want = new Set(rows);
    let y0 = Infinity, y1 = -Infinity;
    for (const e of this.layout) {
      const hit = e.type === "row" ? want.has(e.row.idx) : e.collapsed && e.rows.some((r) => want.has(r));
      if (hit) { y0 = Math.min(y0, e.y); y1 = Math.max(y1, e.y + e.h); }
    }
    return y1 > y0 ? { y0: this.top + y0, y1: this.top + y1 } : {};
  }

  // ------------------------------------------------------------------ view changes
  setView(t0, t1) {
    const dur = Math.max(this.source.duration, 1);
    let span = Math.max(MIN_SPAN, t1 - t0);
    span = Math.min(span, dur * 1.5);
    let a = t0;
    if (t1 - t0 !== span) a = (t0 + t1) / 2 - span / 2;
    a = Math.min(Math.max(a, -dur * 0.25), dur * 1.25 - span);
    this.t0 = a;
    this.t1 = a + span;
    this.refresh();
    this.cb.onView?.(this.t0, this.t1);
  }

  /** Zoom by ``factor`` keeping the time under canvas x ``atX`` (default: the mouse, else the centre) still. */
  zoom(factor, atX) {
    const x = atX ?? (this.hover && this.hover.x >= LABEL_W ? this.hover.x : LABEL_W + this.areaW / 2);
    const t = this.tOf(x);
    const span = (this.t1 - this.t0) * factor;
    const frac = (x - LABEL_W) / this.areaW;
    this.setView(t - frac * span, t - frac * span + span);
  }

  pan(fraction) {
    const span = this.t1 - this.t0;
    this.setView(this.t0 + span * fraction, this.t1 + span * fraction);
  }

  zoomTo(a, b, pad = 0.05) {
    const span = Math.max(b - a, MIN_SPAN);
    this.setView(a - span * pad, b + span * pad);
  }

  resetView() { this.setView(0, Math.max(this.source.duration, 1)); }

  scrollBy(dy) {
    const before = this.scrollY;
    this.scrollY += dy;
    this.clampScroll();
    if (this.scrollY !== before) this.refresh();
    return this.scrollY !== before;
  }

  /** Make row ``idx`` visible: expand its collapsed ancestors, scroll it to the upper third if off screen. */
  scrollToRow(idx) {
    if (!this.rowY.get(idx)) {
      const r = this.rows.find((x) => x.idx === idx);
      if (!r) return;
      const g = r.group || [];
      let changed = false;
      for (let d = 0; d < g.length; d++) {
        const k = g.slice(0, d + 1).join("\u0001");
        if (this.collapsed.delete(k)) changed = true;
      }
      if (changed) { this.relayout(); this.cb.onLayout?.(); }
    }
    const e = this.rowY.get(idx);
    if (!e) return;
    const vis = this.h - this.top;
    const sticky = GROUP_H * (e.depth || 0);
    if (e.y - sticky < this.scrollY || e.y + e.h > this.scrollY + vis) this.scrollY = e.y - vis / 3;
    this.clampScroll();
    this.refresh();
  }

  /** Make rows ``idxs`` visible together when they fit the screen (a collective on every rank), else
   * the last of them. */
  scrollToRows(idxs) {
    const want = idxs.filter((i) => i !== undefined);
    if (!want.length) return;
    for (const i of want) if (!this.rowY.get(i)) this.scrollToRow(i); // expands collapsed ancestors
    const es = want.map((i) => this.rowY.get(i)).filter(Boolean);
    if (!es.length) return;
    const y0 = Math.min(...es.map((e) => e.y)), y1 = Math.max(...es.map((e) => e.y + e.h));
    const vis = this.h - this.top;
    const sticky = GROUP_H * Math.max(...es.map((e) => e.depth || 0));
    if (y1 - y0 + sticky <= vis) {
      if (y0 - sticky < this.scrollY || y1 > this.scrollY + vis) this.scrollY = Math.max(0, y0 - sticky - 4);
      this.clampScroll();
      this.refresh();
    } else this.scrollToRow(want[want.length - 1]);
  }

  /** Canvas y of the middle of row ``idx`` (or of the summary track holding it); null when hidden. */
  rowMidY(idx, lane = 0) {
    const e = this.rowY.get(idx) || this.rowHome?.get(idx);
    if (!e) return null;
    const h = e.type === "row" && e.row.kind === "events" ? ROW_H : e.h;
    return this.top + e.y - this.scrollY + lane * ROW_H + h / 2;
  }

  fetchQueued() { return this._fetchAt > this._fetchStarted; }

  /** True while a window is asked and not yet drawn, or device lanes that change the layout are still
   *  looked up (tests and the benchmarks wait for it to fall before they read the screen). */
  get pending() { return this._pending || this.layoutLoading > 0; }

  set pending(v) { this._pending = v; }

  /** Run ``work`` (async), which changes the layout when it ends: ``pending`` stays true meanwhile,
   *  and the timeline is drawn after it. */
  async relayingOut(work) {
    this.layoutLoading++;
    try {
      return await work();
    } finally {
      this.layoutLoading--;
      this.queueDraw();
    }
  }

  refresh() {
    this.pending = true; // a window is to be asked (tests wait for its answer to be drawn)
    this.queueDraw();
    clearTimeout(this.fetchTimer);
    this._fetchAt = (this._fetchAt || 0) + 1;
    this.fetchTimer = setTimeout(() => { this._fetchStarted = this._fetchAt; this.fetch(); }, 35);
  }

  queueDraw() {
    if (this.drawQueued) return;
    this.drawQueued = true;
    requestAnimationFrame(() => { this.drawQueued = false; this.draw(); });
  }

  async fetch() {
    if (!this.rows.length) { this.draw(); this.pending = false; return; }
    if (this.ctrl) this.ctrl.abort();
    const ctrl = (this.ctrl = new AbortController());
    const { ev, cn, groups } = this.visibleRows();
    const t0 = this.t0, t1 = this.t1, px = Math.round(this.areaW);
    const jobs = [];
    const began = performance.now();
    if (ev.length) jobs.push(this.source.window(ev, t0, t1, px, ctrl.signal).then((w) => ["w", w]));
    if (cn.length && this.source.counters) jobs.push(this.source.counters(cn, t0, t1, px, ctrl.signal).then((c) => ["c", c]));
    const crowded = new Map();
    if (this.source.deviceWindow) {
      let asked = 0;
      for (const idx of ev) {
        if (!this.devShown(idx)) continue; // folded: its lanes are not drawn, their ops not asked
        const inView = this.devLanes.get(idx).dps.filter((dp) => dp.b >= t0 && dp.a <= t1);
        if (inView.length > DEV_PER_ROW || asked + inView.length > DEV_PER_VIEW) { crowded.set(idx, inView.length); continue; }
        for (const dp of inView) {
          asked++;
          jobs.push(this.source.deviceWindow(dp.pid, dp.rows.map((_, i) => i), t0, t1, px, ctrl.signal).then((d) => ["d", { idx, dp, d }]));
        }
      }
    }
    if (groups.length && this.source.busy) jobs.push(this.source.busy(groups.map((g) => g.rows), t0, t1, px, ctrl.signal).then((b) => ["b", b]));
    try {
      const results = await Promise.all(jobs);
      if (ctrl.signal.aborted) {
        for (const [kind, data] of results) if (kind === "w" || kind === "b") release(data);
        return;
      }
      const busy = new Map();
      const dev = new Map();
      for (const [kind, data] of results) {
        if (kind === "d") {
          const { idx, dp, d } = data;
          const dl = this.devLanes.get(idx);
          const list = dev.get(idx) || [];
          for (let i = 0; i < d.row.length; i++) {
            list.push({ s: d.s[i], e: d.e[i], c: d.c[i], d: d.d[i], id: d.id[i], name: d.name[i], dp, drow: d.row[i],
                        engine: dp.rows[d.row[i]], lane: dl.engines.indexOf(dp.rows[d.row[i]]) });
          }
          dev.set(idx, list);
          continue;
        }
        if (kind === "w") this.ingestWindow(data);
        else if (kind === "c") this.counterData = new Map(Object.entries(data.rows).map(([k, v]) => [Number(k), v]));
        else {
          // the packed answer: group i's pixels at i * px of its busy and cc bytes (views, no copies)
          const n = data.px;
          data.groups.forEach((g, i) => busy.set(groups[i].key, { busy: data.busy.subarray(i * n, (i + 1) * n), cc: data.cc.subarray(i * n, (i + 1) * n), mean: g.mean_busy, meanCc: g.mean_cc, meanHost: g.mean_host ?? 0, basis: g.basis ?? "compute", t0, t1 }));
        }
      }
      if (busy.size) this.paintBusy(busy, busy.values().next().value.busy.length);
      this.busyData = busy;
      // the previous answer's buffer goes back to be read into again (decision 0181; 0165 dropped
      // it with transfer(0), which left its bytes to the browser until a GC): its views are no longer
      // reachable from busyData, and the strips were copied into the atlas
      const answer = results.find(([kind]) => kind === "b")?.[1] || null;
      if (this._busyAnswer && this._busyAnswer !== answer) release(this._busyAnswer);
      this._busyAnswer = answer;
      this.devEvents = dev;
      this.devCrowded = crowded;
      if (!ev.length) this.dropWindow();
      if (this.flowMode === "all" && this.source.flows && this.level === "raw") {
        const f = await this.source.flows(t0 - (t1 - t0) * 0.1, t1 + (t1 - t0) * 0.1, ctrl.signal);
        if (ctrl.signal.aborted) return;
        this.flowData = f.flows;
        this.flowsTruncated = f.truncated;
      } else if (this.flowMode !== "all") this.flowData = [];
      const ms = performance.now() - began;
      this.draw();
      if (ctrl === this.ctrl && !this.fetchQueued()) this.pending = false;
      if (!this.painted) {
        this.painted = true;
        stats.firstPaintMs = stats.firstPaintMs ?? performance.now();
        performance.mark("nx-first-paint");
        this.host.dataset.ready = "1";
        this._painted();
      }
      this.host.dataset.fetches = String(Number(this.host.dataset.fetches || 0) + 1);
      const items = this.events.count;
      const lv = this.level === "raw" ? "events" : this.level === null ? "-" : `summary level ${this.level}`;
      this.cb.onStatus?.(`${fmtCount(items)} items on screen · ${lv} · ${ms.toFixed(0)} ms · ${fmtDur(this.npp)}/px`);
    } catch (e) {
      if (e.name !== "AbortError") this.cb.onStatus?.(`error: ${e.message}`);
    }
  }

  ingestWindow(w) {
    this.level = w.level;
    const n = w.row.length;
    const rows = w.row;
    // the events of each track in drawing order (by start, the longer first): indices, no objects
    const k = new Uint32Array(n);
    for (let i = 0; i < n; i++) k[i] = i;
    const s = w.s, e = w.e;
    const before = (x, y) => rows[x] - rows[y] || s[x] - s[y] || e[y] - e[x];
    let sorted = true; // an answer often comes in this order already: no sort (it boxes every index)
    for (let i = 1; i < n && sorted; i++) if (before(i - 1, i) > 0) sorted = false;
    if (!sorted) k.sort(before);
    const lane = new Uint8Array(n);
    const ranges = new Map();
    // lanes: an event that starts before the previous one on its lane ends goes one lane down, so
    // overlapping events sit side by side and a nested event sits under the one enclosing it
    let grew = false;
    const ends = new Float64Array(MAX_LANES);
    for (let a = 0; a < n; ) {
      const r = rows[k[a]];
      let b = a;
      while (b < n && rows[k[b]] === r) b++;
      let used = 0;
      for (let j = a; j < b; j++) {
        const i = k[j];
        let q = 0;
        while (q < used && ends[q] > s[i]) q++;
        if (q >= MAX_LANES) q = MAX_LANES - 1;
        if (q >= used) { ends[q] = e[i]; used = q + 1; } else ends[q] = Math.max(ends[q], e[i]);
        lane[i] = q;
      }
      ranges.set(r, { k, a, b });
      if (used > (this.lanes.get(r) || 1)) { this.lanes.set(r, used); grew = true; }
      a = b;
    }
    const items = this.events;
    this.dropWindow();
    this._winAnswer = w;
    // names: the answer's, else the source's by leaf (looked up when drawn)
    items.cols = { s, e, c: w.c, d: w.d, id: w.id, leaf: w.leaf || null, name: w.name || null,
                   nameOf: this.source.nameOf || null };
    items.lane = lane;
    items.ranges = ranges;
    items.count = n;
    if (grew) this.relayout();
    // a packed answer (decision 0175) is read in place: its arrays are the columns above, and its
    // buffer goes back to be read into again when the next answer replaces them (``dropWindow``)
  }

  /** Forget the events drawn, and give back the buffer of the answer that held them. */
  dropWindow() {
    this.events.clear();
    if (this._winAnswer) release(this._winAnswer);
    this._winAnswer = null;
  }

  /** The selected event's flows and framework chain (``/event/flows``), drawn in "selected" mode. */
  setSelectedFlows(f) {
    this.selFlows = f;
    this.queueDraw();
  }

  // ------------------------------------------------------------------ drawing
  draw() {
    const ctx = this.ctx;
    const W = this.w, H = this.h;
    ctx.clearRect(0, 0, W, H);
    ctx.fillStyle = "#fff";
    ctx.fillRect(0, 0, W, H);
    ctx.font = "11px system-ui, sans-serif";
    ctx.textBaseline = "middle";
    const top = this.scrollY;
    ctx.save();
    ctx.beginPath();
    ctx.rect(0, this.top, W, H - this.top);
    ctx.clip();
    const plain = []; // [row, y, h, dim] of the tracks of events alone, drawn after the loop
    const strips = []; // [group entry, y] of the summary tracks, their strips drawn after the loop
    for (const e of this.layout) {
      const y = this.top + e.y - top;
      if (y + e.h < this.top || y > H) continue;
      if (e.type === "group") { this.drawGroup(e, y, strips); continue; }
      const r = e.row;
      const dim = this.match && r.kind === "events" && !this.match.has(r.idx);
      ctx.fillStyle = r.idx % 2 ? "#fbfbfc" : "#fff";
      ctx.fillRect(0, y, W, e.h);
      ctx.strokeStyle = "#eef0f2";
      ctx.beginPath();
      ctx.moveTo(0, y + e.h - 0.5);
      ctx.lineTo(W, y + e.h - 0.5);
      ctx.stroke();
      ctx.fillStyle = dim ? "#b3b9c2" : "#374151";
      const dl = this.devLanes.has(r.idx);
      const room = dl ? 18 : 34; // a track with device lanes keeps room for their toggle
      const label = r.label.length > room ? r.label.slice(0, room - 1) + "…" : r.label;
      ctx.fillText(label, 8 + e.depth * 12, y + (r.kind === "counter" ? 10 : ROW_H / 2));
      if (dl) this.drawDevToggle(r, y);
      if (r.kind === "events" && !this.devShown(r.idx)) plain.push([r, y, e.h, dim]);
      else {
        ctx.save();
        ctx.beginPath();
        ctx.rect(LABEL_W, y, this.areaW, e.h);
        ctx.clip();
        if (r.kind === "counter") this.drawCounter(r, y, e.h);
        else { this.drawEvents(r, y, e.h, dim); this.drawDevice(r, y); }
        ctx.restore();
      }
      this.drawDeviceLabels(r, y, e.depth);
      this.drawPin(r, y);
    }
    // tracks of events alone, under one clip (decision 0181): their events stay inside their own
    // lanes, so only the time area's edges need clipping, and a save() per track was ~1 KB of
    // canvas state that only a garbage collection frees (5-7 MB while panning 512 expanded ranks)
    if (plain.length || strips.length) {
      ctx.save();
      ctx.beginPath();
      ctx.rect(LABEL_W, this.top, this.areaW, H - this.top);
      ctx.clip();
      for (const [r, y, h, dim] of plain) this.drawEvents(r, y, h, dim);
      ctx.imageSmoothingEnabled = false;
      for (const [e, y] of strips) this.drawStrips(e, y);
      ctx.restore();
    }
    this.drawSticky();
    ctx.restore();
    this.drawPinned();
    // gutter separator
    ctx.strokeStyle = "#d9dde3";
    ctx.beginPath();
    ctx.moveTo(LABEL_W - 0.5, 0);
    ctx.lineTo(LABEL_W - 0.5, H);
    ctx.stroke();
    this.drawMarks();
    if (this.showFlows) this.drawFlows();
    this.drawSelection();
    this.drawRuler();
    this.drawScrollbar();
    this.followTip();
    if (!this.rows.length) {
      ctx.fillStyle = "#6b7280";
      ctx.fillText("No events in this profile", LABEL_W + 20, RULER + 30);
    }
  }

  drawGroup(e, y, strips) {
    const ctx = this.ctx;
    ctx.fillStyle = e.depth === 0 ? "#dfe4ea" : e.depth === 1 ? "#eaeef2" : "#f3f5f7";
    ctx.fillRect(0, y, this.w, e.h);
    ctx.fillStyle = "#1d2430";
    const small = e.h < 14;
    ctx.font = small ? `${e.depth === 0 ? "600 " : ""}${e.h < 10 ? 7 : 9}px system-ui, sans-serif` : e.depth === 0 ? "600 11px system-ui, sans-serif" : "11px system-ui, sans-serif";
    const text = e.text.length > 30 ? e.text.slice(0, 29) + "…" : e.text;
    ctx.fillText(`${e.collapsed ? "▸" : "▾"} ${text}`, 4 + e.depth * 12, y + Math.min(e.h, GROUP_H) / 2);
    ctx.font = "11px system-ui, sans-serif";
    if (e.collapsed) this.drawSummary(e, y, strips);
    ctx.strokeStyle = "#d3d8de";
    ctx.beginPath();
    ctx.moveTo(0, y + e.h - 0.5);
    ctx.lineTo(this.w, y + e.h - 0.5);
    ctx.stroke();
  }

  /** The colours of a busy answer's strips, painted once per answer (not at every draw: a pan redraws
   *  ~60 times a second, and an ImageData per group per draw was garbage the page kept, decision 0165):
   *  one canvas, two rows per group, row ``b.row`` busy (white -> #1f4e9a), ``b.row + 1`` collectives
   *  (white -> #e07b00). Only the last answer's strips are kept. */
  paintBusy(busy, n) {
    const a = (this._atlas = this._atlas || document.createElement("canvas"));
    const h = Math.max(1, busy.size * 2);
    // the canvas and one ImageData are kept while the width holds, and only grow in height (the groups
    // on screen change as the view scrolls): their pixels are memory outside the JS heap, which V8
    // frees only when a GC runs, and a page that allocates little runs few (decision 0165)
    if (a.width !== n) { a.width = n; a.height = h; } else if (a.height < h) a.height = h;
    const ih = this._atlasImg && this._atlasImg.width === n ? this._atlasImg.height : 0;
    if (ih !== a.height) this._atlasImg = a.getContext("2d").createImageData(n, a.height);
    const img = this._atlasImg;
    const px32 = new Uint32Array(img.data.buffer, img.data.byteOffset, n * h); // RGBA as one little-endian word
    let row = 0;
    for (const b of busy.values()) {
      b.row = row;
      const p = row * n, q = p + n;
      for (let i = 0; i < n; i++) { px32[p + i] = BUSY_RGBA[b.busy[i]]; px32[q + i] = CC_RGBA[b.cc[i]]; }
      row += 2;
    }
    a.getContext("2d").putImageData(img, 0, 0, 0, 0, n, h);
  }

  /** A collapsed group's summary track: busy share per pixel, white (idle) to dark blue (always busy);
   * the share spent in collectives as an orange strip underneath (painted by ``paintBusy``). */
  drawSummary(e, y, strips) {
    const b = this.busyData.get(e.key);
    if (!b) return;
    // the strips go inside the track, 1 px from its edges: drawn with the others under one clip of
    // the time area (``draw``), not a save() and a clip of their own per track (decision 0181)
    strips.push([e, y]);
    const ctx = this.ctx;
    ctx.fillStyle = "#4b5563";
    if (e.h >= 14) ctx.fillText(`${Math.round(b.mean * 100)}% ${b.basis === "compute" ? "compute" : "host"}`, LABEL_W - 82, y + e.h / 2);
  }

  /** A summary track's busy and collective strips, from the atlas (``paintBusy``), with the clip to
   *  the time area and image smoothing off already set. */
  drawStrips(e, y) {
    const b = this.busyData.get(e.key);
    const n = b.busy.length;
    // the answer covers [b.t0, b.t1]: place it at the current scale until the next answer arrives
    const x0 = this.xOf(b.t0), x1 = this.xOf(b.t1);
    const ccH = e.h < 14 ? 2 : 5;
    const hb = e.h - ccH - 2;
    this.ctx.drawImage(this._atlas, 0, b.row, n, 1, x0, y + 1, x1 - x0, hb);
    this.ctx.drawImage(this._atlas, 0, b.row + 1, n, 1, x0, y + 1 + hb, x1 - x0, ccH);
  }

  /** The pin toggle at the right of a track's label: a filled dot when pinned, a ring under the mouse. */
  drawPin(r, y) {
    const on = this.pinned.includes(r.idx);
    const hov = this.hover && this.hover.x < LABEL_W && this.hover.y >= y && this.hover.y < y + ROW_H;
    if (!on && !hov) return;
    const ctx = this.ctx;
    ctx.beginPath();
    ctx.arc(LABEL_W - 10, y + ROW_H / 2, 3.5, 0, Math.PI * 2);
    ctx.strokeStyle = "#7a3bd1";
    ctx.fillStyle = "#7a3bd1";
    if (on) ctx.fill(); else ctx.stroke();
  }

  /** Pinned tracks: a band under the ruler that does not scroll, each label with its group path. */
  drawPinned() {
    if (!this.pinLayout.length) return;
    const ctx = this.ctx;
    ctx.fillStyle = "#fff";
    ctx.fillRect(0, RULER, this.w, this.pinH);
    for (const e of this.pinLayout) {
      const y = RULER + e.y;
      const r = e.row;
      ctx.fillStyle = "#f7f3fd";
      ctx.fillRect(0, y, LABEL_W, e.h);
      ctx.fillStyle = "#374151";
      const path = [...(r.group || []).slice(1), r.label].join(" › ");
      ctx.fillText(path.length > 36 ? "…" + path.slice(-35) : path, 6, y + (r.kind === "counter" ? 10 : ROW_H / 2));
      ctx.save();
      ctx.beginPath();
      ctx.rect(LABEL_W, y, this.areaW, e.h);
      ctx.clip();
      if (r.kind === "counter") this.drawCounter(r, y, e.h);
      else this.drawEvents(r, y, e.h, false);
      ctx.restore();
      this.drawPin(r, y);
    }
    ctx.fillStyle = "#7a3bd1";
    ctx.fillRect(0, this.top - 3, this.w, 2);
  }

  /** The group headers of the first row on screen, pinned under the ruler (sticky headers). */
  drawSticky() {
    const topY = this.scrollY;
    const first = this.layout.find((e) => e.y + e.h > topY);
    if (!first || first.y >= topY) return;
    const path = first.type === "group" ? first.path.slice(0, first.depth) : first.path;
    const ctx = this.ctx;
    for (let d = 0; d < path.length; d++) {
      const key = path.slice(0, d + 1).join("\u0001");
      const ge = this.groupEntry.get(key);
      if (!ge) continue;
      const y = this.top + d * GROUP_H;
      ctx.fillStyle = d === 0 ? "#dfe4ea" : d === 1 ? "#eaeef2" : "#f3f5f7";
      // the whole width: the track scrolling under a sticky header must not show through it
      ctx.fillRect(0, y, this.w, GROUP_H);
      ctx.fillStyle = "#1d2430";
      ctx.font = d === 0 ? "600 11px system-ui, sans-serif" : "11px system-ui, sans-serif";
      ctx.fillText(`▾ ${path[d].length > 30 ? path[d].slice(0, 29) + "…" : path[d]}`, 4 + d * 12, y + GROUP_H / 2);
      ctx.font = "11px system-ui, sans-serif";
      ctx.strokeStyle = "#c9cfd6";
      ctx.beginPath();
      ctx.moveTo(0, y + GROUP_H - 0.5);
      ctx.lineTo(this.w, y + GROUP_H - 0.5);
      ctx.stroke();
    }
    this.stickyH = path.length * GROUP_H;
  }

  drawEvents(r, y, h, dim) {
    const ctx = this.ctx;
    const v = this.events.rowOf(r.idx);
    if (!v) return;
    const npp = this.npp;
    ctx.globalAlpha = dim ? 0.25 : 1;
    const outlines = []; // stroked once every item is drawn: a neighbour drawn later never covers one
    const selId = this.selected && this.selected.row === r.idx ? String(this.selected.id) : null;
    const it = this._drawItem || (this._drawItem = {});
    for (let j = 0; j < v.n; j++) {
      fieldsOf(v, j, it);
      const name = it.name || r.name || r.label;
      const x0 = LABEL_W + (it.s - this.t0) / npp;
      const x1 = LABEL_W + (it.e - this.t0) / npp;
      const ly = y + it.lane * ROW_H;
      const lh = ROW_H;
      const col = colorFor(name);
      if (it.c === 1 && it.d === 0 && it.e === it.s) {
        // instant event: a small diamond
        ctx.fillStyle = col;
        ctx.beginPath();
        ctx.moveTo(x0, ly + 3);
        ctx.lineTo(x0 + 4, ly + lh / 2);
        ctx.lineTo(x0, ly + lh - 3);
        ctx.lineTo(x0 - 4, ly + lh / 2);
        ctx.fill();
        continue;
      }
      const w = Math.max(1, x1 - x0);
      ctx.fillStyle = col;
      if (it.c > 1) {
        // merged bucket: lighter, height shows that it is an aggregate
        ctx.globalAlpha = (dim ? 0.25 : 1) * 0.55;
        ctx.fillRect(x0, ly + 4, w, lh - 8);
        ctx.globalAlpha = dim ? 0.25 : 1;
      } else {
        ctx.fillRect(x0, ly + 2, w, lh - 4);
      }
      const sel = it.c === 1 && ((selId !== null && selId === String(it.id)) || this.peers?.has(`${it.leaf}:${it.id}`));
      const chained = this.flowMode === "selected" && it.c === 1 && this.selFlows?.chainIds?.has(`${it.leaf}:${it.id}`);
      if (sel || chained) outlines.push([sel ? "#111" : "#7a3bd1", x0 - 1, ly + 1, w + 2, lh - 2]);
      if (w > 36) {
        const text = it.c > 1 ? `${name} ×${fmtCount(it.c)}` : name;
        ctx.fillStyle = "#111";
        const tx = Math.max(x0, LABEL_W) + 3;
        const maxW = x0 + w - tx - 3;
        if (maxW > 20) {
          let t = text;
          while (t.length > 2 && ctx.measureText(t).width > maxW) t = t.slice(0, -2);
          ctx.fillText(t === text ? t : t + "…", tx, ly + lh / 2);
        }
      }
    }
    ctx.lineWidth = 2;
    for (const [colour, x, oy, w, h] of outlines) {
      ctx.strokeStyle = colour;
      ctx.strokeRect(x, oy, w, h);
    }
    ctx.lineWidth = 1;
    ctx.globalAlpha = 1;
  }

  /** A core's device ops in lanes under its events, on the same axis: each engine a lane, shaded
   * over its device profile's range (the execution it profiled). */
  drawDevice(r, y) {
    if (!this.devShown(r.idx)) return;
    const dl = this.devLanes.get(r.idx);
    const ctx = this.ctx;
    const base = y + this.devBase(r.idx) * ROW_H;
    for (const dp of dl.dps) {
      const a = Math.max(LABEL_W, this.xOf(dp.a)), b = Math.min(this.w, this.xOf(dp.b));
      if (b <= a) continue;
      ctx.fillStyle = "#f4effc";
      ctx.fillRect(a, base, b - a, dl.engines.length * ROW_H);
    }
    const crowd = this.devCrowded.get(r.idx);
    if (crowd) {
      // too many device profiles in view to ask their ops: say so on the lanes, not a blank band
      const text = `${fmtCount(crowd)} device profiles in view: zoom in to see their ops`;
      ctx.fillStyle = "#fff";
      ctx.fillRect(LABEL_W + 4, base + 2, ctx.measureText(text).width + 8, ROW_H - 4);
      ctx.fillStyle = "#5b2a9e";
      ctx.fillText(text, LABEL_W + 8, base + ROW_H / 2);
    }
    for (const it of this.devEvents.get(r.idx) || []) {
      const x0 = this.xOf(it.s), x1 = this.xOf(it.e);
      const ly = base + it.lane * ROW_H;
      const w = Math.max(1, x1 - x0);
      ctx.fillStyle = colorFor(it.name || it.engine);
      ctx.globalAlpha = it.c > 1 ? 0.55 : 1;
      ctx.fillRect(x0, ly + (it.c > 1 ? 4 : 2), w, ROW_H - (it.c > 1 ? 8 : 4));
      ctx.globalAlpha = 1;
      if (this.selectedDev && this.selectedDev.dp === it.dp.pid && this.selectedDev.drow === it.drow && this.selectedDev.s === it.s) {
        ctx.strokeStyle = "#111";
        ctx.lineWidth = 2;
        ctx.strokeRect(x0 - 1, ly + 1, w + 2, ROW_H - 2);
        ctx.lineWidth = 1;
      }
      if (w > 36) {
        ctx.fillStyle = "#111";
        const tx = Math.max(x0, LABEL_W) + 3;
        let t = it.c > 1 ? `${it.name} ×${fmtCount(it.c)}` : it.name;
        while (t.length > 2 && ctx.measureText(t).width > x0 + w - tx - 3) t = t.slice(0, -2);
        if (t.length > 2) ctx.fillText(t, tx, ly + ROW_H / 2);
      }
    }
  }

  /** The device lanes' fold toggle in a track's label gutter: "dev ▾" (shown) or "dev ▸ N" (folded). */
  drawDevToggle(r, y) {
    const ctx = this.ctx;
    const shown = this.devShown(r.idx);
    const x0 = DEV_TOGGLE_X0, w = DEV_TOGGLE_X1 - DEV_TOGGLE_X0;
    ctx.fillStyle = shown ? "#efe7fb" : "#7a3bd1";
    ctx.fillRect(x0, y + 3, w, ROW_H - 6);
    ctx.strokeStyle = "#7a3bd1";
    ctx.strokeRect(x0 + 0.5, y + 3.5, w - 1, ROW_H - 7);
    ctx.fillStyle = shown ? "#5b2a9e" : "#fff";
    ctx.font = "9px system-ui, sans-serif";
    ctx.fillText(shown ? "dev ▾" : `dev ▸ ${this.devLanes.get(r.idx).engines.length}`, x0 + 4, y + ROW_H / 2);
    ctx.font = "11px system-ui, sans-serif";
  }

  drawDeviceLabels(r, y, depth) {
    if (!this.devShown(r.idx)) return;
    const dl = this.devLanes.get(r.idx);
    const ctx = this.ctx;
    const base = y + this.devBase(r.idx) * ROW_H;
    ctx.fillStyle = "#7a3bd1";
    dl.engines.forEach((eng, i) => ctx.fillText(`↳ device · ${eng}`, 8 + (depth + 1) * 12, base + i * ROW_H + ROW_H / 2));
  }

  counterSeries(r) {
    const data = this.counterData.get(r.idx);
    if (!data) return null;
    const names = Object.keys(data).sort();
    return { data, names };
  }

  drawCounter(r, y, h) {
    const ctx = this.ctx;
    const cs = this.counterSeries(r);
    if (!cs) return;
    const { data, names } = cs;
    const top = y + 16, bot = y + h - 3, hh = bot - top;
    let maxV = r.unit === "percent" ? 100 : 0;
    if (r.style === "stack") {
      const sums = new Map();
      for (const n of names) data[n].t.forEach((t, i) => sums.set(t, (sums.get(t) || 0) + data[n].v[i]));
      for (const v of sums.values()) maxV = Math.max(maxV, v);
    } else if (r.style === "used_total") {
      // used against a total line: total = used + available at each sample
      const tot = this.usedTotal(data, names);
      for (const v of tot.total.v) maxV = Math.max(maxV, v);
    } else if (r.unit !== "percent") {
      for (const n of names) for (const v of data[n].v) maxV = Math.max(maxV, v);
    }
    // the scale takes the limit in, so its line is always on the track
    if (r.limit && r.unit === "bytes") maxV = Math.max(maxV, r.limit.bytes);
    maxV = maxV || 1;
    const ys = (v) => bot - (v / maxV) * hh;
    const legend = [];
    if (r.style === "stack") {
      const base = new Map();
      names.forEach((n, k) => {
        const s = data[n];
        ctx.fillStyle = SERIES_COLORS[k % SERIES_COLORS.length];
        legend.push([n, ctx.fillStyle]);
        ctx.globalAlpha = 0.55;
        ctx.beginPath();
        const pts = s.t.map((t, i) => [this.xOf(t), base.get(t) || 0, (base.get(t) || 0) + s.v[i]]);
        if (!pts.length) return;
        ctx.moveTo(pts[0][0], ys(pts[0][1]));
        for (const p of pts) ctx.lineTo(p[0], ys(p[2]));
        for (let i = pts.length - 1; i >= 0; i--) ctx.lineTo(pts[i][0], ys(pts[i][1]));
        ctx.closePath();
        ctx.fill();
        s.t.forEach((t, i) => base.set(t, (base.get(t) || 0) + s.v[i]));
      });
      ctx.globalAlpha = 1;
    } else if (r.style === "used_total") {
      const { used, total } = this.usedTotal(data, names);
      ctx.fillStyle = SERIES_COLORS[0];
      ctx.globalAlpha = 0.5;
      ctx.beginPath();
      if (used.t.length) {
        ctx.moveTo(this.xOf(used.t[0]), bot);
        used.t.forEach((t, i) => ctx.lineTo(this.xOf(t), ys(used.v[i])));
        ctx.lineTo(this.xOf(used.t[used.t.length - 1]), bot);
        ctx.closePath();
        ctx.fill();
      }
      ctx.globalAlpha = 1;
      ctx.strokeStyle = "#111";
      ctx.setLineDash([4, 3]);
      ctx.beginPath();
      total.t.forEach((t, i) => (i ? ctx.lineTo(this.xOf(t), ys(total.v[i])) : ctx.moveTo(this.xOf(t), ys(total.v[i]))));
      ctx.stroke();
      ctx.setLineDash([]);
      legend.push(["used", SERIES_COLORS[0]], ["total", "#111"]);
    } else {
      names.forEach((n, k) => {
        const s = data[n];
        ctx.strokeStyle = SERIES_COLORS[k % SERIES_COLORS.length];
        legend.push([n, ctx.strokeStyle]);
        ctx.lineWidth = n.endsWith("host_mean") || n.endsWith(".process") || n.endsWith("rss") ? 1.6 : 0.8;
        ctx.beginPath();
        s.t.forEach((t, i) => (i ? ctx.lineTo(this.xOf(t), ys(s.v[i])) : ctx.moveTo(this.xOf(t), ys(s.v[i]))));
        ctx.stroke();
      });
      ctx.lineWidth = 1;
    }
    if (r.limit && r.unit === "bytes") this.drawLimit(r.limit, ys(r.limit.bytes), top);
    // axis: the top value; legend: one swatch per series (first few)
    ctx.fillStyle = "#6b7280";
    ctx.fillText(r.unit === "percent" ? "100%" : fmtBytes(maxV), LABEL_W + 4, top + 2);
    ctx.fillText("0", LABEL_W + 4, bot - 5);
    let lx = LABEL_W + 70;
    for (const [n, c] of legend.slice(0, 6)) {
      const short = n.split(".").slice(-1)[0];
      ctx.fillStyle = c;
      ctx.fillRect(lx, top - 9, 8, 8);
      ctx.fillStyle = "#4b5563";
      ctx.fillText(short, lx + 11, top - 5);
      lx += 18 + ctx.measureText(short).width;
    }
  }

  /** A memory limit: a horizontal line at height ``ly`` across the track, labelled at its right end
   * (above the line, or below it when the line is at the track's top). */
  drawLimit(limit, ly, top) {
    const ctx = this.ctx;
    const y = Math.round(ly) + 0.5;
    ctx.strokeStyle = LIMIT_COLOR;
    ctx.lineWidth = 1.5;
    ctx.beginPath();
    ctx.moveTo(LABEL_W, y);
    ctx.lineTo(this.w, y);
    ctx.stroke();
    ctx.lineWidth = 1;
    ctx.fillStyle = LIMIT_COLOR;
    ctx.textAlign = "right";
    ctx.fillText(`${limitName(limit)} ${fmtBytes(limit.bytes)}`, this.w - 6, y - top >= 8 ? y - 6 : y + 7);
    ctx.textAlign = "left";
  }

  usedTotal(data, names) {
    const used = data[names.find((n) => n.endsWith("host_used")) ?? names[0]] || { t: [], v: [] };
    const avail = data[names.find((n) => n.endsWith("host_available"))] || { t: [], v: [] };
    const av = new Map(avail.t.map((t, i) => [t, avail.v[i]]));
    const total = { t: [], v: [] };
    used.t.forEach((t, i) => { if (av.has(t)) { total.t.push(t); total.v.push(used.v[i] + av.get(t)); } });
    return { used, total };
  }

  /** Flows to draw: the selected event's (default), or every flow in view. */
  drawnFlows() {
    if (this.flowMode === "all") return this.flowData;
    if (this.flowMode === "selected" && this.selFlows) return this.selFlows.flows;
    return [];
  }

  drawFlows() {
    const flows = this.drawnFlows();
    this.arrowsDrawn = 0; // arrows actually on the canvas (both ends on shown rows): what tests check
    if (!flows.length) return;
    const ctx = this.ctx;
    ctx.save();
    ctx.beginPath();
    ctx.rect(LABEL_W, RULER, this.areaW, this.h - RULER);
    ctx.clip();
    const strong = this.flowMode === "selected";
    ctx.strokeStyle = strong ? "rgba(122, 59, 209, 0.95)" : "rgba(30, 40, 60, 0.75)";
    ctx.fillStyle = ctx.strokeStyle;
    ctx.lineWidth = strong ? 1.6 : 1;
    for (const f of flows) {
      const ends = f.ends;
      for (let i = 0; i + 1 < ends.length; i++) {
        const a = ends[i], b = ends[i + 1];
        const ra = this.leafToRow.get(a[1]), rb = this.leafToRow.get(b[1]);
        const y0 = this.rowMidY(ra, this.laneOf(ra, a)), y1 = this.rowMidY(rb, this.laneOf(rb, b));
        if (y0 === null || y1 === null || (ra === rb && y0 === y1)) continue;
        const x0 = this.xOf(a[2]), x1 = this.xOf(b[2]);
        ctx.beginPath();
        ctx.moveTo(x0, y0);
        const mx = Math.max(x0, x1) + 18;
        ctx.bezierCurveTo(mx, y0, mx, y1, x1 + 1, y1);
        ctx.stroke();
        ctx.beginPath();
        ctx.moveTo(x1 + 1, y1);
        ctx.lineTo(x1 + 7, y1 - 3);
        ctx.lineTo(x1 + 7, y1 + 3);
        ctx.fill();
        this.arrowsDrawn++;
      }
    }
    ctx.lineWidth = 1;
    ctx.restore();
  }

  laneOf(row, end) {
    const v = this.events.rowOf(row);
    if (!v) return 0;
    const want = String(end[0]);
    const it = {};
    for (let j = 0; j < v.n; j++) if (fieldsOf(v, j, it).c === 1 && String(it.id) === want) return it.lane;
    return 0;
  }

  drawMarks() {
    const ctx = this.ctx;
    const bands = [...this.marks.map((m) => [m, "rgba(255, 153, 0, 0.16)", "#e88b00"]),
                   ...(this.highlight ? [[this.highlight, "rgba(122, 59, 209, 0.10)", "#7a3bd1"]] : [])];
    for (const [m, fill, edge] of bands) {
      const a = Math.max(LABEL_W, this.xOf(m.a)), b = Math.min(this.w, Math.max(this.xOf(m.b), this.xOf(m.a) + 1));
      if (b <= a) continue;
      ctx.fillStyle = fill;
      ctx.fillRect(a, RULER, b - a, this.h - RULER);
      ctx.strokeStyle = edge;
      ctx.beginPath();
      ctx.moveTo(a + 0.5, RULER); ctx.lineTo(a + 0.5, this.h);
      ctx.moveTo(b - 0.5, RULER); ctx.lineTo(b - 0.5, this.h);
      ctx.stroke();
    }
  }

  drawSelection() {
    if (!this.sel) return;
    const ctx = this.ctx;
    const a = Math.max(LABEL_W, this.xOf(Math.min(this.sel.a, this.sel.b)));
    const b = Math.min(this.w, this.xOf(Math.max(this.sel.a, this.sel.b)));
    if (b <= a) return;
    let y0 = RULER, y1 = this.h;
    if (this.sel.y0 !== undefined && this.sel.y1 !== undefined && this.sel.rows) {
      y0 = Math.max(RULER, Math.min(this.sel.y0, this.sel.y1) - this.scrollY);
      y1 = Math.min(this.h, Math.max(this.sel.y0, this.sel.y1) - this.scrollY);
    }
    ctx.fillStyle = "rgba(35, 110, 210, 0.14)";
    ctx.fillRect(a, y0, b - a, y1 - y0);
    ctx.strokeStyle = "#236ed2";
    ctx.strokeRect(a + 0.5, y0 + 0.5, b - a - 1, y1 - y0 - 1);
    ctx.fillStyle = "#236ed2";
    ctx.fillText(fmtDur(Math.abs(this.sel.b - this.sel.a)), a + 4, Math.max(RULER + 8, y0 + 8));
  }

  /** The ruler: a base time with every nanosecond at the left, ticks as offsets from it. */
  drawRuler() {
    const ctx = this.ctx;
    ctx.fillStyle = "#f3f5f7";
    ctx.fillRect(0, 0, this.w, RULER);
    ctx.strokeStyle = "#d9dde3";
    ctx.beginPath();
    ctx.moveTo(0, RULER - 0.5);
    ctx.lineTo(this.w, RULER - 0.5);
    ctx.stroke();
    const step = niceStep((this.t1 - this.t0) / Math.max(2, this.areaW / 110));
    const base = Math.floor(this.t0 / step) * step; // exact: step is an integer number of ns
    ctx.fillStyle = "#4b5563";
    ctx.strokeStyle = "#c4c9d1";
    const ticks = [];
    for (let k = Math.ceil((this.t0 - base) / step); base + k * step <= this.t1; k++) {
      const t = base + k * step;
      const x = this.xOf(t);
      const label = fmtTick(k * step, step);
      ticks.push({ t, x, label });
      ctx.beginPath();
      ctx.moveTo(x + 0.5, RULER - 8);
      ctx.lineTo(x + 0.5, RULER);
      ctx.stroke();
      if (x > LABEL_W - 2) ctx.fillText(label, x + 3, 10);
    }
    this.ticks = ticks;
    this.rulerBase = base;
    this.drawInsightMarks();
    ctx.fillStyle = "#1d2430";
    ctx.font = "600 11px system-ui, sans-serif";
    ctx.fillText(fmtNs(base), 6, 8);
    ctx.font = "11px system-ui, sans-serif";
    ctx.fillStyle = "#6b7280";
    ctx.fillText(`${fmtDur(this.t1 - this.t0)} shown`, 6, 19);
    if (this.hover && this.hover.x >= LABEL_W) {
      ctx.strokeStyle = "rgba(0,0,0,0.25)";
      ctx.beginPath();
      ctx.moveTo(this.hover.x + 0.5, RULER);
      ctx.lineTo(this.hover.x + 0.5, this.h);
      ctx.stroke();
    }
  }

  /** Insights on the time axis: a red band at the ruler's foot over each insight's range, with its
   * rank number; a click on it opens the range (``cb.onInsight``). */
  drawInsightMarks() {
    const ctx = this.ctx;
    this.insightBoxes = [];
    for (const m of this.insights) {
      const a = Math.max(LABEL_W, this.xOf(m.a)), b = Math.min(this.w, Math.max(this.xOf(m.b), this.xOf(m.a) + 3));
      if (b <= LABEL_W || a >= this.w) continue;
      ctx.fillStyle = "rgba(200, 30, 30, 0.85)";
      ctx.fillRect(a, RULER - 6, b - a, 5);
      const lx = Math.min(Math.max(a, LABEL_W), this.w - 14);
      ctx.beginPath();
      ctx.arc(lx + 6, RULER - 10, 6, 0, Math.PI * 2);
      ctx.fill();
      ctx.fillStyle = "#fff";
      ctx.font = "600 9px system-ui, sans-serif";
      ctx.fillText(String(m.n), lx + 3.5, RULER - 10);
      ctx.font = "11px system-ui, sans-serif";
      this.insightBoxes.push({ x0: a, x1: Math.max(b, lx + 12), m });
    }
  }

  insightAt(x, y) {
    if (y >= RULER || y < RULER - 17) return null;
    const hit = (this.insightBoxes || []).find((bx) => x >= bx.x0 - 2 && x <= bx.x1 + 2);
    return hit ? hit.m : null;
  }

  drawScrollbar() {
    const vis = this.h - this.top;
    if (this.height <= vis) return;
    const ctx = this.ctx;
    const hBar = Math.max(20, (vis * vis) / this.height);
    const yBar = this.top + (this.scrollY / (this.height - vis)) * (vis - hBar);
    ctx.fillStyle = "rgba(0,0,0,0.22)";
    ctx.fillRect(this.w - 7, yBar, 5, hBar);
  }

  // ------------------------------------------------------------------ hit testing
  entryAt(y) {
    if (y < RULER) return null;
    if (y < this.top) {
      for (const e of this.pinLayout) if (y - RULER >= e.y && y - RULER < e.y + e.h) return e;
      return null;
    }
    const yy = y - this.top + this.scrollY;
    for (const e of this.layout) if (yy >= e.y && yy < e.y + e.h) return e;
    return null;
  }

  /** Canvas y of an entry's top (pinned entries do not scroll). */
  entryY(e) { return e.pinned ? RULER + e.y : this.top + e.y - this.scrollY; }

  itemAt(x, y) {
    const e = this.entryAt(y);
    if (!e || x < LABEL_W) return null;
    if (e.type === "group") return e.collapsed ? { summary: true, entry: e } : null;
    if (e.row.kind === "counter") return { counter: true, row: e.row, entry: e };
    const lane = Math.floor((y - this.entryY(e)) / ROW_H);
    if (!e.pinned && this.devShown(e.row.idx) && lane >= this.devBase(e.row.idx)) {
      const dlane = lane - this.devBase(e.row.idx);
      let best = null, bw = Infinity;
      for (const it of this.devEvents.get(e.row.idx) || []) {
        if (it.lane !== dlane) continue;
        const x0 = this.xOf(it.s), x1 = Math.max(this.xOf(it.e), x0 + 1);
        if (x < x0 - 2 || x > x1 + 2) continue;
        if (x1 - x0 < bw) { best = it; bw = x1 - x0; }
      }
      return best ? { device: true, item: best, row: e.row } : null;
    }
    const v = this.events.rowOf(e.row.idx);
    if (!v) return null;
    // an event under the mouse beats one within the 3 px tolerance (an instant event next to a long
    // one must not steal its clicks); among equals, the narrowest
    let best = -1;
    let bestKey = [2, Infinity];
    const it = {};
    for (let j = 0; j < v.n; j++) {
      fieldsOf(v, j, it);
      if (it.lane !== lane) continue;
      const x0 = this.xOf(it.s), x1 = Math.max(this.xOf(it.e), x0 + 1);
      if (x < x0 - 3 || x > x1 + 3) continue;
      // (half a pixel of slack: an event's x is fractional, the mouse's is not)
      const key = [x >= x0 - 0.5 && x <= x1 + 0.5 ? 0 : 1, x1 - x0];
      if (key[0] < bestKey[0] || (key[0] === bestKey[0] && key[1] < bestKey[1])) { best = j; bestKey = key; }
    }
    if (best < 0) return null;
    return { item: v.items ? v.items[best] : this.events.item(e.row.idx, v.k[v.a + best]), row: e.row };
  }

  counterTooltip(row, x) {
    const cs = this.counterSeries(row);
    if (!cs) return null;
    const t = this.tOf(x);
    const lines = [row.label];
    let total = 0;
    let when = null;
    for (const n of cs.names) {
      const s = cs.data[n];
      if (!s.t.length) continue;
      let k = 0, bd = Infinity;
      for (let i = 0; i < s.t.length; i++) { const dd = Math.abs(s.t[i] - t); if (dd < bd) { bd = dd; k = i; } }
      when = s.t[k];
      const v = s.v[k];
      total += v;
      const short = n.replace(/^(cpu_util|host_mem|device_mem)\./, "");
      lines.push(`${short}: ${row.unit === "percent" ? v.toFixed(1) + " %" : fmtBytes(v)}`);
    }
    if (row.style === "stack") lines.push(`total: ${fmtBytes(total)}`);
    if (row.limit && row.unit === "bytes") {
      const l = row.limit;
      lines.push(`${limitName(l)}: ${fmtBytes(l.bytes)}${l.source ? ` (${l.source}${l.cgroup ? ` of ${l.cgroup}` : ""})` : ""}`);
    }
    if (when !== null) lines.splice(1, 0, `at ${fmtNs(when)}`);
    return lines.join("\n");
  }

  summaryTooltip(e, x) {
    const b = this.busyData.get(e.key);
    if (!b) return e.path.join(" › ");
    const i = Math.floor(((x - this.xOf(b.t0)) / Math.max(1, this.xOf(b.t1) - this.xOf(b.t0))) * b.busy.length);
    const v = b.busy[Math.min(Math.max(i, 0), b.busy.length - 1)], c = b.cc[Math.min(Math.max(i, 0), b.cc.length - 1)];
    const what = b.basis === "compute" ? "compute (core executions)" : "host calls (no core executions in this group)";
    return `${e.path.join(" › ")} (collapsed: click the name to expand)\nat ${fmtNs(this.tOf(x))}\n${what} ${Math.round((v / 255) * 100)}% · exposed collectives ${Math.round((c / 255) * 100)}%\nwhole view: ${b.basis === "compute" ? "compute" : "host"} ${Math.round(b.mean * 100)}% · exposed collectives ${Math.round(b.meanCc * 100)}%${b.basis === "compute" ? ` · host calls ${Math.round(b.meanHost * 100)}% (not busy)` : ""}\nframework regions are never counted as busy`;
  }

  itemTooltip(hit) {
    const it = hit.item;
    if (hit.device) {
      return it.c > 1 ? `${it.name} (device, ${it.engine})\n${fmtCount(it.c)} ops merged (zoom in to separate)\nspan ${fmtNs(it.s)} – ${fmtNs(it.e)}`
        : `${it.name} (device op, engine ${it.engine})\nstart ${fmtNs(it.s)}\nduration ${fmtDurExact(it.e - it.s)}\ndevice profile ${it.dp.pid}`;
    }
    const name = it.name || hit.row.name || hit.row.label;
    return it.c > 1
      ? `${name}\n${fmtCount(it.c)} events merged (zoom in to separate)\nspan ${fmtNs(it.s)} – ${fmtNs(it.e)}\ntotal ${fmtDur(it.d)} · mean ${fmtDur(it.d / it.c)}`
      : `${name}\nstart ${fmtNs(it.s)}\nduration ${fmtDurExact(it.e - it.s)}\n${[...(hit.row.group || []), hit.row.label].join(" › ")}`;
  }

  /** The hover tooltip for what is under the mouse now: after PageDown, a search jump or any view
   * change without a mouse move, the tooltip of the event that was there before would be stale. */
  followTip() {
    const tip = document.getElementById("tooltip");
    if (!tip || !this.lastClient || !this.hover || this._dragging) return;
    const key = `${this.t0}|${this.t1}|${this.scrollY}|${this.layout.length}`;
    if (key === this._tipKey) return;
    this._tipKey = key;
    this.showTip(this.hover, this.lastClient);
  }

  /** The tooltip's text for canvas point ``p`` (null over nothing). */
  tipText(p) {
    const dt = this.devToggleAt(p.x, p.y);
    if (dt !== null) {
      const n = this.devLanes.get(dt).engines.length;
      return `${this.devShown(dt) ? "Fold" : "Unfold"} this core's device lanes (${n} engine${n === 1 ? "" : "s"}, ${this.devLanes.get(dt).dps.length} device profiles)`;
    }
    const ins = this.insightAt(p.x, p.y);
    if (ins) return `Insight ${ins.n}: ${ins.title}\n${fmtNs(ins.a)} – ${fmtNs(ins.b)}\nclick to open this range`;
    const hit = this.itemAt(p.x, p.y);
    if (hit?.counter) return this.counterTooltip(hit.row, p.x);
    if (hit?.summary) return this.summaryTooltip(hit.entry, p.x);
    return hit ? this.itemTooltip(hit) : null;
  }

  /** Show the tooltip of canvas point ``p`` at client point ``c`` (hidden over nothing). */
  showTip(p, c) {
    const tip = document.getElementById("tooltip");
    const text = this.tipText(p);
    if (text) {
      tip.textContent = text;
      tip.style.display = "block";
      tip.style.left = `${Math.min(c.x + 14, window.innerWidth - 300)}px`;
      tip.style.top = `${c.y + 14}px`;
    } else tip.style.display = "none";
    tip.dataset.text = text || "";
  }

  // ------------------------------------------------------------------ input
  /** Keys (from the page-wide handler): W/S zoom at the mouse, A/D pan, F focus, M mark, arrows, PgUp/PgDn. */
  onKey(ev) {
    if (this.cb.onKey?.(ev)) return;
    if (ev.ctrlKey || ev.metaKey || ev.altKey) return;
    const k = ev.key.toLowerCase();
    const vis = this.h - this.top;
    if (k === "w" || k === "arrowup" && !ev.shiftKey) this.zoom(0.8);
    else if (k === "s" || k === "arrowdown" && !ev.shiftKey) this.zoom(1.25);
    else if (k === "a" || k === "arrowleft") this.pan(-0.15);
    else if (k === "d" || k === "arrowright") this.pan(0.15);
    else if (k === "pagedown") this.scrollBy(vis * 0.9);
    else if (k === "pageup") this.scrollBy(-vis * 0.9);
    else if (k === "f") this.focusSelection();
    else if (k === "m") this.markSelection();
    else if (k === "escape") { this.sel = null; this.cb.onSelect?.(null); this.queueDraw(); }
    else if (k === "0" || k === "home") this.resetView();
    else return;
    ev.preventDefault();
  }

  /** F: zoom to the selected event, else to the area selection. */
  focusSelection() {
    if (this.selected && this.selected.e !== undefined) this.zoomTo(this.selected.s, this.selected.e, 0.15);
    else if (this.sel) this.zoomTo(Math.min(this.sel.a, this.sel.b), Math.max(this.sel.a, this.sel.b), 0.02);
  }

  /** M: mark the selected event's (or the area's) time range on every track; again to remove it. */
  markSelection() {
    const r = this.selected && this.selected.e !== undefined ? { a: this.selected.s, b: this.selected.e }
      : this.sel ? { a: Math.min(this.sel.a, this.sel.b), b: Math.max(this.sel.a, this.sel.b) } : null;
    if (!r) return;
    const i = this.marks.findIndex((m) => m.a === r.a && m.b === r.b);
    if (i >= 0) this.marks.splice(i, 1);
    else this.marks.push(r);
    this.host.dataset.marks = String(this.marks.length);
    this.queueDraw();
  }

  _bind() {
    const c = this.canvas;
    const tip = document.getElementById("tooltip");
    const pos = (ev) => { const r = c.getBoundingClientRect(); return { x: ev.clientX - r.left, y: ev.clientY - r.top }; };
    let drag = null;
    c.addEventListener("mouseenter", () => { active = this; });
    c.addEventListener("mousedown", (ev) => {
      if (ev.button !== 0) return;
      active = this;
      const p = pos(ev);
      const selecting = ev.shiftKey || this.selectMode || p.y < RULER;
      const onTrack = p.y >= RULER && !(ev.shiftKey && ev.altKey);
      this._dragging = true;
      drag = { x: p.x, y: p.y, t0: this.t0, t1: this.t1, sy: this.scrollY, selecting, moved: false, gutter: p.x < LABEL_W };
      if (selecting) {
        // an area: tracks under the drag x time; a drag in the ruler selects time over every track
        this.sel = { a: this.tOf(p.x), b: this.tOf(p.x), rows: p.y >= RULER && onTrack ? [] : null,
                     y0: p.y + this.scrollY, y1: p.y + this.scrollY };
        c.classList.add("selecting");
      }
      ev.preventDefault();
    });
    this._move = (ev) => {
      const p = pos(ev);
      if (drag) {
        if (Math.abs(p.x - drag.x) + Math.abs(p.y - drag.y) > 3) drag.moved = true;
        if (drag.selecting) {
          this.sel.b = this.tOf(Math.max(LABEL_W, Math.min(this.w, p.x)));
          this.sel.y1 = Math.max(RULER, Math.min(this.h, p.y)) + this.scrollY;
          this.queueDraw();
        } else if (drag.moved) {
          c.classList.add("dragging");
          const dt = (p.x - drag.x) * ((drag.t1 - drag.t0) / this.areaW);
          this.scrollY = drag.sy - (p.y - drag.y);
          this.clampScroll();
          if (drag.gutter) this.refresh();
          else this.setView(drag.t0 - dt, drag.t1 - dt);
        }
        tip.style.display = "none";
        return;
      }
      if (ev.target !== c) return;
      this.hover = p;
      this.lastClient = { x: ev.clientX, y: ev.clientY };
      this.showTip(p, this.lastClient);
      this._tipKey = `${this.t0}|${this.t1}|${this.scrollY}|${this.layout.length}`;
      this.queueDraw();
    };
    this._up = (ev) => {
      this._dragging = false;
      if (!drag) return;
      const d = drag;
      drag = null;
      c.classList.remove("dragging", "selecting");
      if (d.selecting) {
        // whole nanoseconds: the area the URL keeps (and a restart restores) is then this very one
        const a = Math.round(Math.min(this.sel.a, this.sel.b)), b = Math.round(Math.max(this.sel.a, this.sel.b));
        const ins = !d.moved && this.insightAt(d.x, d.y);
        if (ins) { this.sel = null; this.cb.onInsight?.(ins); this.queueDraw(); return; }
        if ((b - a) / this.npp < 3) { this.sel = null; this.cb.onSelect?.(null); }
        else {
          let rows = null;
          if (this.sel.rows) {
            const y0 = this.sel.y0 - this.scrollY, y1 = this.sel.y1 - this.scrollY;
            // a drag of a few pixels vertically means "every track": a time range
            rows = Math.abs(y1 - y0) < 6 ? null : this.rowsBetween(y0, y1);
          }
          this.sel = { ...this.sel, a, b, rows };
          this.cb.onSelect?.({ a, b, rows });
        }
        this.queueDraw();
        return;
      }
      if (!d.moved) {
        const p = pos(ev);
        if (p.x < LABEL_W && p.y >= RULER) {
          const e = this.entryAt(p.y);
          if (e && e.type === "group") { this.toggleGroup(e.key); return; }
          const dt = this.devToggleAt(p.x, p.y);
          if (dt !== null) { this.toggleDevLanes(dt); return; }
          if (e && e.type === "row" && p.x >= LABEL_W - 20) { this.togglePin(e.row.idx); return; }
        }
        const hit = this.itemAt(p.x, p.y);
        if (hit && hit.summary) { this.toggleGroup(hit.entry.key); return; }
        if (hit && hit.device) {
          if (hit.item.c > 1) { this.zoomTo(hit.item.s, hit.item.e); return; }
          this.selectedDev = { dp: hit.item.dp.pid, drow: hit.item.drow, s: hit.item.s };
          this.cb.onDeviceClick?.(hit.item);
          this.queueDraw();
          return;
        }
        if (hit && !hit.counter) {
          this.selected = { id: hit.item.id, row: hit.row.idx, s: hit.item.s, e: hit.item.e, leaf: hit.item.leaf, c: hit.item.c };
          this.selFlows = null;
          this.peers = null;
          this.cb.onEventClick?.({ ...hit.item, rowInfo: hit.row, name: hit.item.name || hit.row.name });
          this.queueDraw();
        }
      }
    };
    window.addEventListener("mousemove", this._move);
    window.addEventListener("mouseup", this._up);
    c.addEventListener("mouseleave", () => { tip.style.display = "none"; this.hover = null; this.lastClient = null; this.queueDraw(); });
    // Perfetto's wheel: plain wheel scrolls the tracks (the page when they all fit), Ctrl+wheel zooms
    // at the mouse, Shift+wheel or a horizontal swipe pans
    c.addEventListener("wheel", (ev) => {
      const p = pos(ev);
      if (ev.ctrlKey || ev.metaKey) {
        ev.preventDefault();
        this.zoom(Math.exp(ev.deltaY * 0.0015), Math.max(p.x, LABEL_W));
      } else if (ev.shiftKey || Math.abs(ev.deltaX) > Math.abs(ev.deltaY)) {
        ev.preventDefault();
        this.pan((ev.deltaX || ev.deltaY) / this.areaW);
      } else if (this.scrollBy(ev.deltaY)) {
        ev.preventDefault();
      }
    }, { passive: false });
  }
}
