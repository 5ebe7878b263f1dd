"""The JSON API, `/api/v1/...` under the app's URL prefix: a researcher's (or a tool's) questions
answered from the snapshot the pages read, through the same read API (analytics/queries/) and the
same Scope (the request's user and [roles], checked by dashboard/auth.py first). No SQL here.

Answers are JSON with numbers as stored and times as ISO-8601 UTC (analytics/render.py's
to_json, which also writes `jobsight job --format json`); errors are {"error": message} with the
status: 400 a parameter, 401/403 authentication (auth.py), 404 a job that does not exist or is not
the asker's (the same answer). The routes and their documents are described by
dashboard/api_schema.py, served at /api/v1/openapi.json.
"""
from __future__ import annotations

import base64
import binascii
import datetime as dt
import functools
import json
import logging

import flask
import pandas as pd

from jobsight.analytics import render
from jobsight.analytics.client import ANY_CLUSTER
from jobsight.analytics.errors import UserError
from jobsight.analytics.queries import job as job_queries
from jobsight.analytics.queries.data_age import data_age
from jobsight.analytics.queries.flags import SORTS, flag_codes, flag_rows
from jobsight.analytics.queries.job_lists import job_page
from jobsight.analytics.queries.scope import Filters, Scope
from jobsight.analytics.queries.subjects import seen
from jobsight.analytics.queries.summaries import budgets as budget_frame
from jobsight.analytics.queries.usage import BY, budget_as_of, budget_rows, usage
from jobsight.dashboard import api_schema, common
from jobsight.dashboard.auth import current_scope

log = logging.getLogger("jobsight.dashboard")

PATH = "api/v1/"            # under the app's URL prefix: /api/v1/, or /jobsight/api/v1/
PAGE_SIZE, MAX_PAGE = 100, 1000
FLAGS_LIMIT = 100
MAX_PARAM = 200             # longer query values are refused, not cut
# the app config's key of the [report] settings the /report route builds with (set by `jobsight dashboard`)
REPORT_SETTINGS = "jobsight.report_settings"


class BadRequest(ValueError):
    """A parameter the API cannot use: 400 with the message."""


class NotFound(LookupError):
    """Nothing of the asker's to answer with: 404 with the message."""


def _json(obj, status: int = 200) -> flask.Response:
    return flask.Response(render.to_json(obj) + "\n", status=status, mimetype="application/json",
                          headers={"Cache-Control": "no-store"})


def error(status: int, message: str) -> flask.Response:
    return _json({"error": message}, status)


def _answer(fn):
    """A route's errors as JSON: 400 for a bad parameter or a question the read API refuses, 404 for
    a job not found, 500 (logged with its traceback, never shown) for anything else."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (job_queries.NoSuchJob, NotFound) as exc:
            return error(404, str(exc))
        except (BadRequest, UserError, common.Unusable) as exc:
            return error(400, str(exc))
        except Exception:
            log.exception("API %s failed", flask.request.path)
            return error(500, "internal error; it has been logged")
    return wrapper


def _params(allowed: set[str]) -> dict[str, str]:
    """The query's parameters, each at most once and known to the route."""
    out: dict[str, str] = {}
    for name, values in flask.request.args.lists():
        if name not in allowed:
            raise BadRequest(f"unknown parameter {name[:40]!r} (known: {', '.join(sorted(allowed))})")
        if len(values) > 1 and name != "flag":
            raise BadRequest(f"parameter {name!r} given {len(values)} times")
        if any(len(v) > MAX_PARAM for v in values):
            raise BadRequest(f"parameter {name!r} is longer than {MAX_PARAM} characters")
        out[name] = ",".join(values)
    return out


FILTERS = {"since", "until", "user", "account", "partition", "cluster"}


