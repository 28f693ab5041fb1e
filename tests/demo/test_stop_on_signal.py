"""`python -m demo` stops on SIGINT/SIGTERM whenever they come, even while its main loop waits (demo/processes.py)."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from demo.processes import StopOnSignal


@pytest.fixture
def restore_handlers():
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


def test_a_signal_during_the_wait_ends_it_and_says_which(restore_handlers):
    stop = StopOnSignal()
    assert not stop.wait(0.05)
    timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    assert stop.wait(60)  # returns once the signal came, not after 60 s
    assert stop.is_set() and stop.signum == signal.SIGTERM
    timer.join()


def test_signals_in_quick_succession_during_waits_never_hang_the_loop(restore_handlers):
    # With a threading.Event set from the handler, a signal landing while the main thread was inside Event.wait()
    # blocked the handler on the lock the interrupted wait held: the demo never stopped.
    stop = StopOnSignal()
    sender = threading.Thread(target=lambda: [os.kill(os.getpid(), signal.SIGINT) for _ in range(200)])
    sender.start()
    waits = 0
    while sender.is_alive() or waits < 10:
        stop.wait(0.001)
        waits += 1
    sender.join()
    assert stop.signum == signal.SIGINT
