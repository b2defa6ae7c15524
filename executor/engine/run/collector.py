"""The cyclic garbage collector in a process the command line owns.

Planning builds a handful of objects per step (the steps and configs when `executor_main` is given
a function that declares them, then the graph, statuses, decisions, reports), all alive until the
process exits; every collection while they are young rescans them all, about a tenth of a second
of a 10,000-step plan. `executor_main` owns its process, so it pauses the collector while it plans
and, before any step runs (for hours, perhaps), freezes what planning built out of the collector's
sight and lets it run as usual. Garbage without cycles is freed as always meanwhile. As the process
exits it freezes everything once more, so that the interpreter's last collection does not walk
what the exit drops anyway. `stepgraph run FILE` owns its process from the start: it pauses the
collector before the file runs, so that steps declared at the file's top level (before its
`executor_main` call: 100,000 steps cost 1.5 s of collections while declared) are declared without
it, and the file's executor_main carries that pause on (`LOADING`) rather than starting its own.
All of this is the command line's (executor/cli.py, executor/tools/commands.py); the library API
(`executor.run` in a notebook) leaves the collector alone: freezing would keep its caller's garbage
cycles forever.
"""

from __future__ import annotations

import atexit
import contextvars
import gc


class PlanningPause:
    """executor_main's hold on the collector, one per command-line call (no module state)."""

    def __init__(self) -> None:
        self.paused = False

    def pause(self) -> None:
        """Before executor_main reads its flags and declares and builds the steps."""
        self.paused = gc.isenabled()
        gc.disable()

    def carried_on(self) -> "PlanningPause":
        """executor_main's pause: the one `stepgraph run FILE` started before the file ran (still
        paused, or resumed if an earlier executor_main call of the file ran steps), else a new one,
        paused now."""
        started = LOADING.get()
        if started is not None:
            return started
        self.pause()
        return self

    def resume(self) -> None:
        """Before steps run (the console view calls it): freeze what planning built, collect as usual
        from here. A no-op unless pause() paused the collector."""
        if self.paused:
            self.paused = False
            gc.freeze()
            gc.enable()


    def release(self) -> None:
        """As a command-line call ends with no step run (a dry run, an error): the collector as it
        was found, nothing frozen (a notebook that catches executor_main's SystemExit keeps it)."""
        if self.paused:
            self.paused = False
            gc.enable()


# The pause `stepgraph run FILE` started before running the file (executor/tools/commands.py): a
# contextvar, so that it reaches the file's executor_main call and nothing on another thread.
LOADING: contextvars.ContextVar[PlanningPause | None] = contextvars.ContextVar("stepgraph_loading_pause",
                                                                               default=None)


def freeze_for_exit() -> None:
    """executor_main, as it ends: when the process exits, freeze what is still alive before the
    interpreter's final collection, which would walk every object (a tenth of a second or more
    after a 10,000-step plan) only to free memory the exit frees anyway. An atexit handler, so
    that a caller who catches the SystemExit (a notebook) keeps its collector; the rest of exit is
    unchanged (the other atexit handlers, clearing modules). Objects left in reference cycles then keep
    their finalizers unrun, which Python does not promise at exit either (object.__del__'s notes)."""
    atexit.unregister(gc.freeze)  # once, however often executor_main is called
    atexit.register(gc.freeze)
