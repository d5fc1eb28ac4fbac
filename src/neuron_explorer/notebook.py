"""Profiling a notebook cell or a block of a script: ``%%neuron_profile`` and ``profile()``.

In Jupyter (or IPython)::

    %load_ext neuron_explorer

    %%neuron_profile -o ./output
    for _ in range(10):
        loss = model(x).sum(); loss.backward()

captures the cell's PyTorch/JAX activity as one capture session (the same files as a profiled
process: ``neuron-explorer view -d ./output`` reads them), then shows the summary table and an
inline timeline of the cell under it.  In a script, the same through a context manager::

    from neuron_explorer.notebook import profile

    with profile("./output") as p:
        train_step()
    print(p.summary)          # the summary table; p.session_dir: the capture

Why a session and not a process: a notebook's kernel lives across many cells, and a capture of the
whole kernel would mix them.  Each ``profile`` adds a capture sink to the in-process runtime for
its duration (the rings are drained first, so what ran before is not part of it), as
``neuron_explorer.torch``'s sessions do; the hooks stay installed between cells.  The timeline is
an SVG drawn from ``view``'s Chrome JSON (at most ``MAX_DRAWN`` events, the longest first), so it
needs no JavaScript and survives the notebook being saved and reopened.
"""

from __future__ import annotations

import contextlib
import html
import json
import os
import tempfile
import threading
from dataclasses import dataclass, field
from typing import Any, Iterator

from neuron_explorer.util.log import get_logger

__all__ = ["Profile", "profile", "load_ipython_extension", "timeline_svg", "MAX_DRAWN"]

MAX_DRAWN = 2000  # events drawn in the inline timeline (the longest; the files hold them all)
_lock = threading.Lock()


@dataclass
class Profile:
    """What one ``profile()`` block captured: where, its summary table, and its timeline."""

    output_dir: str
    session_dir: str | None = None
    summary: str = ""
    events: list[dict[str, Any]] = field(default_factory=list, repr=False)  # Chrome trace "X" events
    warnings: list[str] = field(default_factory=list)
    track_names: dict[tuple[str, str], str] = field(default_factory=dict, repr=False)  # (pid, tid) -> label

    def __repr__(self) -> str:
        """The summary table, then where the capture is (what a terminal or text/plain shows)."""
        return f"{self.summary.rstrip()}\ncapture: {self.session_dir or '(nothing captured)'}"

    def timeline_html(self) -> str:
        return timeline_svg(self.events, names=self.track_names)

    def _repr_html_(self) -> str:
        """Jupyter shows a Profile as its summary and timeline."""
        where = html.escape(self.session_dir or "(nothing captured)")
        return (f"<div><pre>{html.escape(self.summary)}</pre>{self.timeline_html()}"
                f"<p>capture: <code>{where}</code> (<code>neuron-explorer view -d "
                f"{html.escape(self.output_dir)}</code>)</p></div>")


def _runtime():
    from neuron_explorer import boot
    from neuron_explorer.runtime.config import CaptureConfig
    from neuron_explorer.runtime.core import get_runtime

    rt = get_runtime()
    if rt is None:
        rt = boot.start(CaptureConfig.from_env({}), from_env=False, capture=False, keep_rings=True)
    return rt


@contextlib.contextmanager
def profile(output_dir: str | None = None, view: bool = True) -> Iterator[Profile]:
    """Capture what runs inside the block as one session under ``output_dir`` (default:
    ``NEURON_RT_INSPECT_OUTPUT_DIR``, else ``./output``); with ``view``, fill in the summary and
    timeline at the end.  The block's own exceptions pass through unchanged (the capture is still
    written)."""
    from neuron_explorer.capture.sink import CaptureSink, report_written
    from neuron_explorer.contracts import env as cfgmod
    from neuron_explorer.runtime.config import CaptureConfig

    out = output_dir or os.environ.get(cfgmod.OUTPUT_DIR) or "./output"
    result = Profile(output_dir=out)
    rt = _runtime()
    cfg = CaptureConfig.from_env({k: v for k, v in os.environ.items() if k.startswith("NEURON_EXPLORER_")})
    cfg.output_dir = out
    os.makedirs(out, exist_ok=True)
    with _lock:
        rt.discard()  # what ran before the block is not part of it
        sink = CaptureSink(rt, config=cfg)
        rt.add_sink(sink)
        sink.start()
    try:
        yield result
    finally:
        sink.flush(rt, final=True, reason="profile end")
        with _lock:
            rt.remove_sink(sink)
        if sink.final_error is not None:
            report_written(sink)  # "profile incomplete: the final write failed (...)"
        result.session_dir = sink.session_dir if sink.written else None
    if view and result.session_dir:
        _view(result)


