"""The access token of `stepgraph serve`: made or read from --token-file, checked on every request.

A request carries it in the URL (`?token=...`, as printed) or in the HttpOnly, SameSite=Strict
cookie the first such request sets (then the URL loses the token by a redirect, so it stays out
of history and screenshots). Tokens are compared in constant time; anything else is a 401.
"""

from __future__ import annotations

import hmac
import secrets
from pathlib import Path
from typing import Callable

from aiohttp import web

from executor.core.errors import ExecutorError

TOKEN_BYTES = 24
MIN_TOKEN_CHARS = 16


def make_token() -> str:
    return secrets.token_urlsafe(TOKEN_BYTES)


def read_token_file(path: str) -> str:
    """A stable token from a file (its first line, stripped); refuses short or missing ones."""
    try:
        lines = Path(path).read_text().strip().splitlines()
    except OSError as e:
        raise ExecutorError(f"--token-file {path}: cannot read it ({e.strerror}); write a token of at least "
                            f"{MIN_TOKEN_CHARS} characters into it, e.g. `python -c 'import secrets; "
                            f"print(secrets.token_urlsafe(24))' > {path}`") from None
    token = lines[0].strip() if lines else ""
    if len(token) < MIN_TOKEN_CHARS or not token.isascii() or any(c.isspace() for c in token):
        raise ExecutorError(f"--token-file {path}: the token must be at least {MIN_TOKEN_CHARS} printable ASCII "
                            f"characters without spaces (found {len(token)} characters)")
    return token


def cookie_name(port: int) -> str:
    """Cookies ignore ports: two servers on one host must not overwrite each other's."""
    return f"stepgraph-token-{port}"


def matches(given: str | None, token: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode(), token.encode())


def token_middleware(token: str, port_of: Callable[[], int]) -> Callable:
    """401 without the token; with it in the URL: set the cookie and redirect to the bare URL."""

    @web.middleware
    async def check(request: web.Request, handler):
        name = cookie_name(port_of())
        from_url = request.query.get("token")
        if from_url is not None:
            if not matches(from_url, token):
                raise web.HTTPUnauthorized(text="wrong token: open the URL `stepgraph serve` printed\n")
            query = request.query.copy()
            query.pop("token")
            response = web.HTTPSeeOther(request.rel_url.with_query(query))
            response.set_cookie(name, token, httponly=True, samesite="Strict", path="/")
            raise response
        if not matches(request.cookies.get(name), token):
            raise web.HTTPUnauthorized(text="token required: open the URL `stepgraph serve` printed "
                                            "(it ends in ?token=...)\n")
        return await handler(request)

    return check
