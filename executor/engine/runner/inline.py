"""The inline runner (`--runner inline`, and the auto runner's steps that need nothing of Ray): each
step runs in a child process of the runner, its output teed into its attempt log
(`<output>/.executor/logs/attempt-<n>.log`, as on Ray).

Once JAX is imported, or while this process is connected to Ray, the child is spawned (a fresh
interpreter started with this one's sys.path, environment and working directory), never forked:
JAX's thread pools make a fork unsafe (Python warns "JAX is multithreaded, so this will likely lead
to a deadlock"), and a forked child of a Ray driver inherits its connection (`ray.is_initialized()`
is true there) and hangs on the first task it sends down it. The step then travels to
the child pickled by cloudpickle: functions and classes of importable modules by reference, those
of the script run as __main__ (an experiment file, a notebook) by value, so the child never runs
the script again (multiprocessing's spawn would, and a script calling executor.run() at top level
would run again in every child). A step whose call cannot be pickled fails at once, saying how to
fix it. Without JAX the child is forked, which costs nothing: a spawned child pays for a fresh
interpreter and its imports (~1 s a step on a loaded 2-core machine), more than fifty small steps
of the lease tests can afford. `start_method` forces one or the other.

A child can be stopped where a thread cannot: a cancelled step (lease lost, timeout, Ctrl-C,
SIGTERM) is killed, so it can never keep writing into an output another runner has committed
since. The child also watches its runner: the runner pings it every few hundred milliseconds,
and a child that hears nothing for `silence_limit_s` (half the lease TTL: its runner was paused
by SIGSTOP or a frozen VM, or died) exits by itself, before any other runner may take the lease
over. Children ignore SIGINT and SIGTERM: the runner decides how a step ends.

A step's environment (`Resources.env`) is given to the child that runs it (a spawned child starts
with it; a forked one sets it in its own environment before the step runs): the runner's process
environment is never changed. A `memory://` prefix exists in this one process only, so there steps
run on daemon threads (which cannot be stopped; use a real prefix to debug endings), and threads
share the one environment of the process: a step setting `Resources.env` is refused there at plan
time, as is a step needing several processes (`Resources.hosts` above 1), by `check_steps`.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import threading
import time
import traceback
from typing import Callable, Iterable, Literal, Mapping, Sequence

from executor.core.step import Resources
from executor.engine.prefix.location import using
from executor.engine.runner import log_forwarding
from executor.engine.runner.base import StepCall, StepOutcome
from executor.engine.runner.capture import captured_output, log_path
from executor.engine.runner.escalate import ray_on_fan_out

# A step's child process ends with these to tell its runner why (never stepgraph's own exit codes).
_CHILD_SILENCED = 75  # the child stopped itself: no ping from its runner for silence_limit_s
_CHILD_ORPHANED = 76  # the child stopped itself: its runner is gone
PING = struct.Struct("d")  # a ping: the runner's time.monotonic() when it sent it


def run_call(call: StepCall) -> StepOutcome:
    """Run one step function and capture how it ended (shared by every runner).

    Whatever the function raises is its own error, KeyboardInterrupt and SystemExit included: a
    real Ctrl-C reaches the executor through its signal handler, never through a step's return.
    The step's environment (`call.env`) is not set here: the process that runs the step was given
    it as it started (a child's own environment; Ray's runtime_env), never by changing the
    environment of a process that runs other steps or the run itself.
    """
    try:
        with using(call.storage), _caching_from(call):  # the step's storage options and cache sources, as values
            return StepOutcome(ok=True, result=call.fn(call.config))
    except BaseException as e:  # noqa: BLE001 - user code may raise anything; we report it
        return StepOutcome(ok=False, error=f"{type(e).__name__}: {e}",
                           traceback="".join(traceback.format_exception(e))[-4000:])


def _caching_from(call: StepCall) -> contextlib.AbstractContextManager:
    """The run's --cache-from prefixes made the step's (engine/worker/shard_sources.py); loaded only when given."""
    if call.cache_from is None:
        return contextlib.nullcontext()
    from executor.engine.worker.shard_sources import caching_from

    return caching_from(call.cache_from)


def thread_env_problem(name: str, env: Mapping[str, str]) -> str | None:
    """Why a step with `Resources.env` cannot run on a thread of this process (memory:// prefixes):
    a process has one environment, shared by the run and every step running beside it, so setting
    one step's variables would race with the others'. None when it sets none."""
    if not env:
        return None
    return (f"step {name!r} sets Resources(env={sorted(env)}), but on a memory:// prefix the in-process "
            f"runner runs steps on threads of this one process, which share one environment (setting it for one "
            f"step would change it for every other step and for the caller). Use a local directory prefix "
            f"(steps then run in child processes, each given its own environment), or drop env and pass the "
            f"values in the step's config.")


# -- the child process -----------------------------------------------------------------------
def _watch_runner(ping_fd: int, silence_limit_s: float | None, last: list[float]) -> None:
    """Child side: exit when the runner goes silent (paused) or away (dead).

    Each ping carries the runner's CLOCK_MONOTONIC time (one clock for every process on the
    machine), so silence is measured from when the runner last spoke, not from when this child
    got around to reading: a child starved of CPU does not mistake its own delay for a pause."""
    pending = b""
    while True:
        readable, _, _ = select.select([ping_fd], [], [], (silence_limit_s or 60) / 4)
        if readable:
            try:
                data = os.read(ping_fd, 4096)
            except OSError:
                data = b""
            if not data:
                os._exit(_CHILD_ORPHANED)
            pending += data
            whole = len(pending) - len(pending) % PING.size
            if whole:
                last[0] = max(last[0], PING.unpack_from(pending, whole - PING.size)[0])
                pending = pending[whole:]
        if silence_limit_s is not None and time.monotonic() - last[0] > silence_limit_s:
            os._exit(_CHILD_SILENCED)


def _dumps(value: object) -> bytes:
    """A call for the child, or its outcome for the runner: cloudpickle where installed (what the
    script run as __main__ defined travels by value, and comes back as the script's own class)."""
    try:
        import cloudpickle
    except ImportError:
        return pickle.dumps(value)
    return cloudpickle.dumps(value)


def _child_entry() -> None:
    """The child's main: `python -c "...inline import _child_entry; _child_entry()" CALL RESULT PING SILENCE
    ESCALATE`."""
    call_fd, result_fd, ping_fd = (int(a) for a in sys.argv[1:4])
    silence_limit_s = None if sys.argv[4] == "-" else float(sys.argv[4])
    escalate = sys.argv[5] == "1"
    with os.fdopen(call_fd, "rb") as source:
        sys.path[:] = pickle.load(source)  # before the call: unpickling it imports the step's modules
        try:
            call = pickle.load(source)
        except BaseException as e:  # noqa: BLE001 - a module the parent had that this process cannot import
            with os.fdopen(result_fd, "wb") as out:
                out.write(pickle.dumps(StepOutcome(ok=False, error=f"the step's process could not load the step: "
                                                                   f"{type(e).__name__}: {e}")))
            os._exit(1)
    _child_main(call, result_fd, ping_fd, silence_limit_s, _dumps, escalate)


def _streams_on_fds() -> None:
    """In the child: sys.stdout/sys.stderr write to fds 1 and 2, where the log's tee reads (a
    parent's replacement streams, e.g. a test's capture or a notebook's, would bypass it)."""
    for fd, name in ((1, "stdout"), (2, "stderr")):
        stream = getattr(sys, name)
        try:
            on_fd = stream.fileno() == fd
        except (AttributeError, OSError, ValueError):
            on_fd = False
        if not on_fd:
            setattr(sys, name, open(fd, "w", buffering=1, closefd=False, errors="backslashreplace"))


def _run_logged(call: StepCall, escalate: bool) -> StepOutcome:
    """The step, its output teed into its attempt log (as on Ray: executor/engine/runner/capture.py).
    `escalate` (the auto runner): a fan-out stops the step, whose outcome then asks for Ray."""
    _streams_on_fds()
    with captured_output(log_path(call.output_path, call.attempt), f"{call.step_id} attempt {call.attempt}",
                         call.storage):
        if not escalate:
            return run_call(call)
        with ray_on_fan_out() as asked:
            outcome = run_call(call)
    if asked[0]:  # even when the step caught NeedsRay itself
        return StepOutcome(ok=False, error="the step fans work out (map_shards): it runs again on Ray",
                           needs_ray=True)
    return outcome


def _child_main(call: StepCall, result_fd: int, ping_fd: int, silence_limit_s: float | None,
                dumps: Callable[[object], bytes] = pickle.dumps, escalate: bool = False) -> None:
    """`dumps`: how the outcome goes back (a forked child shares the runner's __main__, so plain
    pickle's references resolve; a spawned one returns the script's own classes by value)."""
    status = 0
    try:
        os.environ.update(call.env)  # this child's own environment, for this one step (spawned: already set)
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_IGN)
        last = [time.monotonic()]

        def on_continue(signum: int, frame: object) -> None:
            # Resumed after a SIGSTOP: runs before the step's next bytecode, so a step stopped past
            # its lease does not get to write again.
            if silence_limit_s is not None and time.monotonic() - last[0] > silence_limit_s:
                os._exit(_CHILD_SILENCED)

        signal.signal(signal.SIGCONT, on_continue)
        threading.Thread(target=_watch_runner, args=(ping_fd, silence_limit_s, last), daemon=True).start()
        outcome = _run_logged(call, escalate)
        try:
            data = dumps(outcome)
        except Exception:  # noqa: BLE001 - an unpicklable return value is stored as its repr
            data = pickle.dumps(StepOutcome(ok=outcome.ok, result=repr(outcome.result)[:2000],
                                            error=outcome.error, traceback=outcome.traceback))
        with os.fdopen(result_fd, "wb") as out:
            out.write(data)
    except BaseException:  # noqa: BLE001 - never let the child return into the runner's code
        status = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(status)


