"""A request to Dash's callback endpoint that matches no registered callback (unknown output, a
callback that runs in the browser, wrong number of inputs, state or outputs, not a JSON object,
JSON nested deeper than any callback takes) is answered 400 here. Dash itself fails on it with an
exception: HTTP 500 and a traceback in the log for every probe of a scanner. A value of a type its
component never sends (a list for a date, an object for a dropdown) is read as no value (null), as
if the control were cleared."""
from __future__ import annotations

from typing import Any, Callable

import flask

MAX_DEPTH = 32      # a real request nests about 6 deep (body, inputs, value, a table row, a cell)


def _too_deep(body: Any, limit: int = MAX_DEPTH) -> bool:
    level, stack = 0, [body]
    while stack:                        # breadth first, without recursion
        if level > limit:
            return True
        stack = [v for x in stack if isinstance(x, (dict, list))
                 for v in (x.values() if isinstance(x, dict) else x) if isinstance(v, (dict, list))]
        level += 1
    return False


def _text(v) -> bool:
    return v is None or isinstance(v, str)


def _choice(v) -> bool:          # a dropdown: one option's value, or a list of them (multi)
    return v is None or isinstance(v, (str, int, float)) or (isinstance(v, list) and all(isinstance(x, str) for x in v))


# what the browser sends for each property the app's callbacks take (a Store's `data` is any JSON)
VALUE_TYPES: dict[str, Callable[[Any], bool]] = {
    "start_date": _text, "end_date": _text, "pathname": _text, "search": _text, "href": _text, "value": _choice,
}


def clear_odd_values(body: dict) -> None:
    """Set to None, in place, every input or state value of a type its component never sends."""
    for item in body["inputs"] + body.get("state", []):
        for x in (item if isinstance(item, list) else [item]):
            if isinstance(x, dict) and not VALUE_TYPES.get(x.get("property"), lambda _v: True)(x.get("value")):
                x["value"] = None


def _shape_ok(items, n: int) -> bool:
    # a pattern-matching (ALL) input is a list of {id, property, value} entries
    return isinstance(items, list) and len(items) == n and all(isinstance(x, (dict, list)) for x in items)


def problem(body, callback_map: dict) -> str | None:
    """Why ``body`` is not a request for one of the callbacks in ``callback_map`` (None: it is)."""
    if not isinstance(body, dict):
        return "not a JSON object"
    if _too_deep(body):
        return "nested too deeply"
    key = body.get("output")
    spec = callback_map.get(key) if isinstance(key, str) else None
    if spec is None or "callback" not in spec:      # none, or one that runs in the browser (clientside)
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
        try:
            body = flask.request.get_json(silent=True)
            why = problem(body, callback_map())
        except RecursionError:          # the JSON parser gives up on deep nesting with this, not ValueError
            why = "nested too deeply"
        if why is None:
            clear_odd_values(body)      # Flask keeps the parsed body for the request: Dash reads this object
            return None
        return flask.Response(f"Bad callback request: {why}\n", status=400, mimetype="text/plain")
