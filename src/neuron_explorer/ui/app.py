"""The ASGI application: a read-only JSON API over a workspace, plus the static front end.

Every endpoint is GET; none writes to the workspace. Profile names come from the URL and go through
:func:`paths.resolve_profile` before anything is opened; every other parameter is a number, a grouping
mode from a fixed list, or a search string bound as a query parameter. Query work runs in Starlette's
thread pool (DuckDB releases the GIL), so a slow window never blocks the event loop.
"""

from __future__ import annotations

import math
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

from . import paths
from .store import BadRequest, NotFound, Workspace

STATIC = Path(__file__).resolve().parent / "static"


class FastJSON(JSONResponse):
    """orjson: window answers are tens of thousands of numbers; the stdlib encoder is the bottleneck."""

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)


def _ints(s: str | None) -> list[int]:
    """Row lists as ``1,2,5-9``: compact for the hundreds of rows of a tall screen."""
    out: list[int] = []
    if not s:
        return out
    for part in s.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part[1:]:
            a, b = part.split("-", 1)
            lo, hi = int(a), int(b)
            if hi < lo or hi - lo > 100_000:
                raise BadRequest("bad row range")
            out.extend(range(lo, hi + 1))
        else:
            out.append(int(part))
        if len(out) > 100_000:
            raise BadRequest("too many rows")
    return out


MAX_PARAM = float(1 << 62)  # ns from a profile's origin, ids, rows: every number a request may need


def _num(req: Request, key: str, default: float | None = None) -> float:
    """A finite number of magnitude at most 2^62: ``inf``/``nan`` or 1e308 would otherwise reach
    integer conversions and queries and fail there (a 500) instead of here (a 400 naming the value)."""
    v = req.query_params.get(key)
    if v is None:
        if default is None:
            raise BadRequest(f"missing parameter {key}")
        return default
    try:
        x = float(v)
    except ValueError:
        raise BadRequest(f"{key}={v[:40]!r} is not a number") from None
    if not math.isfinite(x) or abs(x) > MAX_PARAM:
        raise BadRequest(f"{key}={v[:40]!r} is not valid; accepted: a finite number within +-2^62")
    return x