# -- the runner side ---------------------------------------------------------------------------
class _RunnerPipes:
    """The runner ends of every step's pipes in this process, and one lock to make pipes and fork under.

    Process-wide because file descriptors are: two runs in one process (two runners) fork children
    that inherit every descriptor open at that moment. A step's pipes are made, its child started
    and the child's ends closed in the parent under `lock`, so another runner's fork never copies
    them half-made (a copy of a result pipe's write end would hold back that step's outcome until
    the other step ended); and a forked child closes every runner's ends it inherited (a copy of a
    ping pipe would hide from a step's child that its runner is gone)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ends: set[int] = set()

    def add(self, *fds: int) -> None:  # callers hold lock
        self.ends.update(fds)

    def close(self, fd: int) -> None:
        with self.lock:  # forgotten and closed at once: a reused number is never someone else's
            self.ends.discard(fd)
            with contextlib.suppress(OSError):
                os.close(fd)

    def close_all_in_child(self, *also: int) -> None:
        """In a just-forked child (which holds `lock`, taken by the thread that forked): close the
        runners' ends and start afresh, so a step that runs steps itself can fork in turn."""
        for fd in (*also, *self.ends):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.__init__()  # type: ignore[misc]


_PIPES = _RunnerPipes()


class ChildHandle:
    """One step in a child process; a thread collects its result and exit status (`reap`: waits
    for the child, returns its exit code, negative for a signal)."""

    def __init__(self, call: StepCall, pid: int, reap: Callable[[], int], result_fd: int, ping_fd: int,
                 runner: "InlineRunner"):
        self.call, self.pid, self._reap, self._runner = call, pid, reap, runner
        self._ping_fd = ping_fd
        self.future: cf.Future = cf.Future()
        self._cancelled = False
        self._reaped = threading.Lock()  # held while the pid may still be signalled
        threading.Thread(target=self._collect, args=(result_fd,), daemon=True,
                         name=f"collect-{call.step_id}").start()

    def _collect(self, result_fd: int) -> None:
        chunks = []
        with os.fdopen(result_fd, "rb", closefd=False) as pipe:
            while chunk := pipe.read(1 << 20):
                chunks.append(chunk)
        _PIPES.close(result_fd)
        with self._reaped:
            exitcode = self._reap()
            self.pid = 0
        self._runner._forget(self)
        log_forwarding.printed_directly(log_forwarding.output_key(self.call.step_id, self.call.attempt))
        self.future.set_result(self._outcome(b"".join(chunks), exitcode))

    def _outcome(self, data: bytes, exitcode: int | None) -> StepOutcome:
        if self._cancelled:
            return StepOutcome(ok=False, error="cancelled", infrastructure=True)
        if data:
            try:
                return pickle.loads(data)
            except Exception as e:  # noqa: BLE001
                return StepOutcome(ok=False, error=f"could not read the step's result: {e}", infrastructure=True)
        if exitcode is not None and exitcode < 0:  # killed by signal -exitcode
            why = f"was killed by {signal.Signals(-exitcode).name}"
        elif exitcode == _CHILD_SILENCED:
            why = (f"stopped itself: it heard nothing from its runner for {self._runner.silence_limit_s:g}s "
                   f"(the runner was paused or stuck), so its lease may be taken over")
        elif exitcode == _CHILD_ORPHANED:
            why = "stopped itself: its runner is gone"
        else:
            why = f"exited with status {exitcode} before returning"
        return StepOutcome(ok=False, error=f"the step's process {why}", infrastructure=True)

    def ping(self) -> None:
        with contextlib.suppress(OSError):  # a full pipe (the child is stopped) drops the ping
            os.write(self._ping_fd, PING.pack(time.monotonic()))

    def close_ping(self) -> None:
        _PIPES.close(self._ping_fd)

    def done(self) -> bool:
        return self.future.done()

    def outcome(self) -> StepOutcome:
        return self.future.result()

    def cancel(self) -> None:
        """Kill the step's process (its children too, if it made a process group of its own)."""
        with self._reaped:
            if self.pid and not self.future.done():
                self._cancelled = True
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, signal.SIGKILL)


