"""Device-profile .pftrace files from a real capture (a compiled model with the session-mode device
profile on), decoded with the perfetto package's protos: every op of the profile, at the absolute
start and end the Parquet output gives it, on its engine's track."""

from __future__ import annotations

import glob
import json
import os
from collections import Counter

import pytest

from ..capture.test_device_and_api import session_capture
from .test_perfetto_semantics import decode

pytestmark = pytest.mark.slow


def test_device_profile_trace_holds_every_op_at_its_time(tmp_path, tmp_path_factory):
    import duckdb

    from neuron_explorer.view.pipeline import ViewOptions, run

    # a compiled model's 3 steps with the session-mode device profile: the capture the device-profile
    # tests read, made once per test run (one launch for both)
    out = session_capture(tmp_path_factory)
    views = tmp_path / "views"
    views.mkdir()
    for fmt, name in (("perfetto", "t.pftrace"), ("json", "t.json"), ("parquet", "pq")):
        run(ViewOptions(directory=str(out), output_format=fmt, output_file=str(views / name), progress=False, jobs=1))
    origin = json.load(open(views / "t.json"))["metadata"]["origin_ns"]
    (dev,) = glob.glob(f"{views}/device_profile_model_*.pftrace")
    profile_id = os.path.basename(dev)[len("device_profile_model_"):-len(".pftrace")]
    d = decode(open(dev, "rb").read())
    assert d.slices
    got = Counter((d.track_name(s.track).split(" #")[0], s.name, s.start + origin, s.end + origin) for s in d.slices)
    rows = duckdb.connect().execute(
        f"""select track, name, start_ts, end_ts from read_parquet('{views}/pq/DeviceProfileEvents/**/*.parquet',
            hive_partitioning=true) where profile_id = ?""", [profile_id]).fetchall()
    want = Counter((t, n, s, max(s, e)) for t, n, s, e in rows)
    assert got == want
    assert all(isinstance(s.args.get("exec_id"), int) for s in d.slices)
