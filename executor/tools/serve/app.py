"""The aiohttp application of `stepgraph serve`: routes, security headers and templates.

Every response carries a Content-Security-Policy that allows scripts and styles only from this
server's /static/ files (no inline script, whatever a step's text holds), no framing, no
referrer. Templates autoescape everything; the only markup passed through unescaped is SVG
drawn by executor/tools/draw.py and run_report.py, which escape their own texts.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Callable

import jinja2
from aiohttp import web

from executor.tools.serve import live, pages
from executor.tools.serve.auth import token_middleware
from executor.tools.serve.keys import ENV, WATCHER
from executor.tools.serve.watch import Watcher

HERE = Path(__file__).parent
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "base-uri 'none'; form-action 'self'; frame-ancestors 'none'")


async def security_headers(request: web.Request, response: web.StreamResponse) -> None:
    """on_response_prepare: every response, streams and errors included, just before its headers go."""
    response.headers.setdefault("Content-Security-Policy", CSP)
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "no-referrer"
    response.headers["X-Frame-Options"] = "DENY"
    response.headers.setdefault("Cache-Control", "no-store")


def template_env() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(when=pages.when, ago=pages.ago, duration=pages.duration, took=pages.took,
                       holder=pages.holder)
    env.globals["now"] = time.time
    return env


def make_app(watcher: Watcher, token: str, port_of: Callable[[], int]) -> web.Application:
    app = web.Application(middlewares=[token_middleware(token, port_of)])
    app.on_response_prepare.append(security_headers)
    app[WATCHER] = watcher
    app[ENV] = template_env()
    app.router.add_get("/", pages.overview)
    app.router.add_get("/runs", pages.runs)
    app.router.add_get("/run/{name}", pages.run)
    app.router.add_get("/run/{name}/report", pages.run_report)
    app.router.add_get("/tags", pages.tags)
    app.router.add_get("/step/{step_id:.+}", pages.step)
    app.router.add_get("/log", pages.log)
    app.router.add_get("/events", live.events)
    app.router.add_static("/static/", HERE / "static", follow_symlinks=False)

    async def start_polling(app: web.Application):
        task = asyncio.create_task(watcher.poll_forever())
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def end_streams(app: web.Application) -> None:
        watcher.close()

    app.on_shutdown.append(end_streams)
    app.cleanup_ctx.append(start_polling)
    return app
