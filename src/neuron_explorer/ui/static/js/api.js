// Thin client for the JSON API. Every call takes an optional AbortSignal so a pan that supersedes a
// window request cancels it instead of letting stale answers queue up.

export const stats = (window.__nxStats = window.__nxStats || { windowMs: [], requests: 0, firstPaintMs: null });

async function get(path, params = {}, signal) {
  const qs = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null) qs.set(k, String(v));
  const url = path + (qs.toString() ? `?${qs}` : "");
  const t = performance.now();
  const res = await fetch(url, { signal });
  const body = await res.json();
  stats.requests += 1;
  if (path.endsWith("/window")) stats.windowMs.push(performance.now() - t);
  if (!res.ok) throw new Error(body.error || `${res.status} ${res.statusText}`);
  return body;
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
  overview: (name) => get(P(name)),
  tracks: (name, mode) => get(`${P(name)}/tracks`, { mode }),
  window: (name, mode, rows, t0, t1, px, signal) => get(`${P(name)}/window`, { mode, rows: encodeRows(rows), t0, t1, px }, signal),
  counters: (name, mode, rows, t0, t1, px, signal) => get(`${P(name)}/counters`, { mode, rows: encodeRows(rows), t0, t1, px }, signal),
  flows: (name, mode, t0, t1, signal) => get(`${P(name)}/flows`, { mode, t0, t1 }, signal),
  event: (name, id, leaf) => get(`${P(name)}/event`, { id, leaf }),
  summary: (name, mode, t0, t1) => get(`${P(name)}/summary`, { mode, t0, t1 }),
  search: (name, mode, q) => get(`${P(name)}/search`, { mode, q }),
  searchNext: (name, q, after, dir) => get(`${P(name)}/search/next`, { q, after, dir }),
  deviceProfiles: (name) => get(`${P(name)}/device-profiles`),
  deviceOverview: (name, pid) => get(`${P(name)}/device/${encodeURIComponent(pid)}`),
  deviceWindow: (name, pid, rows, t0, t1, px, signal) => get(`${P(name)}/device/${encodeURIComponent(pid)}/window`, { rows: encodeRows(rows), t0, t1, px }, signal),
  deviceEvent: (name, pid, row, start) => get(`${P(name)}/device/${encodeURIComponent(pid)}/event`, { row, start }),
};

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
