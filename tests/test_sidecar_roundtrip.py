"""Whatever the sidecar writes, `jobsight ingest` reads back: job id, cluster and host of any text
(`--cluster 'a,b'`, a job id with a quote or a newline, bytes that are not UTF-8) are written as
the ingester reads them, with the documented replacement (docs/sidecar.md: surrounding whitespace
removed; a comma, quote, control character or lone surrogate becomes `_`), and never rejected.

The property test writes through the sidecar's own code: jobenv.detect_job (the identity),
Sampler (the rows: one `cpu` row and one GPU row per sample), writer.CsvWriter and output_stem,
with the metadata JSON as the sidecar writes it; then ingests the file into a fresh database by
DuckDB's bulk read and, again, by the polars reader, and compares."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import unicodedata
from pathlib import Path

import pytest
from conftest import ROOT, fresh_memory_db, jobsight_cmd
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from jobsight.analytics.ingest import files as ingest
from jobsight.analytics.ingest.parsers import sidecar_csv
from jobsight.analytics.ingest.records import ParseOptions
from jobsight.analytics.store import db
from jobsight.collector import csv_schema, gpu_rows, jobenv, writer
from jobsight.collector.loop import Sampler
from jobsight.collector.problems import Problems
from jobsight.collector.sidecar import output_stem
from jobsight.collector.sources import CpuReading

PID = 4242
UUID = "GPU-5f7b6c1e-0000-4000-8000-000000000001"


def documented(text: str) -> str:
    """The rule of docs/sidecar.md, restated from it (not from the code): surrounding whitespace
    removed, then every comma, double quote, control character (Cc) and surrogate (Cs) -> '_'."""
    return "".join("_" if c in ',"' or unicodedata.category(c) in ("Cc", "Cs") else c for c in text.strip())


class FakeCpu:
    method = "cgroup-v2"

    def __init__(self) -> None:
        self.cpu_s = 0.0

    def read(self) -> CpuReading:
        self.cpu_s += 1.5
        return CpuReading(self.cpu_s, 1 << 30, 4 << 30, 1 << 30)


class FakeGpus:
    def sample(self) -> list[dict]:
        row = gpu_rows.blank_row(UUID, 0)
        row.update(util_pct=97.0, mem_used_bytes=123 << 20, mem_total_bytes=80 << 30, power_w=301.25)
        return [row]


def write_like_the_sidecar(out: Path, job_id: str | None, cluster: str | None, host: str) -> tuple[jobenv.JobInfo, list[str], Path]:
    """(the identity the sidecar settled on, its stderr lines, the CSV) for these inputs."""
    lines: list[str] = []
    job = jobenv.detect_job({"SLURMD_NODENAME": host}, job_id=job_id, cluster=cluster, pid=PID, warn=lines.append)
    stem = out / output_stem(job, 1_795_000_000.0, PID)
    csv = writer.CsvWriter(str(stem) + ".csv", csv_schema.COLUMNS, warn=lambda key, msg: lines.append(msg))
    ticks = iter(range(100))
    sampler = Sampler(job, FakeCpu(), 2, FakeGpus(), csv, Problems(), clock=lambda: 10.0 * next(ticks),
                      wallclock=lambda: 1_795_000_000.0 + 10.0 * next(ticks))
    sampler.baseline()
    assert sampler.sample() and sampler.sample()
    csv.close()
    writer.write_json_new(str(stem) + csv_schema.META_SUFFIX,
                          {"schema_version": 1, "job_id": job.job_id, "cluster": job.cluster or None, "host": job.host})
    return job, lines, Path(csv.path)


def ingested(path: Path, bulk: bool) -> tuple[ingest.FileReport, list[tuple], list[tuple]]:
    """(report, distinct sample identities, sidecar_run identities) of one ingest into a new database."""
    with fresh_memory_db() as con:
        with pytest.MonkeyPatch.context() as m:
            if not bulk:
                m.delattr(sidecar_csv, "bulk_read")
            (rep,) = ingest.ingest_paths(con, [path], ParseOptions())
        samples = con.execute("SELECT DISTINCT cluster, job_id_raw, host FROM samples").fetchall()
        runs = con.execute("SELECT cluster, job_id_raw, host FROM sidecar_run").fetchall()
    return rep, samples, runs


NASTY = ',"\r\n\t \x00\x01\x1b\x7f\x85\xa0\u2028\u3000\ufeff\udcff\U0001f600ab1-_.=[]%\\\''
ident = st.one_of(st.text(max_size=30), st.text(alphabet=NASTY, max_size=12),   # surrogates only when asked for:
                  st.text(alphabet=st.characters(exclude_categories=()) | st.characters(categories=["Cs"]), max_size=12))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(job_id=st.one_of(st.none(), ident), cluster=st.one_of(st.none(), ident), host=ident)
@example(job_id="17", cluster="a,b", host="gcn1")                 # the issue
@example(job_id='1,"2"', cluster="c", host="n\r\n1")
@example(job_id=" 7 ", cluster="\t", host="n\x00\udcff")
@example(job_id="8", cluster="x" * 256, host="h" * 256)            # long values (the ingest's limit): a short file name
@example(job_id=",", cluster='"', host="\u2028")
def test_what_the_sidecar_writes_is_ingested_as_written(job_id, cluster, host):
    with tempfile.TemporaryDirectory() as d:
        job, lines, path = write_like_the_sidecar(Path(d), job_id, cluster, host)
        # the identity is the documented replacement of what was given ...
        uname = jobenv.csv_value(os.uname().nodename.split(".")[0])
        want = (documented(job_id or "") or f"local-{PID}", documented(cluster or ""), documented(host) or uname)
        assert (job.job_id, job.cluster, job.host) == want
        # ... with one stderr line when that changed anything, none otherwise
        changed = ((job_id is not None and documented(job_id) != job_id)
                   or (bool(cluster) and documented(cluster) != cluster)
                   or (bool(host.strip()) and documented(host) != host.strip()))   # the variable's padding goes silently
        assert len(lines) == (1 if changed else 0), lines
        assert all("\n" not in line and "\r" not in line for line in lines)
        # ... and the ingester reads exactly that back, by both roads
        cluster_stored = want[1] or "default"     # an empty cell: no cluster known (docs/ingest.md)
        for bulk in (True, False):
            rep, samples, runs = ingested(path, bulk)
            assert (rep.status, rep.rows_in, rep.stored, rep.rejected, rep.dropped) == ("ingested", 4, 4, 0, 0), rep
            assert samples == [(cluster_stored, want[0], want[2])]
            assert runs == [(cluster_stored, want[0], want[2])]


def test_values_that_need_no_change_are_written_as_given():
    job = jobenv.detect_job({"SLURM_JOB_ID": "4243_7", "SLURM_CLUSTER_NAME": "snellius", "SLURMD_NODENAME": "gcn12"},
                            pid=1, warn=pytest.fail)
    assert (job.job_id, job.cluster, job.host) == ("4243_7", "snellius", "gcn12")
    job = jobenv.detect_job({"PBS_JOBID": "1234[7].pbs-server:15001"}, cluster="Clüster Ω 7", pid=1, warn=pytest.fail)
    assert (job.job_id, job.cluster) == ("1234[7].pbs-server:15001", "Clüster Ω 7")


def test_the_sidecar_command_with_a_comma_in_cluster_and_job_id_round_trips(tmp_path):
    """End to end, as the issue found it: `jobsight sidecar --cluster 'a,b'` then `jobsight ingest`."""
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PBS_", "LSB_", "JOBSIGHT_"))}
    env["SLURMD_NODENAME"] = "gcn1"
    p = subprocess.run([sys.executable, "-m", "jobsight.collector", "run", "--interval", "0.05", "--gpus", "none",
                        "--out", str(out), "--cluster", "a,b", "--job-id", '9,"x"', "--", sys.executable, "-c",
                        "import time; time.sleep(0.3)"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout == ""
    assert p.stderr == ("jobsight sidecar: written job id '9,\"x\"' as '9__x_'; cluster 'a,b' as 'a_b' (a comma, "
                        "quote, line break or control character cannot be read back from the CSV)\n")
    (csv,) = out.glob("*.csv")
    assert csv.name.startswith("jobsight-a_b-9__x_-gcn1-")
    meta = json.loads(csv.with_name(csv.name[:-4] + ".meta.json").read_text())
    assert (meta["cluster"], meta["job_id"], meta["host"]) == ("a_b", "9__x_", "gcn1")
    r = subprocess.run([*jobsight_cmd(), "ingest", "--db", str(tmp_path / "j.duckdb"), "--json", "--quiet", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    (f,) = json.loads(r.stdout)["files"]
    assert f["status"] == "ingested" and f["rejected"] == 0 and f["stored"] == f["rows_in"] >= 2
    con = db.connect(tmp_path / "j.duckdb", read_only=True)
    try:
        assert con.execute("SELECT DISTINCT cluster, job_id_raw, host FROM samples").fetchall() == [("a_b", "9__x_", "gcn1")]
    finally:
        con.close()
