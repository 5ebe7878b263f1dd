"""Authorization over real HTTP, part 1 (setup in authsweep.py; parts 2 to 4 in test_rel_auth_routes.py).

1. Every Dash callback, read from the app's own `/_dash-dependencies` (a new callback is swept
   without editing this file; an input the sweep cannot classify fails it): each input or state
   that can carry a user, project, partition, job id or date gets another user's value, an admin's
   value and "widening" values (wildcards, SQL, wrong types), as a plain user and as a project
   lead. The answer must hold none of the other users' markers that the request did not itself
   carry, and must equal, string for string, the answer for names that exist nowhere.
"""
from __future__ import annotations

import json
import re
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

import pytest

# authsweep holds asserts (Checks.expect, the env fixture): rewritten like a test module's, which
# needs registering before its import (pytest_plugins below would come too late and warn)
pytest.register_assert_rewrite("authsweep")

from authsweep import (  # noqa: E402
    ALICE,
    BOB,
    CAROL,
    GHOST,
    PAGES,
    ROOT_,
    Checks,
    Person,
    Reply,
    body_for,
    forbidden,
    http,
    outputs_of,
    post,
)

pytest_plugins = ["authsweep"]   # the env and deps fixtures: one pair of servers for both test files


# --- 1. every callback ----------------------------------------------------------------------------

# What each input or state of a callback can carry, by "id.property". An input nobody classified
# fails the sweep: a new kind of input needs a line here (and crafted values below).
KINDS = [
    (r"^url\.pathname$", "path"), (r"^url\.search$", "search"),
    (r"^moved\.data$", "path"),        # the path the browser moved to (dashboard/app.py), as url.pathname
    (r"-period\.(start|end)_date$", "date"),
    (r"-user\.value$", "user"), (r"-account\.value$", "account"), (r"-partition\.value$", "partition"),
    (r"-name\.data$", "name"), (r"^job-key\.data$", "job"), (r"^search-box\.value$", "query"),
    # these carry no identity: chart grain and stacking, flag codes, severities and job states, clicks,
    # the page of My jobs
    (r"-(grain|stack)\.value$", None), (r"-(code|severity|state)\.value$", None), (r"\.n_(clicks|submit)$", None),
    (r"^jobs-page\.data$", None),
]
# callbacks none of whose inputs can name a user, project, partition, job or date: the line on
# every page saying how old the data is (the whole database's newest accounting time, as /metrics)
NO_IDENTIFYING_INPUT: frozenset[str] = frozenset({"..data-age.children...data-age.className.."})


def kind_of(prop: str) -> str | None:
    for pattern, kind in KINDS:
        if re.search(pattern, prop):
            return kind
    Checks.expect(False, f"input {prop!r} is not classified for the authorization sweep: add it to KINDS")


def crafted(kind: str, p: Person) -> list:
    """Values aimed at person ``p``'s data for an input of ``kind``."""
    printed, raw = p.jobs[0][:2]
    arr = p.jobs[-1][0]
    return {
        "date": [p.day],
        "user": [p.user], "account": [p.accounts[0]], "partition": [p.partition],
        "name": [p.user, p.accounts[0]],
        "job": [{"cluster": "c1", "id": raw}, {"cluster": None, "id": arr}],
        "query": [raw, arr, p.jobs[0][2]],
        "search": ["?" + urllib.parse.urlencode(q) for q in (
            {"user": p.user, "account": p.accounts[0], "partition": p.partition, "since": p.day, "until": p.day},
            {"name": p.user}, {"name": p.accounts[0]}, {"cluster": "c1", "id": raw}, {"id": arr})],
    }[kind]


WILD = ["%", "*", "' OR '1'='1' --", "", [BOB.user, ALICE.user, BOB.accounts[0]], {"user": BOB.user}, 1]


def widened(kind: str, w) -> object:
    if kind in ("user", "account", "partition", "name", "date", "query"):
        return w
    if kind == "job":
        return {"cluster": w, "id": w}
    if kind == "query":
        return w
    if kind == "search":
        return "?" + urllib.parse.urlencode({k: w for k in ("user", "account", "partition", "name", "id", "cluster",
                                                            "since")}, doseq=True)
    raise AssertionError(kind)


NEUTRAL: dict[str, object] = {}


