// The canvas timeline shared by the System and Device Trace Viewers.
//
// It never holds more than one screen of data: after every pan, zoom or scroll it asks its source for
// the visible rows over the visible time range at the canvas's pixel width, and the server answers
// with events at least a pixel long plus per-pixel buckets (with counts) for everything shorter.
// Until the answer arrives the previous answer is redrawn at the new scale, so interaction stays
// smooth while the query runs.

import { fmtDur, fmtBytes, fmtCount, stats } from "./api.js";

const RULER = 26;
const LABEL_W = 230;
const ROW_H = 18;
const CNT_H = 42;
const GROUP_H = 18;
const MIN_SPAN = 200; // ns

const SERIES_COLORS = ["#2f7ed8", "#f28f43", "#8bbc21", "#910000", "#1aadce", "#492970", "#77a1e5", "#c42525", "#a6c96a", "#0d233a"];

export function colorFor(name) {
  let h = 0;
  for (let i = 0; i < name.length; i++) h = (h * 31 + name.charCodeAt(i)) >>> 0;
  return `hsl(${h % 360}, 58%, 56%)`;
}

function niceStep(raw) {
  const p = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
  return 10 * p;
}

export class Timeline {
  /**
   * @param {HTMLElement} host element to fill
   * @param {object} source {duration, rows(mode), window(rows,t0,t1,px,signal), counters?, flows?, itemName(row,item,i)}
   * @param {object} cb callbacks {onEventClick(item), onSelect(range|null), onStatus(text)}
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
    this.events = new Map(); // row idx -> {s,e,c,d,id,leaf,name} arrays
    this.counterData = new Map();
    this.flowData = [];
    this.level = null;
    this.sel = null; // {a, b}
    this.selected = null; // {row, s, id}
    this.match = null; // Set of row idx matching the search
    this.showFlows = true;
    this.showCounters = true;
    this.hover = null;
    this.ctrl = null;
    this.painted = false;
    this.fetchTimer = 0;
    this.drawQueued = false;
    this._bind();
    this.resizeObs = new ResizeObserver(() => this.resize());
    this.resizeObs.observe(host);
    this.resize();
  }

  destroy() {
    this.resizeObs.disconnect();
    if (this.ctrl) this.ctrl.abort();
    window.removeEventListener("mouseup", this._up);
    window.removeEventListener("mousemove", this._move);
  }

  // ------------------------------------------------------------------ rows and layout
  setRows(rows) {
    this.rows = rows;
    this.leafToRow = new Map();
    for (const r of rows) for (const lf of r.leaves || []) this.leafToRow.set(lf, r.idx);
    this.events.clear();
    this.counterData.clear();
    this.flowData = [];
    this.relayout();
    this.refresh();
  }

  relayout() {
    const out = [];
    let prev = [];
    let y = 0;
    for (const r of this.rows) {
      if (r.kind === "counter" && !this.showCounters) continue;
      const g = r.group || [];
      let d = 0;
      while (d < g.length && d < prev.length && g[d] === prev[d]) d++;
      for (let k = d; k < g.length; k++) {
        out.push({ type: "group", depth: k, text: g[k], y, h: GROUP_H });
        y += GROUP_H;
      }
      prev = g;
      const h = r.kind === "counter" ? CNT_H : ROW_H;
      out.push({ type: "row", row: r, depth: g.length, y, h });
      y += h;
    }
    this.layout = out;
    this.rowY = new Map(out.filter((e) => e.type === "row").map((e) => [e.row.idx, e]));
    this.height = y;
    this.clampScroll();
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

  get areaW() { return this.w - LABEL_W; }
  get npp() { return (this.t1 - this.t0) / this.areaW; }
  xOf(t) { return LABEL_W + (t - this.t0) / this.npp; }
  tOf(x) { return this.t0 + (x - LABEL_W) * this.npp; }

  clampScroll() {
    const maxS = Math.max(0, this.height - (this.h - RULER));
    this.scrollY = Math.min(Math.max(0, this.scrollY), maxS);
  }

  visibleRows() {
    const top = this.scrollY;
    const bot = this.scrollY + this.h - RULER;
    const ev = [];
    const cn = [];
    for (const e of this.layout) {
      if (e.type !== "row" || e.y + e.h < top || e.y > bot) continue;
      (e.row.kind === "counter" ? cn : ev).push(e.row.idx);
    }
    return { ev, cn };
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
  }

  zoom(factor, atX) {
    const x = atX ?? LABEL_W + this.areaW / 2;
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

  scrollToRow(idx) {
    const e = this.rowY.get(idx);
    if (!e) return;
    const vis = this.h - RULER;
    if (e.y < this.scrollY || e.y + e.h > this.scrollY + vis) this.scrollY = e.y - vis / 3;
    this.clampScroll();
    this.refresh();
  }

  refresh() {
    this.queueDraw();
    clearTimeout(this.fetchTimer);
    this.fetchTimer = setTimeout(() => this.fetch(), 35);
  }

  queueDraw() {
    if (this.drawQueued) return;
    this.drawQueued = true;
    requestAnimationFrame(() => { this.drawQueued = false; this.draw(); });
  }

  async fetch() {
    if (!this.rows.length) { this.draw(); return; }
    if (this.ctrl) this.ctrl.abort();
    const ctrl = (this.ctrl = new AbortController());
    const { ev, cn } = this.visibleRows();
    const t0 = this.t0, t1 = this.t1, px = Math.round(this.areaW);
    const jobs = [];
    const began = performance.now();
    if (ev.length) jobs.push(this.source.window(ev, t0, t1, px, ctrl.signal).then((w) => ["w", w]));
    if (cn.length && this.source.counters) jobs.push(this.source.counters(cn, t0, t1, px, ctrl.signal).then((c) => ["c", c]));
    try {
      const results = await Promise.all(jobs);
      if (ctrl.signal.aborted) return;
      for (const [kind, data] of results) {
        if (kind === "w") this.ingestWindow(data);
        else this.counterData = new Map(Object.entries(data.rows).map(([k, v]) => [Number(k), v]));
      }
      if (!ev.length) this.events.clear();
      this.flowData = [];
      if (this.showFlows && this.source.flows && this.level === "raw") {
        const f = await this.source.flows(t0 - (t1 - t0) * 0.1, t1 + (t1 - t0) * 0.1, ctrl.signal);
        if (ctrl.signal.aborted) return;
        this.flowData = f.flows;
        this.flowsTruncated = f.truncated;
      }
      const ms = performance.now() - began;
      this.draw();
      if (!this.painted) {
        this.painted = true;
        stats.firstPaintMs = stats.firstPaintMs ?? performance.now();
        performance.mark("nx-first-paint");
        this.host.dataset.ready = "1";
      }
      this.host.dataset.fetches = String(Number(this.host.dataset.fetches || 0) + 1);
      const items = [...this.events.values()].reduce((a, r) => a + r.length, 0);
      const lv = this.level === "raw" ? "events" : this.level === null ? "-" : `summary level ${this.level}`;
      this.cb.onStatus?.(`${fmtCount(items)} items on screen · ${lv} · ${ms.toFixed(0)} ms · ${fmtDur(this.npp)}/px`);
    } catch (e) {
      if (e.name !== "AbortError") this.cb.onStatus?.(`error: ${e.message}`);
    }
  }

  ingestWindow(w) {
    this.level = w.level;
    const by = new Map();
    const n = w.row.length;
    for (let i = 0; i < n; i++) {
      const r = w.row[i];
      let a = by.get(r);
      if (!a) by.set(r, (a = []));
      a.push({ row: r, s: w.s[i], e: w.e[i], c: w.c[i], d: w.d[i], id: w.id[i], leaf: w.leaf ? w.leaf[i] : null, name: w.name ? w.name[i] : null });
    }
    this.events = by;
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
    ctx.rect(0, RULER, W, H - RULER);
    ctx.clip();
    for (const e of this.layout) {
      const y = RULER + e.y - top;
      if (y + e.h < RULER || y > H) continue;
      if (e.type === "group") {
        ctx.fillStyle = e.depth === 0 ? "#dfe4ea" : e.depth === 1 ? "#eaeef2" : "#f3f5f7";
        ctx.fillRect(0, y, W, e.h);
        ctx.fillStyle = "#1d2430";
        ctx.font = e.depth === 0 ? "600 11px system-ui, sans-serif" : "11px system-ui, sans-serif";
        ctx.fillText(e.text, 6 + e.depth * 12, y + e.h / 2);
        ctx.font = "11px system-ui, sans-serif";
        continue;
      }
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
      const label = r.label.length > 34 ? r.label.slice(0, 33) + "…" : r.label;
      ctx.fillText(label, 8 + e.depth * 12, y + (r.kind === "counter" ? 10 : e.h / 2));
      ctx.save();
      ctx.beginPath();
      ctx.rect(LABEL_W, y, this.areaW, e.h);
      ctx.clip();
      if (r.kind === "counter") this.drawCounter(r, y, e.h);
      else this.drawEvents(r, y, e.h, dim);
      ctx.restore();
    }
    ctx.restore();
    // gutter separator
    ctx.strokeStyle = "#d9dde3";
    ctx.beginPath();
    ctx.moveTo(LABEL_W - 0.5, 0);
    ctx.lineTo(LABEL_W - 0.5, H);
    ctx.stroke();
    if (this.showFlows) this.drawFlows();
    this.drawSelection();
    this.drawRuler();
    this.drawScrollbar();
    if (!this.rows.length) {
      ctx.fillStyle = "#6b7280";
      ctx.fillText("No events in this profile", LABEL_W + 20, RULER + 30);
    }
  }

  drawEvents(r, y, h, dim) {
    const ctx = this.ctx;
    const items = this.events.get(r.idx);
    if (!items) return;
    const npp = this.npp;
    ctx.globalAlpha = dim ? 0.25 : 1;
    for (const it of items) {
      const name = it.name || r.name || r.label;
      const x0 = LABEL_W + (it.s - this.t0) / npp;
      const x1 = LABEL_W + (it.e - this.t0) / npp;
      const col = colorFor(name);
      if (it.c === 1 && it.d === 0 && it.e === it.s) {
        // instant event: a small diamond
        ctx.fillStyle = col;
        ctx.beginPath();
        ctx.moveTo(x0, y + 3);
        ctx.lineTo(x0 + 4, y + h / 2);
        ctx.lineTo(x0, y + h - 3);
        ctx.lineTo(x0 - 4, y + h / 2);
        ctx.fill();
        continue;
      }
      const w = Math.max(1, x1 - x0);
      ctx.fillStyle = col;
      if (it.c > 1) {
        // merged bucket: lighter, height shows that it is an aggregate
        ctx.globalAlpha = (dim ? 0.25 : 1) * 0.55;
        ctx.fillRect(x0, y + 4, w, h - 8);
        ctx.globalAlpha = dim ? 0.25 : 1;
      } else {
        ctx.fillRect(x0, y + 2, w, h - 4);
      }
      if (this.selected && it.c === 1 && this.selected.id === it.id && this.selected.row === r.idx) {
        ctx.strokeStyle = "#111";
        ctx.lineWidth = 2;
        ctx.strokeRect(x0 - 1, y + 1, w + 2, h - 2);
        ctx.lineWidth = 1;
      }
      if (w > 36) {
        const text = it.c > 1 ? `${name} ×${fmtCount(it.c)}` : name;
        ctx.fillStyle = "#111";
        const tx = Math.max(x0, LABEL_W) + 3;
        const maxW = x0 + w - tx - 3;
        if (maxW > 20) {
          let t = text;
          while (t.length > 2 && ctx.measureText(t).width > maxW) t = t.slice(0, -2);
          ctx.fillText(t === text ? t : t + "…", tx, y + h / 2);
        }
      }
    }
    ctx.globalAlpha = 1;
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
    } else if (r.unit !== "percent") {
      for (const n of names) for (const v of data[n].v) maxV = Math.max(maxV, v);
    }
    maxV = maxV || 1;
    const ys = (v) => bot - (v / maxV) * hh;
    if (r.style === "stack") {
      const base = new Map();
      names.forEach((n, k) => {
        const s = data[n];
        ctx.fillStyle = SERIES_COLORS[k % SERIES_COLORS.length];
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
    } else {
      names.forEach((n, k) => {
        const s = data[n];
        ctx.strokeStyle = SERIES_COLORS[k % SERIES_COLORS.length];
        ctx.lineWidth = n.endsWith("host_mean") || n.endsWith(".process") || n.endsWith("rss") ? 1.6 : 0.8;
        ctx.beginPath();
        s.t.forEach((t, i) => (i ? ctx.lineTo(this.xOf(t), ys(s.v[i])) : ctx.moveTo(this.xOf(t), ys(s.v[i]))));
        ctx.stroke();
      });
      ctx.lineWidth = 1;
    }
    ctx.fillStyle = "#6b7280";
    ctx.fillText(r.unit === "percent" ? "100%" : fmtBytes(maxV), LABEL_W + 4, top + 2);
  }

  drawFlows() {
    if (!this.flowData.length) return;
    const ctx = this.ctx;
    ctx.save();
    ctx.beginPath();
    ctx.rect(LABEL_W, RULER, this.areaW, this.h - RULER);
    ctx.clip();
    ctx.strokeStyle = "rgba(30, 40, 60, 0.75)";
    ctx.fillStyle = "rgba(30, 40, 60, 0.75)";
    for (const f of this.flowData) {
      const ends = f.ends;
      for (let i = 0; i + 1 < ends.length; i++) {
        const a = ends[i], b = ends[i + 1];
        const ra = this.rowY.get(this.leafToRow.get(a[1])), rb = this.rowY.get(this.leafToRow.get(b[1]));
        if (!ra || !rb || ra === rb) continue;
        const x0 = this.xOf(a[2]), x1 = this.xOf(b[2]);
        const y0 = RULER + ra.y - this.scrollY + ra.h / 2, y1 = RULER + rb.y - this.scrollY + rb.h / 2;
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
      }
    }
    ctx.restore();
  }

  drawSelection() {
    if (!this.sel) return;
    const ctx = this.ctx;
    const a = Math.max(LABEL_W, this.xOf(Math.min(this.sel.a, this.sel.b)));
    const b = Math.min(this.w, this.xOf(Math.max(this.sel.a, this.sel.b)));
    if (b <= a) return;
    ctx.fillStyle = "rgba(35, 110, 210, 0.14)";
    ctx.fillRect(a, 0, b - a, this.h);
    ctx.strokeStyle = "#236ed2";
    ctx.beginPath();
    ctx.moveTo(a + 0.5, 0); ctx.lineTo(a + 0.5, this.h);
    ctx.moveTo(b - 0.5, 0); ctx.lineTo(b - 0.5, this.h);
    ctx.stroke();
    ctx.fillStyle = "#236ed2";
    ctx.fillText(fmtDur(Math.abs(this.sel.b - this.sel.a)), a + 4, RULER + 8);
  }

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
    ctx.fillStyle = "#4b5563";
    ctx.strokeStyle = "#c4c9d1";
    for (let t = Math.ceil(this.t0 / step) * step; t <= this.t1; t += step) {
      const x = this.xOf(t);
      ctx.beginPath();
      ctx.moveTo(x + 0.5, RULER - 8);
      ctx.lineTo(x + 0.5, RULER);
      ctx.stroke();
      ctx.fillText(fmtDur(t), x + 3, 10);
    }
    ctx.fillStyle = "#6b7280";
    ctx.fillText(`${fmtDur(this.t1 - this.t0)} shown`, 8, 13);
    if (this.hover && this.hover.x >= LABEL_W) {
      ctx.strokeStyle = "rgba(0,0,0,0.25)";
      ctx.beginPath();
      ctx.moveTo(this.hover.x + 0.5, RULER);
      ctx.lineTo(this.hover.x + 0.5, this.h);
      ctx.stroke();
    }
  }

  drawScrollbar() {
    const vis = this.h - RULER;
    if (this.height <= vis) return;
    const ctx = this.ctx;
    const hBar = Math.max(20, (vis * vis) / this.height);
    const yBar = RULER + (this.scrollY / (this.height - vis)) * (vis - hBar);
    ctx.fillStyle = "rgba(0,0,0,0.22)";
    ctx.fillRect(this.w - 7, yBar, 5, hBar);
  }

  // ------------------------------------------------------------------ hit testing
  entryAt(y) {
    const yy = y - RULER + this.scrollY;
    if (y < RULER) return null;
    for (const e of this.layout) if (yy >= e.y && yy < e.y + e.h) return e;
    return null;
  }

  itemAt(x, y) {
    const e = this.entryAt(y);
    if (!e || e.type !== "row" || x < LABEL_W) return null;
    if (e.row.kind === "counter") return { counter: true, row: e.row, entry: e };
    const items = this.events.get(e.row.idx);
    if (!items) return null;
    let best = null;
    let bestW = Infinity;
    for (const it of items) {
      const x0 = this.xOf(it.s), x1 = Math.max(this.xOf(it.e), x0 + 1);
      if (x >= x0 - 3 && x <= x1 + 3 && x1 - x0 < bestW) { best = it; bestW = x1 - x0; }
    }
    return best ? { item: best, row: e.row } : null;
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
    if (when !== null) lines.splice(1, 0, `at ${fmtDur(when)}`);
    return lines.join("\n");
  }

  // ------------------------------------------------------------------ input
  _bind() {
    const c = this.canvas;
    const tip = document.getElementById("tooltip");
    const pos = (ev) => { const r = c.getBoundingClientRect(); return { x: ev.clientX - r.left, y: ev.clientY - r.top }; };
    let drag = null;
    c.addEventListener("mousedown", (ev) => {
      if (ev.button !== 0) return;
      this.host.focus({ preventScroll: true });
      const p = pos(ev);
      const selecting = ev.shiftKey || this.selectMode || p.y < RULER;
      drag = { x: p.x, y: p.y, t0: this.t0, t1: this.t1, sy: this.scrollY, selecting, moved: false, gutter: p.x < LABEL_W };
      if (selecting) { this.sel = { a: this.tOf(p.x), b: this.tOf(p.x) }; c.classList.add("selecting"); }
      ev.preventDefault();
    });
    this._move = (ev) => {
      const p = pos(ev);
      if (drag) {
        if (Math.abs(p.x - drag.x) + Math.abs(p.y - drag.y) > 3) drag.moved = true;
        if (drag.selecting) {
          this.sel.b = this.tOf(Math.max(LABEL_W, Math.min(this.w, p.x)));
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
      const hit = this.itemAt(p.x, p.y);
      let text = null;
      if (hit?.counter) text = this.counterTooltip(hit.row, p.x);
      else if (hit) {
        const it = hit.item;
        const name = it.name || hit.row.name || hit.row.label;
        text = it.c > 1
          ? `${name}\n${fmtCount(it.c)} events merged (zoom in to separate)\nspan ${fmtDur(it.s)} – ${fmtDur(it.e)}\ntotal ${fmtDur(it.d)} · mean ${fmtDur(it.d / it.c)}`
          : `${name}\nstart ${fmtDur(it.s)}\nduration ${fmtDur(it.e - it.s)}\n${hit.row.label}`;
      }
      if (text) {
        tip.textContent = text;
        tip.style.display = "block";
        tip.style.left = `${Math.min(ev.clientX + 14, window.innerWidth - 300)}px`;
        tip.style.top = `${ev.clientY + 14}px`;
      } else tip.style.display = "none";
      this.queueDraw();
    };
    this._up = (ev) => {
      if (!drag) return;
      const d = drag;
      drag = null;
      c.classList.remove("dragging", "selecting");
      if (d.selecting) {
        const a = Math.min(this.sel.a, this.sel.b), b = Math.max(this.sel.a, this.sel.b);
        if ((b - a) / this.npp < 3) { this.sel = null; this.cb.onSelect?.(null); }
        else { this.sel = { a, b }; this.cb.onSelect?.({ a, b }); }
        this.queueDraw();
        return;
      }
      if (!d.moved) {
        const p = pos(ev);
        const hit = this.itemAt(p.x, p.y);
        if (hit && !hit.counter) {
          this.selected = { id: hit.item.id, row: hit.row.idx, s: hit.item.s };
          this.cb.onEventClick?.({ ...hit.item, rowInfo: hit.row, name: hit.item.name || hit.row.name });
          this.queueDraw();
        }
      }
    };
    window.addEventListener("mousemove", this._move);
    window.addEventListener("mouseup", this._up);
    c.addEventListener("mouseleave", () => { tip.style.display = "none"; this.hover = null; this.queueDraw(); });
    c.addEventListener("wheel", (ev) => {
      ev.preventDefault();
      const p = pos(ev);
      if (p.x < LABEL_W) {
        this.scrollY += ev.deltaY;
        this.clampScroll();
        this.refresh();
      } else if (ev.shiftKey || Math.abs(ev.deltaX) > Math.abs(ev.deltaY)) {
        this.pan((ev.deltaX || ev.deltaY) / this.areaW);
      } else {
        this.zoom(Math.exp(ev.deltaY * 0.0015), p.x);
      }
    }, { passive: false });
    this.host.addEventListener("keydown", (ev) => {
      const k = ev.key.toLowerCase();
      const vis = this.h - RULER;
      if (k === "w" || k === "arrowup") this.zoom(0.8);
      else if (k === "s" || k === "arrowdown") this.zoom(1.25);
      else if (k === "a" || k === "arrowleft") this.pan(-0.15);
      else if (k === "d" || k === "arrowright") this.pan(0.15);
      else if (k === "pagedown") { this.scrollY += vis * 0.9; this.clampScroll(); this.refresh(); }
      else if (k === "pageup") { this.scrollY -= vis * 0.9; this.clampScroll(); this.refresh(); }
      else if (k === "escape") { this.sel = null; this.cb.onSelect?.(null); this.queueDraw(); }
      else if (k === "0" || k === "home") this.resetView();
      else return;
      ev.preventDefault();
    });
  }
}
