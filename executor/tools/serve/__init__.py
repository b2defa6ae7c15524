"""`stepgraph serve`: a live, read-only, token-protected web view of a prefix.

    source.py   every read of the prefix (the only module that touches storage)
    watch.py    the server's picture of the prefix, refreshed by one listing plus reads of what changed
    auth.py     the access token: URL, then an HttpOnly SameSite=Strict cookie; constant-time compare
    app.py      the aiohttp application: routes, security headers (CSP), templates
    pages.py    the pages and the fragments live updates send
    live.py     server-sent events: what changed, per open page; the running attempt's log
    command.py  the command: flags -> a running server, its URL printed

This module imports nothing heavy: `stepgraph --help` must not pay for aiohttp.
"""

from __future__ import annotations

from typing import Any


def cmd_serve(args: Any) -> int:
    from executor.tools.serve.command import serve

    return serve(args)
