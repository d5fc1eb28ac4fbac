"""``view`` on a Dask distributed cluster (``--scheduler tcp://HOST:8786``): ``DaskEngine``, the
engine that runs the steps of ``pipeline.run`` (discovery, the output check, the index and the
conversion of each profile, the finalize step: ``view.tasks``) on the cluster's workers, while
this process plans, draws the progress bar and prints the warnings as for a local run.  With
object storage but no cluster (``-d s3://...``, ``--output-file s3://...``) the same run takes a
``pipeline.LocalEngine``.  Plain local runs never come here, so they pay for neither Dask nor
the AWS SDK.

A worker that dies mid-task is replaced by the scheduler, which runs the task again elsewhere: a
conversion task writes only its own, deterministically named files, so the retry overwrites what
the dead attempt left.  The output appears whole or not at all: on a file system the dataset is
built in a private work area and renamed into place by the finalize task; on object storage the
completion marker is written last (``view.remote``).  See docs/scale-out.md and decisions 0046-0048
and 0099.
"""

from __future__ import annotations

import itertools
import re
import uuid
from typing import Any, Callable, Iterator

from neuron_explorer.util.storage import StorageError

from . import tasks
from .options import ViewError
from .pipeline import LocalEngine, Progress


class ClusterError(Exception):
    """The cluster could not be used or lost the run (one line for the user; exit status 1)."""


class ClusterUsageError(ClusterError):
    """``--scheduler`` names no address a Dask client can use (a usage error: exit status 2)."""


SCHEMES = ("tcp://", "tls://", "ucx://", "inproc://")
_HOST = re.compile(r"^(?:\[[0-9A-Fa-f:.]+(?:%[\w.-]+)?\]|[A-Za-z0-9_.-]+)$")
EXAMPLE = "tcp://HOST:8786, e.g. tcp://10.0.0.5:8786 or tcp://[::1]:8786"


def check_scheduler(address: str) -> str:
    """``address`` when a Dask client can connect to it (``scheme://host:port``, an IPv6 host in
    brackets, port 1-65535), else ClusterUsageError naming what is wrong.  Checked before Dask is
    imported: a malformed address makes ``distributed.Client`` raise from its constructor and then
    block for a minute in its finalizer (distributed 2026.8)."""
    if address.startswith("ray://"):
        raise ClusterUsageError(f"--scheduler {address}: Ray is not supported; start a Dask scheduler "
                                "(dask scheduler) and pass tcp://HOST:8786 (docs/decisions/0047-dask-not-ray.md)")
    if not address.startswith(SCHEMES):
        raise ClusterUsageError(f"--scheduler {address!r}: expected a Dask scheduler address such as {EXAMPLE} "
                                "(or tls://...)")
    scheme, _, loc = address.partition("://")
    if scheme == "inproc":
        if not loc:
            raise ClusterUsageError(f"--scheduler {address}: an inproc:// address names a scheduler in this process")
        return address
    if loc.startswith("["):
        end = loc.find("]")
        if end < 0:
            raise ClusterUsageError(f"--scheduler {address}: unclosed '[' in the host; an IPv6 host goes in "
                                    f"brackets, {EXAMPLE}")
        host, sep, port = loc[:end + 1], loc[end + 1:end + 2], loc[end + 2:]
    elif loc.count(":") > 1:
        raise ClusterUsageError(f"--scheduler {address}: an IPv6 host goes in brackets, {EXAMPLE}")
    else:
        host, sep, port = loc.partition(":")
    if sep != ":":
        raise ClusterUsageError(f"--scheduler {address}: no port; expected {EXAMPLE}")
    if not host or not _HOST.match(host):
        raise ClusterUsageError(f"--scheduler {address}: {host!r} is not a host name or address; expected {EXAMPLE}")
    if not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
        raise ClusterUsageError(f"--scheduler {address}: port {port!r} is not a TCP port from 1 to 65535; "
                                f"expected {EXAMPLE}")
    return address


