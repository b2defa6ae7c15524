"""The application keys the server's handlers share (a module of their own: no import cycles)."""

from __future__ import annotations

import jinja2
from aiohttp import web

from executor.tools.serve.watch import Watcher

WATCHER = web.AppKey("watcher", Watcher)
ENV = web.AppKey("templates", jinja2.Environment)
