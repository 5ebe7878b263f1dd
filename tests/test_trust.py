"""The trust model (docs/ingest.md#trust-model) with real Unix users: whatever alice writes, her
files change nothing of bob's job; her samples count for her own jobs, also when they arrive
before the accounting; root's spool is trusted.

The accounting is the real harness's sacct dump (fixtures/slurm/harness-sacct.txt: bob's jobs 106
and 113, alice's 109 and 114), with User/UID set to this machine's alice and bob. Files are
chowned to them, so these tests need root and the harness users (scripts/slurm-harness.sh creates
them): locally they skip with the reason, under CI (JOBSIGHT_REQUIRE_SERVICES=1) they fail. The
last tests (metadata that is a FIFO or a link out of the folder, a file replaced while it is read)
need neither.
"""
from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
from pathlib import Path

import duckdb
import pytest
from conftest import FIXTURES, ROOT, jobsight_cmd, require_service

from jobsight.collector.csv_schema import HEADER

CLUSTER = "jobsight"
HARNESS_TEXT = FIXTURES / "slurm" / "harness-sacct.txt"
HARNESS_JSON = FIXTURES / "slurm" / "harness-sacct.json"
GPU = "GPU-00000000-1111-2222-3333-444444444444"
# Ingest bookkeeping, which a file that changes nothing still writes (its ingest_log row, its
# rejects, how far it was read), and the refresh's own state; every other table is the database's content.
BOOKKEEPING = {"ingest_log", "reject", "file_offset", "metric_state", "schema_version", "dash_snapshot", "metric_scope",
               "metric_flag_scope", "metric_day_scope", "metric_gpu_partitions"}


@pytest.fixture(scope="module")
def uids() -> dict[str, int]:
    """alice's and bob's uids; skip (fail under CI) without root or without the harness users."""
    if os.geteuid() != 0:
        require_service(False, "the trust tests chown files to alice and bob: run them as root")
    try:
        return {u: pwd.getpwnam(u).pw_uid for u in ("alice", "bob")}
    except KeyError as exc:
        require_service(False, f"no Unix user {exc}: run scripts/slurm-harness.sh start as root (it creates them)")


def sacct_lines(jobs: dict[str, str], uids: dict[str, int], billing: str | None = None) -> str:
    """The harness dump's header and the rows of `jobs` (old id -> new id, steps included), with
    User/UID of the job row set to the new owner's (`new_id:user` to change it) and, with
    `billing`, AllocTRES billing set to it."""
    header, *rows = HARNESS_TEXT.read_text().splitlines()
    names = header.split("|")
    col = {n: names.index(n) for n in ("JobID", "JobIDRaw", "User", "UID", "AllocTRES")}
    out = [header]
    for row in rows:
        f = row.split("|")
        base, dot, step = f[col["JobID"]].partition(".")
        if base not in jobs:
            continue
        new, _, user = jobs[base].partition(":")
        f[col["JobID"]] = f[col["JobIDRaw"]] = new + dot + step
        if not dot:
            user = user or f[col["User"]]
            f[col["User"]], f[col["UID"]] = user, str(uids[user])
            if billing is not None:
                f[col["AllocTRES"]] = ",".join(f"billing={billing}" if t.startswith("billing=") else t
                                               for t in f[col["AllocTRES"]].split(","))
        out.append("|".join(f))
    return "\n".join(out) + "\n"


def sidecar_csv(job: str, util: float, n: int = 6, start: str = "2026-11-22T00:16:0") -> str:
    """A sidecar file of job on host vm: n samples of one GPU at util % and of the CPU, 1 s apart."""
    rows = [HEADER]
    for i in range(n):
        t = f"{start}{i}.000Z"
        rows.append(f"{t},{job},{CLUSTER},vm,cpu,{util},1000,4000,,,,,,")
        rows.append(f"{t},{job},{CLUSTER},vm,{GPU},{util},1000,80000,0,100.0,,1410,50,")
    return "\n".join(rows) + "\n"


