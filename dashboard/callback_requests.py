"""A request to Dash's callback endpoint that matches no registered callback (unknown output, wrong
number of inputs, state or outputs, not a JSON object) is answered 400 here. Dash itself fails on it
with an exception: HTTP 500 and a traceback in the log for every probe of a scanner."""
from __future__ import annotations

from typing import Callable

import flask


def _shape_ok(items, n: int) -> bool:
    # a pattern-matching (ALL) input is a list of {id, property, value} entries
    return isinstance(items, list) and len(items) == n and all(isinstance(x, (dict, list)) for x in items)


def problem(body, callback_map: dict) -> str | None:
    """Why ``body`` is not a request for one of the callbacks in ``callback_map`` (None: it is)."""
    if not isinstance(body, dict):
        return "not a JSON object"
    key = body.get("output")
    spec = callback_map.get(key) if isinstance(key, str) else None
    if spec is None:
        return "no such callback output"
    if not _shape_ok(body.get("inputs"), len(spec.get("inputs", []))):
        return "inputs do not match the callback"
    if not _shape_ok(body.get("state", []), len(spec.get("state", []))):
        return "state does not match the callback"
    outputs = body.get("outputs")
    if key.startswith(".."):
        if not _shape_ok(outputs, len(key[2:-2].split("..."))):
            return "outputs do not match the callback"
    elif outputs is not None and not isinstance(outputs, dict):
        return "outputs do not match the callback"
    changed = body.get("changedPropIds", [])
    if not isinstance(changed, list) or not all(isinstance(x, str) for x in changed):
        return "changedPropIds is not a list of names"
    return None


def install(server: flask.Flask, callback_map: Callable[[], dict], endpoint: str) -> None:
    """``callback_map``: the app's callbacks (as Dash holds them when the request comes);
    ``endpoint``: the full path of Dash's callback route (with the URL prefix)."""
    @server.before_request
    def _match_a_callback():
        if flask.request.endpoint != endpoint or flask.request.method != "POST":
            return None
        why = problem(flask.request.get_json(silent=True), callback_map())
        if why is None:
            return None
        return flask.Response(f"Bad callback request: {why}\n", status=400, mimetype="text/plain")
