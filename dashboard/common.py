"""What the pages share: the URL query string <-> filters, the read-only database handle of the
request, the error wrapper of every callback and the filter controls."""
from __future__ import annotations

import contextlib
import datetime as dt
import functools
import json
import logging
from typing import Any, Callable, Iterator
from urllib.parse import parse_qs, urlencode

import dash
import flask
from dash import dcc, html
from dash.exceptions import PreventUpdate

from jobsight.analytics.queries.scope import Filters, Scope
from jobsight.analytics.store.database import Database
from jobsight.dashboard.auth import current_scope

log = logging.getLogger("jobsight.dashboard")

READER_KEY = "JOBSIGHT_READER"
SEVERITIES = ["alarm", "warn", "info"]
ERROR_TEXT = "Something went wrong while preparing this view; it has been logged. Try again or change the filters."
MAX_FIELDS = 50
# the period a filter may name: wide enough for any job, narrow enough for every date sum and timestamp
FIRST_DAY, LAST_DAY = dt.date(1970, 1, 1), dt.date(2199, 12, 31)


class Unusable(ValueError):
    """A request a page cannot show (a date out of range, too many URL fields): :func:`safe` shows
    the message, a plain sentence for the user, and logs one line, not a traceback."""


# --- URL ------------------------------------------------------------------------------------

def parse_search(search: str | None) -> dict[str, str]:
    """Query string -> {name: first value}; unknown or repeated names are harmless."""
    try:
        raw = parse_qs((search or "").lstrip("?"), keep_blank_values=False, max_num_fields=MAX_FIELDS)
    except ValueError:
        raise Unusable(f"This address has more than {MAX_FIELDS} query fields; open the page from the menu.") from None
    return {k: v[0] for k, v in raw.items() if v and len(v[0]) <= 200}


def make_search(params: dict[str, Any]) -> str:
    clean = {k: v for k, v in params.items() if v not in (None, "", [], ())}
    for k, v in list(clean.items()):
        if isinstance(v, (list, tuple)):
            clean[k] = ",".join(str(x) for x in v)
    return ("?" + urlencode(clean)) if clean else ""


# in the browser, as make_search: the controls' values (``keys`` name them, null: left out) as the
# query string; no change when the address has it already (the page's load, where Dash runs a
# callback whose inputs a new page brings, whatever prevent_initial_call says)
_SEARCH_JS = """function () {
    var keys = %s, parts = [];
    for (var i = 0; i < keys.length; i++) {
        var v = arguments[i];
        if (keys[i] === null || v === null || v === undefined || v === "" || (Array.isArray(v) && !v.length)) { continue; }
        parts.push([keys[i], Array.isArray(v) ? v.join(",") : String(v)]);
    }
    var search = parts.length ? "?" + new URLSearchParams(parts).toString() : "";
    return search === window.location.search ? window.dash_clientside.no_update : search;
}"""


def sync_search(app, keys: list[str | None], *inputs) -> None:
    """The address follows the controls (``inputs``, Inputs and States in the order of ``keys``),
    in the browser: no request to the server, none on a page's load."""
    app.clientside_callback(_SEARCH_JS % json.dumps(keys), dash.Output("url", "search", allow_duplicate=True),
                            *inputs, prevent_initial_call=True)


def _date(text: str | None) -> dt.date | None:
    if not text:
        return None
    try:
        return dt.date.fromisoformat(text[:10])
    except ValueError:
        return None


def split_list(text: str | None) -> tuple[str, ...]:
    return tuple(x for x in (text or "").split(",") if x)[:20]


def _day(text: str | None) -> dt.date | None:
    day = _date(text)
    if day is not None and not FIRST_DAY <= day <= LAST_DAY:
        raise Unusable(f"Dates from {FIRST_DAY} to {LAST_DAY} only; {day} is outside. Choose another period.")
    return day


def filters_from(params: dict[str, str], **fixed: str | None) -> Filters:
    """Filters from URL parameters; ``fixed`` (the user or project of an entity page) wins.
    A date outside FIRST_DAY..LAST_DAY raises :class:`Unusable`."""
    values = dict(since=_day(params.get("since")), until=_day(params.get("until")),
                  user=params.get("user") or None, account=params.get("account") or None,
                  partition=params.get("partition") or None,
                  codes=split_list(params.get("code")), severities=split_list(params.get("severity")))
    values.update({k: v for k, v in fixed.items() if v})
    return Filters(**values)


