// Thin client for the JSON API. Every call takes an optional AbortSignal so a pan that supersedes a
// window request cancels it instead of letting stale answers queue up.

export const stats = (window.__nxStats = window.__nxStats || { windowMs: [], requests: 0, firstPaintMs: null });

async function get(path, params = {}, signal) {
  const qs = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null) qs.set(k, String(v));
  const url = path + (qs.toString() ? `?${qs}` : "");
  const t = performance.now();
  const res = await fetch(url, { signal });
  // a packed answer (format=bin) is read as bytes; errors are JSON whatever was asked
  const packed = res.ok && params.format === "bin";
  const body = packed ? unpackOwned(await readBytes(res)) : await res.json();
  stats.requests += 1;
  // what a pan or zoom waits for: event windows, and the busy shading of collapsed groups
  if (path.endsWith("/window") || path.endsWith("/busy")) stats.windowMs.push(performance.now() - t);
  if (!res.ok) throw new Error(body.error || `${res.status} ${res.statusText}`);
  return body;
}

// ---- packed answers read into buffers the page reuses (decision 0181) ----
// ``res.arrayBuffer()`` gives a buffer that the page's JavaScript cannot free: dropping it (even with
// ``transfer(0)``) leaves its bytes to the browser's wrapper until a garbage collection, which a page
// allocating little seldom runs, so every pan's answers piled up (10-16 MB at 512 ranks). A packed
// answer is read instead with a BYOB reader into a buffer of ``spare`` (one the page made, read into
// in place), and given back with ``release`` once the timeline has replaced it: a few buffers serve
// every answer.
const spare = [];
const SPARE_MAX = 8;

function takeBuffer(n) {
  let best = -1;
  for (let i = 0; i < spare.length; i++) {
    if (spare[i].byteLength >= n && (best < 0 || spare[i].byteLength < spare[best].byteLength)) best = i;
  }
  if (best >= 0) return spare.splice(best, 1)[0];
  stats.packedBuffers = (stats.packedBuffers || 0) + 1; // how many the page ever made (tests read it)
  return new ArrayBuffer(Math.max(n, 1 << 16));
}

/** Give back the buffer of a packed answer (``unpack``'s ``bytes``) once nothing reads its arrays. */
export function release(answer) {
  const buf = answer && answer.bytes;
  if (!(buf instanceof ArrayBuffer) || !buf.byteLength || spare.includes(buf)) return;
  answer.bytes = null;
  if (spare.length < SPARE_MAX) spare.push(buf);
}

/** A response's body as [buffer, length]: read into a reused buffer where the browser can (a BYOB
 *  reader), else ``arrayBuffer()``. */
async function readBytes(res) {
  const len = Number(res.headers.get("content-length"));
  let rd = null;
  try { rd = res.body && res.body.getReader({ mode: "byob" }); } catch { rd = null; }
  if (!rd) { const b = await res.arrayBuffer(); return [b, b.byteLength]; }
  // one byte more than announced: the read that reports the end then fits without growing
  let buf = takeBuffer(Number.isFinite(len) && len > 0 ? len + 1 : 1 << 16);
  let off = 0;
  for (;;) {
    if (off === buf.byteLength) { // longer than announced: a buffer twice the size
      const more = takeBuffer(buf.byteLength * 2);
      new Uint8Array(more).set(new Uint8Array(buf, 0, off));
      spare.push(buf);
      buf = more;
    }
    const { value, done } = await rd.read(new Uint8Array(buf, off, buf.byteLength - off));
    if (value) buf = value.buffer; // the same bytes, handed back under a new object
    if (done) break;
    off += value.byteLength;
  }
  return [buf, off];
}

function unpackOwned([buf, len]) {
  const head = unpack(buf, len);
  head.bytes = buf; // given back with ``release``
  return head;
}

const TYPED = { u1: Uint8Array, i1: Int8Array, u2: Uint16Array, i2: Int16Array, u4: Uint32Array, i4: Int32Array,
                f4: Float32Array, f8: Float64Array };