def write(path: Path, text: str, owner: str | None = None, uids: dict[str, int] | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if owner:
        os.chown(path, uids[owner], uids[owner])
    return path


def home(tmp: Path, user: str, uids: dict[str, int]) -> Path:
    """tmp/home/USER/jobsight, owned by USER (as the README's /home/*/jobsight/)."""
    d = tmp / "home" / user / "jobsight"
    d.mkdir(parents=True, exist_ok=True)
    for p in (d.parent, d):
        os.chown(p, uids[user], uids[user])
    return d


def ingest(db: Path, *paths: Path, rc: int = 0, args: tuple[str, ...] = ()) -> dict:
    proc = subprocess.run([*jobsight_cmd(), "ingest", "--db", str(db), "--json", "--quiet", *args, *map(str, paths)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == rc, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


def content(db: Path, job: str | None = None, leave_out: tuple[str, ...] = ()) -> dict[str, list[str]]:
    """Every row of every table but BOOKKEEPING (with `job`: the rows of that job, in the tables
    that have one, without ingest ids), after a full recompute of the stored results."""
    from jobsight.analytics.store import results as store
    from jobsight.analytics.store.database import Database
    con = Database.open(db)
    try:
        store.refresh(con, full=True)
        tables = [t for (t,) in con.execute("SELECT table_name FROM information_schema.tables WHERE "
                                            "table_schema = 'main' AND table_type = 'BASE TABLE'").fetchall()
                  if t not in BOOKKEEPING and t not in leave_out]
        out = {}
        for t in tables:
            cols = {c for (c,) in con.execute("SELECT column_name FROM information_schema.columns WHERE table_name = ?",
                                              [t]).fetchall()}
            if job is not None and not {"cluster", "job_id_raw"} <= cols:
                continue
            where, args = (" WHERE cluster = ? AND job_id_raw = ?", [CLUSTER, job]) if job else ("", [])
            # a job's rows compared across databases: ingest ids differ with the files before it
            sel = "* EXCLUDE (ingest_id)" if job and "ingest_id" in cols else "*"
            out[t] = sorted(repr(r) for r in con.execute(f"SELECT {sel} FROM {t}{where}", args).fetchall())
    finally:
        con.close()
    return out


def query(db: Path, sql: str, args: list | None = None) -> list[tuple]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql, args or []).fetchall()


@pytest.fixture()
def site(tmp_path, uids):
    """A database holding the root-owned spool's accounting of jobs 106, 109, 113 and 114."""
    spool = tmp_path / "spool"
    write(spool / "sacct.txt", sacct_lines({"106": "106", "109": "109", "113": "113", "114": "114"}, uids))
    db = tmp_path / "jobs.duckdb"
    ingest(db, spool)
    assert query(db, "SELECT job_id_raw, \"user\", uid, billing FROM job ORDER BY 1") == [
        ("106", "bob", uids["bob"], 1.0), ("109", "alice", uids["alice"], 1.0),
        ("113", "bob", uids["bob"], 1.0), ("114", "alice", uids["alice"], 33.0)]
    return db, tmp_path, spool


def test_alice_changes_nothing_of_bobs_job(site, uids):
    """(a) bob's accounting rewritten to alice with billing 0, in every accounting format, is not
    read; (b) samples and metadata claiming bob's job are rejected with their line and reason.
    The whole database but the ingest bookkeeping is the same before and after."""
    db, tmp, _ = site
    before = content(db)
    mine = home(tmp, "alice", uids)
    write(mine / "bob-106.txt", sacct_lines({"106": "106:alice", "113": "113:alice"}, uids, billing="0"), "alice", uids)
    write(mine / "bob.json", HARNESS_JSON.read_text().replace('"bob"', '"alice"'), "alice", uids)
    for fixture in (FIXTURES / "seff" / "seff-mixed.txt", FIXTURES / "pbs" / "20240301", FIXTURES / "lsf" / "lsb.acct"):
        write(mine / fixture.name, fixture.read_text(), "alice", uids)
    csv = write(mine / "jobsight-jobsight-113-vm.csv", sidecar_csv("113", 100.0), "alice", uids)
    write(mine / "jobsight-jobsight-113-vm.meta.json",
          json.dumps({"job_id": "113", "cluster": CLUSTER, "host": "vm", "alloc_cores": 64}), "alice", uids)
    smi = write(mine / "gpu-113.csv", "timestamp, index, uuid, utilization.gpu [%]\n"
                "2026/11/22 00:16:00.000, 0, GPU-x, 100 %\n2026/11/22 00:16:01.000, 0, GPU-x, 100 %\n", "alice", uids)

    out = ingest(db, tmp / "home", args=("--cluster", CLUSTER))   # the cluster of the nvidia-smi log
    by = {Path(f["path"]).name: f for f in out["files"]}
    accounting = ("bob-106.txt", "bob.json", "seff-mixed.txt", "20240301", "lsb.acct")
    for name in accounting:
        assert by[name]["status"] == "skipped", by[name]
        assert f"owned by alice (uid {uids['alice']})" in by[name]["error"] and "not read" in by[name]["error"]
    assert out["skipped"] == len(accounting) and out["failed"] == 0
    assert (by[csv.name]["rows_in"], by[csv.name]["stored"], by[csv.name]["rejected"]) == (12, 0, 12)
    assert (by[smi.name]["rows_in"], by[smi.name]["stored"], by[smi.name]["rejected"]) == (2, 0, 2)
    assert any("metadata of job 113" in n and "bob" in n for n in by[csv.name]["notes"])
    rejects = query(db, "SELECT line_no, reason FROM rejects WHERE source_file = ? ORDER BY line_no", [str(csv)])
    assert [r[0] for r in rejects] == list(range(2, 14))
    assert all(r[1] == f"job 113 of cluster {CLUSTER} is bob's, and this file is owned by alice (uid {uids['alice']}): "
               "a user's samples count only for their own jobs" for r in rejects)
    assert content(db) == before

    # Named on the command line, such a file is not read either, and the run says it failed.
    named = ingest(db, mine / "bob-106.txt", rc=1)
    assert named["files"][0]["status"] == "unreadable" and "owned by alice" in named["files"][0]["error"]
    assert content(db) == before


def test_alice_samples_count_for_alice_job(site, uids):
    """(c) alice's sidecar file for her own job 114 is stored and counts in its metrics; its
    metadata row carries her as the owner."""
    db, tmp, _ = site
    mine = home(tmp, "alice", uids)
    write(mine / "jobsight-jobsight-114-vm.csv", sidecar_csv("114", 40.0), "alice", uids)
    write(mine / "jobsight-jobsight-114-vm.meta.json", json.dumps({"job_id": "114", "cluster": CLUSTER, "host": "vm"}),
          "alice", uids)
    (f,) = ingest(db, mine)["files"]
    assert (f["status"], f["stored"], f["rejected"]) == ("ingested", 12, 0)
    assert query(db, "SELECT count(*) FROM sample WHERE job_id_raw = '114'") == [(12,)]
    assert query(db, "SELECT n_samples FROM job_gpu_devices WHERE job_id_raw = '114'") == [(6,)]
    assert query(db, "SELECT gpu_util_pct, gpus_sampled FROM job_metrics WHERE job_id_raw = '114'") == [(40.0, 1)]
    assert query(db, "SELECT owner_uid, owner_user FROM sidecar_run WHERE job_id_raw = '114'") == [(uids["alice"], "alice")]


def test_samples_before_accounting_count_once_the_owner_matches(site, uids):
    """(d) alice's samples of jobs 120 and 121, before any accounting of them, are held; the
    accounting then shows 120 is hers (her samples count) and 121 bob's (hers never count: job 121
    is what the accounting alone gives). bob's own copy of the same bytes is read and counts."""
    db, tmp, spool = site
    mine = home(tmp, "alice", uids)
    write(mine / "jobsight-jobsight-120-vm.csv", sidecar_csv("120", 70.0), "alice", uids)
    claim = write(mine / "jobsight-jobsight-121-vm.csv", sidecar_csv("121", 5.0), "alice", uids)
    out = ingest(db, mine)
    assert [(f["stored"], f["rejected"]) for f in out["files"]] == [(12, 0), (12, 0)]
    assert all("held" in " ".join(f["notes"]) for f in out["files"])
    assert query(db, "SELECT count(*) FROM sample WHERE job_id_raw IN ('120', '121')") == [(0,)]
    assert query(db, "SELECT job_id_raw, owner_uid, owner_user, count(*) FROM sample_pending GROUP BY ALL ORDER BY 1") == [
        ("120", uids["alice"], "alice", 12), ("121", uids["alice"], "alice", 12)]

    later = write(spool / "later.txt", sacct_lines({"109": "120", "113": "121"}, uids))
    (f,) = ingest(db, later)["files"]
    assert any("12 held samples now count" in n for n in f["notes"])
    assert any("job 121" in n and "do not count" in n and "bob's" in n for n in f["notes"])
    assert query(db, "SELECT count(*) FROM sample WHERE job_id_raw = '120'") == [(12,)]
    assert query(db, "SELECT gpu_util_pct, gpus_sampled FROM job_metrics WHERE job_id_raw = '120'") == [(70.0, 1)]
    assert query(db, "SELECT count(*) FROM sample WHERE job_id_raw = '121'") == [(0,)]
    assert query(db, "SELECT job_id_raw, count(*) FROM sample_pending GROUP BY ALL") == [("121", 12)]

    # job 121 is exactly what the accounting alone gives (its held samples aside)
    ref = tmp / "reference.duckdb"
    ingest(ref, spool / "sacct.txt", later)
    assert content(db, "121", leave_out=("sample_pending",)) == content(ref, "121", leave_out=("sample_pending",))
    assert query(db, "SELECT gpu_util_pct, gpus_sampled FROM job_metrics WHERE job_id_raw = '121'") == [(None, None)]

    # bob's own file of the same bytes is not "already ingested" by alice's copy, and counts
    theirs = write(home(tmp, "bob", uids) / claim.name, claim.read_text(), "bob", uids)
    (f,) = ingest(db, theirs)["files"]
    assert (f["status"], f["stored"], f["rejected"]) == ("ingested", 12, 0)
    assert query(db, "SELECT gpu_util_pct FROM job_metrics WHERE job_id_raw = '121'") == [(5.0,)]


def test_root_spool_is_trusted(site, uids):
    """(e) a root-owned sidecar spool counts for any user's job: bob's 113 here."""
    db, _, spool = site
    csv = write(spool / "sidecar" / "jobsight-jobsight-113-vm.csv", sidecar_csv("113", 90.0, n=4))
    (f,) = ingest(db, csv)["files"]
    assert (f["status"], f["stored"], f["rejected"]) == ("ingested", 8, 0)
    assert query(db, "SELECT n_samples FROM job_gpu_devices WHERE job_id_raw = '113'") == [(4,)]
    assert query(db, "SELECT gpu_util_pct FROM job_metrics WHERE job_id_raw = '113'") == [(90.0,)]
    assert query(db, "SELECT count(*) FROM sample_pending") == [(0,)]


def test_metadata_of_another_owner_is_ignored(site, uids):
    """bob's metadata beside alice's CSV cannot name the job of her rows: it is not read."""
    db, tmp, _ = site
    mine = home(tmp, "alice", uids)
    write(mine / "jobsight-jobsight-114-vm.csv", sidecar_csv("114", 40.0).replace(",114,", ",,"), "alice", uids)
    write(mine / "jobsight-jobsight-114-vm.meta.json", json.dumps({"job_id": "114", "cluster": CLUSTER}), "bob", uids)
    (f,) = ingest(db, mine)["files"]
    assert any(f"metadata ignored (owned by bob (uid {uids['bob']}), not by the owner of the CSV)" in n for n in f["notes"])
    assert (f["stored"], f["rejected"]) == (0, 12)   # no job id in the rows, and none from the metadata
    assert query(db, "SELECT count(*) FROM sidecar_run") == [(0,)]


# Neither root nor the harness users needed below.

def test_metadata_fifo_or_link_out_of_the_folder_is_not_read(tmp_path):
    """The metadata file is opened only as a regular file inside the CSV's folder: a FIFO (which
    would block the run) or a link to a file elsewhere is ignored with a note; the CSV is read."""
    from jobsight.analytics.ingest import files as ingestmod
    from jobsight.analytics.ingest.records import ParseOptions
    from jobsight.analytics.store import db as dbmod
    secret = tmp_path / "elsewhere" / "secret.json"
    write(secret, json.dumps({"job_id": "999", "cluster": "stolen"}))
    folder = tmp_path / "f"
    write(folder / "jobsight-c-5-vm.csv", sidecar_csv("5", 10.0, n=2))
    write(folder / "jobsight-c-6-vm.csv", sidecar_csv("6", 10.0, n=2))
    os.mkfifo(folder / "jobsight-c-5-vm.meta.json")
    (folder / "jobsight-c-6-vm.meta.json").symlink_to(secret)
    con = dbmod.connect(tmp_path / "m.duckdb")
    try:
        reps = ingestmod.ingest_paths(con, [folder], ParseOptions())
        assert [(r.status, r.stored) for r in reps] == [("ingested", 4), ("ingested", 4)]
        assert any("FIFO" in n and "metadata ignored" in n for n in reps[0].notes)
        assert any("outside the CSV's folder" in n for n in reps[1].notes)
        assert con.execute("SELECT count(*) FROM sidecar_run").fetchone()[0] == 0
        assert con.execute("SELECT DISTINCT cluster FROM sample").fetchall() == [(CLUSTER,)]
    finally:
        con.close()


def test_file_replaced_while_read_is_not_loaded(tmp_path, monkeypatch):
    """The owner is decided on the file as opened; if the path leads to another file by the time
    the rows would be committed, nothing of it is stored."""
    from jobsight.analytics.ingest import files as ingestmod
    from jobsight.analytics.ingest.parsers import nvidia_smi
    from jobsight.analytics.ingest.records import ParseOptions
    from jobsight.analytics.store import db as dbmod
    log = write(tmp_path / "gpu-77.csv", "timestamp, index, uuid, utilization.gpu [%]\n2026/11/22 00:16:00.000, 0, GPU-x, 5 %\n")
    other = write(tmp_path / "other", log.read_text())
    real_parse = nvidia_smi.parse

    def parse_then_swap(path, opts):
        result = real_parse(path, opts)
        shutil.copy(other, tmp_path / "swap")
        os.replace(tmp_path / "swap", log)   # a new inode under the same name
        return result
    monkeypatch.setattr(nvidia_smi, "parse", parse_then_swap)
    con = dbmod.connect(tmp_path / "r.duckdb")
    try:
        (rep,) = ingestmod.ingest_paths(con, [log], ParseOptions(timezone="UTC"))
        assert rep.status == "failed" and "replaced" in rep.error
        assert con.execute("SELECT (SELECT count(*) FROM sample) + (SELECT count(*) FROM ingest_log)").fetchone()[0] == 0
    finally:
        con.close()
