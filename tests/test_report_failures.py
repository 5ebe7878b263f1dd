"""Reports never stop halfway: names that would share a file or be too long for one, a file that
cannot be written, an --out that is not a folder, and a run stopped while writing."""
from __future__ import annotations

import datetime as dt
import os
import signal

import pytest
from test_report_values import _job, run_cli

from jobsight.analytics.config import parse_config
from jobsight.analytics.reports import html
from jobsight.analytics.store import results as store
from jobsight.analytics.store.database import Database

LONG = "p" * 300
NAMES = ["proj a", "proj/a", "proj_a", LONG]
# "proj_a" is its own slug; the others get a slug and a hash of the whole name (SHA-256, 12 digits)
STEMS = {"proj a": "account-proj_a~d0eb79c4daf6", "proj/a": "account-proj_a~a5915e9b0c5d",
         "proj_a": "account-proj_a", LONG: "account-" + "p" * 100 + "~67f102b90624"}
TOML = """
[roles]
leads = { "proj a" = ["u0"], "proj/a" = ["u1"], "proj_a" = ["u2"], "%s" = ["u3"] }
[email]
from = "jobsight@example.org"
user_address = "{user}@example.org"
""" % LONG


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("names")
    con = Database.open(d / "n.duckdb", parse_config({}))
    for i, account in enumerate(NAMES):     # one job each in W47, 1 + i SBU
        _job(con, str(i + 1), f"u{i}", account, dt.datetime(2026, 11, 17, 8), 1, 1, 1 + i, cpu_time_s=1800)
    store.refresh(con)
    con.close()
    (d / "jobsight.toml").write_text(TOML, encoding="utf-8")
    return d


def _report(d, *extra, who=("--for", "all-accounts")):
    return run_cli(["report", "--db", str(d / "n.duckdb"), "--config", str(d / "jobsight.toml"),
                    "--week", "2026-W47", *who, *extra])


@pytest.mark.parametrize("names", [NAMES[:3], NAMES[3:]], ids=["similar", "long"])
def test_names_map_to_files_one_to_one(setup, tmp_path, names):
    who = [a for name in names for a in ("--for", f"account:{name}")]
    rc, _, err = _report(setup, "--format", "html,md", "--out", str(tmp_path / "r"),
                         "--email", "--eml-dir", str(tmp_path / "e"), who=who)
    assert rc == 0, err
    stems = {name: STEMS[name] for name in names}
    folder = tmp_path / "r" / "2026-W47"
    assert sorted(p.name for p in folder.glob("account-*")) == sorted(
        f"{stem}.{ext}" for stem in stems.values() for ext in ("html", "md"))
    lines = err.splitlines()
    assert f"jobsight report: wrote {2 * len(names)} file(s) for {len(names)} report(s) to {folder}" in lines
    for name, stem in stems.items():     # each file is its own account's report, its name 255 bytes or less
        assert f"<h1>jobsight weekly report for project {name}</h1>" in (folder / f"{stem}.html").read_text(encoding="utf-8")
        assert len(f"{stem}.html".encode()) <= 255
    mails = tmp_path / "e" / "2026-W47"
    assert sorted(p.name for p in mails.iterdir()) == sorted(f"{stem}.eml" for stem in stems.values())
    assert f"jobsight report: wrote {len(names)} e-mail(s) to {mails}" in lines
    for name, stem in stems.items():
        lead = f"u{NAMES.index(name)}@example.org"
        assert f"\nTo: {lead}\n" in (mails / f"{stem}.eml").read_text(encoding="utf-8").replace("\r\n", "\n")
    assert not [p for p in (*folder.iterdir(), *mails.iterdir()) if p.name.endswith(".tmp")]


