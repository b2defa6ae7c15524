"""The cyclic garbage collector in a process the command line owns.

Planning builds a handful of objects per step (the steps and configs when `executor_main` is given
a function that declares them, then the graph, statuses, decisions, reports), all alive until the
process exits; every collection while they are young rescans them all, about a tenth of a second
of a 10,000-step plan. `executor_main` owns its process, so it pauses the collector while it plans
and, before any step runs (for hours, perhaps), freezes what planning built out of the collector's
sight and lets it run as usual. Garbage without cycles is freed as always meanwhile. As the process
exits it freezes everything once more, so that the interpreter's last collection does not walk
what the exit drops anyway. All of this is the command line's (executor/cli.py); the library API
(`executor.run` in a notebook) leaves the collector alone: freezing would keep its caller's garbage
cycles forever.
"""

from __future__ import annotations

import atexit
import gc


class PlanningPause:
    """executor_main's hold on the collector, one per command-line call (no module state)."""

    def __init__(self) -> None:
        self.paused = False

    def pause(self) -> None:
        """Before executor_main reads its flags and declares and builds the steps."""
        self.paused = gc.isenabled()
        gc.disable()

    def resume(self) -> None:
        """Before steps run (the console view calls it): freeze what planning built, collect as usual
        from here. A no-op unless pause() paused the collector."""
        if self.paused:
            self.paused = False
            gc.freeze()
            gc.enable()


def freeze_for_exit() -> None:
    """executor_main, as it ends: when the process exits, freeze what is still alive before the
    interpreter's final collection, which would walk every object (a tenth of a second or more
    after a 10,000-step plan) only to free memory the exit frees anyway. An atexit handler, so
    that a caller who catches the SystemExit (a notebook) keeps its collector; the rest of exit is
    unchanged (the other atexit handlers, clearing modules). Objects left in reference cycles then keep
    their finalizers unrun, which Python does not promise at exit either (object.__del__'s notes)."""
    atexit.unregister(gc.freeze)  # once, however often executor_main is called
    atexit.register(gc.freeze)
