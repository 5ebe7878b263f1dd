"""The merge rule: how parsed job, step and sidecar-run rows are staged, cast to the table's types
and merged into what is stored, and the job numbers derived from its steps.

Jobs and steps (keys (cluster, job_id_raw) and (cluster, job_id_raw, step_id)): a record ranks by
(final state?, coalesce(end, start, submit, eligible)); an incoming record replaces the stored one
when its rank is >= the stored rank (values it lacks are kept), otherwise it is "unchanged"; an
identical record is "unchanged". Records from lower-fidelity sources (seff, nvidia-smi, sidecar)
only fill NULL columns of a record from accounting (sacct text or JSON). Several records of one key
in one file: the best-ranked (then the last) is loaded and the others count as unchanged.
"""
from __future__ import annotations

from typing import Optional

import duckdb
import polars as pl

FINAL_STATES = ("BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY",
                "PREEMPTED", "TIMEOUT", "REVOKED")
# Sources that hold the scheduler's accounting record; the others only fill gaps.
ACCOUNTING_SOURCES = ("slurm-sacct", "slurm-sacct-json", "pbs", "lsf")


class _ArrowStream:
    """Hands a polars frame to DuckDB through the Arrow C stream interface (no pyarrow needed)."""

    def __init__(self, frame: pl.DataFrame):
        self.frame = frame

    def __arrow_c_stream__(self, requested_schema=None):
        return self.frame.__arrow_c_stream__(requested_schema)


def _run(con: duckdb.DuckDBPyConnection, sql: str, _incoming: Optional[pl.DataFrame] = None,
         _keys: Optional[pl.DataFrame] = None, _owners: Optional[pl.DataFrame] = None,
         _touched: Optional[pl.DataFrame] = None, _rj: Optional[pl.DataFrame] = None) -> list[tuple]:
    """Run sql reading the given polars frames by these names. DuckDB finds them as this function's
    local variables (its replacement scan), not through con.register(): a registered view is a
    catalog entry, and a dropped catalog entry lives until the transaction ends, so each frame
    registered in a file's transaction (a 50M-row file's every piece) would stay in memory to the end."""
    _incoming, _keys, _owners, _touched, _rj = (None if f is None else _ArrowStream(f)
                                                for f in (_incoming, _keys, _owners, _touched, _rj))
    return con.execute(sql).fetchall()


def _table_columns(con: duckdb.DuckDBPyConnection, table: str) -> list[tuple[str, str]]:
    return [(r[0], r[1]) for r in con.execute(
        "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = ? "
        "AND table_schema = 'main' ORDER BY ordinal_position", [table]).fetchall()]


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _stage(con, frame: pl.DataFrame, table: str, stage: str, ingest_id: int) -> list[str]:
    """Create temp table `stage` with the table's columns (missing ones NULL) plus _row."""
    cols, sel = _select_casts(con, frame, table, ingest_id)
    _run(con, f"CREATE OR REPLACE TEMP TABLE {stage} AS SELECT {sel}, _row FROM _incoming",
         _incoming=frame.with_row_index("_row"))
    return cols


def _fidelity(expr: str) -> str:
    srcs = ", ".join(f"'{s}'" for s in ACCOUNTING_SOURCES)
    return f"(CASE WHEN {expr} IN ({srcs}) THEN 2 ELSE 1 END)"


