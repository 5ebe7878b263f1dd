"""Injection: job names, users and accounts carrying HTML/JS, SQL, spreadsheet formulas, ANSI
escapes and newlines are stored exactly and come out inert: escaped on the terminal, neutralised
in CSV, escaped in HTML and Markdown reports; the database keeps all its tables."""
from __future__ import annotations

import csv
import io
import json
import re

import pytest
from conftest import post_callback
from relhelp import generated_cluster, open_ro


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    return generated_cluster(tmp_path_factory)

PAYLOADS = ['<script>alert(1)</script>', '"><img src=x onerror=alert(1)>', "'; DROP TABLE job; --",
            '=HYPERLINK("http://x","y")', '+1', '-1', '@SUM(1)', '\x1b[31mred\x1b[0m', '\x1b]0;title\x07',
            'line1\nline2\rline3']
FORMULA = tuple("=+-@\t\r")
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")          # everything but \t and \n
TABLES = {"job", "step", "sample", "sidecar_run", "reject", "ingest_log", "schema_version"}


def _cli(args: list[str], capsys) -> str:
    from jobsight.analytics.cli import main as jobsight
    capsys.readouterr()
    rc = jobsight(args)
    out = capsys.readouterr().out
    assert rc == 0, out
    return out


@pytest.fixture(scope="module")
def hostile(cluster, tmp_path_factory):
    """A generated sacct --json dump with every job's name, user and account replaced by a payload
    (job i: name P[i], user P[i+3], account P[i+6]); ingested. Returns (db, {job id: (name, user, account)})."""
    root, _ = cluster
    src = sorted((root / "sacct-json").glob("*.json"))[0]
    doc = json.loads(src.read_text(encoding="utf-8"))
    jobs = {}
    for i, j in enumerate(doc["jobs"]):
        n, u, a = (PAYLOADS[(i + k) % len(PAYLOADS)] for k in (0, 3, 6))
        j["name"], j["user"], j["account"] = n, u, a
        j["association"]["user"], j["association"]["account"] = u, a
        jobs[str(j["job_id"])] = (n, u, a)
    assert len(jobs) >= len(PAYLOADS)
    tmp = tmp_path_factory.mktemp("inject")
    f = tmp / "hostile.json"
    f.write_text(json.dumps(doc), encoding="utf-8")
    db = tmp / "h.duckdb"
    from jobsight.analytics.cli import main as jobsight
    assert jobsight(["ingest", "--db", str(db), "--cluster", "demo", "--quiet", str(f)]) == 0
    return db, jobs


def test_stored_exactly_and_tables_intact(hostile):
    db, jobs = hostile
    con = open_ro(db)
    try:
        have = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        stored = {r[0]: tuple(r[1:]) for r in con.execute(
            'SELECT job_id_raw, job_name, "user", account FROM jobs').fetchall()}
    finally:
        con.close()
    assert TABLES <= have
    assert stored == jobs


def test_job_terminal_output_has_no_control_characters(hostile, capsys):
    db, jobs = hostile
    ids = list(jobs)
    # jobs 0, 7, 8, 9 are named <script>, ESC[31m, ESC]0;title BEL and line1\nline2\rline3; between them
    # their users and accounts carry every control-character payload as well
    for jid in (ids[0], ids[7], ids[8], ids[9]):
        name = jobs[jid][0]
        out = _cli(["job", "--db", str(db), jid], capsys)
        assert not CONTROL.search(out), (jid, out[:300])
        # the name is on its own `Name:` line, with any newline in it escaped
        line = next(ln for ln in out.splitlines() if ln.startswith("Name: "))
        assert line.count("line1") == ("line1" in name) and ("line2" not in line or "\\n" in line), line
        if "\x1b" in name:                             # shown, as the visible text \x1b
            assert "\\x1b" in line, line


def test_flags_table_has_no_control_characters(hostile, capsys):
    db, _ = hostile
    out = _cli(["flags", "--db", str(db)], capsys)
    assert "alert(1)" in out                        # the hostile rows are there
    assert not CONTROL.search(out)


def _payload_cells(text: str) -> list[str]:
    cells = [c for row in csv.reader(io.StringIO(text, newline="")) for c in row]
    return [c for c in cells if c in PAYLOADS or c.lstrip("'") in PAYLOADS]


@pytest.mark.parametrize("args", [["flags", "--format", "csv"], ["usage", "--format", "csv", "--by", "user"],
                                  ["usage", "--format", "csv", "--by", "account"]])
def test_csv_cells_are_neutralised(hostile, capsys, args):
    db, _ = hostile
    out = _cli([args[0], "--db", str(db), *args[1:]], capsys)
    cells = _payload_cells(out)
    assert cells, "no hostile value in the CSV"
    formulas = [c for c in cells if c.lstrip("'") in PAYLOADS and c.lstrip("'").startswith(FORMULA)]
    assert formulas, "no formula-like value in the CSV"
    assert all(c.startswith("'") for c in formulas), [c for c in formulas if not c.startswith("'")]
    # the others come through unchanged
    assert all(c in PAYLOADS for c in cells if not c.lstrip("'").startswith(FORMULA))