def create_app(workspace: str | os.PathLike, cache_dir: str | os.PathLike | None = None,
               pyramid_min_events: int = 2_000_000, raw_budget: int | None = None) -> Starlette:
    """The app for one workspace. ``cache_dir`` holds rebuildable pyramids (never the workspace)."""
    ws = Workspace(workspace, cache_dir=cache_dir, pyramid_min_events=pyramid_min_events,
                   **({"raw_budget": raw_budget} if raw_budget is not None else {}))

    def api(fn: Callable[..., Any]) -> Callable[[Request], Any]:
        def timed(req: Request) -> tuple[bytes, str]:
            t = time.perf_counter()
            data = fn(req)
            t1 = time.perf_counter()
            body = FastJSON(data).body
            t2 = time.perf_counter()
            # Server-Timing: where a slow answer went (shown by browser dev tools; bench/ui_bench.py reads it)
            return body, f"query;dur={(t1 - t) * 1e3:.1f}, json;dur={(t2 - t1) * 1e3:.1f}"

        async def endpoint(req: Request) -> Response:
            try:
                body, timing = await run_in_threadpool(timed, req)
                return Response(body, media_type="application/json", headers={"Server-Timing": timing})
            except paths.PathRejected as e:
                return FastJSON({"error": str(e)}, status_code=403)
            except (NotFound, FileNotFoundError) as e:
                return FastJSON({"error": f"not found: {e}"}, status_code=404)
            except (BadRequest, ValueError) as e:
                return FastJSON({"error": str(e)}, status_code=400)
            except (duckdb.Error, OSError) as e:
                # files that vanished under a running query: the profile was removed (404), or is
                # being rewritten or damaged (500): either way one line, not a traceback page
                name = req.path_params.get("name")
                if name is not None and not ws.exists(name):
                    ws.forget(name)
                    return FastJSON({"error": f"not found: profile {name!r} is no longer in the workspace"},
                                    status_code=404)
                first = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
                return FastJSON({"error": f"cannot read profile {name!r}: {first}"}, status_code=500)
        return endpoint

    def prof(req: Request):
        return ws.profile(req.path_params["name"])

    def mode(req: Request) -> str:
        return req.query_params.get("mode", "cpu_device")

    def profiles(req: Request) -> Any:
        return {"workspace": str(ws.root), "profiles": ws.list()}

    def overview(req: Request) -> Any:
        return prof(req).overview()

    def tracks(req: Request) -> Any:
        p = prof(req)
        m = mode(req)
        return {"mode": m, "rows": [r.to_json(i) for i, r in enumerate(p.rows(m))]}

    def window(req: Request) -> Any:
        return prof(req).window(mode(req), _ints(req.query_params.get("rows")), _num(req, "t0"), _num(req, "t1"),
                                int(_num(req, "px", 1000)))

    def counters(req: Request) -> Any:
        return prof(req).counters(mode(req), _ints(req.query_params.get("rows")), _num(req, "t0"), _num(req, "t1"),
                                  int(_num(req, "px", 1000)))

    def flows(req: Request) -> Any:
        return prof(req).flows(mode(req), _num(req, "t0"), _num(req, "t1"))

    def event(req: Request) -> Any:
        leaf = req.query_params.get("leaf")
        return prof(req).event(int(_num(req, "id")), int(leaf) if leaf not in (None, "") else None)

    def summary(req: Request) -> Any:
        rows = _ints(req.query_params.get("rows")) or None
        return prof(req).summary(mode(req), _num(req, "t0"), _num(req, "t1"), rows)

    def search(req: Request) -> Any:
        return prof(req).search(mode(req), req.query_params.get("q", "")[:200])

    def search_next(req: Request) -> Any:
        return prof(req).search_next(req.query_params.get("q", "")[:200], _num(req, "after"),
                                     int(_num(req, "dir", 1)))

    def device_profiles(req: Request) -> Any:
        return {"device_profiles": prof(req).device_profiles()}

    def device_overview(req: Request) -> Any:
        return prof(req).device(req.path_params["pid"]).overview()

    def device_window(req: Request) -> Any:
        d = prof(req).device(req.path_params["pid"])
        return d.window(_ints(req.query_params.get("rows")), _num(req, "t0"), _num(req, "t1"),
                        int(_num(req, "px", 1000)))

    def device_event(req: Request) -> Any:
        d = prof(req).device(req.path_params["pid"])
        return d.event(int(_num(req, "row")), int(_num(req, "start")))

    async def index(req: Request) -> Response:
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})

    routes = [
        Route("/", index),
        Route("/api/profiles", api(profiles)),
        Route("/api/profiles/{name}", api(overview)),
        Route("/api/profiles/{name}/tracks", api(tracks)),
        Route("/api/profiles/{name}/window", api(window)),
        Route("/api/profiles/{name}/counters", api(counters)),
        Route("/api/profiles/{name}/flows", api(flows)),
        Route("/api/profiles/{name}/event", api(event)),
        Route("/api/profiles/{name}/summary", api(summary)),
        Route("/api/profiles/{name}/search", api(search)),
        Route("/api/profiles/{name}/search/next", api(search_next)),
        Route("/api/profiles/{name}/device-profiles", api(device_profiles)),
        Route("/api/profiles/{name}/device/{pid}", api(device_overview)),
        Route("/api/profiles/{name}/device/{pid}/window", api(device_window)),
        Route("/api/profiles/{name}/device/{pid}/event", api(device_event)),
        Mount("/static", StaticFiles(directory=str(STATIC)), name="static"),
    ]
    app = Starlette(routes=routes)
    app.state.workspace = ws
    return app
