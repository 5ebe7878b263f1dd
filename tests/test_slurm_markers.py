"""Slurm's "not set" markers and their sums are unknown values, never a reason to lose a row
(analytics/ingest/slurm_values.py, docs/ingest.md#fields-a-row-needs)."""
from __future__ import annotations

import json
import subprocess

import pytest
from conftest import FIXTURES, jobsight_cmd

from jobsight.analytics.config import parse_config
from jobsight.analytics.ingest import files as ingest
from jobsight.analytics.ingest import slurm_values
from jobsight.analytics.ingest.parsers import sacct_json, sacct_text
from jobsight.analytics.ingest.records import ParseOptions
from jobsight.analytics.store import results as store
from jobsight.analytics.store.database import Database

GIB = 2 ** 30
MARKERS = FIXTURES / "sacct_json" / "unset-markers-v0.0.41.json"


@pytest.mark.parametrize("value, bits, what", [
    (-2, 32, "NO_VAL"), (-1, 32, "INFINITE"), (-4, 64, "NO_VAL summed"), (-16, 64, "NO_VAL summed"),
    (-46, 64, "NO_VAL summed"), (-3, 64, "INFINITE summed"),
    (0xFFFFFFFE, 32, "NO_VAL"), (0xFFFFFFFF, 32, "INFINITE"), (2 ** 64 - 2, 32, "NO_VAL"),
    (2 ** 64 - 1, 64, "INFINITE"), (2 ** 64 - 8, 64, "NO_VAL summed"), (2 ** 32 - 4, 32, "NO_VAL summed"),
    (9223372036854775806, 64, "a marker averaged (overflowed)"), (float(2 ** 63 - 2), 64, None),
    (0xFFFE, 16, "NO_VAL"), (0xFFFF, 16, "INFINITE"), (0xFE, 8, "NO_VAL"), (0xFF, 8, "INFINITE"),
    # the narrow widths' markers are real values of a wider field: 254 or 65534 cores
    (0xFE, 32, None), (0xFFFE, 32, None), (0, 64, None), (128, 32, None), (2 ** 31, 32, None), (1.5, 64, None),
])
def test_marker(value, bits, what):
    # float 2^63 - 2 rounds to 2^63, which is no marker of any width
    assert slurm_values.marker(value, bits) == what


def test_json_steps_with_energy_markers_are_kept():
    r = sacct_json.parse(MARKERS, ParseOptions())
    assert r.rejects == [] and r.rows_in == 5 and len(r.steps) == 4
    j = r.jobs.row(0, named=True)
    assert (j["ncpus"], j["nnodes"], j["elapsed_s"], j["billing"]) == (128, 2, 12600, 128.0)
    assert j["cpu_time_s"] == 736 + 0 + 802000 + 802000
    assert j["mem_peak_bytes"] == 228 * GIB and j["mem_alloc_bytes"] == 256 * GIB
    assert "energy" not in (j["alloc_tres"] or "")
    s0 = r.steps.filter(r.steps["step_id"] == "0").row(0, named=True)
    assert s0["tres_usage_in_tot"] == f"mem={228 * GIB}" and s0["tres_usage_in_ave"] == f"mem={2 * GIB}"
    assert s0["tres_usage_in_max"] == f"mem={2 * GIB}"
    # energy: allocated -2 (job), and per step max, min, average, total, requested and consumed
    assert any(n.startswith("unset-markers-v0.0.41.json: TRES energy: Slurm's 'not set' marker") and "in 5 row(s)" in n
               for n in r.notes), r.notes


def test_json_128_core_job_metrics(tmp_path):
    """The job is 99.5 % CPU- and 89 % memory-efficient, with no low-efficiency flags."""
    con = Database.open(tmp_path / "m.duckdb", parse_config({}))
    try:
        (rep,) = ingest.ingest_paths(con.con, [MARKERS], ParseOptions())
        assert rep.status == "ingested" and rep.rejected == 0 and rep.stored == 5
        store.refresh(con.con)
        cur = con.execute("SELECT * FROM job_metrics WHERE job_id_raw = '9001'")
        m = dict(zip([d[0] for d in cur.description], cur.fetchone()))
        flags = {r[0] for r in con.execute("SELECT code FROM job_flags WHERE job_id_raw = '9001'").fetchall()}
    finally:
        con.close()
    assert m["cpu_eff_pct"] == pytest.approx(100 * 1604736 / (128 * 12600))      # 99.50 %
    assert m["mem_eff_pct"] == pytest.approx(100 * 228 / 256)                    # 89.06 %
    assert not flags & {"cpu_low_eff", "mem_oversized", "cpu_serial_on_many"}


def _json_job(**over):
    job = json.loads(MARKERS.read_text())["jobs"][0]
    job.update(over)
    return job


def test_json_markers_in_counts_are_unknown(tmp_path):
    job = _json_job(steps=[])
    job["tres"]["allocated"][0]["count"] = 4294967294          # cpu NO_VAL
    job["time"]["limit"] = 4294967295                          # INFINITE: unlimited
    job["restart_cnt"] = -2                                    # NO_VAL as signed
    p = tmp_path / "j.json"
    p.write_text(json.dumps({"jobs": [job]}))
    r = sacct_json.parse(p, ParseOptions())
    j = r.jobs.row(0, named=True)
    reasons = json.loads(j["null_reasons"])
    assert r.rejects == []
    assert j["ncpus"] == 128        # from the request, as for a pending job
    assert j["timelimit_s"] is None and reasons["timelimit_s"] == "UNLIMITED"
    assert j["restarts"] is None