def test_reports_show_payloads_as_text(hostile, tmp_path, capsys):
    db, _ = hostile
    out_dir = tmp_path / "rep"
    _cli(["report", "--db", str(db), "--since", "2026-10-01", "--until", "2026-12-31", "--for", "admin",
          "--for", "all-users", "--for", "all-accounts", "--format", "html,md", "--out", str(out_dir)], capsys)
    html = list(out_dir.rglob("*.html"))
    md = list(out_dir.rglob("*.md"))
    assert html and md
    assert all(p.resolve().is_relative_to(out_dir.resolve()) for p in html + md)   # names cannot escape --out
    escaped_seen = 0
    for p in html + md:
        text = p.read_text(encoding="utf-8")
        low = text.lower()
        assert "<script>alert" not in low and "<img" not in low and "onerror=alert(1)>" not in low, p.name
        assert "\x1b" not in text and "\x07" not in text, p.name
        # outside inline scripts (the bundled plotly.js holds control bytes of its own): none at all
        assert not CONTROL.search(re.sub(r"(?s)<script.*?</script>", "", text)), p.name
        escaped_seen += "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert escaped_seen, "the HTML payload is not shown (escaped) in any report"


# -- dashboard ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def dash_client(hostile):
    from jobsight.analytics.store.snapshot import SnapshotReader, publish
    from jobsight.dashboard.app import create_app
    from jobsight.dashboard.auth import Auth, Roles
    db, _ = hostile
    publish(db)
    reader = SnapshotReader(db)
    app = create_app(reader, Auth("header", Roles.from_config({"admins": ["root"]})))
    yield app, app.server.test_client()
    reader.close()


def _post(app, client, key: str, values: dict) -> dict:
    r = post_callback(client, key, app.callback_map[key], values.get, "root")
    assert r.status_code == 200, (key, r.status_code, r.data[:300])
    return json.loads(r.data)


def _strings_with_payloads(node, parent_type=None, out=None):
    """(component type, prop, string) for every string that carries a payload."""
    out = [] if out is None else out
    if isinstance(node, dict):
        ctype = node.get("type", parent_type)
        for k, v in node.items():
            if isinstance(v, str) and any(p in v for p in PAYLOADS):
                out.append((ctype, k, v))
            else:
                _strings_with_payloads(v, ctype, out)
    elif isinstance(node, list):
        for v in node:
            if isinstance(v, str) and any(p in v for p in PAYLOADS):
                out.append((parent_type, "children", v))
            else:
                _strings_with_payloads(v, parent_type, out)
    return out


def test_dashboard_job_page_shows_names_as_text(dash_client, hostile):
    app, client = dash_client
    _, jobs = hostile
    for jid, (name, _user, _account) in list(jobs.items())[:len(PAYLOADS)]:
        page = _post(app, client, "page.children", {"url.pathname": "/job", "url.search": f"?cluster=demo&id={jid}"})
        doc = _post(app, client, "job-content.children", {"job-key.data": {"cluster": "demo", "id": jid}})
        text = json.dumps([page, doc])
        assert "dangerously_allow_html" not in text and '"Markdown"' not in text, jid
        found = _strings_with_payloads(doc)
        assert any(s == name for _, _, s in found), (jid, name, found[:5])       # the whole name, one string
        for ctype, prop, _s in found:
            assert ctype not in ("Markdown", "Iframe", "Script") and prop in ("children", "data", "title", "value",
                                                                               "text", "x", "y", "name"), (ctype, prop)


@pytest.mark.parametrize("key,path", [("..fl-table.rowData...fl-status.children...fl-table.columnDefs..", "/flagged"),
                                      ("..ut-table.rowData...ut-status.children...ut-table.columnDefs..", "/users"),
                                      ("..pt-table.rowData...pt-status.children...pt-table.columnDefs..", "/projects")])
def test_dashboard_tables_show_payloads_as_text(dash_client, key, path):
    app, client = dash_client
    page = json.dumps(_post(app, client, "page.children", {"url.pathname": path, "url.search": ""}))
    assert '"presentation": "markdown"' not in page and "dangerously_allow_html" not in page
    assert "markdown_options" not in page or '"html": true' not in page
    data = _post(app, client, key, {})
    rows = next(iter(data["response"].values()))["rowData"]
    cells = [v for r in rows for v in r.values() if isinstance(v, str)]
    assert any(c in PAYLOADS for c in cells), "no hostile value in the table"


# Regression (fixed): `jobsight job ... | head -1` prints a BrokenPipeError traceback: analytics/cli.py main()
# should catch BrokenPipeError, point stdout at os.devnull and return 141 (like other Unix tools)


def test_closed_pipe_is_not_a_traceback(hostile):
    """A reader that stops early (`| head`) is normal use in scripts, not a crash."""
    import subprocess
    import sys

    from relhelp import ROOT
    db, jobs = hostile
    jid = next(iter(jobs))
    proc = subprocess.Popen([sys.executable, "-m", "jobsight.analytics.cli", "job", "--db", str(db), jid], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()                       # the reader is gone before jobsight writes
    err = proc.stderr.read().decode()
    proc.wait(timeout=60)
    proc.stderr.close()
    assert "Traceback" not in err, err[-300:]
