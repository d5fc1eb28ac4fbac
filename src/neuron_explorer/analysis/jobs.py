"""Which job a process's collectives belong to.

A collective is named by its group's ranks, its op and its sequence number, so the k-th
``all_reduce`` of two jobs has the same name: converted together (the default output directory
collects every run), two jobs would share collective flows, and clock alignment would match one
job's collectives with the other's.  A job is told apart by two facts (decision 0091):

* **Its rendezvous.**  The launcher's variables the capture recorded in trace_info.pb's ``job`` map
  (``contracts.env.JOB_VARIABLES``: MASTER_ADDR/MASTER_PORT, torchrun's run id and restart count,
  Slurm's job and step, ...), the same on every rank of a job.  A master address on the loopback
  interface is a rendezvous of one host alone, so the host name is part of it there (the host's
  name, not the instance id: processes that share a loopback share a host, whatever
  ``NEURON_EXPLORER_INSTANCE_ID`` calls them).
* **Its run.**  A rendezvous is reused by the next run of the same script (the same port, the same
  fixed run id).  On one instance every process reads the same wall clock, and two runs of one
  rendezvous cannot be alive at once, so the processes of a rendezvous on one instance whose
  lifetimes overlap are one run; runs are numbered in time order on each instance, and the k-th
  run on every instance of a rendezvous is one job (the hosts of a job start its runs in the same
  order, whatever their clocks say).

Captures without the ``job`` map (written before it existed, or by a launcher that sets none of
the variables) share the empty rendezvous and are told apart by their runs only.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ProcessLife", "assign", "life_of", "rendezvous"]

_LOOPBACK = ("localhost", "ip6-localhost", "ip6-loopback", "::1", "0:0:0:0:0:0:0:1")


def _loopback(addr: str) -> bool:
    a = addr.strip().strip("[]").lower()
    return a in _LOOPBACK or a.startswith("127.") or a.startswith("::ffff:127.")


def rendezvous(job: dict[str, str], host: str) -> str:
    """The rendezvous a process took part in, as one string (``""``: none recorded); ``host``: the
    name of the host it ran on."""
    if not job:
        return ""
    parts = [f"{k}={job[k]}" for k in sorted(job)]
    if _loopback(job.get("MASTER_ADDR", "")) or _loopback(job.get("JAX_COORDINATOR_ADDRESS", "").rsplit(":", 1)[0]):
        parts.append(f"host={host}")
    return "\x1f".join(parts)


@dataclass(frozen=True)
class ProcessLife:
    """What ``assign`` needs of a process: where it ran, its rendezvous, and when it was alive
    (wall-clock ns on its instance's clock)."""

    instance: str
    rendezvous: str
    start: int
    end: int


def life_of(info, instance: str, last_ns: int | None = None) -> ProcessLife:
    """A process's ``ProcessLife`` from its trace_info.pb (``info``; None: nothing recorded).  Its
    lifetime runs from its first clock anchor (or ``start_wall_ns``) to its last, or to
    ``last_ns`` (the end of its last collective, wall clock) when that is later."""
    walls = [a.wall_ns for a in info.anchors] if info is not None else []
    if info is not None and info.start_wall_ns:
        walls.append(int(info.start_wall_ns))
    if last_ns is not None:
        walls.append(int(last_ns))
    start, end = (min(walls), max(walls)) if walls else (0, 0)
    job = dict(info.job) if info is not None else {}
    return ProcessLife(instance, rendezvous(job, (info.hostname if info is not None else "") or instance), start, end)


def assign(lives: list[ProcessLife]) -> list[str]:
    """The job of each process: its rendezvous and the number of its run (see the module).  The
    ids only tell jobs apart within one ``view`` run."""
    by: dict[tuple[str, str], list[int]] = {}
    for i, p in enumerate(lives):
        by.setdefault((p.rendezvous, p.instance), []).append(i)
    out = [""] * len(lives)
    for (rdv, _), idx in by.items():
        idx.sort(key=lambda i: (lives[i].start, lives[i].end))
        run, until = -1, None
        for i in idx:
            if until is None or lives[i].start > until:  # starts after every earlier one ended: a new run
                run += 1
                until = lives[i].end
            else:
                until = max(until, lives[i].end)
            out[i] = f"{rdv}\x1e{run}"
    return out
