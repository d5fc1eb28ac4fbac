"""The stop flag a signal handler sets (util/stopflag.py): it never hangs the thread it interrupts,
where ``threading.Event.set()`` in a handler hangs within a few hundred signals."""

import subprocess
import sys
import threading

from neuron_explorer.util.stopflag import StopFlag

# a timer signal every 0.3 ms, whose handler sets the flag, while the main thread waits on it in a
# loop: every signal lands somewhere in wait(), including the moments an Event would hold its lock
HAMMER = r"""
import faulthandler, signal, sys
faulthandler.dump_traceback_later(120, exit=True)  # a hang ends the child (and fails the test)
from neuron_explorer.util.stopflag import StopFlag
current = [StopFlag()]
seen = [0]
def handler(signum, frame):
    seen[0] += 1
    current[0].set()
signal.signal(signal.SIGALRM, handler)
signal.setitimer(signal.ITIMER_REAL, 0.0003, 0.0003)
waits = 0
while seen[0] < 3000:
    f = current[0]
    f.wait(0.00001)
    waits += 1
    if f.is_set():  # one-shot: the next wait needs a fresh flag
        f.close()
        current[0] = StopFlag()
signal.setitimer(signal.ITIMER_REAL, 0, 0)
print("ok", seen[0], waits)
"""


def test_a_handler_setting_the_flag_never_hangs_the_waiting_thread() -> None:
    r = subprocess.run([sys.executable, "-c", HAMMER], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.startswith("ok "), r.stdout


def test_wait_times_out_unset_and_returns_at_once_when_set() -> None:
    f = StopFlag()
    try:
        assert not f.is_set()
        assert f.wait(0.001) is False and f.wait(0) is False
        f.set()
        assert f.is_set() and f.wait(None) is True and f.wait(0) is True
    finally:
        f.close()


def test_another_thread_wakes_a_waiter() -> None:
    f = StopFlag()
    try:
        threading.Timer(0.05, f.set).start()
        assert f.wait(None) is True  # a wait without a bound returns once set
    finally:
        f.close()


def test_many_sets_never_block_and_a_closed_flag_writes_nothing() -> None:
    f = StopFlag()
    for _ in range(200_000):  # far more bytes than a pipe holds: set() must not block
        f.set()
    f.close()
    f.set()  # the fds may be reused by now: nothing written, no error
    assert f.is_set() and f.wait(0) is True
    g = StopFlag()
    g.close()
    assert g.wait(0.001) is False  # closed and unset: no poll on a closed fd