def requests_for(dep: dict, victim: Person):
    """(label, values aimed at ``victim``, the same aimed at GHOST) for one callback: each identifying
    input alone, then all of them together; every page when the callback reads the path."""
    props = [f"{d['id']}.{d['property']}" for d in dep["inputs"] + dep["state"]]
    kinds = {p: kind_of(p) for p in props}
    base = {p: NEUTRAL.get(k) for p, k in kinds.items()}
    ident = [p for p, k in kinds.items() if k not in (None, "path")]
    if not ident:
        Checks.expect(dep["output"] in NO_IDENTIFYING_INPUT, f"callback {dep['output']} has no identifying input: "
                      "list it in NO_IDENTIFYING_INPUT or classify its inputs")
    paths = [p for p, k in kinds.items() if k == "path"]
    for page in (PAGES if paths else [None]):
        page_vals = {paths[0]: page} if paths else {}
        for prop in ident:
            for i, (v, g) in enumerate(zip(crafted(kinds[prop], victim), crafted(kinds[prop], GHOST))):
                yield f"{prop}#{i} page={page}", {**base, **page_vals, prop: v}, {**base, **page_vals, prop: g}
        if len(ident) > 1:
            yield (f"all page={page}", {**base, **page_vals, **{p: crafted(kinds[p], victim)[0] for p in ident}},
                   {**base, **page_vals, **{p: crafted(kinds[p], GHOST)[0] for p in ident}})


def ghost_to(victim: Person, text: str) -> str:
    pairs = [(GHOST.user, victim.user), (GHOST.accounts[0], victim.accounts[0]), (GHOST.partition, victim.partition),
             (GHOST.day, victim.day), (GHOST.jobs[0][1], victim.jobs[0][1]), (GHOST.jobs[0][0], victim.jobs[-1][0]),
             (GHOST.jobs[0][2], victim.jobs[0][2])]
    for g, v in pairs:
        text = text.replace(g, v)
    return text


DAY = re.compile(r"\d{4}-\d\d-\d\d")


def without_empty_days(text: str) -> str:
    """The answer with each chart's zero-filled days left out: charts span the selected period, so
    a period ending on the victim's day and one ending on the ghost's (years later) differ in how
    many empty days they draw, and in nothing else when no one's data leaks; the days with a value
    are kept and compared."""
    def walk(node):
        if isinstance(node, dict):
            x, y = node.get("x"), node.get("y")
            if (isinstance(x, list) and isinstance(y, list) and len(x) == len(y)
                    and all(isinstance(v, str) and DAY.match(v) for v in x)):
                kept = [(a, b) for a, b in zip(x, y) if b not in (0, 0.0, None)]
                node = {**node, "x": [a for a, _ in kept], "y": [b for _, b in kept]}
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node
    try:
        return json.dumps(walk(json.loads(text)), sort_keys=True)
    except ValueError:
        return text


def leaks(viewer: str, request: bytes, reply: Reply) -> set[str]:
    """Markers of data outside ``viewer``'s scope in the reply that the request did not carry."""
    sent = request.decode()
    return {m for m in forbidden(viewer) if m in reply.body and m not in sent}


@pytest.mark.parametrize("viewer,victims", [(ALICE, (BOB, CAROL, ROOT_)), (CAROL, (BOB, ROOT_))],
                         ids=["user", "lead"])
def test_every_callback_with_another_users_values(env, deps, viewer, victims):
    assert deps, "the app lists no callbacks"
    jobs = [(dep, victim, label, v, g) for dep in deps for victim in victims
            for label, v, g in requests_for(dep, victim)]

    def run(job):
        dep, victim, label, v, g = job
        (bv, rv), (bg, rg) = post(env, viewer.user, dep, v), post(env, viewer.user, dep, g)
        return dep, victim, label, (bv, rv), (bg, rg)

    with ThreadPoolExecutor(4) as pool:
        for dep, victim, label, (bv, rv), (bg, rg) in pool.map(run, jobs):
            where = f"{viewer.user} -> {victim.user}: {dep['output']} {label}"
            Checks.expect(rv.status in (200, 204) and rg.status in (200, 204), f"{where}: HTTP {rv.status}/{rg.status}")
            Checks.expect(not leaks(viewer.user, bv, rv), f"{where}: leaked {leaks(viewer.user, bv, rv)}")
            Checks.expect(not leaks(viewer.user, bg, rg), f"{where} (ghost): leaked {leaks(viewer.user, bg, rg)}")
            Checks.expect(without_empty_days(rv.body) == without_empty_days(ghost_to(victim, rg.body)),
                          f"{where}: the answer differs from the one for a name that does not exist\n"
                          f"{rv.body[:400]}\n{ghost_to(victim, rg.body)[:400]}")
            Checks.expect("Traceback" not in rv.body, where)