class DaskEngine:
    """The tasks on a Dask distributed cluster.  Task keys carry the step and the item's number,
    so the scheduler's dashboard names what runs; ``pure=False``: every run computes anew.

    Each submission (a ``call``, a ``map``) also gets its own number in the key: a key the
    scheduler still holds is not computed again, its old result is returned.  ``diff`` maps the
    same function over both sides' files, and the baseline's file *i* and the candidate's had
    one key: when the release of the first map's futures had not reached the scheduler before
    the second map was submitted (a matter of timing, more likely on a loaded host), the
    candidate was read as the baseline for those files."""

    local = False

    def __init__(self, address: str) -> None:
        check_scheduler(address)
        try:
            from distributed import Client
        except ImportError as e:
            raise ClusterError(f"--scheduler needs dask's distributed scheduler "
                               f"(pip install 'dask[distributed]'): {e}") from None
        self.token = uuid.uuid4().hex[:8]
        self.submissions = itertools.count()
        try:
            # (the connect timeout is dask's: distributed.comm.timeouts.connect, 30 s by default)
            self.client = Client(address, set_as_default=False)
        except (OSError, TimeoutError) as e:
            raise ClusterError(f"--scheduler {address}: cannot connect: {_line(e)}") from None

    def call(self, fn: Callable, *args: Any) -> Any:
        fut = self.client.submit(fn, *args, pure=False, key=self._key(fn))
        return _result(fut.result)

    def map(self, fn: Callable, items: list, prog: Progress, *args: Any) -> list:
        from distributed import as_completed

        key = self._key(fn)
        futs = [self.client.submit(fn, it, *args, pure=False, key=f"{key}-{i:07d}") for i, it in enumerate(items)]
        try:
            for f in as_completed(futs, loop=self.client.loop):
                if f.status == "error":
                    _result(f.result)
                prog.step()
            return _result(lambda: self.client.gather(futs))
        except BaseException:  # the run is over: free the cluster of the rest
            self.client.cancel(futs)
            raise

    def stream(self, fn: Callable, items: list, *args: Any) -> Iterator[Any]:
        """``fn(item, *args)`` for each item, submitted now; the results in item order, each
        fetched from its worker as soon as its task is done (while the others run and while the
        caller works on earlier ones: ``diff`` merges one side while the workers read the other)
        rather than all at once at the end.  A task's failure is raised as ``map`` raises it;
        the rest are cancelled when the results are abandoned."""
        from distributed import as_completed

        key = self._key(fn)
        futs = [self.client.submit(fn, it, *args, pure=False, key=f"{key}-{i:07d}") for i, it in enumerate(items)]
        done = as_completed(futs, with_results=True, raise_errors=False, loop=self.client.loop)
        return self._in_order(futs, done)

    def _in_order(self, futs: list, done: Any) -> Iterator[Any]:
        where = {f.key: i for i, f in enumerate(futs)}
        got: dict[int, Any] = {}
        try:
            for i in range(len(futs)):
                while i not in got:
                    f, r = next(done)
                    if f.status == "error":
                        _result(f.result)
                    elif f.status != "finished":
                        raise ClusterError(f"the cluster run failed: a task was {f.status}")
                    got[where[f.key]] = r
                futs[i] = None  # (its result is here: the cluster may let it go)
                yield got.pop(i)
        finally:
            left = [f for f in futs if f is not None and not f.done()]
            if left:
                self.client.cancel(left)

    def _key(self, fn: Callable) -> str:
        """A key no other submission of this run has: the step, this run's token, the submission."""
        return f"neuron-explorer-{fn.__name__}-{self.token}-{next(self.submissions)}"

    def close(self) -> None:
        try:
            self.client.close()
        except Exception:  # (closing a lost connection: nothing to do)
            pass


def _line(e: BaseException) -> str:
    return " ".join(str(e).split())[:400] or type(e).__name__


def _result(get: Callable[[], Any]) -> Any:
    """A task's result; the failures a task reports (``tasks.TaskOSError``, a refused request,
    storage) reach the run as they are, any other is the cluster's."""
    try:
        return get()
    except (tasks.TaskOSError, ViewError, StorageError):
        raise
    except Exception as e:
        what = ("a worker died too many times running " if type(e).__name__ == "KilledWorker" else "") + _line(e)
        raise ClusterError(f"the cluster run failed: {what}") from None


def engine_for(scheduler: str | None, jobs: int | None = None) -> LocalEngine | DaskEngine:
    return DaskEngine(scheduler) if scheduler else LocalEngine(jobs)

