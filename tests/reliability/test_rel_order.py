"""Idempotence and order: the database's public contents do not depend on the order files are
ingested in, on ingesting them twice, or on overlapping sacct windows (a job RUNNING in one
weekly dump and finished in the next)."""
from __future__ import annotations

import itertools
import random
import re
import shutil
from pathlib import Path

import pytest
from relhelp import LONG, VOLATILE, content_checksums, generated_cluster, open_ro, snapshot


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    return generated_cluster(tmp_path_factory)

OPTS = ["--timezone", "Europe/Amsterdam", "--cluster", "demo", "--quiet"]
ORDER_FREE = VOLATILE          # every public column, null_reasons included, must match


def _ingest(db: Path, files: list[Path], *extra: str) -> int:
    from jobsight.analytics.cli import main as jobsight
    return jobsight(["ingest", "--db", str(db), *OPTS, *extra, *map(str, files)])


def _content(db: Path) -> dict:
    con = open_ro(db)
    try:
        return content_checksums(con, ORDER_FREE)
    finally:
        con.close()


def _sacct_records(path: Path) -> dict[str, str]:
    """JobIDRaw -> State of the job (not step) lines of a generated sacct text dump."""
    lines = path.read_text(encoding="utf-8").splitlines()
    head = lines[0].split("|")
    ji, si = head.index("JobIDRaw"), head.index("State")
    out = {}
    for ln in lines[1:]:
        f = ln.split("|")
        if len(f) == len(head) and "." not in f[ji]:
            out[f[ji]] = f[si]
    return out


@pytest.fixture(scope="module")
def files(cluster):
    """Two overlapping weekly sacct dumps, a seff report and a sidecar CSV of jobs in them, and an
    nvidia-smi log: five files whose results interact."""
    root, _ = cluster
    w1, w2 = sorted((root / "sacct").glob("*.txt"))[:2]
    first, second = _sacct_records(w1), _sacct_records(w2)
    spanning = [j for j, s in first.items() if s == "RUNNING" and j in second and second[j] != "RUNNING"]
    assert spanning, "the two dumps share no job that was RUNNING and then finished"
    known = set(first) | set(second)
    seffs = [p for p in sorted((root / "seff").glob("*.txt")) if re.search(r"(\d+)", p.name)[1] in known]
    sidecars = [p for p in sorted((root / "sidecar").rglob("*.csv")) if re.search(r"-(\d+)-", p.name)[1] in known]
    smi = sorted((root / "nvidia-smi").glob("*.csv"))
    chosen = [w1, w2] + seffs[:1] + sidecars[:1] + smi[:1]
    assert len(chosen) == 5, chosen
    return chosen, spanning


@pytest.fixture(scope="module")
def baseline(files, tmp_path_factory):
    db = tmp_path_factory.mktemp("order") / "base.duckdb"
    assert _ingest(db, files[0]) == 0
    return db, _content(db)


def test_running_then_finished_ends_finished(baseline, files):
    db, _ = baseline
    _, spanning = files
    con = open_ro(db)
    try:
        states = dict(con.execute("SELECT job_id_raw, state FROM jobs WHERE job_id_raw IN (SELECT unnest(?))",
                                  [spanning]).fetchall())
    finally:
        con.close()
    assert set(states) == set(spanning)
    assert "RUNNING" not in states.values()


def test_any_order_same_database(baseline, files, tmp_path):
    chosen, _ = files
    _, want = baseline
    perms = list(itertools.permutations(range(len(chosen))))
    picks = perms if LONG else [perms[-1]] + random.Random(8).sample(perms[1:-1], 3)   # reversed + 3 more
    for n, perm in enumerate(picks):
        db = tmp_path / f"p{n}.duckdb"
        assert _ingest(db, [chosen[i] for i in perm]) == 0
        assert _content(db) == want, f"order {perm} gives another database"


def test_same_files_twice_change_nothing(baseline, files, tmp_path):
    chosen, _ = files
    db = tmp_path / "twice.duckdb"
    shutil.copy(baseline[0], db)
    before = snapshot(db)
    assert _ingest(db, chosen) == 0
    assert snapshot(db) == before                        # already ingested: not even a new `ingests` row
    # The same bytes under another name, and again under new options that do not change the
    # meaning (--json): read again, yet every row is unchanged.
    copies = []
    for p in chosen:
        c = tmp_path / "copies" / p.parent.name / p.name
        c.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(p, c)
        meta = p.with_name(p.stem + ".meta.json")
        if meta.exists():
            shutil.copy(meta, c.with_name(meta.name))
        copies.append(c)
    assert _ingest(db, copies) == 0
    after = _content(db)
    want = baseline[1]
    for rel in ("jobs", "steps", "samples"):
        assert after[rel] == want[rel], rel


def test_overlapping_windows_ingested_in_either_order(files, baseline, tmp_path):
    """Old dump after the new one: the RUNNING records must not roll finished jobs back."""
    chosen, _ = files
    db = tmp_path / "rev.duckdb"
    assert _ingest(db, [chosen[1], chosen[0]]) == 0
    assert _ingest(db, chosen[2:]) == 0
    assert _content(db) == baseline[1]


# Regression (fixed): ingest keeps the stored null_reasons when a record is replaced (coalesce(a.null_reasons,
# t.null_reasons) in _merge's 'replace' UPDATE): a RUNNING job's {"end_time": "Unknown"} survives its COMPLETED
# record, and depends on file order


@pytest.mark.parametrize("view", ["jobs", "steps"])
def test_null_reasons_name_only_null_columns(baseline, view):
    """null_reasons is {column: word} for values stored as NULL: every column it names must be NULL."""
    import json
    db, _ = baseline
    con = open_ro(db)
    try:
        cols = [r[0] for r in con.execute(f"DESCRIBE {view}").fetchall()]
        rows = con.execute(f"SELECT * FROM {view} WHERE null_reasons IS NOT NULL").fetchall()
    finally:
        con.close()
    stale = []
    for r in rows:
        rec = dict(zip(cols, r))
        for col in json.loads(rec["null_reasons"]):
            if col in rec and rec[col] is not None:
                stale.append((rec["job_id_raw"], col, rec[col]))
    assert rows and not stale, stale[:5]
