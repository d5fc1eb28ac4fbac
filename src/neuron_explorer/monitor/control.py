"""neuron-monitor's control endpoint: relays ``neuron-explorer attach`` requests to the processes
of its host (docs/on-demand.md, decision 0109).

A thin relay of the request and answer files (``contracts.ondemand``): the command, on any host,
finds a host's targets, writes their requests and reads their answers through this endpoint, and
aligns the steps of every target of every host itself.  HTTP on one address (127.0.0.1 unless
told otherwise), POST with a JSON body only, every call carrying the token
(``contracts.ondemand.TOKEN_HEADER``, compared in constant time).  Bodies are parsed as strictly
as the files: a request is written only once ``parse_request`` accepts it and names a process of
this user.  No CORS header is ever sent.
"""

from __future__ import annotations

import hmac
import json
import os
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from neuron_explorer.contracts import ondemand as od

__all__ = ["ControlServer"]

MAX_BODY = od.MAX_FILE_BYTES


class ControlServer:
    """The endpoint, served from a daemon thread until ``close``."""

    def __init__(self, host: str, port: int, token: str, directory: Path | None = None) -> None:
        self.token = token.encode()
        self.dir = Path(directory if directory is not None else od.default_dir())
        od.check_private_dir(self.dir, create=True)
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # (the monitor's stdout is its reports)
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                self._reply(405, {"error": "POST only"})

            def do_POST(self) -> None:  # noqa: N802
                try:
                    code, obj = server.handle(self.path, dict(self.headers.items()), self._body())
                except od.RequestError as e:
                    code, obj = 400, {"error": str(e)}
                except Exception as e:  # noqa: BLE001 - one bad call never stops the monitor
                    code, obj = 500, {"error": f"{type(e).__name__}: {e}"}
                self._reply(code, obj)

            def _body(self) -> bytes:
                n = self.headers.get("Content-Length", "")
                if not n.isdigit() or int(n) > MAX_BODY:
                    raise od.RequestError(f"a body of at most {MAX_BODY} bytes, with its Content-Length")
                return self.rfile.read(int(n))

            def _reply(self, code: int, obj: dict) -> None:
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="neuron-monitor-control", daemon=True)

    def start(self) -> "ControlServer":
        self.thread.start()
        return self

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    # -- calls ------------------------------------------------------------------------------
    def handle(self, path: str, headers: dict[str, str], body: bytes) -> tuple[int, dict]:
        given = next((v for k, v in headers.items() if k.lower() == od.TOKEN_HEADER.lower()), "")
        if not hmac.compare_digest(given.encode(), self.token):
            return 403, {"error": "wrong or missing token"}
        ctype = next((v for k, v in headers.items() if k.lower() == "content-type"), "")
        if ctype.split(";")[0].strip() != "application/json":
            return 415, {"error": "Content-Type must be application/json"}
        if path not in od.RELAY_PATHS:
            return 404, {"error": f"no such call {path[:80]!r}"}
        try:
            obj = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            raise od.RequestError("the body is not JSON") from None
        if not isinstance(obj, dict):
            raise od.RequestError("the body is not a JSON object")
        return getattr(self, "call_" + path.rsplit("/", 1)[1])(obj)

    def call_targets(self, obj: dict) -> tuple[int, dict]:
        pids, tag = obj.get("pids"), obj.get("tag")
        problems = []
        if pids is not None:
            if not isinstance(pids, list) or len(pids) > 4096 or not all(type(p) is int and 0 < p < 1 << 31
                                                                         for p in pids):
                raise od.RequestError("pids must be a list of process ids")
            found = []
            for pid in dict.fromkeys(pids):
                st = od.process_start_time(pid)
                if st is None or not od.owned(pid):
                    problems.append(f"pid {pid}: no such process of this user")
                else:
                    found.append((pid, st))
        else:
            rx = None
            if tag is not None:
                if not isinstance(tag, str) or len(tag) > 1024:
                    raise od.RequestError("tag must be a short regular expression")
                try:
                    rx = re.compile(tag)
                except re.error as e:
                    raise od.RequestError(f"tag {tag[:80]!r} is not a regular expression: {e}") from None
            found = od.listening_processes(self.dir, rx)
        return 200, {"targets": [list(t) for t in found], "problems": problems}

    def call_send(self, obj: dict) -> tuple[int, dict]:
        raw = json.dumps(obj.get("request")).encode()
        req = od.parse_request(raw)
        if not od.owned(req.pid) or od.process_start_time(req.pid) != req.start_time:
            raise od.RequestError(f"pid {req.pid} is no process of this user (or it restarted)")
        od.write_private(od.request_path(self.dir, req.pid), od.encode(req))
        return 200, {"ok": True}

    def _pid(self, obj: dict) -> int:
        pid = obj.get("pid")
        if type(pid) is not int or not 0 < pid < 1 << 31:
            raise od.RequestError("pid must be a process id")
        return pid

    def call_answer(self, obj: dict) -> tuple[int, dict]:
        path = od.answer_path(self.dir, self._pid(obj))
        if not os.path.lexists(path):
            return 200, {"answer": None}
        return 200, {"answer": od.parse_answer(od.read_private(path)).to_json()}

    def call_cleanup(self, obj: dict) -> tuple[int, dict]:
        removed = od.remove_request_files(self.dir, self._pid(obj), obj.get("id"))
        return 200, {"removed": removed}