# --- database and errors --------------------------------------------------------------------

@contextlib.contextmanager
def handle() -> Iterator[Database]:
    reader = flask.current_app.config[READER_KEY]
    with reader.cursor() as h:
        yield h


def scope() -> Scope:
    return current_scope()


def safe(fallback: Callable[[], Any] | None = None, outputs: int = 1):
    """Wrap a callback: any exception is logged with its traceback on the server and the user gets
    a plain message (or ``fallback()``), never the traceback. An :class:`Unusable` request is the
    user's, not a fault: one log line, and its message where ERROR_TEXT would be."""
    def answer(text: str):
        if fallback is not None:
            got = fallback()
            if isinstance(got, tuple):
                return tuple(text if v == ERROR_TEXT else v for v in got)
            return text if got == ERROR_TEXT else got
        msg = html.Div(text, className="error", role="alert")
        return msg if outputs == 1 else (msg,) + (None,) * (outputs - 1)

    def deco(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except PreventUpdate:
                raise
            except Unusable as exc:
                log.info("callback %s: %s", fn.__name__, exc)
                return answer(str(exc))
            except Exception:
                log.exception("callback %s failed", fn.__name__)
                return answer(ERROR_TEXT)
        return wrapper
    return deco


# --- controls -------------------------------------------------------------------------------

def options(values: list[str]) -> list[dict[str, str]]:
    return [{"label": v, "value": v} for v in values]


def period_control(prefix: str, params: dict[str, str]) -> html.Div:
    return html.Div([
        html.Label("Period (UTC)", htmlFor=f"{prefix}-period"),
        dcc.DatePickerRange(id=f"{prefix}-period", start_date=str(_date(params.get("since")) or "") or None,
                            end_date=str(_date(params.get("until")) or "") or None, clearable=True,
                            display_format="YYYY-MM-DD", start_date_placeholder_text="from",
                            end_date_placeholder_text="to"),
    ], className="control")


def dropdown(prefix: str, name: str, label: str, values: list[str], value, multi: bool = False) -> html.Div:
    return html.Div([
        html.Label(label, htmlFor=f"{prefix}-{name}"),
        dcc.Dropdown(id=f"{prefix}-{name}", options=options(values), value=value, multi=multi,
                     clearable=True, placeholder="all"),
    ], className="control")


def scope_filter_controls(prefix: str, params: dict[str, str], opts: dict[str, list[str]],
                          skip: tuple[str, ...] = ()) -> list[html.Div]:
    labels = {"user": "User", "account": "Project", "partition": "Partition"}
    # a value from the URL that is not among the visible options is dropped, not echoed
    return [dropdown(prefix, key, label, opts.get(key, []),
                     params.get(key) if params.get(key) in opts.get(key, []) else None)
            for key, label in labels.items() if key not in skip]


def number(x: float | None, digits: int = 1) -> str:
    if x is None:
        return "-"
    try:
        if x != x:  # NaN
            return "-"
    except TypeError:
        return str(x)
    return f"{x:,.{digits}f}"


SIDECAR_LINE = 'jobsight sidecar run --out "$HOME/jobsight" -- CMD'


def no_jobs_yet() -> html.Div:
    """What someone with no job at all sees instead of "no jobs for these filters": how jobs get in."""
    return html.Div([
        html.P("You have no jobs in jobsight yet."),
        html.P(["To have your jobs' GPUs, cores and memory measured, run your command through the sidecar "
                "in your jobscript (CMD: your command):"]),
        html.Pre(html.Code(SIDECAR_LINE)),
        html.P("The site's ingest picks up its files in $HOME/jobsight and your jobs' accounting records; "
               "your jobs appear here after its next run."),
    ], className="empty", id="no-jobs-yet")


def card(label: str, value: str, cid: str, note: str | None = None) -> html.Div:
    """A total; ``note`` a line under it (what the total leaves out), id ``note-<cid>``."""
    parts = [html.Div(label, className="card-label"), html.Div(value, className="card-value", id=cid)]
    if note:
        parts.append(html.Div(note, className="card-note", id=f"note-{cid}"))
    return html.Div(parts, className="card")
