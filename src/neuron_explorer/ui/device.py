"""Device profiles of a system profile: the list, the one covering an execution, and their windows.

Why separate from the system windows: device tables are small next to system ones (one execution's
instructions), so they are queried straight from Parquet, without an index; rows are the ``track``
column (engine / queue), with the same per-pixel merging.
"""

from __future__ import annotations

import json
import math
from typing import Any

from neuron_explorer.ui import wire
from neuron_explorer.ui.params import MAX_WINDOW_ROWS, BadRequest, NotFound, ns_per_px, window_args
from neuron_explorer.ui.profile import Profile
from neuron_explorer.ui.sql import files_sql, quote, records

# Columns the Device Profiles List leads with (what a user picks a device profile by); the others follow.
LIST_FIRST = ("model_name", "nc_idx", "executions", "flops", "achieved_flops_per_s", "mfu", "total_time_ns", "ops",
              "instance_id", "process_id", "mode", "device_kind", "source")

def device_profiles(p: Profile) -> list[dict[str, Any]]:
    """Rows of DeviceProfiles.parquet (none when the profile has no device profiles)."""
    if not p.devprof_file:
        return []
    c = p.cursor()
    c.execute(f"SELECT * FROM read_parquet({quote(p.devprof_file)}) ORDER BY ALL")
    out = []
    for r in records(c):
        first = {k: r[k] for k in LIST_FIRST if k in r}
        out.append(wire.record({**first, **{k: v for k, v in r.items() if k not in first}}))
    return out


def _int_or(v: Any, default: int) -> int:
    return int(v) if v is not None else default


def device_profile_for(p: Profile, ev: dict[str, Any]) -> dict[str, Any] | None:
    """The device profile covering an nc_exec_running event.

    ``view`` records it on the event (``device_profile_id``); for stores without that column, the one
    with the same process and core whose model names and exec id range include the event's.
    """
    dps = device_profiles(p)
    if ev.get("device_profile_id"):
        return next((d for d in dps if str(d.get("profile_id")) == str(ev["device_profile_id"])), None)
    for dp in dps:
        if (dp.get("instance_id") == ev.get("instance_id")
                and int(dp.get("process_id") or -1) == int(ev.get("process_id") or -2)
                and _int_or(dp.get("nc_idx"), -1) == _int_or(ev.get("nc_idx"), -2)
                and (not dp.get("model_name") or str(ev.get("model_name")) in str(dp.get("model_name")))):
            first, last = dp.get("exec_id_first"), dp.get("exec_id_last")
            x = ev.get("exec_id")
            if x is None or first is None or last is None or int(first) <= int(x) <= int(last):
                return dp
    return None


def profiled_execution(p: Profile, ev: dict[str, Any]) -> dict[str, Any] | None:
    """For an execution no device profile covers: the execution of the same graph (process, core,
    model) that one does cover, and that profile's mode, so the viewer can say which mode captured
    which execution and link to it (in ``model`` mode, each graph's first execution is profiled)."""
    same = [dp for dp in device_profiles(p)
            if dp.get("instance_id") == ev.get("instance_id")
            and int(dp.get("process_id") or -1) == int(ev.get("process_id") or -2)
            and _int_or(dp.get("nc_idx"), -1) == _int_or(ev.get("nc_idx"), -2)
            and dp.get("model_name") and str(dp.get("model_name")) == str(ev.get("model_name"))]
    if not same or not p.ev_files:
        return None
    dp = same[0]
    c = p.cursor()
    files = [f for inst, pid, f in p.ev_files if (inst, pid) == (ev.get("instance_id"), int(ev.get("process_id") or 0))]
    if not files or dp.get("exec_id_first") is None:
        return None
    c.execute(f"SELECT id, start_ts, end_ts, exec_id FROM read_parquet({files_sql(files)}) "
              "WHERE name = 'nc_exec_running' AND model_name = ? AND exec_id = ? AND nc_idx = ? "
              "ORDER BY start_ts LIMIT 1",
              [ev.get("model_name"), int(dp["exec_id_first"]), _int_or(ev.get("nc_idx"), -1)])
    r = c.fetchone()
    if r is None:
        return None
    leaf = next((lf.leaf for lf in p.leaves if lf.name == "nc_exec_running" and lf.inst == ev.get("instance_id")
                 and lf.pid == int(ev.get("process_id") or 0) and lf.nc == _int_or(ev.get("nc_idx"), -1)), None)
    return {"profile_id": str(dp.get("profile_id")), "mode": dp.get("mode"), "exec_id": int(r[3]),
            "id": wire.id_value(int(r[0])), "leaf": leaf, "start": int(r[1]) - p.origin, "end": int(r[2]) - p.origin}


def open_device(p: Profile, profile_id: str, frame: str = "device") -> "DeviceProfile":
    """The device profile ``profile_id`` of ``p`` (NotFound when it has no events)."""
    if not p.dev_files:
        raise NotFound("no device profiles were captured for this profile")
    dp = next((d for d in device_profiles(p) if str(d.get("profile_id")) == str(profile_id)), None)
    return DeviceProfile(p, str(profile_id), dp, frame)


FRAMES = ("device", "system")


def check_frame(frame: str) -> str:
    """Times of device answers: relative to the device profile's first op ("device", the default) or
    to the system profile's origin ("system": the device trace on the system timeline's time axis)."""
    if frame not in FRAMES:
        raise BadRequest(f"unknown frame {frame!r}; one of {', '.join(FRAMES)}")
    return frame


