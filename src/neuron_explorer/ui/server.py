"""``neuron-explorer view --ui`` (decision 0081): serve the System Trace Viewer over a workspace."""

from __future__ import annotations

import ipaddress
import os
import socket
import sys

from neuron_explorer.ui import background
from neuron_explorer.util.log import get_logger

LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and localhost: the only binds that keep profiles on this machine."""
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


def split_host_header(value: str) -> tuple[str, int | None] | None:
    """``("name", port)`` from a Host header (``name``, ``name:port``, ``[v6]:port``); None if malformed."""
    v = value.strip().lower()
    if v.startswith("["):
        end = v.find("]")
        if end < 0:
            return None
        name, rest = v[1:end], v[end + 1:]
        if rest and not rest.startswith(":"):
            return None
        port_s = rest[1:] if rest else ""
    else:
        name, _, port_s = v.partition(":")
    if port_s:
        if not port_s.isdigit() or len(port_s) > 5:
            return None
        return name.rstrip("."), int(port_s)
    return name.rstrip("."), None


class HostPolicy:
    """Which Host headers name this server (the defence against DNS rebinding).

    A web page on an attacker's domain can make that domain resolve to 127.0.0.1; the browser then sends
    the page's requests to this server, but with the attacker's name in Host. So a request is answered
    only when its Host names the served address and port: on a loopback bind, loopback names and
    addresses (127.0.0.1, localhost, [::1], the bound address); on a non-loopback bind chosen with
    ``--host``, also that host and any literal IP address (a rebinding attack always uses a domain name),
    and, on a wildcard bind (0.0.0.0, ::), this machine's host name and FQDN.
    """

    def __init__(self, bind_host: str, port: int) -> None:
        self.port = port
        b = bind_host.strip("[]").lower()
        self.loopback = is_loopback(b)
        self.names = set(LOOPBACK_NAMES) | {b}
        if b in ("0.0.0.0", "::", ""):
            self.names |= {socket.gethostname().lower(), socket.getfqdn().lower()}
        self.shown = url_for(bind_host, port)

    def allows(self, host_header: str | None) -> bool:
        parsed = split_host_header(host_header) if host_header else None
        if parsed is None:
            return False
        name, port = parsed
        if (port if port is not None else 80) != self.port:
            return False
        if name in self.names or is_loopback(name):
            return True
        return not self.loopback and _is_ip(name)


class HostGuard:
    """ASGI middleware: answer 403 to HTTP requests whose Host is not one ``policy`` allows."""

    def __init__(self, app, policy: HostPolicy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] in ("http", "websocket"):
            host = next((v.decode("latin-1") for k, v in scope.get("headers", []) if k == b"host"), None)
            if not self.policy.allows(host):
                body = (f"refused: the Host header {host!r} does not name this server ({self.policy.shown}); "
                        "open the URL the server printed (see --host in docs/ui.md)\n").encode()
                if scope["type"] == "websocket":
                    await send({"type": "websocket.close", "code": 1008})
                    return
                await send({"type": "http.response.start", "status": 403,
                            "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                                        (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def default_cache_dir() -> str:
    """Pyramids are derived data: they live in the user's cache, never in the (read-only) workspace."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "neuron-explorer", "ui")


def url_for(host: str, port: int) -> str:
    shown = host
    if host in ("0.0.0.0", "::", ""):
        shown = socket.gethostname()
    elif ":" in host and not host.startswith("["):
        shown = f"[{host}]"
    return f"http://{shown}:{port}/"


def listen_socket(host: str) -> socket.socket:
    """An unbound TCP socket for ``host`` with SO_REUSEADDR and TCP_NODELAY.

    Answers go out as two writes (headers, then body). Without TCP_NODELAY the body waits for the
    client's delayed ACK of the headers on a kept-alive connection: about 40 ms added to every request,
    more than a whole zoomed-in window query. Accepted connections inherit the option on Linux.
    """
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except OSError:
        pass
    return sock


SHUTDOWN_WAIT_S = 2.0  # at exit, how long the server waits for a background preparation or index build


def serve(workspace: str, host: str = "127.0.0.1", port: int = 3001) -> int:
    """Serve the UI for ``workspace`` until interrupted; returns the process exit code.

    Binds loopback by default. Any other address exposes every profile in the workspace to whoever
    can reach it (there is no authentication), so that case prints a warning first. Requests whose
    Host header does not name the served address are refused (``HostPolicy``).
    """
    try:
        import uvicorn

        from neuron_explorer.ui.app import create_app
    except ImportError as e:  # the 'ui' extra is not installed
        get_logger(__name__).error("neuron-explorer: the UI needs the 'ui' extra (pip install 'neuron-explorer[ui]'): "
                                   f"{e}")
        return 2
    if not os.path.isdir(workspace):
        get_logger(__name__).error(f"neuron-explorer: workspace {workspace} is not a directory")
        return 2
    if not 0 < port < 65536:
        get_logger(__name__).error(f"neuron-explorer: error: --port {port} is not valid; accepted: a TCP port from 1 "
                                   "to 65535")
        return 2
    if not is_loopback(host):
        get_logger(__name__).warning(f"neuron-explorer: WARNING: serving on {host}, which is not a loopback address: "
                                     f"anyone who can reach this machine on port {port} can read every profile in "
                                     f"{workspace} (no authentication). Use --host 127.0.0.1 (the default) and an SSH "
                                     "tunnel instead.")
    try:
        policy = HostPolicy(host, port)
    except OSError as e:
        get_logger(__name__).error(f"neuron-explorer: cannot serve on --host {host!r}: {e.strerror or e}")
        return 2
    # bind first so a busy port is a clear error, not a traceback
    sock = listen_socket(host)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as e:
        get_logger(__name__).error(f"neuron-explorer: cannot listen on {host}:{port}: {e.strerror or e}")
        sock.close()
        return 1
    app = HostGuard(create_app(workspace, cache_dir=default_cache_dir()), policy)
    get_logger(__name__).info(f"neuron-explorer: System Trace Viewer for {workspace}")
    print(url_for(host, port), flush=True)
    config = uvicorn.Config(app, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
    left = background.wait(SHUTDOWN_WAIT_S)
    if left:
        # A thread still inside DuckDB's C++ code aborts the process when the interpreter finalises
        # (docs/decisions/0061): leave without finalising. Nothing is lost: an index is renamed into
        # the cache only when complete, and the next open removes this build's temporary directory.
        get_logger(__name__).warning(f"neuron-explorer: stopping without waiting for {', '.join(left)}; "
                                     "it is built again at the next open")
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m neuron_explorer.ui.server WORKSPACE [HOST] [PORT]`` (tests and the benchmark)."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        print("usage: python -m neuron_explorer.ui.server WORKSPACE [HOST] [PORT]", file=sys.stderr)
        return 2
    host = argv[1] if len(argv) > 1 else "127.0.0.1"
    try:
        port = int(argv[2]) if len(argv) > 2 else 3001
    except ValueError:
        print(f"usage: PORT {argv[2]!r} is not a number", file=sys.stderr)
        return 2
    return serve(argv[0], host, port)


if __name__ == "__main__":
    sys.exit(main())
