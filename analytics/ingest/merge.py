"""The merge rule: how parsed job, step and sidecar-run rows are staged, cast to the table's types
and merged into what is stored, and the job numbers derived from its steps.

Jobs and steps (keys (cluster, job_id_raw) and (cluster, job_id_raw, step_id)): a record ranks by
(accounting source?, final state?, coalesce(end, start + elapsed, start, submit, eligible)), ties broken by
SOURCE_PREFERENCE. The stored and the incoming record merge column by column (_merge_sql), so the
row does not depend on which came first (docs/database.md#update-rule); an unchanged row counts as
"unchanged". Several records of one key in one file: the best-ranked (then the last) is merged and
the others count as unchanged; picked in polars where the columns' types allow (file_winners), so
that a file of new jobs is inserted as a plain bulk insert, else by the SQL.
"""
from __future__ import annotations

from typing import Optional

import duckdb
import polars as pl

FINAL_STATES = ("BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY",
                "PREEMPTED", "TIMEOUT", "REVOKED")
# Sources that hold the scheduler's accounting record; the others only fill gaps.
ACCOUNTING_SOURCES = ("slurm-sacct", "slurm-sacct-json", "pbs", "lsf")
# Which source wins between records of equal rank (same fidelity, state and times): sacct --json
# first, for its microsecond CPU times. A NULL in the winner still takes the other's value.
SOURCE_PREFERENCE = ("slurm-sacct-json", "slurm-sacct", "pbs", "lsf", "slurm-seff", "sidecar", "nvidia-smi")


class ArrowStream:
    """Hands a polars frame to DuckDB through the Arrow C stream interface (no pyarrow needed)."""

    def __init__(self, frame: pl.DataFrame):
        self.frame = frame

    def __arrow_c_stream__(self, requested_schema=None):
        return self.frame.__arrow_c_stream__(requested_schema)


def run_sql(con: duckdb.DuckDBPyConnection, sql: str, _incoming: Optional[pl.DataFrame] = None,
         _keys: Optional[pl.DataFrame] = None, _owners: Optional[pl.DataFrame] = None,
         _touched: Optional[pl.DataFrame] = None, _rj: Optional[pl.DataFrame] = None) -> list[tuple]:
    """Run sql reading the given polars frames by these names. DuckDB finds them as this function's
    local variables (its replacement scan), not through con.register(): a registered view is a
    catalog entry, and a dropped catalog entry lives until the transaction ends, so each frame
    registered in a file's transaction (a 50M-row file's every piece) would stay in memory to the end."""
    _incoming, _keys, _owners, _touched, _rj = (None if f is None else ArrowStream(f)
                                                for f in (_incoming, _keys, _owners, _touched, _rj))
    return con.execute(sql).fetchall()


def table_columns(con: duckdb.DuckDBPyConnection, table: str) -> list[tuple[str, str]]:
    return [(r[0], r[1]) for r in con.execute(
        "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = ? "
        "AND table_schema = 'main' ORDER BY ordinal_position", [table]).fetchall()]