class DeviceProfile:
    """One device profile (the op/kernel events of an execution range on one core)."""

    def __init__(self, prof: Profile, profile_id: str, info: dict[str, Any] | None, frame: str = "device") -> None:
        self.p = prof
        self.profile_id = profile_id
        self.info = info
        # union_by_name: parts written by different producers may carry different optional columns
        self.files = files_sql([f for _, _, f in prof.dev_files]) + ", union_by_name = true"
        c = prof.cursor()
        r = c.execute(f"""SELECT min(start_ts), max(end_ts), count(*) FROM read_parquet({self.files})
                          WHERE profile_id::VARCHAR = ?""", [profile_id]).fetchall()[0]
        if not r[2]:
            raise NotFound(f"device profile {profile_id}")
        self.origin, self.end, self.n = int(r[0]), int(r[1]), int(r[2])
        # answers relative to this origin; the device's own first op stays self.origin
        self.frame_origin = prof.origin if check_frame(frame) == "system" else self.origin
        self.tracks = c.execute(f"""SELECT track, count(*), max(duration_ns) FROM read_parquet({self.files})
                                    WHERE profile_id::VARCHAR = ? GROUP BY track ORDER BY track""",
                                [profile_id]).fetchall()

    def overview(self) -> dict[str, Any]:
        return {"profile_id": self.profile_id, "info": self.info, "origin_ns": str(self.frame_origin),
                "start_ns": self.origin - self.frame_origin, "system_origin_ns": str(self.p.origin),
                "duration_ns": max(self.end - self.origin, 1), "events": self.n,
                "rows": [{"idx": i, "key": t, "kind": "events", "group": ["Device"], "label": t, "count": int(n),
                          "name": t, "leaves": [i]} for i, (t, n, _) in enumerate(self.tracks)]}

    def window(self, row_idx: list[int], t0: float, t1: float, px: int) -> dict[str, Any]:
        """The tracks ``row_idx`` in [t0, t1) (relative ns), merged per pixel like a system window."""
        t0, t1, px = window_args(t0, t1, px)
        npp = ns_per_px(t0, t1, px)
        picked = [i for i in row_idx if 0 <= i < len(self.tracks)]
        res: dict[str, Any] = {"t0": t0, "t1": t1, "px": px, "ns_per_px": npp, "level": "raw",
                               "row": [], "s": [], "e": [], "c": [], "d": [], "id": [], "leaf": [], "name": []}
        if not picked:
            return res
        names = [self.tracks[i][0] for i in picked]
        maxdur = max(int(self.tracks[i][2] or 0) for i in picked)
        a0, a1 = self.frame_origin + int(t0), self.frame_origin + math.ceil(t1)
        data = self.p.cursor().execute(f"""
            WITH m AS (SELECT unnest($tracks::VARCHAR[]) AS track, unnest($rows::INTEGER[]) AS r),
            ev AS (SELECT track, name, start_ts - $origin AS s, end_ts - $origin AS e, duration_ns AS d
                   FROM read_parquet({self.files})
                   WHERE profile_id::VARCHAR = $pid AND start_ts >= $lo AND start_ts < $a1 AND end_ts >= $a0),
            x AS (SELECT m.r, ev.*, CASE WHEN ev.d >= $npp THEN -1 - row_number() OVER ()
                                    ELSE floor((ev.s - $t0) / $npp)::BIGINT END AS k FROM ev JOIN m USING (track))
            SELECT r, k, count(*)::BIGINT, sum(d)::BIGINT, min(s), max(e), min(s), r, min(name)
            FROM x GROUP BY r, k ORDER BY r, 5 LIMIT {MAX_WINDOW_ROWS}""",
            {"tracks": names, "rows": picked, "pid": self.profile_id, "origin": self.frame_origin, "lo": a0 - maxdur,
             "a0": a0, "a1": a1, "npp": npp, "t0": t0}).fetchall()
        for r, _k, cnt, d, s, e, sid, leaf, name in data:
            res["row"].append(r)
            res["c"].append(cnt)
            res["d"].append(d)
            res["s"].append(s)
            res["e"].append(e)
            res["id"].append(sid)  # device events are addressed by (track, start)
            res["leaf"].append(leaf)
            res["name"].append(name)
        return res

    def event(self, row: int, start: int) -> dict[str, Any]:
        """All columns of the device event on track ``row`` starting at ``start`` (relative ns)."""
        if not 0 <= row < len(self.tracks):
            raise NotFound("no such track")
        c = self.p.cursor()
        c.execute(f"SELECT * FROM read_parquet({self.files}) WHERE profile_id::VARCHAR = ? AND track = ? "
                  "AND start_ts = ? LIMIT 1", [self.profile_id, self.tracks[row][0], self.frame_origin + int(start)])
        rows = records(c)
        if not rows:
            raise NotFound("device event")
        ev = rows[0]
        try:
            attrs = json.loads(ev.pop("extra_attributes_json", None) or "{}")
        except ValueError:
            attrs = {}
        return {"name": ev.get("name"), "properties": wire.record(ev), "attributes": attrs,
                "origin_ns": str(self.frame_origin),
                "relative": {"start": int(ev["start_ts"]) - self.frame_origin,
                             "end": int(ev["end_ts"]) - self.frame_origin}}
