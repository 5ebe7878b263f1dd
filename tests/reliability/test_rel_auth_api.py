"""Authorization of the JSON API (dashboard/api.py) over real HTTP, on authsweep.py's header server:
every API route as a plain user, a project lead and the admin, with tampered parameters (another
user's name, account, job, cluster, cursor): no response carries a marker of anyone outside the
asker's scope, a job outside it is the same 404 as one that does not exist, and every answer is
valid against the served OpenAPI document (a validator of the subset it uses, below)."""
from __future__ import annotations

import datetime as dt
import json
import re
import urllib.parse

import pytest

pytest.register_assert_rewrite("authsweep")

from authsweep import ALICE, BOB, CAROL, DAVE, GHOST, PEOPLE, ROOT_, Checks, forbidden, http  # noqa: E402

pytest_plugins = ["authsweep"]

VIEWERS = [ALICE.user, BOB.user, CAROL.user, DAVE.user, ROOT_.user]
ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


# --- a validator of the JSON Schema subset the document uses ---------------------------------------

def validate(value, schema: dict, doc: dict, where: str = "$") -> list[str]:
    if "$ref" in schema:
        schema = doc["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    errors = []
    types = schema.get("type")
    if types is not None:
        kinds = {"string": str, "integer": int, "number": (int, float), "boolean": bool, "null": type(None),
                 "array": list, "object": dict}
        allowed = [types] if isinstance(types, str) else types
        if not any(isinstance(value, kinds[t]) and not (t in ("integer", "number") and isinstance(value, bool))
                   for t in allowed):
            return [f"{where}: {type(value).__name__} is not {allowed}"]
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{where}: {value!r} not in enum")
    if schema.get("format") == "date-time" and isinstance(value, str) and not ISO.match(value):
        errors.append(f"{where}: {value!r} is not a date-time")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        errors += [f"{where}: missing {k}" for k in schema.get("required", []) if k not in value]
        extra = schema.get("additionalProperties", True)
        for k, v in value.items():
            if k in props:
                errors += validate(v, props[k], doc, f"{where}.{k}")
            elif extra is False:
                errors.append(f"{where}: unexpected property {k}")
            elif isinstance(extra, dict):
                errors += validate(v, extra, doc, f"{where}.{k}")
    if isinstance(value, list) and "items" in schema:
        for i, v in enumerate(value):
            errors += validate(v, schema["items"], doc, f"{where}[{i}]")
    return errors


def response_schema(doc: dict, route: str, status: int) -> dict:
    return doc["paths"][route]["get"]["responses"][str(status)]["content"]["application/json"]["schema"]


@pytest.fixture(scope="module")
def doc(env):
    r = http(env.header_port, "/api/v1/openapi.json", headers=env.as_user(ALICE.user))
    Checks.expect(r.status == 200, f"openapi.json: HTTP {r.status}")
    d = json.loads(r.body)
    Checks.expect(d["openapi"].startswith("3."), "not an OpenAPI 3 document")
    return d


def get(env, doc, user: str, target: str) -> tuple[int, object]:
    """GET target as user; the answer checked against the document's schema for its route and status."""
    r = http(env.header_port, target, headers=env.as_user(user))
    Checks.expect(r.headers.get("content-type", "").startswith("application/json"), f"{target}: {r.headers}")
    body = json.loads(r.body)
    path = urllib.parse.urlsplit(target).path
    route = "/api/v1/jobs/{cluster}/{job_id}" if path.count("/") == 5 else path
    answers = doc["paths"].get(route, {}).get("get", {}).get("responses", {})
    if "content" in answers.get(str(r.status), {}):
        errors = validate(body, response_schema(doc, route, r.status), doc)
        Checks.expect(not errors, f"{target} as {user}: HTTP {r.status} not as documented: {errors[:5]}")
    asked = urllib.parse.unquote(target)        # what the asker wrote may come back (the id of a 404)
    shown = [m for m in forbidden(user) if m in r.body and m not in asked]
    Checks.expect(not shown, f"{target} as {user}: HTTP {r.status} shows {shown}")
    return r.status, body


def tampered_targets() -> list[str]:
    q = urllib.parse.quote
    out = ["/api/v1/jobs", "/api/v1/jobs?limit=1", "/api/v1/flags", "/api/v1/flags?limit=0",
           "/api/v1/budgets", "/api/v1/openapi.json", "/api/v1/no-such-route", "/api/v1/report?week=last",
           "/api/v1/report?week=1999-W60", "/api/v1/report?since=0001-01-01", "/api/v1/report?user=bob&week=last",
           "/api/v1/report", "/api/v1/usage/budgets", "/api/v1/usage/budgets?since=2026-11-01",
           "/api/v1/usage/budgets?until=2026-11-30T12:00"]
    for by in ("user", "account", "partition", "cluster", "day", "week", "month"):
        out.append(f"/api/v1/usage?by={by}")
    for p in PEOPLE + (GHOST,):
        for name in ("user", "account"):
            value = p.user if name == "user" else p.accounts[0]
            out += [f"/api/v1/jobs?{name}={q(value)}", f"/api/v1/flags?{name}={q(value)}",
                    f"/api/v1/usage?by=user&{name}={q(value)}", f"/api/v1/budgets?account={q(p.accounts[-1])}",
                    f"/api/v1/usage/budgets?{name}={q(value)}"]
        out += [f"/api/v1/jobs?since={p.day}&until={p.day}", f"/api/v1/flags?since={p.day}&until={p.day}&sort=sbu",
                f"/api/v1/usage?by=day&since={p.day}&until={p.day}", f"/api/v1/jobs?partition={q(p.partition)}",
                f"/api/v1/report?since={p.day}", f"/api/v1/report?week={dt.date.fromisoformat(p.day):%G-W%V}"]
    out += ["/api/v1/jobs?user=%25", "/api/v1/jobs?user=%27%20OR%20%271%27%3D%271", "/api/v1/jobs?flag=cpu_low_eff&flag=gpu_idle",
            "/api/v1/jobs?state=RUNNING", "/api/v1/jobs?cursor=WyIyMDI2LTExLTE5VDEwOjAwOjAwIiwgImMxIiwgIjAiXQ",
            "/api/v1/jobs?limit=0", "/api/v1/jobs?limit=-1", "/api/v1/jobs?since=not-a-date", "/api/v1/usage?by=job",
            "/api/v1/flags?flag=no_such_flag", "/api/v1/jobs?user=a&user=b", "/api/v1/jobs?x=1"]
    return out


def job_targets() -> list[tuple[str, str, bool]]:
    """(target, owner, is it a real job) for every job of every person, by printed and raw id, on
    its cluster, on any cluster (*) and on a wrong one."""
    out = []
    for p in PEOPLE + (GHOST,):
        for printed, raw, *_ in p.jobs:
            for jid in {printed, raw}:
                for cluster in ("c1", "*", "c-other"):
                    out.append((f"/api/v1/jobs/{cluster}/{urllib.parse.quote(jid)}", p.user,
                                p is not GHOST and cluster != "c-other"))
    return out


@pytest.mark.parametrize("who", VIEWERS)
def test_every_api_route_answers_within_the_scope(env, doc, who):
    for target in tampered_targets():
        status, _ = get(env, doc, who, target)
        Checks.expect(status in (200, 400, 404), f"{target} as {who}: HTTP {status}")
    visible = {p.user for p in PEOPLE if p.user in forbidden_free(who)}
    not_found = set()
    for target, owner, real in job_targets():
        status, body = get(env, doc, who, target)
        if real and owner in visible:
            Checks.expect(status == 200 and body["user"] == owner, f"{target} as {who}: HTTP {status}")
        else:
            Checks.expect(status == 404, f"{target} as {who}: HTTP {status}, expected 404")
            jid = urllib.parse.unquote(target.rsplit("/", 1)[1])
            cluster = target.split("/")[4]
            not_found.add(json.dumps(body).replace(jid, "ID").replace(f" on cluster '{cluster}'", ""))
    if who != ROOT_.user:       # another's job and no job: the same answer (the admin's names missing samples)
        Checks.expect(len(not_found) == 1, f"as {who}: 404s differ: {not_found}")


def forbidden_free(who: str) -> set[str]:
    from authsweep import VISIBLE
    return {p.user for p in VISIBLE[who]}


# by hand from the seed (authsweep.py): the jobs each viewer's API lists, the flags and usage rows
EXPECTED_JOBS = {
    ALICE.user: {"7100011"}, BOB.user: {"7200021", "7200031_4"}, DAVE.user: {"7400051"},
    CAROL.user: {"7300041", "7300042", "7400051"},
    ROOT_.user: {"7100011", "7200021", "7200031_4", "7300041", "7300042", "7400051", "7500061"},
}


@pytest.mark.parametrize("who", VIEWERS)
def test_lists_hold_exactly_the_scope(env, doc, who):
    ids, cursor, pages = [], None, 0
    while True:       # one job a page: the cursor walks the whole list once
        status, body = get(env, doc, who, "/api/v1/jobs?limit=1" + (f"&cursor={cursor}" if cursor else ""))
        Checks.expect(status == 200, f"jobs as {who}: HTTP {status}")
        ids += [j["job_id"] for j in body["jobs"]]
        pages += 1
        cursor = body["next"]
        if cursor is None or pages > 20:
            break
    Checks.expect(sorted(ids) == sorted(EXPECTED_JOBS[who]), f"jobs as {who}: {ids}")
    _status, body = get(env, doc, who, "/api/v1/flags?limit=0")
    Checks.expect({r["job_id"] for r in body["flags"]} == EXPECTED_JOBS[who], f"flags as {who}")
    account = next((a for a in ("acct-lead-k2",) if who == CAROL.user), None)
    status, body = get(env, doc, who, "/api/v1/usage?by=user" + (f"&account={account}" if account else ""))
    if who == CAROL.user:
        Checks.expect(status == 200 and {r["user"] for r in body["usage"]} == {CAROL.user, DAVE.user},
                      f"usage of the led account: {body}")
        status, body = get(env, doc, who, f"/api/v1/usage?by=user&account={ALICE.accounts[0]}")
        Checks.expect(status == 400, f"usage of an account carol does not lead: HTTP {status}")
    else:
        users = {p.user for p in PEOPLE} if who == ROOT_.user else {who}
        Checks.expect(status == 200 and {r["user"] for r in body["usage"]} == users, f"usage as {who}: {body}")
    # the report is always the asker's own, the admin's too
    person = next(p for p in PEOPLE if p.user == who)
    status, body = get(env, doc, who, f"/api/v1/report?since={min(p.day for p in PEOPLE)}&until={max(p.day for p in PEOPLE)}")
    rep = body.get("report") or {}
    Checks.expect(status == 200 and (rep["kind"], rep["name"]) == ("user", who), f"report as {who}: {status} {body}")
    Checks.expect({j["user"] for j in rep["top_jobs"]} == {who} and rep["totals"]["jobs"] == len(person.jobs),
                  f"report as {who}: {rep['top_jobs']} {rep['totals']}")
