"""`stepgraph serve --prefix P [--host H] [--port N|0] [--token-file F]`: flags -> a running server.

Reads the prefix once (an unreachable bucket is one clear error before anything listens), binds,
prints the URL with its token, and serves until interrupted. Binding beyond loopback prints a
warning (the token is still required). Storage options are used, never printed.
"""

from __future__ import annotations

import asyncio
import ipaddress
import signal
import sys
from typing import Any, Callable

from executor.core.errors import ExecutorError

DEFAULT_PORT = 8270  # not Ray's dashboard (8265), Jupyter (8888) or TensorBoard (6006)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


def url_of(host: str, port: int, token: str) -> str:
    shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return f"http://{shown}:{port}/?token={token}"


async def _first_picture(watcher: Any) -> None:
    """The watcher's first refresh, the collector paused, then what it read frozen out of the
    collector's sight (engine/run/collector.py): the command owns its process, and otherwise every
    full collection while it serves walks a row per step (100,000 steps: 8 collections while the
    picture is made and 1 to 3 s of the first page's first byte). Rows replaced later are freed as
    always (they hold no cycles). A storage error here is the command's error, the collector back."""
    from executor.engine.run.collector import PlanningPause

    pause = PlanningPause()
    pause.pause()
    try:
        await watcher.refresh()
    except BaseException:
        pause.release()
        raise
    pause.resume()


def serve(args: Any, say: Callable[[str], None] = print) -> int:
    from executor.core.exit_codes import ExitCode
    from executor.core.extras import require_extra
    from executor.tools.commands import require_outputs

    require_extra("serve", "stepgraph serve", "jinja2")
    from executor.tools.serve.auth import make_token, read_token_file
    from executor.tools.serve.source import PrefixSource
    from executor.tools.serve.watch import Watcher

    if args.interval <= 0:
        raise ExecutorError(f"--interval must be a positive number of seconds, not {args.interval}")
    token = read_token_file(args.token_file) if args.token_file else make_token()
    opened = require_outputs(args)  # opened once; a missing or empty prefix: exit 2, as its --help says
    prefix = opened.url
    watcher = Watcher(PrefixSource(opened), interval_s=args.interval,
                      on_error=lambda message: print(f"warning: reading {prefix}: {message}", file=sys.stderr))
    if not is_loopback(args.host):
        print(f"warning: serving on {args.host}, beyond this machine's loopback: anyone who can reach it and "
              f"has the token can read this prefix's steps, logs and results (the token is still required)",
              file=sys.stderr)
    try:
        asyncio.run(_serve(watcher, token, args.host, args.port, say))
    except KeyboardInterrupt:
        pass
    return ExitCode.OK


async def _serve(watcher: Any, token: str, host: str, port: int, say: Callable[[str], None]) -> None:
    from aiohttp import web

    from executor.tools.serve.app import make_app

    say(f"reading {watcher.source.prefix} ...")
    await _first_picture(watcher)
    if not watcher.steps and not watcher.runs:
        say(f"no step outputs or run files under {watcher.source.prefix} yet: the pages fill in as runs write")
    bound: dict[str, int] = {}
    runner = web.AppRunner(make_app(watcher, token, lambda: bound["port"]), access_log=None, shutdown_timeout=2.0)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
    except OSError as e:
        await runner.cleanup()
        raise ExecutorError(f"cannot listen on {host}:{port}: {e.strerror}; pick another --port (0: any free "
                            f"one)") from None
    bound["port"] = runner.addresses[0][1]
    say(f"serving {len(watcher.steps)} step(s) and {len(watcher.runs)} run(s) of {watcher.source.prefix} "
        f"(read-only; updates every {watcher.interval_s:g} s)")
    say(f"open: {url_of(host, bound['port'], token)}")
    sys.stdout.flush()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