def _view(p: Profile) -> None:
    """The block's summary and timeline, read back from its session as ``view`` reads it."""
    from neuron_explorer.view.options import ViewOptions
    from neuron_explorer.view.pipeline import run

    assert p.session_dir is not None
    res = run(ViewOptions(directory=p.session_dir, output_format="summary-text", progress=False, jobs=1))
    p.summary = res.text or ""
    p.warnings = [m for m, _ in res.warnings]
    with tempfile.TemporaryDirectory(prefix="neuron-explorer-cell-") as tmp:
        path = os.path.join(tmp, "cell.json")
        run(ViewOptions(directory=p.session_dir, output_format="json", output_file=path, progress=False, jobs=1))
        with open(path, "rb") as f:
            doc = json.load(f)
    evs = doc.get("traceEvents", []) if isinstance(doc, dict) else doc
    evs = [e for e in evs if isinstance(e, dict)]
    p.events = [e for e in evs if e.get("ph") == "X"]
    p.track_names = {(str(e.get("pid")), str(e.get("tid"))): str((e.get("args") or {}).get("name", ""))
                     for e in evs if e.get("ph") == "M" and e.get("name") == "thread_name"}


def timeline_svg(events: list[dict[str, Any]], width: int = 960, row: int = 16,
                 names: dict[tuple[str, str], str] | None = None) -> str:
    """An SVG timeline: one row per (pid, tid) track, one bar per event, its name and duration in a
    tooltip.  At most ``MAX_DRAWN`` events, the longest first (a cell's long phases show; the files
    hold every event)."""
    if not events:
        return "<p>(no events in this cell's capture)</p>"
    drawn = sorted(events, key=lambda e: -float(e.get("dur") or 0))[:MAX_DRAWN]
    t0 = min(float(e.get("ts") or 0) for e in drawn)
    t1 = max(float(e.get("ts") or 0) + float(e.get("dur") or 0) for e in drawn)
    span = max(t1 - t0, 1e-3)
    tracks = sorted({(str(e.get("pid")), str(e.get("tid"))) for e in drawn})
    y = {t: i for i, t in enumerate(tracks)}
    label_w, plot_w = 160, width - 170
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="neuron-explorer-timeline" width="{width}" '
             f'height="{row * len(tracks) + 24}" font-family="monospace" font-size="10">']
    for t, i in y.items():
        label = (names or {}).get(t) or f"{t[0]}/{t[1]}"
        parts.append(f'<text x="2" y="{i * row + 12}">{html.escape(label[:26])}</text>')
    for e in drawn:
        ts, dur = float(e.get("ts") or 0), float(e.get("dur") or 0)
        x = label_w + (ts - t0) / span * plot_w
        w = max(dur / span * plot_w, 0.5)
        name = str(e.get("name", ""))
        hue = sum(map(ord, name)) % 360
        parts.append(f'<rect x="{x:.1f}" y="{y[(str(e.get("pid")), str(e.get("tid")))] * row + 2}" width="{w:.1f}" '
                     f'height="{row - 4}" fill="hsl({hue},60%,55%)"><title>{html.escape(name)} '
                     f'{dur:.1f} us</title></rect>')
    parts.append(f'<text x="{label_w}" y="{row * len(tracks) + 18}">0 .. {span / 1000:.3f} ms, '
                 f'{len(drawn)} of {len(events)} events</text></svg>')
    return "".join(parts)


# ---- IPython

def _magic(line: str, cell: str, shell: Any) -> Profile | None:
    """``%%neuron_profile [-o DIR] [--no-view]``: run the cell in the user's namespace, captured."""
    import shlex

    args = shlex.split(line)
    out, view = None, True
    while args:
        a = args.pop(0)
        if a in ("-o", "--output-dir") and args:
            out = args.pop(0)
        elif a == "--no-view":
            view = False
        else:
            get_logger(__name__).error(f"neuron-explorer: error: %%neuron_profile: unknown argument {a!r}; "
                                       "accepted: -o DIR, --no-view")
            return None
    code = compile(shell.transform_cell(cell), "<%%neuron_profile cell>", "exec")
    with profile(out, view=view) as p:
        exec(code, shell.user_ns)  # (as %%time runs a cell: the user's namespace, its exceptions shown)
    if p.session_dir is None:
        get_logger(__name__).warning("neuron-explorer: warning: %%neuron_profile: the cell recorded nothing "
                                     "(no PyTorch or JAX work ran in it)")
        return None
    get_logger(__name__).info(f"neuron-explorer: profile written to {p.session_dir}")
    return p if view else None  # (shown as the cell's result: the summary and the timeline)


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext neuron_explorer``: registers the ``%%neuron_profile`` cell magic."""

    def neuron_profile(line: str, cell: str) -> Profile | None:
        return _magic(line, cell, ipython)

    neuron_profile.__doc__ = _magic.__doc__
    ipython.register_magic_function(neuron_profile, magic_kind="cell", magic_name="neuron_profile")