class ThreadHandle:
    """One step on a daemon thread (memory:// prefixes only): cancel cannot stop it."""

    def __init__(self, call: StepCall):
        self.call = call
        self.future: cf.Future = cf.Future()
        threading.Thread(target=lambda: self.future.set_result(run_call(call)), daemon=True,
                         name=f"step-{call.step_id}").start()

    def done(self) -> bool:
        return self.future.done()

    def outcome(self) -> StepOutcome:
        return self.future.result()

    def cancel(self) -> None:
        pass  # a thread cannot be stopped; the executor ignores its result


class FailedHandle:
    """A step that could not be started in a child process: failed at once, with the reason."""

    def __init__(self, call: StepCall, error: str):
        self.call = call
        self.future: cf.Future = cf.Future()
        self.future.set_result(StepOutcome(ok=False, error=error))

    def done(self) -> bool:
        return True

    def outcome(self) -> StepOutcome:
        return self.future.result()

    def cancel(self) -> None:
        pass


def fork_is_unsafe() -> bool:
    """A fork would copy threads or connections the child cannot use: JAX's thread pools, or a Ray
    driver's connection (its worker threads and sockets; the child would believe itself connected)."""
    if "jax" in sys.modules:
        return True
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()


class InlineRunner:
    def __init__(self, max_workers: int = 4, *, isolate: bool = True, silence_limit_s: float | None = None,
                 ping_s: float = 0.25, start_method: Literal["fork", "spawn"] | None = None, escalate: bool = False):
        """`escalate` (the auto runner's inline half): a step that fans work out (map_shards) is
        stopped there, its outcome `needs_ray`, instead of running its shards in order."""
        self.isolate, self.silence_limit_s, self.start_method = isolate, silence_limit_s, start_method
        self.escalate = escalate
        self.ping_s = min(ping_s, silence_limit_s / 4) if silence_limit_s else ping_s
        self._children: list[ChildHandle] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._pinger: threading.Thread | None = None

    def check_steps(self, steps: Iterable[tuple[str, Resources]], *, prefix_is_local: bool) -> list[str]:
        """Every reason these steps cannot run on this runner (empty when all can)."""
        steps = list(steps)
        problems = [f"step {name!r} asks for Resources(hosts={r.hosts}), but the inline runner "
                    f"(--runner inline) runs each step in one child process of this one. Run it with "
                    f"--runner auto or --runner ray, or set hosts=1 to debug it inline."
                    for name, r in steps if int(r.hosts) > 1]
        if not self.isolate:
            problems += [p for name, r in steps if (p := thread_env_problem(name, r.env))]
        return problems

    def submit(self, call: StepCall) -> ChildHandle | ThreadHandle | FailedHandle:
        if not self.isolate:
            problem = thread_env_problem(call.step_id, call.env)  # check_steps refused it before the run
            return FailedHandle(call, problem) if problem else ThreadHandle(call)
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        if (self.start_method or ("spawn" if fork_is_unsafe() else "fork")) == "fork":
            return self._fork(call)
        return self._spawn(call)

    def _fork(self, call: StepCall) -> ChildHandle:
        with _PIPES.lock:
            (result_r, result_w), (ping_r, ping_w) = os.pipe(), os.pipe()
            os.set_blocking(ping_w, False)
            pid = os.fork()
            if pid == 0:
                _PIPES.close_all_in_child(result_r, ping_w)  # no runner's pipes outlive it in this child
                signal.set_wakeup_fd(-1)  # the runner's signal watcher is not the child's
                _child_main(call, result_w, ping_r, self.silence_limit_s, escalate=self.escalate)
            os.close(result_w)
            os.close(ping_r)
            _PIPES.add(result_r, ping_w)
        handle = ChildHandle(call, pid, lambda: os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]),
                             result_r, ping_w, self)
        with self._lock:
            self._children.append(handle)
        self._start_pinger()
        return handle

    def _spawn(self, call: StepCall) -> ChildHandle | FailedHandle:
        try:
            payload = _dumps(call)
        except (pickle.PicklingError, AttributeError, TypeError) as e:
            return FailedHandle(call, f"{call.step_id}: the step's function or config cannot be sent to the step's "
                                      f"process ({type(e).__name__}: {e}); a step's function and config must pickle "
                                      f"(no locks, open files or clients in the config; without cloudpickle, "
                                      f"a module-level function)")
        silence = "-" if self.silence_limit_s is None else repr(self.silence_limit_s)
        with _PIPES.lock:
            (call_r, call_w), (result_r, result_w), (ping_r, ping_w) = os.pipe(), os.pipe(), os.pipe()
            os.set_blocking(ping_w, False)
            command = [sys.executable, "-c", "from executor.engine.runner.inline import _child_entry; _child_entry()",
                       str(call_r), str(result_w), str(ping_r), silence, "1" if self.escalate else "0"]
            try:
                process = subprocess.Popen(command, pass_fds=(call_r, result_w, ping_r),
                                           env={**os.environ, **call.env} if call.env else None)
            finally:  # the child's ends belong to the child now
                for fd in (call_r, result_w, ping_r):
                    os.close(fd)
            _PIPES.add(call_w, result_r, ping_w)
        handle = ChildHandle(call, process.pid, process.wait, result_r, ping_w, self)
        with self._lock:
            self._children.append(handle)
        self._start_pinger()
        with contextlib.suppress(BrokenPipeError), os.fdopen(call_w, "wb", closefd=False) as sink:  # child gone
            pickle.dump(list(sys.path), sink)
            sink.write(payload)
        _PIPES.close(call_w)  # the child's read of its call ends here, whoever else forked meanwhile
        return handle

    def _forget(self, handle: ChildHandle) -> None:
        with self._lock:
            if handle in self._children:
                self._children.remove(handle)
                handle.close_ping()

    def _start_pinger(self) -> None:
        if self._pinger is None:
            self._pinger = threading.Thread(target=self._ping_loop, name="inline-ping", daemon=True)
            self._pinger.start()

    def _ping_loop(self) -> None:
        while not self._stop.wait(self.ping_s):
            with self._lock:  # a forgotten child's pipe is closed under this lock: never ping a reused fd
                for child in self._children:
                    child.ping()

    def wait(self, handles: Sequence[ChildHandle | ThreadHandle], timeout: float) -> list:
        if not handles:
            return []
        cf.wait([h.future for h in handles], timeout=timeout, return_when=cf.FIRST_COMPLETED)
        return [h for h in handles if h.done()]

    def shutdown(self) -> None:
        """Kill whatever still runs: no step outlives the run that started it (nor its pinger)."""
        self._stop.set()
        with self._lock:
            children = list(self._children)
        for child in children:
            child.cancel()
        if self._pinger is not None:
            self._pinger.join(timeout=5)