def _merge_records(con, frame: pl.DataFrame, table: str, keys: list[str], time_cols: list[str],
                   ingest_id: int) -> tuple[int, int, int]:
    """Upsert frame into table by the merge rule; returns (stored, updated, unchanged)."""
    if frame is None or frame.height == 0:
        return 0, 0, 0
    # Bulk case (a new dump into an empty or unrelated database): no key repeats in the file and
    # none is stored yet, so every row is simply inserted, straight from the frame.
    if not frame.select(keys).is_duplicated().any():
        on = " AND ".join(f"t.{_q(k)} = k.{_q(k)}" for k in keys)
        known = _run(con, f"SELECT count(*) FROM (SELECT 1 FROM _keys k JOIN {table} t ON {on} LIMIT 1)",
                     _keys=frame.select(keys))[0][0]
        if not known:
            cols, sel = _select_casts(con, frame, table, ingest_id)
            n = _run(con, f"INSERT INTO {table} ({', '.join(_q(c) for c in cols)}) SELECT {sel} FROM _incoming",
                     _incoming=frame)[0][0]
            return n, 0, 0
    cols = _stage(con, frame, table, "_in", ingest_id)
    finals = ", ".join(f"'{s}'" for s in FINAL_STATES)
    rank_t = "coalesce(" + ", ".join(time_cols) + ")"
    st_t = "coalesce(" + ", ".join("t." + c for c in time_cols) + ")"
    keyl = ", ".join(_q(k) for k in keys)
    total = con.execute("SELECT count(*) FROM _in").fetchall()[0][0]
    # best record per key within the file: best rank, then the later line
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE _w AS
        SELECT * EXCLUDE (_rn) FROM (
            SELECT *, (state IN ({finals}))::INT AS _final, {rank_t} AS _t,
                   row_number() OVER (PARTITION BY {keyl}
                       ORDER BY (state IN ({finals}))::INT DESC, {rank_t} DESC NULLS LAST, _row DESC) AS _rn
            FROM _in) WHERE _rn = 1""")
    winners = con.execute("SELECT count(*) FROM _w").fetchall()[0][0]
    con.execute("DROP TABLE _in")  # keep one staged copy at a time (memory on 1M-job files)
    data_cols = [c for c in cols if c not in keys and c != "ingest_id"]
    on = " AND ".join(f"t.{_q(k)} = w.{_q(k)}" for k in keys)
    replace_changed = " OR ".join(f"(w.{_q(c)} IS NOT NULL AND w.{_q(c)} IS DISTINCT FROM t.{_q(c)})" for c in data_cols)
    fill_changed = " OR ".join(f"(t.{_q(c)} IS NULL AND w.{_q(c)} IS NOT NULL)" for c in data_cols if c != "source")
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE _act AS
        SELECT w.*, CASE
            WHEN t.{_q(keys[0])} IS NULL THEN 'insert'
            WHEN {_fidelity('w.source')} < {_fidelity('t.source')} THEN (CASE WHEN {fill_changed} THEN 'fill' ELSE 'same' END)
            WHEN {_fidelity('w.source')} > {_fidelity('t.source')}
                 OR w._final > (t.state IN ({finals}))::INT
                 OR (w._final = (t.state IN ({finals}))::INT
                     AND coalesce(w._t, '-infinity'::TIMESTAMP) >= coalesce({st_t}, '-infinity'::TIMESTAMP))
                 THEN (CASE WHEN {replace_changed} THEN 'replace' ELSE 'same' END)
            ELSE 'same' END AS _action
        FROM _w w LEFT JOIN {table} t ON {on}""")
    con.execute("DROP TABLE _w")
    counts = dict(con.execute("SELECT _action, count(*) FROM _act GROUP BY 1").fetchall())
    collist = ", ".join(_q(c) for c in cols)
    if counts.get("insert"):
        con.execute(f"INSERT INTO {table} ({collist}) SELECT {collist} FROM _act WHERE _action = 'insert'")
    where = " AND ".join(f"{table}.{_q(k)} = a.{_q(k)}" for k in keys)
    if counts.get("replace"):
        # Values the newer record lacks are kept, unless it says why it has none (its null_reasons:
        # "Unknown", "return code lost"): that is a statement about the job, and the reasons stored
        # are the newer record's own (a RUNNING job's {"end_time": "Unknown"} must not outlive it).
        def newer(c: str) -> str:
            if c == "null_reasons":
                return f"{_q(c)} = a.{_q(c)}"
            said_null = f"""coalesce(json_exists(a.null_reasons, '$."{c}"'), false)"""
            return f"{_q(c)} = CASE WHEN {said_null} THEN NULL ELSE coalesce(a.{_q(c)}, {table}.{_q(c)}) END"
        sets = ", ".join(newer(c) for c in data_cols)
        con.execute(f"UPDATE {table} SET {sets}, ingest_id = a.ingest_id FROM _act a WHERE {where} AND a._action = 'replace'")
    if counts.get("fill"):
        # a lower-fidelity record only fills NULLs the stored record does not explain; the stored
        # reasons stay (the filler's reasons would describe columns that the stored record has)
        def fill(c: str) -> str:
            explained = f"""coalesce(json_exists({table}.null_reasons, '$."{c}"'), false)"""
            return f"{_q(c)} = CASE WHEN {explained} THEN {table}.{_q(c)} ELSE coalesce({table}.{_q(c)}, a.{_q(c)}) END"
        sets = ", ".join(fill(c) for c in data_cols if c not in ("source", "null_reasons"))
        # ingest_id: the last ingest that changed the row (the stored metrics recompute such rows' jobs)
        con.execute(f"UPDATE {table} SET {sets}, ingest_id = a.ingest_id FROM _act a WHERE {where} AND a._action = 'fill'")
    stored = counts.get("insert", 0)
    updated = counts.get("replace", 0) + counts.get("fill", 0)
    unchanged = counts.get("same", 0) + (total - winners)
    for t in ("_in", "_w", "_act"):
        con.execute(f"DROP TABLE IF EXISTS {t}")
    return stored, updated, unchanged


