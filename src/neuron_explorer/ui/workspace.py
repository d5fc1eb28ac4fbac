"""The profiles of one workspace directory, opened lazily and shared by all requests.

Why a registry: preparing a profile (its leaf scan and window index) is the one expensive step, so it
happens once per profile however many requests arrive at the same time, and again only when the
profile is re-ingested (its metadata file changes) or removed.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import duckdb

from neuron_explorer.contracts.dataset import DEVICE_PROFILES, METADATA, table_file
from neuron_explorer.ui import background, paths
from neuron_explorer.ui.params import NotFound, one_line
from neuron_explorer.ui.profile import COARSE_MIN_EVENTS, RAW_BUDGET, Profile, Progress, stamp
from neuron_explorer.ui.sql import quote


class Workspace:
    """The profiles of one workspace directory, opened lazily and shared by all requests."""

    def __init__(self, root: str | os.PathLike, cache_dir: str | os.PathLike | None = None,
                 pyramid_min_events: int = 2_000_000, threads: int | None = None,
                 raw_budget: int = RAW_BUDGET) -> None:
        self.root = Path(root).resolve()
        self.raw_budget = raw_budget
        self.cache_dir = Path(cache_dir) if cache_dir else None
        self.pyramid_min_events = pyramid_min_events
        self.threads = threads
        self.con = self._connect()
        self._profiles: dict[str, Profile] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._progress: dict[str, Progress] = {}
        self._lock = threading.Lock()
        self.index_gate: threading.Event | None = None  # tests: hold every background index build until set
        self.coarse_min_events = COARSE_MIN_EVENTS  # smaller profiles build their index before the first paint

    def _connect(self) -> duckdb.DuckDBPyConnection:
        con = duckdb.connect(":memory:")
        if self.threads:
            con.execute(f"SET threads = {int(self.threads)}")
        for opt in ("SET parquet_metadata_cache = true", "SET enable_object_cache = true"):
            try:
                con.execute(opt)
            except duckdb.Error:
                pass
        return con

    def revive(self) -> bool:
        """Replace the workspace's database when it no longer answers (True then).

        Why: DuckDB meets some damaged Parquet files with an internal error that invalidates the whole
        database it ran on; every later query, of any profile, fails from then on. Called after a
        failed query: the profiles prepared on the dead database (their counters and leaf tables
        lived there) are forgotten and prepared again by their next request."""
        with self._lock:
            try:
                self.con.cursor().execute("SELECT 1").fetchall()
                return False
            except duckdb.Error:
                pass
            self.con = self._connect()
            self._profiles.clear()
            return True

    def list(self) -> list[dict[str, Any]]:
        """Profiles in the workspace, from their metadata only (cheap: nothing is prepared)."""
        out = []
        for name in paths.list_profile_dirs(self.root):
            d = self.root / name
            meta = paths.single_file(self.root, d, table_file(METADATA))
            if not meta:
                continue
            try:
                r = self.con.cursor().execute(f"""
                    SELECT count(*), count(DISTINCT instance_id), max(world_size), sum(events), min(start_wall_ns),
                           any_value(display_name)
                    FROM read_parquet({quote(meta)})""").fetchall()[0]
            except duckdb.Error:
                self.revive()  # the damaged file may have taken the database with it: the others still list
                continue
            out.append({"name": name, "processes": int(r[0]), "instances": int(r[1]),
                        "world_size": int(r[2] or 0), "events": int(r[3] or 0),
                        "start_wall_ns": str(r[4]) if r[4] is not None else None,
                        "display_name": r[5] or name,
                        "types": ["system", "device"] if self._has_device_profiles(d) else ["system"]})
        return out

    def _has_device_profiles(self, profile_dir: Path) -> bool:
        dev = paths.single_file(self.root, profile_dir, table_file(DEVICE_PROFILES))
        if not dev:
            return False
        try:
            q = f"SELECT count(*) FROM read_parquet({quote(dev)})"
            return self.con.cursor().execute(q).fetchall()[0][0] > 0
        except duckdb.Error:
            self.revive()
            return False

    def exists(self, name: str) -> bool:
        """Is ``name`` (still) a profile of the workspace?"""
        try:
            paths.resolve_profile(self.root, name)
            return True
        except (paths.PathRejected, OSError):
            return False

    def forget(self, name: str) -> None:
        """Drop a prepared profile (removed or replaced on disk): the next request prepares it anew."""
        with self._lock:
            self._profiles.pop(name, None)

    def profile(self, name: str, wait: bool = True) -> Profile:
        """The prepared profile (prepared once; concurrent first requests wait for the same work).

        With ``wait`` (the default) it also waits for the event index; without, a cold open returns
        as soon as the leaves and the coarse level are ready (``p.index`` is None until the background
        build is done: windows, busy shares and track lists are answered from the coarse level).
        A profile removed from the workspace while the server runs is NotFound (and forgotten); one
        re-ingested under the same name, or whose index build failed, is prepared again."""
        p = self._prepared(name)
        return p.wait_index() if wait else p

    def _prepared(self, name: str) -> Profile:
        paths.check_profile_name(name)
        with self._lock:
            p = self._profiles.get(name)
        if p is not None:
            if not self.exists(name):
                self.forget(name)
                raise NotFound(f"profile {name!r} is no longer in the workspace")
            if stamp(p.meta_file) == p.stamp and p.index_error is None and p.con is self.con:
                return p
            if p.index_error is not None:
                self.revive()  # the build may have failed because the database died under it
            self.forget(name)  # re-ingested, its index build failed, or its database was replaced: prepare it again
        with self._lock:
            p = self._profiles.get(name)
            if p is not None:
                return p
            lock = self._locks.setdefault(name, threading.Lock())
        with lock:
            p = self._profiles.get(name)
            if p is None:
                prog = self._progress.get(name)
                if prog is None or prog.error or prog.settled.is_set():  # else: status()'s, for this preparation
                    prog = self._progress[name] = Progress()
                try:
                    p = Profile(self.root, name, self.con, self.cache_dir, self.pyramid_min_events, self.raw_budget,
                                progress=prog, index_gate=self.index_gate, coarse_min_events=self.coarse_min_events)
                except Exception as e:
                    if isinstance(e, duckdb.Error):
                        self.revive()  # so that the next attempt, and the other profiles, have a database
                    prog.error = one_line(e)
                    prog.settled.set()
                    raise
                with self._lock:
                    self._profiles[name] = p
        return p

    def status(self, name: str, wait_s: float = 0.0) -> dict[str, Any]:
        """How far ``name``'s preparation has got (``/status``); with ``wait_s`` (at most 1 s), the answer
        waits until the first paint can start (coarse, ready or failed) or that long, whichever is first.

        The first call starts the preparation in a background thread, so a browser opening a profile
        never seen before shows a progress bar within a request's time instead of a blank page for
        the minutes a 100M-event index build takes. The wait spares a cold open the polling interval:
        the answer goes out as soon as the summary is read (docs/decisions/0055-ui-cold-open-requests.md)."""
        st = self._status(name)
        if wait_s > 0 and st.get("state") == "preparing" and not st.get("coarse"):
            with self._lock:
                prog = self._progress.get(name)
            if prog is not None and prog.settled.wait(min(float(wait_s), 1.0)):
                st = self._status(name)
        return st

    def _status(self, name: str) -> dict[str, Any]:
        paths.check_profile_name(name)
        try:
            paths.resolve_profile(self.root, name)  # a link out of the workspace: PathRejected, as for the others
        except OSError:
            raise NotFound(f"profile {name!r}") from None
        with self._lock:
            p = self._profiles.get(name)
            prog = self._progress.get(name)
        if p is not None and stamp(p.meta_file) == p.stamp:
            if p.index_ready:
                return {"state": "ready", "phase": "ready", "fraction": 1.0}
            if p.index_error is None:
                return p.progress.to_json()  # coarse: the timeline can paint while the index builds
        if prog is not None and prog.error and not prog.reported:
            prog.reported = True  # say it once (the browser shows it); the next call tries again
            return prog.to_json()
        if prog is None or prog.error or prog.phase == "ready":
            prog = Progress()
            with self._lock:
                self._progress[name] = prog  # until the thread's own Progress replaces it
            background.start(self._prepare_quietly, name, name=f"prepare-{name}", what=f"the preparation of {name}")
        return prog.to_json()

    def _prepare_quietly(self, name: str) -> None:
        """Prepare in the background; a failure is recorded in the progress (and raised again to the
        next request that needs the profile)."""
        try:
            self.profile(name, wait=False)
        except Exception:  # noqa: BLE001 - reported through status() and the next request
            pass