def test_one_file_that_cannot_be_written_stops_nothing_else(setup, tmp_path):
    folder = tmp_path / "r" / "2026-W47"
    (folder / "account-proj_a.html").mkdir(parents=True)     # a folder where one report goes
    (tmp_path / "e" / "2026-W47" / f"{STEMS['proj a']}.eml").mkdir(parents=True)
    rc, _, err = _report(setup, "--format", "html,md", "--out", str(tmp_path / "r"),
                         "--email", "--eml-dir", str(tmp_path / "e"))
    assert rc == 1
    lines = err.splitlines()
    assert f"jobsight report: wrote 7 file(s) for 4 report(s) to {folder}" in lines
    assert f"jobsight report: not written: {folder / 'account-proj_a.html'}: Is a directory" in lines
    assert f"jobsight report: wrote 3 e-mail(s) to {tmp_path / 'e' / '2026-W47'}" in lines
    assert f"jobsight report: not written: {tmp_path / 'e' / '2026-W47' / STEMS['proj a']}.eml: Is a directory" in lines
    assert lines[-1] == "jobsight report: 2 file(s) or e-mail(s) failed (listed above)"
    assert len(list(folder.glob("*.md"))) == 4 and len(list(folder.glob("*.html"))) == 4   # 3 reports + the folder
    assert (folder / f"{STEMS[LONG]}.html").stat().st_size > 1000
    assert not [p for p in folder.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize("option", ["--out", "--eml-dir"])
def test_out_that_is_a_file_is_one_line_and_exit_2(setup, tmp_path, option):
    existing = tmp_path / "taken"
    existing.write_text("not a folder\n")
    extra = ["--out", str(existing)] if option == "--out" else ["--email", "--eml-dir", str(existing)]
    rc, _, err = _report(setup, *extra)
    assert rc == 2
    assert err == f"jobsight report: error: {option} {existing}: cannot use it as a folder: File exists\n"
    assert existing.read_text() == "not a folder\n"


def test_a_stopped_run_leaves_whole_files_only(setup, tmp_path, monkeypatch):
    """SIGTERM while a report is being written: the report that was there stays whole, no part of
    the new one is left, and the run exits 128 + 15."""
    out = tmp_path / "r"
    who = ("--for", "account:proj_a", "--for", "account:proj a")
    rc, _, err = _report(setup, "--format", "html", "--out", str(out), who=who)
    assert rc == 0, err
    folder = out / "2026-W47"
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    real = html.render_html_chunks

    def stopped_midway(rep, **kw):
        chunks = real(rep, **kw)
        yield chunks[0][:500]
        os.kill(os.getpid(), signal.SIGTERM)    # the handler `jobsight report` set runs here
        yield b"never written"
    def not_reports_own(_signum, _frame):      # what runs if `jobsight report` sets no handler
        raise RuntimeError("SIGTERM reached the caller's handler")
    monkeypatch.setattr(html, "render_html_chunks", stopped_midway)
    previous = signal.signal(signal.SIGTERM, not_reports_own)
    try:
        with pytest.raises(SystemExit) as stop:
            _report(setup, "--format", "html", "--out", str(out), who=who)
        assert signal.getsignal(signal.SIGTERM) is not_reports_own      # put back
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert stop.value.code == 128 + signal.SIGTERM
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    assert all(data.endswith(b"</html>\n") for name, data in before.items() if name.endswith(".html"))



def test_a_link_in_place_of_a_report_is_replaced_not_followed(setup, tmp_path):
    # a shared reports folder: whoever planted the link cannot make the run write elsewhere
    folder = tmp_path / "r" / "2026-W47"
    folder.mkdir(parents=True)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    (folder / "account-proj_a.html").symlink_to(victim)
    rc, _, err = _report(setup, "--format", "html", "--out", str(tmp_path / "r"), who=("--for", "account:proj_a"))
    assert rc == 0, err
    assert victim.read_text() == "keep me\n"
    page = folder / "account-proj_a.html"
    assert not page.is_symlink() and page.read_text(encoding="utf-8").endswith("</html>\n")
