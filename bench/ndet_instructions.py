"""Instructions per step for NDET and device profiles, counted with callgrind.

The same measurement as ``bench/capture_instructions.py`` (its worker, its callgrind driver, the
slope between a short and a long run), with the configurations that file does not have:

* ``plain``, ``system``, ``ndet``, ``ndet_nonan`` -- as in ``capture_instructions.py``;
* ``system_devmodel`` -- the system profile plus ``NEURON_RT_INSPECT_DEVICE_PROFILE=model``: the
  op recorder runs on the first execution of each graph (during the warm-up, which is not
  counted), so the slope is the steady-state cost, to compare with ``system``;
* ``system_devsession`` -- the same in ``session`` mode (every execution recorded);
* ``ndet_stats`` -- ``ndet`` with neuron-monitor's counters on, as a user's default has them.

Usage::

    python bench/ndet_instructions.py --configs plain,system,system_devmodel --short 100 --long 300
    python bench/ndet_instructions.py --configs plain,ndet,ndet_nonan

Results go to ``bench/results/ndet_instructions.json``; the ratios are printed against ``plain``
and, for the device-profile configurations, against ``system``.
"""

from __future__ import annotations

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from bench import capture_instructions as ci  # noqa: E402

RESULTS = os.path.join(HERE, "results", "ndet_instructions.json")
DEVICE = {"system_devmodel": "model", "system_devsession": "session"}
_base_env = ci._env


def _env(config: str, out_dir: str, workload: str = "compiled") -> dict[str, str]:
    """capture_instructions' environments, plus the device-profile ones (system + a mode) and
    ``ndet_stats``: NDET as a user runs it, with neuron-monitor's counters on (their publisher's
    period stretched like the flush: the per-step part is what is counted)."""
    if config == "ndet_stats":
        env = _base_env("ndet", out_dir, workload)
        del env["NEURON_EXPLORER_STATS"]
        env.update(NEURON_EXPLORER_STATS_PERIOD_MS="100000000",
                   NEURON_EXPLORER_STATS_DIR=os.path.join(out_dir, "stats"))
        return env
    if config not in DEVICE:  # (every base environment has NEURON_EXPLORER_STATS=0: see ci._env)
        return _base_env(config, out_dir, workload)
    env = _base_env("system", out_dir, workload)
    env["NEURON_RT_INSPECT_DEVICE_PROFILE"] = DEVICE[config]
    return env


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ci.CONFIGS = tuple(ci.CONFIGS) + tuple(DEVICE) + ("ndet_stats",)
    ci._env = _env
    if "--out" not in argv and "--worker" not in argv:
        argv += ["--out", RESULTS]
    rc = ci.main(argv)
    if rc == 0 and "--worker" not in argv:
        out = argv[argv.index("--out") + 1]
        with open(out) as f:
            res = json.load(f)
        ps = res["per_step"]
        if "system" in ps:
            res["ratio_over_system"] = {c: ps[c] / ps["system"] for c in ps if c in DEVICE}
            for c, r in res["ratio_over_system"].items():
                print(f"  {c}: {r:.4f}x the system profile ({ps[c] - ps['system']:+,.0f}/step)")
            with open(out, "w") as f:
                json.dump(res, f, indent=2)
    return rc


if __name__ == "__main__":
    sys.exit(main())