def quote_name(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _stage(con, frame: pl.DataFrame, table: str, stage: str, ingest_id: int) -> list[str]:
    """Create temp table `stage` with the table's columns (missing ones NULL) plus _row."""
    cols, sel = select_casts(con, frame, table, ingest_id)
    run_sql(con, f"CREATE OR REPLACE TEMP TABLE {stage} AS SELECT {sel}, _row FROM _incoming",
         _incoming=frame.with_row_index("_row"))
    return cols


_FIRST_ROWS = 10_000
_T_SPAN = 2 ** 59   # microseconds either side of 1970 a time may be for the score below (~18,000 years)


def file_winners(frame: pl.DataFrame, keys: list[str], time_cols: list[str]) -> Optional[pl.DataFrame]:
    """The file's best record per key, in file order, by the rule the merge's SQL reads them with
    (final state, then the time _as_of gives, then the later line); None where the frame's columns
    are not of the types that rule reads alike in polars (text keys and state, times in
    microseconds without a zone, whole seconds elapsed): the SQL picks them then."""
    sch = frame.schema
    times = [c for c in time_cols if c in sch]
    if (any(sch.get(k) != pl.String for k in keys) or sch.get("state", pl.String) != pl.String
            or any(sch[c] != pl.Datetime("us") for c in times)
            or ("end_time" in times and sch.get("elapsed_s", pl.Int64) not in (pl.Int64, pl.Int32))):
        return None
    c = pl.col
    parts = []
    for col in times:
        parts.append(c(col))
        if col == "end_time" and "start_time" in sch and "elapsed_s" in sch:
            parts.append(c("start_time") + pl.duration(seconds=c("elapsed_s")))
    t = (pl.coalesce(parts) if parts else pl.lit(None, dtype=pl.Datetime("us"))).dt.epoch("us")
    final = (pl.when(c("state").is_in(FINAL_STATES)).then(2).otherwise(1) if "state" in sch else pl.lit(1))
    final = pl.when(c("state").is_null()).then(0).otherwise(final) if "state" in sch else final
    ranked = frame.select(*keys, _t=t, _f=final.cast(pl.Int64)).with_row_index("_row")
    if not ranked.select(((c("_t") > -_T_SPAN) & (c("_t") < _T_SPAN)).fill_null(True).all()).item():
        return None
    # one number ranks a record: final state (0 none, 1 other, 2 final), then its time (none lowest)
    score = c("_f") * (4 * _T_SPAN) + (c("_t") + _T_SPAN).fill_null(0)
    # arg_max takes the first best: in reversed order, the later line of equal rank
    best = (ranked.reverse().group_by(keys).agg(pl.col("_row").get(score.arg_max()))["_row"].sort())
    return frame if best.len() == frame.height else frame[best]


def _fidelity(expr: str) -> str:
    srcs = ", ".join(f"'{s}'" for s in ACCOUNTING_SOURCES)
    return f"(CASE WHEN {expr} IN ({srcs}) THEN 2 ELSE 1 END)"


def _repeats(frame: pl.DataFrame, keys: list[str]) -> bool:
    """Whether a key repeats in frame, by the cheapest look that tells: a repeat among the first
    rows (a PBS job's Q, S and E records), else the key's last column without a repeat (an LSF
    job id), else every key."""
    if frame.head(_FIRST_ROWS).select(keys).is_duplicated().any():
        return True
    if frame[keys[-1]].n_unique() == frame.height:
        return False
    return bool(frame.select(keys).is_duplicated().any())


def merge_records(con, frame: pl.DataFrame, table: str, keys: list[str], time_cols: list[str],
                   ingest_id: int) -> tuple[int, int, int]:
    """Upsert frame into table by the merge rule; returns (stored, updated, unchanged)."""
    if frame is None or frame.height == 0:
        return 0, 0, 0
    total = frame.height
    repeats = _repeats(frame, keys)
    picked = file_winners(frame, keys, time_cols) if repeats else None
    if picked is not None:   # the file's best record per key, the others counted unchanged
        frame = picked
    # Bulk case (a new dump into an empty or unrelated database): no key repeats in the file and
    # none is stored yet, so every row is simply inserted, straight from the frame. A file's best
    # record with a null_reasons text still goes through the merge, as it did among its repeats.
    if picked is not None or not repeats:
        on = " AND ".join(f"t.{quote_name(k)} = k.{quote_name(k)}" for k in keys)
        known = run_sql(con, f"SELECT count(*) FROM (SELECT 1 FROM _keys k JOIN {table} t ON {on} LIMIT 1)",
                     _keys=frame.select(keys))[0][0]
        if not known:
            plain, rest = frame, None
            if picked is not None and "null_reasons" in frame.columns and frame.height != total:
                plain, rest = frame.filter(pl.col("null_reasons").is_null()), frame.filter(pl.col("null_reasons").is_not_null())
            cols, sel = select_casts(con, plain, table, ingest_id)
            n = run_sql(con, f"INSERT INTO {table} ({', '.join(quote_name(c) for c in cols)}) SELECT {sel} FROM _incoming",
                     _incoming=plain)[0][0] if plain.height else 0
            s, u, same = _merge_file(con, rest, table, keys, time_cols, ingest_id) if rest is not None and rest.height \
                else (0, 0, 0)
            return n + s, u, same + total - frame.height
    s, u, same = _merge_file(con, frame, table, keys, time_cols, ingest_id)
    return s, u, same + total - frame.height


def _merge_file(con, frame: pl.DataFrame, table: str, keys: list[str], time_cols: list[str],
                ingest_id: int) -> tuple[int, int, int]:
    """merge_records by the SQL: the file's best record per key merged with the stored row."""
    cols, sel = select_casts(con, frame, table, ingest_id)
    finals = ", ".join(f"'{s}'" for s in FINAL_STATES)
    rank_t = _as_of(time_cols)
    keyl = ", ".join(quote_name(k) for k in keys)
    total = frame.height
    # best record per key within the file: best rank, then the later line (read from the frame
    # once: no staged copy of every row)
    run_sql(con, f"""
        CREATE OR REPLACE TEMP TABLE _w AS
        SELECT *, (state IN ({finals}))::INT AS _final, {rank_t} AS _t FROM (SELECT {sel}, _row FROM _incoming)
        QUALIFY row_number() OVER (PARTITION BY {keyl}
                    ORDER BY (state IN ({finals}))::INT DESC, {rank_t} DESC NULLS LAST, _row DESC) = 1""",
            _incoming=frame.with_row_index("_row"))
    winners = con.execute("SELECT count(*) FROM _w").fetchall()[0][0]
    data_cols = [c for c in cols if c not in keys and c != "ingest_id"]
    con.execute(f"CREATE OR REPLACE TEMP TABLE _act AS {_merge_sql(table, keys, data_cols, time_cols)}")
    con.execute("DROP TABLE _w")
    counts = dict(con.execute("SELECT _action, count(*) FROM _act GROUP BY 1").fetchall())
    collist = ", ".join(quote_name(c) for c in cols)
    if counts.get("insert"):
        con.execute(f"INSERT INTO {table} ({collist}) SELECT {collist} FROM _act WHERE _action = 'insert'")
    if counts.get("update"):
        where = " AND ".join(f"{table}.{quote_name(k)} = a.{quote_name(k)}" for k in keys)
        # ingest_id: the last ingest that changed the row (the stored metrics recompute such rows' jobs)
        sets = ", ".join(f"{quote_name(c)} = a.{quote_name(c)}" for c in data_cols + ["ingest_id"])
        con.execute(f"UPDATE {table} SET {sets} FROM _act a WHERE {where} AND a._action = 'update'")
    stored = counts.get("insert", 0)
    updated = counts.get("update", 0)
    unchanged = counts.get("same", 0) + (total - winners)
    for t in ("_w", "_act"):
        con.execute(f"DROP TABLE IF EXISTS {t}")
    return stored, updated, unchanged


def _as_of(time_cols: list[str], alias: str = "") -> str:
    """SQL: the time a record ranks by: the first of time_cols it has, where a record without an
    end (a running job or step) counts as of its start plus the elapsed time sacct printed, the time
    of the dump; so of two RUNNING records the later dump ranks higher, in either order."""
    a = f"{alias}." if alias else ""
    parts = []
    for c in time_cols:
        parts.append(f"{a}{quote_name(c)}")
        if c == "end_time":
            parts.append(f"{a}start_time + to_seconds({a}elapsed_s)")
    return "coalesce(" + ", ".join(parts) + ")"


def _explains(nr: str, col: str) -> str:
    """SQL: does the null_reasons JSON `nr` give a reason for column col being NULL?"""
    return f"""coalesce(json_exists({nr}, '$."{col}"'), false)"""


def _merge_sql(table: str, keys: list[str], data_cols: list[str], time_cols: list[str]) -> str:
    """SELECT over _w (the file's best record per key) joined with the stored rows: per key the merged
    row of the table's columns, its null_reasons and _action (insert | update | same).

    The winner is the record of higher rank (fidelity, final state, time); on equal rank the source
    earlier in SOURCE_PREFERENCE, and of one source the incoming. Each column takes the winner's
    value, else the loser's: a NULL never erases a value of an equally ranked record (the same job
    seen through another format). A winner of strictly higher rank that explains its NULL (a RUNNING
    job's "Unknown" end, seff's lack of the signal) keeps it NULL. The result depends only on the two
    records, not on which came first. null_reasons: the winner's text where it still describes the
    NULL columns exactly, else rebuilt from both (winner first) for the columns left NULL. derived
    (where derived values came from) is the winner's, as source is."""
    finals = ", ".join(f"'{s}'" for s in FINAL_STATES)
    pref = " ".join(f"WHEN '{s}' THEN {len(SOURCE_PREFERENCE) - i}" for i, s in enumerate(SOURCE_PREFERENCE))
    on = " AND ".join(f"t.{quote_name(k)} = w.{quote_name(k)}" for k in keys)
    vals = [c for c in data_cols if c not in ("source", "null_reasons", "derived")]
    stored = ", ".join(f"t.{quote_name(c)} AS {quote_name('_t_' + c)}" for c in data_cols)
    t_time = _as_of(time_cols, "t")
    rank = f"""
        SELECT w.*, {stored}, t.{quote_name(keys[0])} IS NULL AS _new,
               {_fidelity('w.source')} AS _fw, {_fidelity('t.source')} AS _ft,
               coalesce(w._final, 0) AS _finw, coalesce((t.state IN ({finals}))::INT, 0) AS _fint,
               coalesce(w._t, '-infinity'::TIMESTAMP) AS _tw, coalesce({t_time}, '-infinity'::TIMESTAMP) AS _tt,
               (CASE w.source {pref} ELSE 0 END) AS _pw, (CASE t.source {pref} ELSE 0 END) AS _pt
        FROM _w w LEFT JOIN {table} t ON {on}"""
    above = "(_fw > _ft OR (_fw = _ft AND (_finw > _fint OR (_finw = _fint AND _tw > _tt))))"
    below = "(_fw < _ft OR (_fw = _ft AND (_finw < _fint OR (_finw = _fint AND _tw < _tt))))"
    order = f"""
        SELECT *, _new OR {above} OR (NOT {below} AND _pw >= _pt) AS _ww, NOT _new AND ({above} OR {below}) AS _strict
        FROM ({rank})"""

    def pick(c: str) -> str:
        w, t = quote_name(c), quote_name("_t_" + c)
        return (f"CASE WHEN _ww THEN (CASE WHEN {w} IS NOT NULL OR (_strict AND {_explains('null_reasons', c)}) "
                f"THEN {w} ELSE {t} END) ELSE (CASE WHEN {t} IS NOT NULL OR (_strict AND {_explains(quote_name('_t_null_reasons'), c)}) "
                f"THEN {t} ELSE {w} END) END AS {quote_name('_m_' + c)}")
    merged = f"""
        SELECT *, {', '.join(pick(c) for c in vals)},
               CASE WHEN _ww THEN source ELSE "_t_source" END AS "_m_source",
               {'CASE WHEN _ww THEN derived ELSE "_t_derived" END' if 'derived' in data_cols else 'NULL'} AS "_m_derived",
               CASE WHEN _ww THEN null_reasons ELSE "_t_null_reasons" END AS _nw,
               CASE WHEN _ww THEN "_t_null_reasons" ELSE null_reasons END AS _nl
        FROM ({order})"""
    m = {c: quote_name("_m_" + c) for c in vals}
    if "state" in vals:
        merged = _qdel_sql(merged)
    changed = " OR ".join(f"({m[c]} IS NOT NULL AND {_explains('_nw', c)}) OR "
                          f"({m[c]} IS NULL AND {_explains('_nl', c)} AND NOT {_explains('_nw', c)})" for c in vals)
    # the text json.dumps writes, as the parsers do: {"col": "reason", ...}
    entries = ", ".join(f"""CASE WHEN {m[c]} IS NULL{_kept_reason(c)} THEN '"{c}": '
                        || to_json(coalesce(json_extract_string(_nw, '$."{c}"'),
                        json_extract_string(_nl, '$."{c}"')))::VARCHAR END""" for c in vals)
    rebuilt = f"nullif('{{' || concat_ws(', ', {entries}) || '}}', '{{}}')"   # concat_ws skips NULLs
    same = " AND ".join(f"{m[c]} IS NOT DISTINCT FROM {quote_name('_t_' + c)}" for c in vals)
    out = ", ".join([quote_name(k) for k in keys] + [f"{m[c]} AS {quote_name(c)}" for c in vals] + ['"_m_source" AS source', "ingest_id"]
                    + (['"_m_derived" AS derived'] if "derived" in data_cols else []))
    return f"""
        SELECT {out}, _nr AS null_reasons,
               CASE WHEN _new THEN 'insert'
                    WHEN {same} AND "_m_source" IS NOT DISTINCT FROM "_t_source" AND _nr IS NOT DISTINCT FROM "_t_null_reasons"
                         AND "_m_derived" IS NOT DISTINCT FROM {'"_t_derived"' if 'derived' in data_cols else 'NULL'}
                    THEN 'same' ELSE 'update' END AS _action
        FROM (SELECT *, CASE WHEN {changed} THEN {rebuilt} ELSE _nw END AS _nr FROM ({merged}))"""


# PBS logs no uid for a qdel: who deleted the job is the reason its cancelled_by_uid is NULL
QDEL_REASON = "cancelled_by_uid"


def _qdel_sql(merged: str) -> str:
    """SQL over `merged`: a job deleted with qdel (either record names who deleted it: a PBS D record,
    or an E record after one in its file) is CANCELLED unless the merged record ended COMPLETED, as
    the PBS parser rules within one file; so a D record and an E record in two daily files give the
    row both give in one, in either order. _qdel says whether the job was deleted."""
    said = " OR ".join(f"""coalesce(json_exists({nr}, '$."{QDEL_REASON}"'), false)""" for nr in ("_nw", "_nl"))
    return f"""
        SELECT * REPLACE (CASE WHEN _qdel AND "_m_state" IS DISTINCT FROM 'COMPLETED' THEN 'CANCELLED'
                               ELSE "_m_state" END AS "_m_state")
        FROM (SELECT *, ({said}) AS _qdel FROM ({merged}))"""


def _kept_reason(col: str) -> str:
    """SQL condition (after 'IS NULL'): a rebuilt null_reasons keeps col's reason; a job that ended
    COMPLETED after a qdel names no canceller (as within one file)."""
    return """ AND NOT (_qdel AND "_m_state" = 'COMPLETED')""" if col == QDEL_REASON else ""


def refresh_job_usage(con, touched: Optional[pl.DataFrame]) -> None:
    """Job-level numbers derived from steps, for the jobs this file touched (None: every job, when
    the tables hold only this file's rows: no semi-join of millions of keys against themselves).
    mem_peak_bytes: the largest step's TRESUsageInTot mem, else max over steps of MaxRSS x NTasks.
    cpu_time_s: kept when the job record has TotalCPU, else the sum over its steps.
    gpu_util_tres / gpu_mem_tres_bytes (Slurm's gres/gpuutil, gres/gpumem): kept when the job record
    has them, else the max over its steps' TRESUsageInTot (as the sacct JSON parser does), so a GPU
    job without sidecar samples still has Slurm's figure."""
    run_sql(con, f"""
        UPDATE job SET
            mem_peak_bytes = coalesce(s.peak, job.mem_peak_bytes),
            cpu_time_s = coalesce(job.cpu_time_s, s.cpu),
            gpu_util_tres = coalesce(job.gpu_util_tres, s.gutil),
            gpu_mem_tres_bytes = coalesce(job.gpu_mem_tres_bytes, s.gmem)
        FROM (SELECT cluster, job_id_raw,
                     coalesce(max(mem_usage_tot_bytes), max(max_rss_bytes * coalesce(ntasks, 1))) AS peak,
                     sum(cpu_time_s) AS cpu, max(gpu_util_tres) AS gutil, max(gpu_mem_tres_bytes) AS gmem
              FROM step {"" if touched is None else "WHERE (cluster, job_id_raw) IN (SELECT cluster, job_id_raw FROM _touched)"}
              GROUP BY cluster, job_id_raw) s
        WHERE job.cluster = s.cluster AND job.job_id_raw = s.job_id_raw
          AND ((s.peak IS NOT NULL AND job.mem_peak_bytes IS DISTINCT FROM s.peak)
               OR (job.cpu_time_s IS NULL AND s.cpu IS NOT NULL)
               OR (job.gpu_util_tres IS NULL AND s.gutil IS NOT NULL)
               OR (job.gpu_mem_tres_bytes IS NULL AND s.gmem IS NOT NULL))""", _touched=touched)


def select_casts(con, frame: pl.DataFrame, table: str, ingest_id: int) -> tuple[list[str], str]:
    """(table columns, SELECT list) turning `frame` columns into the table's types, missing ones NULL;
    ingest_id is `ingest_id`, or each row's where the frame has that column (rows of many files)."""
    have = set(frame.columns)
    cols = table_columns(con, table)
    sel = []
    for name, typ in cols:
        if name == "ingest_id" and name not in have:
            sel.append(f"{int(ingest_id)}::BIGINT AS ingest_id")
        elif name in have:
            sel.append(f"CAST({quote_name(name)} AS {typ}) AS {quote_name(name)}")
        else:
            sel.append(f"NULL::{typ} AS {quote_name(name)}")
    return [c for c, _ in cols], ", ".join(sel)



def load_sidecar_runs(con, frame: Optional[pl.DataFrame], ingest_id: int, source_file: str) -> None:
    if frame is None or frame.height == 0:
        return
    if "source_file" not in frame.columns:
        frame = frame.with_columns(source_file=pl.lit(source_file))
    cols = _stage(con, frame, "sidecar_run", "_in_r", ingest_id)
    collist = ", ".join(quote_name(c) for c in cols)
    con.execute("DELETE FROM sidecar_run WHERE (cluster, job_id_raw, host, source_file) IN "
                "(SELECT cluster, job_id_raw, host, source_file FROM _in_r)")
    con.execute(f"INSERT INTO sidecar_run ({collist}) SELECT DISTINCT ON (cluster, job_id_raw, host, source_file) "
                f"{collist} FROM _in_r")
    con.execute("DROP TABLE IF EXISTS _in_r")

