"""Several calls at once (runs of one prefix, writes of one file), each on a thread of this process,
started together."""

from __future__ import annotations

import threading
from typing import Any, Callable


def run_at_once(count: int, start_one: Callable[[], Any], timeout_s: float = 300) -> list[Any]:
    """`start_one()` on `count` threads released together; their results. A runner's exception is
    raised here (never lost on its thread), and so is a runner still going after `timeout_s`."""
    barrier = threading.Barrier(count)
    results: list[Any] = []
    errors: list[BaseException] = []

    def one_runner() -> None:
        barrier.wait()
        try:
            results.append(start_one())
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=one_runner) for _ in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=timeout_s)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads), f"a runner did not finish in {timeout_s:g} s"
    return results