def test_every_callback_with_widening_values(env, deps):
    for viewer in (ALICE, CAROL):
        for dep in deps:
            props = [f"{d['id']}.{d['property']}" for d in dep["inputs"] + dep["state"]]
            kinds = {p: kind_of(p) for p in props}
            for w in WILD:
                for page in (PAGES if "path" in kinds.values() else [None]):
                    values = {p: (page if k == "path" else NEUTRAL.get(k) if k is None else widened(k, w))
                              for p, k in kinds.items()}
                    body, r = post(env, viewer.user, dep, values)
                    where = f"{viewer.user}: {dep['output']} = {w!r} page={page}"
                    Checks.expect(r.status in (200, 204), f"{where}: HTTP {r.status} {r.body[:200]}")
                    Checks.expect(not leaks(viewer.user, body, r), f"{where}: leaked {leaks(viewer.user, body, r)}")


def test_malformed_callback_requests_are_refused(env, deps, all_deps):
    """Bodies that match no registered callback are a 400 (Dash alone answers them with a 500 and a
    traceback in the log), and carry nothing of anyone's data."""
    job = next(d for d in deps if d["output"] == "job-content.children")
    good = json.loads(body_for(job, {"job-key.data": {"cluster": "c1", "id": BOB.jobs[0][1]}}))
    multi = next(d for d in deps if d["output"].startswith(".."))
    bad = [b"{", b"", b"[]", b"null", b'"x"', json.dumps({**good, "output": "nope.children"}).encode(),
           json.dumps({**good, "output": ["job-content.children"]}).encode(),
           json.dumps({k: v for k, v in good.items() if k != "inputs"}).encode(),
           json.dumps({**good, "inputs": good["inputs"] * 3}).encode(), json.dumps({**good, "inputs": "x"}).encode(),
           json.dumps({**good, "inputs": [1]}).encode(), json.dumps({**good, "state": [{"id": "x"}]}).encode(),
           json.dumps({**good, "outputs": "x"}).encode(), json.dumps({**good, "changedPropIds": "x"}).encode(),
           json.dumps({**json.loads(body_for(multi, {})), "outputs": []}).encode(),
           json.dumps({**good, "output": multi["output"]}).encode()]
    # a callback that runs in the browser (a grid's CSV download) has no server side to reach
    browser_side = [d for d in all_deps if d.get("clientside_function")]
    assert browser_side, "no clientside callback to try"
    bad += [body_for(d, {}) for d in browser_side]
    for body in bad:
        r = http(env.header_port, "/_dash-update-component", "POST", env.as_user(ALICE.user), body)
        shown = [m for m in forbidden(ALICE.user) if m in r.body]
        Checks.expect(r.status == 400 and not shown, f"{body[:120]!r}: HTTP {r.status} {shown}")


def test_the_sweep_can_see_a_leak(env, deps):
    """The same crafted requests sent by the admin get answers that differ from the ghost's (bob's
    data is there) for every callback that returns data (not only a URL): a plain user's answer
    carrying bob's data would have failed the comparison above."""
    for dep in deps:
        outs = outputs_of(dep["output"])
        if all(o["id"] == "url" for o in (outs if isinstance(outs, list) else [outs])):
            continue
        if dep["output"] in NO_IDENTIFYING_INPUT:   # the same answer for everyone: no one's data to see
            continue
        shown = 0
        for _label, v, g in requests_for(dep, BOB):
            (_bv, rv), (_bg, rg) = post(env, ROOT_.user, dep, v), post(env, ROOT_.user, dep, g)
            shown += rv.body != ghost_to(BOB, rg.body)
        Checks.expect(shown > 0, f"{dep['output']}: the admin's answers never show bob's data: the sweep is blind there")