def _filters(p: dict[str, str], **more) -> Filters:
    """Filters.from_times, as the command line builds them (dates outside the pages' range refused)."""
    f = Filters.from_times(p.get("since") or None, p.get("until") or None,
                           **{k: p.get(k) for k in ("user", "account", "partition", "cluster")}, **more)
    for day in (f.since, f.until):
        if day is not None and not common.FIRST_DAY <= day <= common.LAST_DAY:
            raise BadRequest(f"dates from {common.FIRST_DAY} to {common.LAST_DAY} only, not {day}")
    return f


def _codes(p: dict[str, str]) -> tuple[str, ...]:
    codes = tuple(c for c in p.get("flag", "").split(",") if c)
    unknown = [c for c in codes if c not in flag_codes()]
    if unknown:
        raise BadRequest(f"unknown flag code {unknown[0][:40]!r} (known: {', '.join(flag_codes())})")
    return codes


def _count(p: dict[str, str], name: str, default: int, top: int, zero: bool = False) -> int:
    text = p.get(name)
    if text is None:
        return default
    if not text.isdigit() or not (0 if zero else 1) <= int(text) <= top:
        raise BadRequest(f"{name} must be a whole number from {0 if zero else 1} to {top}")
    return int(text)


def _records(names: list[str], rows: list[tuple]) -> list[dict]:
    return [dict(zip(names, r)) for r in rows]


def _frame_records(df: pd.DataFrame) -> list[dict]:
    """A DataFrame's rows as plain values: NULLs (NaN, NaT) None, timestamps datetime."""
    out = df.astype(object).where(df.notna(), None)
    return [{k: (v.to_pydatetime() if isinstance(v, pd.Timestamp) else v.item() if hasattr(v, "item") else v)
             for k, v in row.items()} for row in out.to_dict("records")]


# --- the job list's cursor: the last row's key, opaque to clients --------------------------------

def encode_cursor(key: tuple) -> str:
    start, cluster, raw = key
    text = json.dumps([start.isoformat() if start is not None else None, cluster, raw])
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def decode_cursor(text: str) -> tuple:
    try:
        start, cluster, raw = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
        if not (isinstance(cluster, str) and isinstance(raw, str) and (start is None or isinstance(start, str))):
            raise ValueError
        return (dt.datetime.fromisoformat(start) if start is not None else None, cluster, raw)
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError):
        raise BadRequest("cursor: not a cursor this API gave out (use the 'next' of the previous page)") from None


# --- the routes -------------------------------------------------------------------------------------

def job(cluster: str, job_id: str) -> flask.Response:
    """One job, exactly as `jobsight job --format json` prints it (in the asker's scope)."""
    _params(set())
    with common.handle() as h:
        m = job_queries.details(h, current_scope(), job_id, None if cluster == ANY_CLUSTER else cluster)
    return flask.Response(render.to_json(m) + "\n", mimetype="application/json", headers={"Cache-Control": "no-store"})


def jobs() -> flask.Response:
    p = _params(FILTERS | {"state", "flag", "cursor", "limit"})
    f = _filters(p, state=p.get("state"), codes=_codes(p))
    after = decode_cursor(p["cursor"]) if p.get("cursor") else None
    with common.handle() as h:
        names, rows, key = job_page(h, current_scope(), f, after, _count(p, "limit", PAGE_SIZE, MAX_PAGE))
    return _json({"jobs": _records(names, rows), "next": encode_cursor(key) if key else None})


def flags() -> flask.Response:
    p = _params(FILTERS | {"flag", "sort", "limit"})
    sort = p.get("sort", "wasted_sbu")
    if sort not in SORTS:
        raise BadRequest(f"sort must be one of {', '.join(SORTS)}")
    f = _filters(p, codes=_codes(p))
    with common.handle() as h:
        names, rows, more = flag_rows(h, current_scope(), f, sort, _count(p, "limit", FLAGS_LIMIT, 10**9, zero=True))
    return _json({"flags": _records(names, rows), "more": more})


