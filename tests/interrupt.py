"""Killing real subprocesses at random moments (the resume tests)."""

import signal
import subprocess
import time

import numpy as np


def kill_at_random_moments(cmd, progress, *, env, seed, times=5, timeout=120, after_each=None):
    """Start `cmd` `times` times, each killed with SIGKILL at a random moment after
    `progress()` has advanced by 1-2 more steps, calling `after_each()` after each; return
    how many were really killed."""
    rng = np.random.default_rng(seed)
    kills = 0
    for _ in range(times):
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        target = progress() + int(rng.integers(1, 3))
        deadline = time.monotonic() + timeout
        while proc.poll() is None and progress() < target and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(rng.uniform(0, 0.05))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.wait()
        if after_each is not None:
            after_each()
    return kills


def interrupt_when(cmd, ready, *, env, timeout=120):
    """Start `cmd`, send it SIGINT (Ctrl-C) as soon as `ready()` is true, and return its exit
    status and stderr. Fails if the command ends before it is ready.

    The child starts with SIGINT at its default action: a shell that starts the test run in
    the background makes it ignored, and Python then never raises KeyboardInterrupt."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + timeout
    while proc.poll() is None and not ready() and time.monotonic() < deadline:
        time.sleep(0.005)
    if proc.poll() is not None:
        raise AssertionError(f"{cmd} ended (status {proc.returncode}) before it could be interrupted: {proc.stderr.read()}")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=timeout)
    return proc.returncode, err