HEADER = "JobID|JobIDRaw|State|Start|End|Elapsed|NCPUS|NNodes|NTasks|AllocTRES|TRESUsageInTot|TRESUsageInMax|TotalCPU|JobName"
T = "2024-01-01T00:00:00|2024-01-01T01:00:00|01:00:00"


@pytest.mark.parametrize("fast", [True, False])
def test_sacct_text_markers(tmp_path, fast):
    lines = [HEADER,
             f"7|7|COMPLETED|{T}|4|1||billing=4,cpu=4,mem=4G,node=1|||02:00:00|job",
             f"7.0|7.0|COMPLETED|{T}|4|1|4294967294||cpu=02:00:00,energy=-8,mem=1G|energy=-2|02:00:00|step",
             f"7.1|7.1|COMPLETED|{T}|4|1|-2||energy=18446744073709551608,fs/disk=-4,mem=2G|mem=1G|00:00:00|step",
             f"8|8|COMPLETED|{T}|4294967294|1||billing=-2,cpu=4,mem=4G,node=1|||01:00:00|job"]
    p = tmp_path / "s.txt"
    p.write_text("\n".join(lines) + "\n")
    r = sacct_text.parse(p, ParseOptions(timezone="UTC"), fast_path=fast)
    assert r.rejects == [] and len(r.jobs) == 2 and len(r.steps) == 2
    s = {x["step_id"]: x for x in r.steps.iter_rows(named=True)}
    assert s["0"]["ntasks"] is None and json.loads(s["0"]["null_reasons"])["ntasks"] == "Slurm NO_VAL: not set"
    assert s["0"]["mem_usage_tot_bytes"] == GIB and s["0"]["tres_usage_in_tot"] == "cpu=02:00:00,mem=1G"
    assert s["0"]["tres_usage_in_max"] is None
    assert s["1"]["ntasks"] is None and s["1"]["mem_usage_tot_bytes"] == 2 * GIB
    assert s["1"]["tres_usage_in_tot"] == "mem=2G"
    j = {x["job_id"]: x for x in r.jobs.iter_rows(named=True)}
    assert j["8"]["ncpus"] is None and j["8"]["billing"] is None and j["8"]["mem_alloc_bytes"] == 4 * GIB
    assert j["8"]["alloc_tres"] == "cpu=4,mem=4G,node=1"
    assert any("s.txt: TRES energy: Slurm's 'not set' marker (or a sum of it) in 2 row(s)" in n for n in r.notes), r.notes


def test_ingest_json_says_what_the_plain_notes_say(tmp_path):
    """`ingest --json` carries the same notes as the plain output, and each field made NULL as
    {"file", "field", "kind", "rows"}: the counts the notes give."""
    lines = [HEADER,
             f"7|7|COMPLETED|{T}|4|1||billing=4,cpu=4,mem=4G,node=1|||02:00:00|job",
             f"7.0|7.0|COMPLETED|{T}|4|1|4294967294||cpu=02:00:00,energy=-8,mem=1G|energy=-2|02:00:00|step",
             f"7.1|7.1|COMPLETED|{T}|4|1|-2||energy=18446744073709551608,mem=2G|mem=1G|00:00:00|step",
             f"9|9|COMPLETED|{T}|999999999|1||cpu=4,mem=4G,node=1|||01:00:00|job"]
    text = tmp_path / "s.txt"
    text.write_text("\n".join(lines) + "\n")
    runs = {}
    for mode in ("plain", "json"):
        out = subprocess.run(jobsight_cmd() + ["ingest", "--db", str(tmp_path / f"{mode}.duckdb"), "--timezone", "UTC",
                                               "--quiet", str(text), str(MARKERS)] + (["--json"] if mode == "json" else []),
                             capture_output=True, text=True, check=True)
        runs[mode] = out.stdout
    plain = [ln.removeprefix("  note: ") for ln in runs["plain"].splitlines() if ln.startswith("  note: ")]
    files = json.loads(runs["json"])["files"]
    assert [n for f in files for n in f["notes"]] == plain
    nulled = [e for f in files for e in f["nulled"]]
    assert nulled == [
        {"file": "s.txt", "field": "TRES energy", "kind": "marker", "rows": 2},
        {"file": "s.txt", "field": "ncpus", "kind": "impossible", "rows": 1},
        {"file": "s.txt", "field": "ntasks", "kind": "marker", "rows": 2},
        {"file": MARKERS.name, "field": "TRES energy", "kind": "marker", "rows": 5}]
    # each entry is a note of the plain output, with the same file, field and count
    for e in nulled:
        what = "Slurm's 'not set' marker" if e["kind"] == "marker" else "an impossible value"
        assert sum(1 for n in plain if n.startswith(f"{e['file']}: {e['field']}: {what}")
                   and f" in {e['rows']} row(s)" in n) == 1, (e, plain)
