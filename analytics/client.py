"""The read commands as clients of a jobsight dashboard's JSON API (docs/api.md): where the database is
not readable (a login node), `jobsight job --server URL` asks the server, proving who it is with a
fresh MUNGE credential per request (`munge -s "GET <path>"`: bound to that one request), and prints
what the local command prints: the answer's documents go back into the types the read API gives
(times as datetimes) and through the command's own renderer.

Failures are one line each (a UserError, exit 2 as the local commands): the server unreachable, not
authenticated, the job not found (the server's message, as the local command says it).
"""
from __future__ import annotations

import datetime as dt
import http.client
import json
import os
import re
import subprocess
from typing import Any, Sequence
from urllib.parse import quote, urlencode, urlsplit

from jobsight.analytics.errors import UserError
from jobsight.analytics.render import terminal_safe

ENV = "JOBSIGHT_SERVER"
API = "api/v1/"
ANY_CLUSTER = "*"      # /api/v1/jobs/*/ID: the job on whichever cluster has it (no Slurm cluster is named *)
TIMEOUT_S = 60.0
MUNGE_TIMEOUT_S = 10.0
MUNGE = ("munge",)      # the tests run it as another user (runuser -u alice -- munge)
URL_RE = re.compile(r"https?://[^\s/?#]+(/[^\s?#]*)?")
ISO_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")


def server_of(args) -> str | None:
    """The server to ask, or None to read --db: --server, then (without --db) $JOBSIGHT_SERVER, then
    [client] server of the config. --db and --server together is an error."""
    if getattr(args, "server", None) and getattr(args, "db", None):
        raise UserError("--db and --server together: read the database or ask the server, not both")
    if getattr(args, "db", None):
        return None
    url = getattr(args, "server", None) or os.environ.get(ENV)
    if not url:
        from jobsight.analytics.config import ConfigError, load_config
        try:
            url = load_config(getattr(args, "config", None)).client_server
        except ConfigError as exc:
            raise UserError(str(exc)) from None
    if not url:
        raise UserError(f"--db FILE is required (or --server URL, ${ENV}, or [client] server in the config)")
    if not URL_RE.fullmatch(url):
        raise UserError(f"--server: not an http:// or https:// URL: {terminal_safe(url)[:200]!r}")
    return url


def credential(payload: str) -> str:
    """A fresh MUNGE credential of this process's uid, its payload the request line."""
    try:
        done = subprocess.run([*MUNGE, "-s", payload], capture_output=True, text=True, timeout=MUNGE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UserError(f"cannot get a MUNGE credential (is munge installed and munged running?): {exc}") from None
    if done.returncode != 0:
        first = (done.stderr.strip().splitlines() or ["no message"])[0]
        raise UserError(f"cannot get a MUNGE credential: {terminal_safe(first)}")
    return done.stdout.strip()


def target(server: str, route: Sequence[str], params: Sequence[tuple[str, Any]] = ()) -> str:
    """The request's path and query: the server URL's path, API, the route's parts percent-encoded."""
    base = urlsplit(server).path.rstrip("/") + "/"
    path = base + API + "/".join(quote(part, safe="*") for part in route)
    query = urlencode([(k, str(v)) for k, v in params if v not in (None, "")])
    return path + ("?" + query if query else "")


def get(server: str, route: Sequence[str], params: Sequence[tuple[str, Any]] = ()) -> Any:
    """GET the route with a MUNGE credential bound to it; the answer's JSON, times revived.
    http.client, not urllib.request: one request needs no more, and start-up is part of the
    command's time (https verifies the server's certificate, as urllib does)."""
    tgt = target(server, route, params)
    parts = urlsplit(server)
    headers = {"Authorization": "MUNGE " + credential("GET " + tgt), "Accept": "application/json"}
    shown = terminal_safe(server)
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    try:
        conn = kind(parts.hostname or "", parts.port, timeout=TIMEOUT_S)
        try:
            conn.request("GET", tgt, headers=headers)
            reply = conn.getresponse()
            status, body = reply.status, reply.read()
        finally:
            conn.close()
    except (OSError, http.client.HTTPException, ValueError) as exc:
        raise UserError(f"server {shown} unreachable: {terminal_safe(str(exc) or type(exc).__name__)}") from None
    if status != 200:
        message = _message(body)
        if status in (401, 403):
            raise UserError(f"not authenticated by {shown}: {message}") from None
        if status == 404:
            raise UserError(message) from None
        raise UserError(f"{shown}: HTTP {status}: {message}") from None
    try:
        return revive(json.loads(body))
    except ValueError:
        raise UserError(f"{shown}: the answer is not JSON (is this a jobsight dashboard?)") from None


def _message(body: bytes) -> str:
    try:
        text = json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        text = body.decode("utf-8", "replace").strip()[:200] or "no message"
    return terminal_safe(str(text))


def revive(obj: Any, key: str = "") -> Any:
    """The JSON back into the read API's types: a time (a key ending in _time, by the read API's
    column names, never by what a value looks like) as a datetime."""
    if isinstance(obj, dict):
        return {k: revive(v, k) for k, v in obj.items()}
    if isinstance(obj, list):
        return [revive(v, key) for v in obj]
    if isinstance(obj, str) and key.endswith("_time") and ISO_TIME.fullmatch(obj):
        return dt.datetime.strptime(obj, "%Y-%m-%dT%H:%M:%SZ")
    return obj