/** A packed answer (ui/wire.py ``pack``, decision 0165): "NXB1", the header's length (uint32 LE), the
 *  header as JSON, then arrays at 8-byte offsets. Returns the header with each array as a typed-array
 *  view on ``buf`` (no copy, no string: the answer's memory is one ArrayBuffer, freed with it). */
export function unpack(buf, size = buf.byteLength) {
  const dv = new DataView(buf, 0, size);
  if (size < 8 || dv.getUint32(0, false) !== 0x4e584231) throw new Error("not a packed answer");
  const n = dv.getUint32(4, true);
  if (8 + n > size) throw new Error("packed header runs past the answer");
  const head = JSON.parse(new TextDecoder().decode(new Uint8Array(buf, 8, n)));
  if (!head || typeof head !== "object" || Array.isArray(head)) throw new Error("packed header is not an object");
  const start = Math.ceil((8 + n) / 8) * 8;
  for (const [name, m] of Object.entries(head.arrays || {})) {
    const T = TYPED[m?.dtype];
    const ok = T && Number.isInteger(m.offset) && Number.isInteger(m.length) && m.offset >= 0 && m.length >= 0
      && m.offset % T.BYTES_PER_ELEMENT === 0 && start + m.offset + m.length * T.BYTES_PER_ELEMENT <= size;
    if (!ok) throw new Error(`packed array ${name} is damaged`);
    head[name] = new T(buf, start + m.offset, m.length);
  }
  delete head.arrays;
  return head;
}

const P = (name) => `/api/profiles/${encodeURIComponent(name)}`;

/** Rows as "0-12,15,20-24": short URLs for the hundreds of rows of a tall screen. */
export function encodeRows(idx) {
  const s = [...idx].sort((a, b) => a - b);
  const parts = [];
  for (let i = 0; i < s.length; ) {
    let j = i;
    while (j + 1 < s.length && s[j + 1] === s[j] + 1) j++;
    parts.push(j > i ? `${s[i]}-${s[j]}` : `${s[i]}`);
    i = j + 1;
  }
  return parts.join(",");
}

export const api = {
  profiles: () => get("/api/profiles"),
  overview: (name, early) => get(P(name), early ? { wait: 0 } : undefined),
  // waitMs: the server answers as soon as the first paint can start, or after that long
  status: (name, waitMs) => get(`${P(name)}/status`, waitMs ? { wait_ms: waitMs } : undefined),
  tracks: (name, mode, layout) => get(`${P(name)}/tracks`, { mode, layout }),
  // packed (decision 0175): row, s, e, c, d, id, leaf as typed arrays (ids beyond 2^53 stay strings)
  window: (name, mode, layout, rows, t0, t1, px, signal) => get(`${P(name)}/window`, { mode, layout, rows: encodeRows(rows), t0, t1, px, format: "bin" }, signal),
  counters: (name, mode, layout, rows, t0, t1, px, signal) => get(`${P(name)}/counters`, { mode, layout, rows: encodeRows(rows), t0, t1, px }, signal),
  // packed (decision 0165): per group and pixel, busy and cc bytes as two typed arrays, group i at i * px
  busy: (name, mode, layout, groups, t0, t1, px, signal) => get(`${P(name)}/busy`, { mode, layout, groups: groups.map(encodeRows).join(";"), t0, t1, px, format: "bin" }, signal),
  activity: (name) => get(`${P(name)}/activity`),
  insights: (name) => get(`${P(name)}/insights`),
  diff: (name, against) => get(`${P(name)}/diff`, { against }),
  nonempty: (name, mode, layout, t0, t1) => get(`${P(name)}/nonempty`, { mode, layout, t0, t1 }),
  flows: (name, mode, t0, t1, signal) => get(`${P(name)}/flows`, { mode, t0, t1 }, signal),
  event: (name, id, leaf) => get(`${P(name)}/event`, { id, leaf }),
  eventFlows: (name, id, leaf, s, signal) => get(`${P(name)}/event/flows`, { id, leaf, s }, signal),
  summary: (name, mode, t0, t1) => get(`${P(name)}/summary`, { mode, t0, t1 }),
  area: (name, mode, layout, rows, t0, t1) => get(`${P(name)}/area`, { mode, layout, rows: rows ? encodeRows(rows) : undefined, t0, t1 }),
  collectives: (name, mode, layout, rows, t0, t1) => get(`${P(name)}/collectives`, { mode, layout, rows: rows ? encodeRows(rows) : undefined, t0, t1 }),
  search: (name, mode, layout, q) => get(`${P(name)}/search`, { mode, layout, q }),
  searchNext: (name, q, after, dir, leaf, id) => get(`${P(name)}/search/next`, { q, after, dir, leaf, id }),
  deviceProfiles: (name) => get(`${P(name)}/device-profiles`),
  deviceSpans: (name) => get(`${P(name)}/device-spans`),
  deviceOverview: (name, pid, frame) => get(`${P(name)}/device/${encodeURIComponent(pid)}`, { frame }),
  deviceWindow: (name, pid, frame, rows, t0, t1, px, signal) => get(`${P(name)}/device/${encodeURIComponent(pid)}/window`, { frame, rows: encodeRows(rows), t0, t1, px }, signal),
  deviceEvent: (name, pid, frame, row, start) => get(`${P(name)}/device/${encodeURIComponent(pid)}/event`, { frame, row, start }),
};

