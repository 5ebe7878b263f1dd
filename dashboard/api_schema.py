"""The OpenAPI 3.1 document of the JSON API (dashboard/api.py), served at /api/v1/openapi.json. The
row schemas are built from the read API's column lists, so a column added there is described here
(its type defaults to text or null; the numbers are named below)."""
from __future__ import annotations

from jobsight.analytics.queries.flags import COLUMNS as FLAG_COLUMNS
from jobsight.analytics.queries.flags import SORTS, flag_codes
from jobsight.analytics.queries.job_lists import LIST_COLUMNS
from jobsight.analytics.queries.summaries import BUDGET_COLUMNS
from jobsight.analytics.queries.usage import BUDGET_COLUMNS as STATUS_COLUMNS
from jobsight.analytics.queries.usage import BY
from jobsight.analytics.queries.usage import COLUMNS as USAGE_COLUMNS

TIME = {"type": ["string", "null"], "format": "date-time"}
NUMBER = {"type": ["number", "null"]}
TEXT = {"type": ["string", "null"]}
KEY_TEXT = {"type": "string"}
TIMES = {"start_time", "end_time", "period_start", "period_end", "as_of", "run_out_date"}
KEYS = {"cluster", "job_id", "job_id_raw", "code", "severity"}
TEXTS = {"job_name", "user", "account", "partition", "state", "message", "advice", "source", "period", "alert"}


# how old the data is: the newest accounting time (null: no job yet), and whether it is over a day old
DATA_AGE = {"type": ["object", "null"], "required": ["newest", "old"], "additionalProperties": False,
            "properties": {"newest": TIME, "old": {"type": "boolean"}}}
ROWS = {"type": "array", "items": {"type": "object"}}
# a report's data (analytics/reports/wire.py): the fields of analytics/reports/report.py's Report (a
# field added there is sent too: more properties are allowed)
REPORT = {"type": "object", "additionalProperties": True,
          "required": ["kind", "name", "period", "cluster", "totals", "trend", "daily", "top_jobs", "flag_counts",
                       "members", "budgets", "partitions", "accounts", "leaderboard", "summary", "data_age"],
          "properties": {
              "kind": {"type": "string", "enum": ["user"]}, "name": KEY_TEXT,
              "period": {"type": "object", "required": ["label", "since", "until", "is_week"], "additionalProperties": False,
                         "properties": {"label": KEY_TEXT, "since": TIME, "until": TIME, "is_week": {"type": "boolean"}}},
              "cluster": TEXT, "totals": {"type": "object", "additionalProperties": NUMBER},
              **{k: ROWS for k in ("trend", "daily", "top_jobs", "flag_counts", "members", "budgets", "partitions",
                                   "accounts", "leaderboard")},
              "summary": {"type": "string"}, "data_age": DATA_AGE, "dashboard_url": TEXT}}


# a budget_status row (`jobsight usage --budget --format json`): its days are DATEs, YYYY-MM-DD
DATE = {"type": ["string", "null"], "format": "date"}
STATUS_ROW = {"type": "object", "additionalProperties": False,
              "required": [*STATUS_COLUMNS, "alert_shown"],
              "properties": {**{c: DATE if c in ("period_start", "period_end", "as_of", "run_out_date") else
                                TEXT if c in ("cluster", "account", "user", "source", "period", "alert") else NUMBER
                                for c in STATUS_COLUMNS}, "alert_shown": {"type": "string"}}}


def _column(name: str) -> dict:
    if name in TIMES:
        return TIME
    if name in KEYS:
        return KEY_TEXT
    if name in TEXTS:
        return TEXT
    return NUMBER


def _row(columns, required=True, **extra) -> dict:
    props = {c: _column(c) for c in columns} | extra
    return {"type": "object", "properties": props, "required": list(props) if required else [],
            "additionalProperties": False}


def _param(name: str, description: str, schema: dict | None = None, where: str = "query") -> dict:
    return {"name": name, "in": where, "required": where == "path", "description": description,
            "schema": schema or {"type": "string"}}


FILTER_PARAMS = [
    _param("since", "from this date (YYYY-MM-DD) or date/time, UTC: jobs that ran in the period"),
    _param("until", "up to this date (the whole day) or date/time, UTC"),
    _param("user", "only this user's jobs (within the asker's scope)"),
    _param("account", "only this account's (project's) jobs"),
    _param("partition", "only this partition's jobs"),
    _param("cluster", "only this cluster's jobs"),
]
FLAG_PARAM = _param("flag", "only jobs with this flag code (repeatable, or comma-separated)",
                    {"type": "string", "enum": list(flag_codes())})


