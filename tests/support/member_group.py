"""Helpers for tests that run several ``scg run`` member processes (tests/e2e/harness.py's
MemberProcess) as one group: wait until they share the partitions, stop them as a service
manager would."""
from __future__ import annotations

import os
import signal
import subprocess


def owned_once_by_all(members, partitions: int) -> bool:
    """Every member owns some partitions and together they own each of ``partitions`` once;
    raises if a member process has exited."""
    for member in members:
        if member.proc.poll() is not None:
            raise AssertionError(f"{member.name} exited ({member.proc.returncode}):\n{member.tail()}")
    owned = [member.owned() for member in members]
    every = [tp for share in owned for tp in share]
    return all(owned) and len(every) == partitions == len(set(every))


def stop_all(members, timeout_s: float = 120) -> list[int]:
    """SIGTERM to every member's Python process at once (one after the other, the last would take
    over everything), then their exit codes. Only the Python process is signalled, as a service
    manager signals a service's main process: signalling the process group (the harness's
    ``stop``) also ends the Spark JVM while the member is still stopping its query. The JVM ends
    with its Python parent; anything left of the group is killed afterwards."""
    for member in members:
        if member.proc.poll() is None:
            os.kill(member.proc.pid, signal.SIGTERM)
    codes = []
    for member in members:
        try:
            codes.append(member.proc.wait(timeout_s))
        except subprocess.TimeoutExpired:
            member.kill()
            raise AssertionError(f"{member.name} did not stop within {timeout_s:.0f}s:\n{member.tail()}")
        finally:
            try:
                os.killpg(member.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return codes