// ---- time you can trust ----
// Relative times (ns from the profile's origin) are JS numbers: exact integers up to 2^53 ns (104 days).
// Absolute times come from the server as decimal strings and are added as BigInt, never as doubles.

/** Thin-space groups of three digits: 723456789 -> "723 456 789". */
function group3(digits) { return digits.replace(/\B(?=(\d{3})+(?!\d))/g, " "); }

/** A relative time in seconds with every nanosecond: 11723456789 -> "11.723 456 789 s". */
export function fmtNs(ns) {
  const v = Math.round(Number(ns));
  const neg = v < 0;
  const a = Math.abs(v);
  const sec = Math.floor(a / 1e9);
  const frac = String(a - sec * 1e9).padStart(9, "0");
  return `${neg ? "-" : ""}${sec}.${frac.slice(0, 3)} ${frac.slice(3, 6)} ${frac.slice(6)} s`;
}

/** origin (decimal string) + relative ns, as the exact absolute nanosecond timestamp (a string). */
export function absNs(originStr, rel) {
  return (BigInt(originStr) + BigInt(Math.round(Number(rel)))).toString();
}

/** A duration with its exact nanoseconds: "12.345 ms (12 345 678 ns)". */
export function fmtDurExact(ns) {
  const v = Math.round(Number(ns));
  return Math.abs(v) < 1000 ? `${v} ns` : `${fmtDur(v)} (${group3(String(Math.abs(v)))}${v < 0 ? " negative" : ""} ns)`;
}

/** A tick offset with just the digits its step needs: (30000, 10000) -> "+30 µs", (1500, 500) -> "+1.5 µs". */
export function fmtTick(dt, step) {
  const units = [[1e9, "s"], [1e6, "ms"], [1e3, "µs"], [1, "ns"]];
  const [u, name] = units.find(([f]) => Math.abs(step) >= f || f === 1) || [1, "ns"];
  let decimals = 0;
  while (decimals < 9 && Math.abs(Math.round((step / u) * 10 ** decimals) - (step / u) * 10 ** decimals) > 1e-6) decimals++;
  return `+${(dt / u).toFixed(decimals)} ${name}`;
}

// ---- formatting shared by widgets ----
export function fmtDur(ns) {
  const a = Math.abs(ns);
  if (a >= 1e9) return `${(ns / 1e9).toFixed(3)} s`;
  if (a >= 1e6) return `${(ns / 1e6).toFixed(3)} ms`;
  if (a >= 1e3) return `${(ns / 1e3).toFixed(2)} µs`;
  return `${Math.round(ns)} ns`;
}
export function fmtBytes(b) {
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let v = b;
  while (Math.abs(v) >= 1024 && i < u.length - 1) { v /= 1024; i++; }
  return `${v.toFixed(i ? 1 : 0)} ${u[i]}`;
}
export function fmtCount(n) { return Number(n).toLocaleString("en-US"); }
export function esc(s) {
  return String(s ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}