def _get(summary: str, params: list[dict], schema: str, *errors: int) -> dict:
    responses = {"200": {"description": "OK", "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}}}}
    for status in (400, 401, 403, *errors):
        responses[str(status)] = {"description": "error", "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    return {"get": {"summary": summary, "parameters": params, "responses": responses,
                    "security": [{"munge": []}, {"basic": []}, {"proxy": []}]}}


def document(prefix: str = "/") -> dict:
    """The OpenAPI document, its paths under the app's URL prefix."""
    base = prefix + "api/v1"
    count = {"type": "string", "pattern": "^[0-9]+$"}
    return {
        "openapi": "3.1.0",
        "info": {"title": "jobsight API", "version": "1",
                 "description": "A user's jobs, flags, usage and budgets, in the scope the dashboard gives them."},
        "paths": {
            f"{base}/jobs/{{cluster}}/{{job_id}}": _get(
                "One job, as `jobsight job --format json` prints it; 404 when it does not exist or is not yours",
                [_param("cluster", "the job's cluster, or * for whichever has it", where="path"),
                 _param("job_id", "job id: 123, 123_4 (array task) or the raw id", where="path")], "Job", 404),
            f"{base}/jobs": _get("Jobs, newest first, a page at a time (follow `next`)", FILTER_PARAMS + [
                _param("state", "only jobs in this state (COMPLETED, FAILED, RUNNING, ...)"), FLAG_PARAM,
                _param("cursor", "the `next` of the previous page"),
                _param("limit", "jobs per page, 1 to 1000 (default 100)", count)], "JobPage"),
            f"{base}/flags": _get("Flagged jobs, one row per flag, most wasted first", FILTER_PARAMS + [
                FLAG_PARAM, _param("sort", "order", {"type": "string", "enum": list(SORTS)}),
                _param("limit", "the flags of at most this many jobs (default 100); 0: every job", count)], "Flags"),
            f"{base}/usage": _get("Billing units burned, wasted and savable, summed by one key", FILTER_PARAMS + [
                _param("by", "the key (default account)", {"type": "string", "enum": list(BY)})], "Usage"),
            f"{base}/budgets": _get("Allocations against their burn, as of the latest day with data",
                                    [_param("account", "only this account's allocations")], "Budgets"),
            f"{base}/usage/budgets": _get(
                "Allocations against their burn as of `until`'s day, as `jobsight usage --budget` lists them",
                [_param("until", "as of this day (default: the latest day with accounting data)"),
                 _param("user", "this user's own and those of the accounts the user ran jobs in"),
                 _param("account", "this account's (its own and its users')"),
                 _param("cluster", "this cluster's and those of every cluster")], "BudgetStatus"),
            f"{base}/report": _get(
                "The asker's own weekly report (`jobsight report --for user:ME`) as its data; 404 when the "
                "asker has no job in any period", [
                    _param("week", "ISO week (2026-W47) or `last` (the last complete ISO week, UTC)"),
                    _param("since", "instead of week: first day (YYYY-MM-DD, UTC)"),
                    _param("until", "instead of week: last day, inclusive (default: 7 days from since)")],
                "Report", 404),
            f"{base}/openapi.json": {"get": {"summary": "This document", "responses": {"200": {"description": "OK"}}}},
        },
        "components": {
            "securitySchemes": {
                "munge": {"type": "http", "scheme": "MUNGE",
                          "description": "Authorization: MUNGE <credential>, its payload the request line: "
                                         "method, space, path with query (munge -s 'GET /api/v1/...')"},
                "basic": {"type": "http", "scheme": "basic"},
                "proxy": {"type": "apiKey", "in": "header", "name": "X-Forwarded-User",
                          "description": "set by the trusted reverse proxy"},
            },
            "schemas": {
                "Error": {"type": "object", "properties": {"error": {"type": "string"}}, "required": ["error"],
                          "additionalProperties": False},
                "Job": {"type": "object", "required": ["cluster", "job_id_raw"],
                        "properties": {"cluster": KEY_TEXT, "job_id_raw": KEY_TEXT, "start_time": TIME, "end_time": TIME,
                                       "flags": {"type": "array", "items": _row(["code", "severity", "message", "advice"])}},
                        "additionalProperties": True},
                "JobPage": {"type": "object", "required": ["jobs", "next"], "additionalProperties": False,
                            "properties": {"jobs": {"type": "array", "items": _row(
                                LIST_COLUMNS, codes={"type": "array", "items": {"type": "string"}})},
                                           "next": TEXT}},
                "Flags": {"type": "object", "required": ["flags", "more"], "additionalProperties": False,
                          "properties": {"flags": {"type": "array", "items": _row(FLAG_COLUMNS)},
                                         "more": {"type": "integer"}}},
                "Usage": {"type": "object", "required": ["by", "usage", "data_age"], "additionalProperties": False,
                          "properties": {"by": {"type": "string", "enum": list(BY)},
                                         "usage": {"type": "array", "items": {
                                             "type": "object", "required": USAGE_COLUMNS,
                                             "properties": {c: NUMBER for c in USAGE_COLUMNS},
                                             "additionalProperties": {"type": ["string", "null"]}}},
                                         "data_age": DATA_AGE}},
                "BudgetStatus": {"type": "object", "required": ["budgets", "data_age"], "additionalProperties": False,
                                 "properties": {"budgets": {"type": "array", "items": STATUS_ROW}, "data_age": DATA_AGE}},
                "Report": {"type": "object", "required": ["report"], "additionalProperties": False,
                           "properties": {"report": REPORT}},
                "Budgets": {"type": "object", "required": ["budgets"], "additionalProperties": False,
                            "properties": {"budgets": {"type": "array", "items": _row(BUDGET_COLUMNS)}}},
            },
        },
    }