def usage_scope(scope: Scope, f: Filters) -> Scope:
    """The scope a usage question is asked in: a lead's is per account (the read API asks it so):
    an account the lead leads, or the lead's own jobs."""
    if scope.role != "lead":
        return scope
    if f.account in scope.accounts:
        return Scope.admin(scope.user)      # f.account limits it to the led account
    if f.user == scope.user:
        return Scope("user", scope.user)
    raise BadRequest(f"a project lead asks usage per project (account= one of {', '.join(scope.accounts)}) "
                     f"or for their own jobs (user={scope.user})")


def usage_route() -> flask.Response:
    p = _params(FILTERS | {"by"})
    by = p.get("by", "account")
    if by not in BY:
        raise BadRequest(f"by must be one of {', '.join(BY)}")
    f = _filters(p)
    with common.handle() as h:
        names, rows = usage(h, usage_scope(current_scope(), f), f, by)
        return _json({"by": by, "usage": _records(names, rows), "data_age": _age(h)})


def _age(h) -> dict:
    age = data_age(h)
    return {"newest": age.newest, "old": age.old}


def budget_status() -> flask.Response:
    """The allocations against their burn as of ``until``'s day, as `jobsight usage --budget` lists them."""
    p = _params({"until", "user", "account", "cluster"})
    f = _filters(p)
    with common.handle() as h:
        names, rows = budget_rows(h, usage_scope(current_scope(), f), f, budget_as_of(h, f.until_ts))
        return _json({"budgets": _records(names, rows), "data_age": _age(h)})


def budgets() -> flask.Response:
    p = _params({"account"})
    with common.handle() as h:
        df = budget_frame(h, current_scope(), p.get("account") or None)
    return _json({"budgets": _frame_records(df)})


def report() -> flask.Response:
    """The asker's own weekly report (`jobsight report --for user:ME`) as its data
    (analytics/reports/wire.py): the client renders it with the local command's renderers."""
    from jobsight.analytics.reports import wire
    from jobsight.analytics.reports.data import gather
    from jobsight.analytics.reports.period import resolve
    from jobsight.analytics.reports.settings import ReportSettings
    p = _params({"week", "since", "until"})
    period = resolve(p.get("week") or None, p.get("since") or None, p.get("until") or None)
    settings = flask.current_app.config.get(REPORT_SETTINGS) or ReportSettings()
    try:
        first = period.since - settings.trend_weeks * period.length
    except OverflowError:
        first = dt.datetime.min
    if not (common.FIRST_DAY <= first.date() and period.until.date() <= common.LAST_DAY):
        raise BadRequest(f"reports from {common.FIRST_DAY} to {common.LAST_DAY} only (with {settings.trend_weeks} "
                         "weeks of trend before them)")
    me = current_scope().user
    with common.handle() as h:
        if not me or not seen(h, "user", me):
            raise NotFound(f"the database has no job of user {me!r} in any period")
        rep = gather(h, period, settings, [me], []).build("user", me)
    return _json({"report": wire.document(rep)})


def openapi(prefix: str) -> flask.Response:
    return _json(api_schema.document(prefix))


def install(app, prefix: str) -> None:
    """The API's routes under the app's URL prefix; any other path under it is a JSON 404."""
    base = prefix + PATH
    server = app.server
    for rule, name, view in ((f"{base}jobs/<cluster>/<job_id>", "job", job), (f"{base}jobs", "jobs", jobs),
                             (f"{base}flags", "flags", flags), (f"{base}usage", "usage", usage_route),
                             (f"{base}usage/budgets", "budget_status", budget_status),
                             (f"{base}budgets", "budgets", budgets), (f"{base}report", "report", report),
                             (f"{base}openapi.json", "openapi", functools.partial(openapi, prefix))):
        server.add_url_rule(rule, f"jobsight_api_{name}", _answer(view), methods=["GET"])
    server.add_url_rule(f"{base}<path:_rest>", "jobsight_api_unknown",
                        lambda _rest: error(404, "no such API route (see openapi.json)"), methods=["GET", "POST"])
