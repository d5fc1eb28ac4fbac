"""``neuron-explorer view`` (no output format): serve the System Trace Viewer over a workspace."""

from __future__ import annotations

import ipaddress
import os
import socket
import sys

LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and localhost: the only binds that keep profiles on this machine."""
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


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


def serve(workspace: str, host: str = "127.0.0.1", port: int = 3001) -> int:
    """Serve the UI for ``workspace`` until interrupted; returns the process exit code.

    Binds loopback by default. Any other address exposes every profile in the workspace to whoever
    can reach it (there is no authentication), so that case prints a warning first.
    """
    try:
        import uvicorn

        from .app import create_app
    except ImportError as e:  # the 'ui' extra is not installed
        print(f"neuron-explorer: the UI needs the 'ui' extra (pip install 'neuron-explorer[ui]'): {e}",
              file=sys.stderr)
        return 2
    if not os.path.isdir(workspace):
        print(f"neuron-explorer: workspace {workspace} is not a directory", file=sys.stderr)
        return 2
    if not is_loopback(host):
        print(f"neuron-explorer: WARNING: serving on {host}, which is not a loopback address: anyone who can "
              f"reach this machine on port {port} can read every profile in {workspace} (no authentication). "
              "Use --host 127.0.0.1 (the default) and an SSH tunnel instead.", file=sys.stderr)
    # bind first so a busy port is a clear error, not a traceback
    sock = listen_socket(host)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as e:
        print(f"neuron-explorer: cannot listen on {host}:{port}: {e.strerror or e}", file=sys.stderr)
        sock.close()
        return 1
    app = create_app(workspace, cache_dir=default_cache_dir())
    print(f"neuron-explorer: System Trace Viewer for {workspace}", file=sys.stderr)
    print(url_for(host, port), flush=True)
    config = uvicorn.Config(app, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m neuron_explorer.ui.server WORKSPACE [HOST] [PORT]`` (tests and the benchmark)."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        print("usage: python -m neuron_explorer.ui.server WORKSPACE [HOST] [PORT]", file=sys.stderr)
        return 2
    host = argv[1] if len(argv) > 1 else "127.0.0.1"
    port = int(argv[2]) if len(argv) > 2 else 3001
    return serve(argv[0], host, port)


if __name__ == "__main__":
    sys.exit(main())