def _refresh_job_usage(con, touched: pl.DataFrame) -> None:
    """Job-level numbers derived from steps, for the jobs this file touched.
    mem_peak_bytes: the largest step's TRESUsageInTot mem, else max over steps of MaxRSS x NTasks.
    cpu_time_s: kept when the job record has TotalCPU, else the sum over its steps.
    gpu_util_tres / gpu_mem_tres_bytes (Slurm's gres/gpuutil, gres/gpumem): kept when the job record
    has them, else the max over its steps' TRESUsageInTot (as the sacct JSON parser does), so a GPU
    job without sidecar samples still has Slurm's figure."""
    _run(con, """
        UPDATE job SET
            mem_peak_bytes = coalesce(s.peak, job.mem_peak_bytes),
            cpu_time_s = coalesce(job.cpu_time_s, s.cpu),
            gpu_util_tres = coalesce(job.gpu_util_tres, s.gutil),
            gpu_mem_tres_bytes = coalesce(job.gpu_mem_tres_bytes, s.gmem)
        FROM (SELECT cluster, job_id_raw,
                     coalesce(max(mem_usage_tot_bytes), max(max_rss_bytes * coalesce(ntasks, 1))) AS peak,
                     sum(cpu_time_s) AS cpu, max(gpu_util_tres) AS gutil, max(gpu_mem_tres_bytes) AS gmem
              FROM step WHERE (cluster, job_id_raw) IN (SELECT cluster, job_id_raw FROM _touched)
              GROUP BY cluster, job_id_raw) s
        WHERE job.cluster = s.cluster AND job.job_id_raw = s.job_id_raw
          AND ((s.peak IS NOT NULL AND job.mem_peak_bytes IS DISTINCT FROM s.peak)
               OR (job.cpu_time_s IS NULL AND s.cpu IS NOT NULL)
               OR (job.gpu_util_tres IS NULL AND s.gutil IS NOT NULL)
               OR (job.gpu_mem_tres_bytes IS NULL AND s.gmem IS NOT NULL))""", _touched=touched)


def _select_casts(con, frame: pl.DataFrame, table: str, ingest_id: int) -> tuple[list[str], str]:
    """(table columns, SELECT list) turning `frame` columns into the table's types, missing ones NULL."""
    have = set(frame.columns)
    cols = _table_columns(con, table)
    sel = []
    for name, typ in cols:
        if name == "ingest_id":
            sel.append(f"{int(ingest_id)}::BIGINT AS ingest_id")
        elif name in have:
            sel.append(f"CAST({_q(name)} AS {typ}) AS {_q(name)}")
        else:
            sel.append(f"NULL::{typ} AS {_q(name)}")
    return [c for c, _ in cols], ", ".join(sel)



def _load_sidecar_runs(con, frame: Optional[pl.DataFrame], ingest_id: int, source_file: str) -> None:
    if frame is None or frame.height == 0:
        return
    if "source_file" not in frame.columns:
        frame = frame.with_columns(source_file=pl.lit(source_file))
    cols = _stage(con, frame, "sidecar_run", "_in_r", ingest_id)
    collist = ", ".join(_q(c) for c in cols)
    con.execute("DELETE FROM sidecar_run WHERE (cluster, job_id_raw, host, source_file) IN "
                "(SELECT cluster, job_id_raw, host, source_file FROM _in_r)")
    con.execute(f"INSERT INTO sidecar_run ({collist}) SELECT DISTINCT ON (cluster, job_id_raw, host, source_file) "
                f"{collist} FROM _in_r")
    con.execute("DROP TABLE IF EXISTS _in_r")

