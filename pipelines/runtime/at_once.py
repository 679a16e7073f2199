"""Run a few blocking calls side by side (a claim in two tables, three questions to the table, the
group and the brokers) and return when every one has ended."""
from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

log = logging.getLogger("scg.runner")


def at_once(*calls: Callable[[], object]) -> list:
    """Run ``calls`` on threads of their own and return their results in order; the first
    failure (in order) is raised once every call has ended, any other is logged."""
    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        futures = [pool.submit(call) for call in calls]
    failures = [f.exception() for f in futures if f.exception() is not None]
    for other in failures[1:]:
        log.warning("a call run alongside another that failed failed too: %r", other)
    return [future.result() for future in futures]
