"""The ASGI application: a read-only JSON API over a workspace, plus the static front end.

Every endpoint is GET; none writes to the workspace. Profile names come from the URL and go through
:func:`paths.resolve_profile` before anything is opened; every other parameter is a number, a grouping
mode from a fixed list, or a search string bound as a query parameter. Query work runs in Starlette's
thread pool (DuckDB releases the GIL), so a slow window never blocks the event loop.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable

import duckdb
import orjson
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from neuron_explorer.ui import (
    area as area_q,
    busy as busy_q,
    compare_page,
    flows as flows_q,
    insights_page,
    paths,
    queries,
    search as search_q,
    wire,
)
from neuron_explorer.ui.device import DeviceProfile, device_profiles as list_device_profiles, device_spans, open_device
from neuron_explorer.ui.params import BadRequest, NotFound, integer, number, one_line, parse_rows
from neuron_explorer.ui.profile import Profile
from neuron_explorer.ui.rows import DEFAULT_LAYOUT, DEFAULT_MODE, check_layout, check_mode
from neuron_explorer.ui.workspace import Workspace

STATIC = Path(__file__).resolve().parent / "static"


def _json(content: Any) -> bytes:
    """orjson: window answers are tens of thousands of numbers; the stdlib encoder is the bottleneck."""
    return orjson.dumps(content, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)


class FastJSON(JSONResponse):
    def render(self, content: Any) -> bytes:
        return _json(content)


Handler = Callable[[Workspace, Request], Any]

# API answers are never kept by the browser's HTTP cache (decision 0181): a window or busy answer is
# asked for one exact range and never asked again, and without a validator a kept one could not be
# reused anyway; kept, each sat in the cache (in memory for a private window) while the user panned
NO_STORE = {"Cache-Control": "no-store"}


def _timed(ws: Workspace, fn: Handler, req: Request) -> tuple[bytes, str, str]:
    """The answer's body (JSON, or bytes for a ``wire.Packed`` answer), its media type and a
    Server-Timing header: where a slow answer went (shown by browser dev tools; bench/ui_bench.py
    reads it)."""
    t = time.perf_counter()
    data = fn(ws, req)
    t1 = time.perf_counter()
    packed = isinstance(data, wire.Packed)
    body = data.encode() if packed else _json(data)
    t2 = time.perf_counter()
    return (body, "application/octet-stream" if packed else "application/json",
            f"query;dur={(t1 - t) * 1e3:.1f}, json;dur={(t2 - t1) * 1e3:.1f}")


def _api(ws: Workspace, fn: Handler) -> Callable[[Request], Any]:
    """An endpoint running ``fn`` in the thread pool, with every failure as one JSON line and a status."""
    async def endpoint(req: Request) -> Response:
        try:
            body, media, timing = await run_in_threadpool(_timed, ws, fn, req)
            return Response(body, media_type=media, headers={"Server-Timing": timing, **NO_STORE})
        except paths.PathRejected as e:
            return FastJSON({"error": str(e)}, status_code=403)
        except (NotFound, FileNotFoundError) as e:
            return FastJSON({"error": f"not found: {e}"}, status_code=404)
        except (duckdb.Error, OSError, UnicodeDecodeError) as e:
            # files that vanished under a running query: the profile was removed (404), or is
            # being rewritten or damaged (500): either way one line, not a traceback page. (DuckDB's
            # message quoting a damaged column name is not UTF-8: a UnicodeDecodeError, not a bad request.)
            if isinstance(e, duckdb.Error):
                ws.revive()  # a damaged file may have invalidated the database: the next request has one
            name = req.path_params.get("name")
            if name is not None and not ws.exists(name):
                ws.forget(name)
                return FastJSON({"error": f"not found: profile {name!r} is no longer in the workspace"},
                                status_code=404)
            first = one_line(e)
            return FastJSON({"error": f"cannot read profile {name!r}: {first}"}, status_code=500)
        except (BadRequest, ValueError) as e:
            return FastJSON({"error": str(e)}, status_code=400)
    return endpoint


# ---------------------------------------------------------------- request parts
def _prof(ws: Workspace, req: Request) -> Profile:
    return ws.profile(req.path_params["name"])


def _early(ws: Workspace, req: Request) -> Profile:
    """The profile without waiting for its index: what a first paint asks (overview, tracks, windows,
    busy shares, counters) is answered from the coarse level while the index builds."""
    return ws.profile(req.path_params["name"], wait=False)


def _mode(req: Request, ws: Workspace | None = None) -> str:
    """The request's grouping mode; without one, the profile's (the grouping its view stored)."""
    m = req.query_params.get("mode")
    if m is not None:
        return m
    name = req.path_params.get("name")
    return ws.profile(name, wait=False).default_mode if ws is not None and name is not None else DEFAULT_MODE


def _layout(req: Request) -> str:
    return check_layout(req.query_params.get("layout", DEFAULT_LAYOUT))


def _opt_int(req: Request, key: str) -> int | None:
    v = req.query_params.get(key)
    return integer(req.query_params, key) if v not in (None, "") else None


def _rows(req: Request) -> list[int]:
    return parse_rows(req.query_params.get("rows"))


def _num(req: Request, key: str, default: float | None = None) -> float:
    return number(req.query_params, key, default)


def _range(req: Request) -> tuple[float, float, int]:
    """t0, t1 and px of a window request."""
    return _num(req, "t0"), _num(req, "t1"), int(_num(req, "px", 1000))


def _device(ws: Workspace, req: Request) -> DeviceProfile:
    return open_device(_prof(ws, req), req.path_params["pid"], req.query_params.get("frame", "device"))


# ---------------------------------------------------------------- handlers
def profiles(ws: Workspace, req: Request) -> Any:
    return {"workspace": str(ws.root), "profiles": ws.list()}


def overview(ws: Workspace, req: Request) -> Any:
    # ?wait=0: during a cold open's index build (the browser's coarse first paint); else wait for it
    early = req.query_params.get("wait") == "0"
    return queries.overview(_early(ws, req) if early else _prof(ws, req))


def status(ws: Workspace, req: Request) -> Any:
    # ?wait_ms=: answer once the first paint can start, or after that long (at most 1 s)
    return ws.status(req.path_params["name"], min(max(_num(req, "wait_ms", 0), 0.0), 1000.0) / 1000)


def tracks(ws: Workspace, req: Request) -> Any:
    m, lay = _mode(req, ws), _layout(req)
    p = _early(ws, req)
    return {"mode": m, "layout": lay, "rows": [r.to_json(i) for i, r in enumerate(p.rows(m, lay))],
            "names": p.names, "leaf_name": p.leaf_name, "leaf_rank": [p.rank(i) for i in range(len(p.leaves))],
            # where each leaf runs: device profiles are matched to their core's track by these
            "leaf_core": [[lf.inst, lf.pid, lf.nc] for lf in p.leaves]}


def window(ws: Workspace, req: Request) -> Any:
    fn = queries.window_packed if _packed(req) else queries.window
    return fn(_early(ws, req), _mode(req, ws), _rows(req), *_range(req), _layout(req))


def counters(ws: Workspace, req: Request) -> Any:
    return queries.counters(_early(ws, req), _mode(req, ws), _rows(req), *_range(req), _layout(req))


def flows(ws: Workspace, req: Request) -> Any:
    return flows_q.flows(_prof(ws, req), _mode(req, ws), _num(req, "t0"), _num(req, "t1"))


def event(ws: Workspace, req: Request) -> Any:
    return queries.event(_prof(ws, req), integer(req.query_params, "id"), _opt_int(req, "leaf"))


def event_flows(ws: Workspace, req: Request) -> Any:
    s = req.query_params.get("s")
    return flows_q.event_flows(_prof(ws, req), integer(req.query_params, "id"), integer(req.query_params, "leaf"),
                               _num(req, "s") if s not in (None, "") else None)


def summary(ws: Workspace, req: Request) -> Any:
    return queries.summary(_prof(ws, req), _mode(req, ws), _num(req, "t0"), _num(req, "t1"), _rows(req) or None,
                           _layout(req))


def _packed(req: Request) -> bool:
    """``format=bin``: the answer as bytes (``wire.Packed``, what the browser asks); ``json`` (the
    default): as JSON."""
    f = req.query_params.get("format", "json")
    if f not in ("json", "bin"):
        raise BadRequest(f"format {f[:40]!r} is not valid; accepted: json, bin")
    return f == "bin"


def busy(ws: Workspace, req: Request) -> Any:
    check_mode(_mode(req, ws))
    fn = busy_q.busy_packed if _packed(req) else busy_q.busy
    return fn(_early(ws, req), _mode(req, ws), _layout(req), busy_q.parse_groups(req.query_params.get("groups")),
              *_range(req))


def summary_doc(ws: Workspace, req: Request) -> Any:
    return insights_page.summary_page(_early(ws, req))


def diff(ws: Workspace, req: Request) -> Any:
    other = req.query_params.get("against")
    if not other:
        raise BadRequest("against: the candidate profile to compare with is missing")
    return compare_page.diff_page(_early(ws, req), ws.profile(other, wait=False))


def activity(ws: Workspace, req: Request) -> Any:
    return busy_q.activity(_prof(ws, req))


def nonempty(ws: Workspace, req: Request) -> Any:
    check_mode(_mode(req, ws))
    return {"rows": busy_q.rows_with_events(_prof(ws, req), _mode(req, ws), _layout(req), _num(req, "t0"),
                                            _num(req, "t1"))}


def area(ws: Workspace, req: Request) -> Any:
    check_mode(_mode(req, ws))
    return area_q.area(_prof(ws, req), _mode(req, ws), _layout(req), _rows(req) or None,
                       _num(req, "t0"), _num(req, "t1"))


def collectives(ws: Workspace, req: Request) -> Any:
    check_mode(_mode(req, ws))
    return area_q.collectives(_prof(ws, req), _mode(req, ws), _layout(req), _rows(req) or None, _num(req, "t0"),
                              _num(req, "t1"))


def search(ws: Workspace, req: Request) -> Any:
    check_mode(_mode(req, ws))
    return search_q.search(_prof(ws, req), _mode(req, ws), req.query_params.get("q", "")[:200], _layout(req))


def search_next(ws: Workspace, req: Request) -> Any:
    return search_q.search_next(_prof(ws, req), req.query_params.get("q", "")[:200], _num(req, "after"),
                                int(_num(req, "dir", 1)), _opt_int(req, "leaf"), _opt_int(req, "id"))


def device_profiles(ws: Workspace, req: Request) -> Any:
    return {"device_profiles": list_device_profiles(_prof(ws, req))}


def device_lanes(ws: Workspace, req: Request) -> Any:
    return device_spans(_prof(ws, req))


def device_overview(ws: Workspace, req: Request) -> Any:
    return _device(ws, req).overview()


def device_window(ws: Workspace, req: Request) -> Any:
    return _device(ws, req).window(_rows(req), *_range(req))


def device_event(ws: Workspace, req: Request) -> Any:
    return _device(ws, req).event(int(_num(req, "row")), int(_num(req, "start")))


async def index_page(req: Request) -> Response:
    return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})


API: list[tuple[str, Handler]] = [
    ("/api/profiles", profiles),
    ("/api/profiles/{name}", overview),
    ("/api/profiles/{name}/status", status),
    ("/api/profiles/{name}/tracks", tracks),
    ("/api/profiles/{name}/window", window),
    ("/api/profiles/{name}/counters", counters),
    ("/api/profiles/{name}/flows", flows),
    ("/api/profiles/{name}/event", event),
    ("/api/profiles/{name}/event/flows", event_flows),
    ("/api/profiles/{name}/summary", summary),
    ("/api/profiles/{name}/busy", busy),
    ("/api/profiles/{name}/activity", activity),
    ("/api/profiles/{name}/insights", summary_doc),
    ("/api/profiles/{name}/diff", diff),
    ("/api/profiles/{name}/nonempty", nonempty),
    ("/api/profiles/{name}/area", area),
    ("/api/profiles/{name}/collectives", collectives),
    ("/api/profiles/{name}/search", search),
    ("/api/profiles/{name}/search/next", search_next),
    ("/api/profiles/{name}/device-profiles", device_profiles),
    ("/api/profiles/{name}/device-spans", device_lanes),
    ("/api/profiles/{name}/device/{pid}", device_overview),
    ("/api/profiles/{name}/device/{pid}/window", device_window),
    ("/api/profiles/{name}/device/{pid}/event", device_event),
]


def create_app(workspace: str | os.PathLike, cache_dir: str | os.PathLike | None = None,
               pyramid_min_events: int = 2_000_000, raw_budget: int | None = None) -> Starlette:
    """The app for one workspace. ``cache_dir`` holds rebuildable pyramids (never the workspace)."""
    ws = Workspace(workspace, cache_dir=cache_dir, pyramid_min_events=pyramid_min_events,
                   **({"raw_budget": raw_budget} if raw_budget is not None else {}))
    routes = [Route("/", index_page), *(Route(path, _api(ws, fn)) for path, fn in API),
              Mount("/static", StaticFiles(directory=str(STATIC)), name="static")]
    app = Starlette(routes=routes)
    app.state.workspace = ws
    return app
