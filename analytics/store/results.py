"""Stored per-job results and the dashboard's per-day summaries, kept current: job_gpu_devices,
job_cpu_hosts, job_metrics, job_day, job_flags, job_advice, job_savings, job_flags_by_owner, and
dash_day, dash_eff_day, dash_flag_day, dash_flag_top.

The definitions are the files of sql/metrics/, in order:

- **portable** (NN_lake_<view>.sql): single SELECTs that DuckDB and Spark SQL both run (rules:
  analytics/store/lake.py), over the inputs lake_samples, lake_jobs, lake_setting and lake_charge_rate.
  The Parquet lake runs them over its files; here each refresh maps the inputs to the jobs listed
  in the table metric_scope (INPUTS), creates the files' views as TEMP views, and stores
  lake_job_gpu_devices, lake_job_cpu_hosts and lake_job_metrics as job_gpu_devices, job_cpu_hosts
  and job_metrics. The first two are the only ones that read the samples: a rebuild that starts
  after them reads their stored rows instead (``_create_views``).
- **DuckDB-only** (NN_<table>.sql, after them): each ends with the view calc_<table>, which reads
  the stored tables before it for the jobs (or, for the dash_* summaries, the days) in its scope
  table. job_savings prices the requests of job_advice with the portable charging SQL (PRICING),
  created over those requests (``_pricing_views``) just before it is computed: the request that
  would have fit is charged by the one definition that charged the job.

``refresh(con)`` brings the stored tables up to date in one transaction:

- **incremental**: the jobs whose accounting or samples an ingest stored or changed since the last
  refresh (rows with an ingest_id above the stored watermark; rows written by hand, without an
  ingest_id, at every refresh) are recomputed, and their old rows replaced; so are the flags of a
  partition's jobs when the partition gains or loses GPUs (the cpu_job_on_gpu_partition flag spans
  jobs), and the summaries of every day those jobs ran, before or after. Nothing else is read or
  written, so a published snapshot is a copy of the file (analytics/store/snapshot.py).
- **rebuild**: after a change of what a stored table is computed with (its file in sql/metrics/
  and the files it reads, the settings they read, the charging table when they read it), that table
  and every table computed from it (``dependencies``) are rebuilt from all jobs, once, and ``say``
  is told which and why (with new rows pending as well: every table after the first of them). A
  change of `[flags]` rebuilds job_flags and what reads it, not dash_eff_day; of
  `flags.gpu_idle_pct` or the charging, job_metrics and what follows, from the stored per-device and
  per-host rows; the samples are weighed again only when their own definitions or
  `samples.max_gap_s` change.

A refresh killed at any point leaves the previous stored results and watermark (DuckDB rolls the
transaction back), so readers never see a half-refreshed state and the next refresh completes it.
A setting the SQL reads that is missing from the setting table is an error, never a default.
"""
from __future__ import annotations

import hashlib
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import duckdb

from jobsight.analytics.store import db, lake, pruned

METRICS_DIR = lake.LAKE_SQL_DIR
KEY = "cluster, job_id_raw"
DAY = "day"


@dataclass(frozen=True)
class Stored:
    table: str      # the stored table readers use
    view: str       # its definition in sql/metrics/ (computes the rows of `scope`)
    scope: str      # the table listing the jobs (or days) to (re)compute
    order: str      # row order of a full build: what readers filter on, so that a lookup of one
                    # job (or day) reads the row groups whose zone maps span it, not all of them
    key: str = KEY  # what the scope lists: its rows are replaced by key
    prices: str = ""  # a stored table of requests that `view` reads priced as lake_job_charge
    index: tuple[str, ...] = ()   # columns given an index each: readers look a few jobs up in them
                                  # (the jobs to fix; one job by its printed or raw id)


# In dependency order. The first three are portable views (sql/metrics/NN_lake_*.sql); each later one
# is the last view of the DuckDB-only file sql/metrics/NN_<table>.sql, which reads the stored tables
# of the earlier ones.
STORED = (
    Stored("job_gpu_devices", "lake_job_gpu_devices", "metric_scope", KEY, index=("job_id_raw",)),
    Stored("job_cpu_hosts", "lake_job_cpu_hosts", "metric_scope", KEY, index=("job_id_raw",)),
    Stored("job_metrics", "lake_job_metrics", "metric_scope", f"start_time, {KEY}", index=("job_id_raw", "job_id")),
    # by day, then owner: a report's or a page's subject has its rows of a day together, not one per vector
    Stored("job_day", "calc_job_day", "metric_scope", f'day, account, "user", {KEY}', index=("job_id_raw",)),
    Stored("job_flags", "calc_job_flags", "metric_flag_scope", KEY, index=("job_id_raw",)),
    Stored("job_advice", "calc_job_advice", "metric_flag_scope", KEY),
    Stored("job_savings", "calc_job_savings", "metric_flag_scope", KEY, prices="job_advice", index=("job_id_raw",)),
    Stored("job_flags_by_owner", "calc_job_flags_by_owner", "metric_flag_scope", f'account, "user", {KEY}'),
    Stored("dash_day", "calc_dash_day", "metric_day_scope", DAY, DAY),
    Stored("dash_eff_day", "calc_dash_eff_day", "metric_day_scope", DAY, DAY),
    Stored("dash_flag_day", "calc_dash_flag_day", "metric_day_scope", DAY, DAY),
    Stored("dash_flag_top", "calc_dash_flag_top", "metric_day_scope", DAY, DAY),
)
SCOPES = ("metric_scope", "metric_flag_scope", "metric_day_scope")

# The portable SQL's inputs (lake.INPUT_VIEWS), for the jobs in metric_scope: the same columns as
# the lake's files. The settings and the charging table apply to every cluster of the database.
_CLUSTER_INPUTS = {   # the inputs that are per cluster, for the clusters of a scope table
    "setting": "SELECT c.cluster, s.name, s.value, s.text FROM (SELECT DISTINCT cluster FROM {scope}) c CROSS JOIN setting s",
    "charge_rate": "SELECT c.cluster, r.* FROM (SELECT DISTINCT cluster FROM {scope}) c CROSS JOIN charge_rate r",
}
INPUTS = {
    "samples": f"SELECT s.*, {lake.TIME_MS} AS time_ms FROM samples s SEMI JOIN metric_scope USING ({KEY})",
    "jobs": f"SELECT j.* FROM jobs j SEMI JOIN metric_scope USING ({KEY})",
    **{table: select.format(scope="metric_scope") for table, select in _CLUSTER_INPUTS.items()},
}
# The portable views that charge a request (lake_job_request): what prices a stored table of
# requests (Stored.prices) too, over the settings and charging table of the scope's clusters.
PRICING = ("lake_config", "lake_job_charge")
REQUEST_VIEW = "lake_job_request"
REQUEST_METRICS = "lake_job_metrics"     # one row per row of lake_jobs
# The schema's views INPUTS read (sql/schema/): their text and the migrations that define them and
# the macros they call are part of the portable tables' checksums (the `samples` view applies a MIG
# instance's utilisation rule).
SCHEMA_VIEWS_READ = ("samples", "jobs")
# Tables besides `setting` a definition may read; their rows are part of its checksum.
TABLES_READ = ("charge_rate", "billing_weight")
# A full rebuild's scope is every job: it reads every sample rather than probe 10^7 samples against
# the scope (a third of the rebuild), and drops the rows of samples without a job record (whose
# jobs get no results, as in an incremental refresh) when it stores the portable views.
EVERY_SAMPLE = f"SELECT s.*, {lake.TIME_MS} AS time_ms FROM samples s"
EVERY_JOB = "SELECT * FROM jobs"       # and every job: no semi join of 10^6 jobs against themselves
# The stored rows the DuckDB-only files read for the jobs of their scope: TEMP views (``_scoped_views``)
# over the scope's jobs, or over every row in a full rebuild, whose scope is every job (a semi join
# of 10^6 rows against themselves costs 0.2-0.3 s each).
SCOPED = {"scoped_job_metrics": ("job_metrics", "metric_scope"),
          "flag_scoped_job_metrics": ("job_metrics", "metric_flag_scope"),
          "flag_scoped_job_day": ("job_day", "metric_flag_scope"),
          "flag_scoped_job_flags": ("job_flags", "metric_flag_scope")}
# Portable views made TEMP tables rather than views: each is both stored and read by a later view,
# and a view would weigh the samples twice per refresh.
MATERIALIZED = ("lake_job_gpu_devices", "lake_job_cpu_hosts")


@dataclass(frozen=True)
class Refresh:
    mode: str               # "full", "incremental" or "current" (nothing to do)
    jobs: int = 0           # jobs whose metrics were computed
    flag_jobs: int = 0      # jobs whose flags were computed (jobs, plus those of changed GPU partitions)
    reason: str = ""
    days: int = 0           # days whose dashboard summaries were computed
    tables: tuple[str, ...] = ()   # the tables a full refresh rebuilt
    kept: tuple[tuple[str, str], ...] = ()   # pruned jobs whose per-device rows stay as stored: the
                                             # lake did not give their samples whole (``skipped``: why)
    skipped: tuple[str, ...] = ()


def _portable(s: Stored) -> bool:
    return s.view.startswith("lake_")


def metric_files() -> list[Path]:
    """Every definition file, in the order a full rebuild runs them: the portable files, then one
    DuckDB-only file per remaining stored table."""
    files = sorted(METRICS_DIR.glob("*.sql"))
    portable = lake.portable_files()
    duck = [s for s in STORED if not _portable(s)]
    names = {n for n, _ in lake.lake_views()}
    rest = files[len(portable):]
    if (files[:len(portable)] != portable or [p.stem.split("_", 1)[-1] for p in rest] != [s.table for s in duck]
            or not all(s.view in names for s in STORED if _portable(s))):
        raise RuntimeError(f"{METRICS_DIR}: expected the portable NN_lake_*.sql files, then one file per "
                           f"stored table {', '.join(s.table for s in duck)}; found {', '.join(p.name for p in files)}")
    return files


_SETTING_CALL = re.compile(r"setting_(?:value|text)\('([^']+)'\)")
_LAKE_NAME = re.compile(r"\blake_[a-z_]+\b")


def _reads(view: str, views: dict[str, str]) -> list[str]:
    """The portable view and every portable view it reads, directly or not, in file order
    (`views`: lake.lake_views() as a dict)."""
    seen, todo = set(), [view]
    while todo:
        name = todo.pop()
        if name in views and name not in seen:
            seen.add(name)
            todo += _LAKE_NAME.findall(re.sub(r"--[^\n]*", "", views[name]))
    return [name for name in views if name in seen]


def _definition_files(s: Stored, views: dict[str, str]) -> list[Path]:
    if _portable(s):
        read = set(_reads(s.view, views))
        return [p for p in lake.portable_files() if p.stem.split("_", 1)[1] in read]
    return [p for p in metric_files() if p.stem.split("_", 1)[-1] == s.table]


def _portable_settings(s: Stored, views: dict[str, str]) -> list[str]:
    """The settings a portable stored table's files use: lake_config's columns they name."""
    columns = lake.settings_columns(views)
    code = "".join(re.sub(r"--[^\n]*", "", views[v]) for v in _reads(s.view, views) if v != lake.SETTINGS_VIEW)
    return sorted(name for name, column in columns.items() if re.search(rf"\b{column}\b", code))


_MACRO_DEF = re.compile(r"CREATE OR REPLACE MACRO (\w+)")


def dependencies(files: Optional[dict[Path, str]] = None) -> dict[str, list[str]]:
    """The stored tables each stored table is computed from: for a portable one, every one before
    it; for a DuckDB-only file, the stored tables it names (directly or through a SCOPED view), the
    one it prices (Stored.prices) and those of the earlier files whose macros it calls. ``files``:
    the metric files' texts, if read."""
    files = files or {p: p.read_text(encoding="utf-8") for p in metric_files()}
    names = {s.table: s.table for s in STORED} | {view: table for view, (table, _) in SCOPED.items()}
    texts = {p.stem.split("_", 1)[-1]: re.sub(r"--[^\n]*", "", text) for p, text in files.items()}
    deps: dict[str, list[str]] = {}
    macros: dict[str, str] = {}          # macro -> the table whose file defines it
    for i, s in enumerate(STORED):
        if _portable(s):
            deps[s.table] = [t.table for t in STORED[:i]]
            continue
        text = texts[s.table]
        read = {names[w] for w in re.findall(r"\b[a-z_]+\b", text) if w in names} | {s.prices} - {""}
        read |= {table for macro, table in macros.items() if re.search(rf"\b{macro}\s*\(", text)}
        deps[s.table] = [t.table for t in STORED[:i] if t.table in read]
        for macro in _MACRO_DEF.findall(text):
            macros.setdefault(macro, s.table)
    return deps


def definitions_checksums(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """What each stored table depends on besides the data: its definition files, the settings they
    read, the charging table if they read it (and, for the portable SQL, the inputs it reads here and
    the schema's views under them, ``_schema_inputs``),
    and the checksums of the stored tables it is computed from (``dependencies``): a table's
    checksum changes with that of any table it reads, and only those."""
    settings = {name: (value, text) for name, value, text in con.execute(
        "SELECT name, value, text FROM setting WHERE name <> 'views.checksum'").fetchall()}
    rates = con.execute("SELECT * FROM charge_rate ORDER BY ALL").fetchall()
    views = dict(lake.lake_views())       # each file read once per call, not once per table
    files = {p: p.read_text(encoding="utf-8") for p in metric_files()}
    deps = dependencies(files)
    schema_inputs = _schema_inputs(con)
    out, digests = {}, {}
    for s in STORED:
        h = hashlib.sha256()
        for table in deps[s.table]:
            h.update(digests[table])
        text = "".join(p.name + "\0" + files[p] for p in _definition_files(s, views))
        read = _portable_settings(s, views) if _portable(s) else sorted(set(_SETTING_CALL.findall(text)))
        h.update(text.encode())
        h.update(repr([(name, settings.get(name)) for name in read]).encode())
        if "charge_rate" in text:
            h.update(repr(rates).encode())
        for table in TABLES_READ[1:]:
            if table in text:
                h.update(repr(con.execute(f"SELECT * FROM {table} ORDER BY ALL").fetchall()).encode())
        if _portable(s):
            h.update(repr((sorted(INPUTS.items()), EVERY_SAMPLE, EVERY_JOB, schema_inputs)).encode())
        else:       # the row order readers rely on: a table stored in another order is rebuilt
            h.update(f"order {s.order}".encode())
        if s.index:     # a table stored without its indexes is rebuilt
            h.update(f"index {' '.join(s.index)}".encode())
        out[s.table] = h.hexdigest()[:16]
        digests[s.table] = h.digest()
    return out


def _schema_inputs(con) -> str:
    """The text of SCHEMA_VIEWS_READ as DuckDB keeps it, and the migrations applied: the macros those
    views call change only with a migration (reading their text from duckdb_functions() would cost
    30 ms at every open)."""
    views = con.execute("SELECT view_name, sql FROM duckdb_views() WHERE NOT internal AND schema_name = 'main' "
                        "AND list_contains(?, view_name) ORDER BY view_name", [list(SCHEMA_VIEWS_READ)]).fetchall()
    return repr((views, con.execute("SELECT version, name FROM schema_version ORDER BY version").fetchall()))


def _check_settings(con) -> None:
    """Every setting the portable SQL reads is in the setting table: it has no default (a cluster
    without one would get no results), so a missing one is an error, as in the DuckDB-only files."""
    have = {name: (value, text) for name, value, text in con.execute("SELECT name, value, text FROM setting").fetchall()}
    for name, column in lake.settings_read().items():
        if have.get(name, (None, None))[column == "text"] is None:
            raise duckdb.InvalidInputException(f"jobsight: setting {name} is not in the setting table; "
                                               "open the database read-write with this jobsight")


def _create_views(con, everything: bool = False, stored: tuple[Stored, ...] = (),
                  lake_path: Optional[str] = None) -> tuple[tuple, tuple]:
    """The portable SQL over the jobs of metric_scope: its inputs and its views, as TEMP objects.
    ``everything``: lake_samples and lake_jobs are every sample and job (a full rebuild: see EVERY_SAMPLE). ``stored``:
    portable tables that are current, whose views read their stored rows rather than compute them.
    ``lake_path``: [lake] path, read instead of the lake each month was pruned to (store/pruned.py).
    Returns the pruned jobs (cluster, job_id_raw) that keep their stored per-device and per-host rows,
    and why lake partitions were skipped (store/pruned.py)."""
    _check_settings(con)
    kept = {s.view: s.table for s in stored}
    # the pruned jobs' samples before their cutoff, read back from the lake (store/pruned.py)
    from_lake, short, skipped = (None, [], []) if set(MATERIALIZED) <= set(kept) else \
        pruned.scope_samples(con, "metric_scope", lake_path)
    for table, select in INPUTS.items():
        if everything:
            select = {"samples": EVERY_SAMPLE, "jobs": EVERY_JOB}.get(table, select)
        if table == "samples" and from_lake:
            select = f"{select} UNION ALL BY NAME {from_lake}"
        con.execute(f"CREATE OR REPLACE TEMP VIEW {lake.INPUT_VIEWS[table]} AS {select}")
    for name, select in lake.lake_views():
        if name in kept:
            con.execute(f"CREATE OR REPLACE TEMP VIEW {name} AS "
                        f"SELECT t.* FROM {kept[name]} t SEMI JOIN metric_scope USING ({KEY})")
        else:
            kind = "TABLE" if name in MATERIALIZED else "VIEW"
            con.execute(f"CREATE OR REPLACE TEMP {kind} {name} AS {select}")
            if name in MATERIALIZED:
                _keep_pruned(con, name)
    return tuple(short), tuple(skipped)


# `jobsight prune` moved some jobs' samples to the lake (pruned_job): their per-device and per-host
# rows are computed again from the lake's samples and the database's (``_create_views``); those of
# the jobs the lake cannot give whole (pruned.KEPT) are kept as stored, never computed from the
# samples left.
KEPT_PREFIX = "_pruned_"


def _stash_pruned(con) -> None:
    """Before a rebuild drops the per-device and per-host tables: the pruned jobs' rows, aside."""
    have = _stored_tables(con)
    for name in MATERIALIZED:
        table = {s.view: s.table for s in STORED}[name]
        if table in have:
            con.execute(f"CREATE OR REPLACE TEMP TABLE {KEPT_PREFIX}{table} AS "
                        f"SELECT t.* FROM {table} t SEMI JOIN pruned_job USING ({KEY})")


def _keep_pruned(con, name: str) -> None:
    """In the TEMP table ``name`` (a MATERIALIZED view), the pruned jobs' rows are the stored ones."""
    table = {s.view: s.table for s in STORED}[name]
    temps = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables "
                                       "WHERE table_catalog = 'temp'").fetchall()}
    source = f"temp.{KEPT_PREFIX}{table}" if KEPT_PREFIX + table in temps else table
    if source == table and table not in _stored_tables(con):
        source = None
    con.execute(f"DELETE FROM temp.{name} t USING temp.{pruned.KEPT} p "
                "WHERE t.cluster = p.cluster AND t.job_id_raw = p.job_id_raw")
    if source:
        con.execute(f"INSERT INTO temp.{name} BY NAME SELECT k.* FROM {source} k "
                    f"SEMI JOIN temp.{pruned.KEPT} USING ({KEY})")


def _scoped_views(con, everything: bool) -> None:
    """The SCOPED views over the stored tables that exist (``everything``: a full rebuild's)."""
    have = _stored_tables(con)
    for name, (table, scope) in SCOPED.items():
        if table in have:
            rows = "" if everything else f" SEMI JOIN {scope} USING ({KEY})"
            con.execute(f"CREATE OR REPLACE TEMP VIEW {name} AS SELECT t.* FROM {table} t{rows}")


def _pricing_views(con, s: Stored, everything: bool = False) -> None:
    """lake_job_charge over the requests of s.prices for the jobs in s.scope (see PRICING)."""
    _check_settings(con)
    for table, select in _CLUSTER_INPUTS.items():
        con.execute(f"CREATE OR REPLACE TEMP VIEW {lake.INPUT_VIEWS[table]} AS {select.format(scope=s.scope)}")
    rows = "" if everything else f" SEMI JOIN {s.scope} USING ({KEY})"
    con.execute(f"CREATE OR REPLACE TEMP VIEW {REQUEST_VIEW} AS SELECT r.* FROM {s.prices} r{rows}")
    for name, select in lake.lake_views():
        if name in PRICING:
            con.execute(f"CREATE OR REPLACE TEMP VIEW {name} AS {select}")


def _drop_views(con, scoped: bool = True) -> None:
    """The TEMP objects of the portable SQL (``scoped``: and the SCOPED views)."""
    kinds = dict(con.execute("SELECT table_name, table_type FROM information_schema.tables "
                             "WHERE table_catalog = 'temp'").fetchall())
    for name, _ in reversed(lake.lake_views()):
        if name in kinds:
            con.execute(f"DROP {'TABLE' if kinds[name] == 'LOCAL TEMPORARY' else 'VIEW'} temp.{name}")
    for table in INPUTS:
        con.execute(f"DROP VIEW IF EXISTS temp.{lake.INPUT_VIEWS[table]}")
    for name in SCOPED if scoped else ():
        con.execute(f"DROP VIEW IF EXISTS temp.{name}")
    for name in MATERIALIZED if scoped else ():
        con.execute(f"DROP TABLE IF EXISTS temp.{KEPT_PREFIX}{name.removeprefix('lake_')}")
    if scoped:
        pruned.drop(con)


def _state(con) -> dict[str, str]:
    return dict(con.execute("SELECT name, value FROM metric_state").fetchall())


def _set_state(con, **values: str) -> None:
    for name, value in values.items():
        con.execute("DELETE FROM metric_state WHERE name = ?", [name])
        con.execute("INSERT INTO metric_state VALUES (?, ?)", [name, str(value)])


def _stored_tables(con) -> set[str]:
    return {r[0] for r in con.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' AND table_type = 'BASE TABLE'"
    ).fetchall()}


def hand_written(con) -> bool:
    return any(con.execute(f"SELECT EXISTS (SELECT 1 FROM {t} WHERE ingest_id IS NULL)").fetchone()[0]
               for t in ("job", "step", "sample"))


def watermark_now(con) -> int:
    return int(con.execute("SELECT COALESCE(max(ingest_id), 0) FROM ingest_log").fetchone()[0])


def _plan(con, full: bool = False) -> tuple[dict, dict, int, bool, tuple[Stored, ...]]:
    """(state, checksums, watermark, new rows pending, the tables a refresh rebuilds from all jobs)."""
    state = _state(con)
    sums = definitions_checksums(con)
    have = _stored_tables(con)
    stale = [i for i, s in enumerate(STORED)
             if full or s.table not in have or state.get(f"definitions.{s.table}") != sums[s.table]]
    watermark = int(state.get("ingest_watermark", 0))
    pending = watermark_now(con) > watermark or hand_written(con)
    # with nothing new to take in, only the stale tables (those whose own definitions or inputs'
    # checksums changed); else every table from the first stale one, which also takes in the new rows
    todo = () if not stale else STORED[stale[0]:] if pending or full else tuple(STORED[i] for i in stale)
    return state, sums, watermark, pending, todo


def rebuild_plan(con: duckdb.DuckDBPyConnection) -> tuple[str, ...]:
    """The stored tables the next refresh rebuilds from all jobs (none: incremental or current)."""
    return tuple(s.table for s in _plan(con)[4])


def refresh(con: duckdb.DuckDBPyConnection, say: Optional[Callable[[str], None]] = None,
            full: bool = False, progress: Optional[Callable[[str], None]] = None, lake_path: Optional[str] = None) -> Refresh:
    """Bring the stored results up to date; see the module docstring. ``full``: recompute every job
    (for rows written into the tables by hand, which carry no ingest_id). ``lake_path``: [lake] path, where
    pruned jobs' samples are read from instead of the lake recorded at prune time."""
    state, sums, watermark, pending, todo = _plan(con, full)
    if not todo:
        return _in_transaction(con, lambda: _incremental(con, watermark, lake_path=lake_path)) if pending else Refresh("current")
    start = STORED.index(todo[0])
    reason = ("asked for" if full else "no stored results yet" if not any(k.startswith("definitions.") for k in state)
              else "the settings, the charging table or the metric definitions changed")

    def work() -> Refresh:
        if start and pending:           # the tables before `start` stay: bring them up to date first
            _incremental(con, watermark, upto=start, lake_path=lake_path)
        return _rebuild(con, todo, sums, reason, say, announce=any(k.startswith("definitions.") for k in state),
                        progress=progress, lake_path=lake_path)
    return _in_transaction(con, work)


def _in_transaction(con, work: Callable[[], Refresh]) -> Refresh:
    con.execute("BEGIN TRANSACTION")
    try:
        result = work()
        con.execute("COMMIT")
    except BaseException:
        db.rollback(con)
        raise
    return result


def _rebuild(con, todo: tuple[Stored, ...], sums: dict[str, str], reason: str, say, announce: bool,
             progress: Optional[Callable[[str], None]] = None, lake_path: Optional[str] = None) -> Refresh:
    """The stored tables ``todo`` (in STORED's order) rebuilt from all jobs; ``say`` is told when it
    replaces results computed otherwise, ``progress`` each table as it starts and ends."""
    every = todo == STORED
    n = con.execute("SELECT count(*) FROM job").fetchone()[0]
    what = "metrics" if every else ", ".join(s.table for s in todo)
    if say and n and announce:
        say(f"{reason}: computing the stored {what} of all {n:,} jobs (once)")
    watermark = watermark_now(con)
    _stash_pruned(con)
    for s in reversed(todo):
        con.execute(f"DROP TABLE IF EXISTS {s.table}")
    _clear_scope(con)
    if any(s.scope == "metric_scope" for s in todo):
        con.execute(f"INSERT INTO metric_scope SELECT DISTINCT {KEY} FROM job")
        con.execute(f"INSERT INTO metric_flag_scope SELECT {KEY} FROM metric_scope")
    else:
        con.execute(f"INSERT INTO metric_flag_scope SELECT DISTINCT {KEY} FROM job")
    kept, skipped = (), ()
    if any(_portable(s) for s in todo):
        kept, skipped = _create_views(con, everything=True,
                                      stored=tuple(s for s in STORED if _portable(s) and s not in todo), lake_path=lake_path)

    # the DuckDB-only file that defines each remaining stored table's view (NN_<table>.sql)
    duckdb_files = {p.stem.split("_", 1)[-1]: p for p in metric_files()}
    started = time.monotonic()
    for i, s in enumerate(todo, 1):
        if progress:
            progress(f"[{i}/{len(todo)}] {s.table} ({time.monotonic() - started:.1f} s)")
        path = None if _portable(s) else duckdb_files[s.table]
        if s.prices:
            _pricing_views(con, s, everything=True)
        if not _portable(s):
            _scoped_views(con, everything=True)
        if path is not None:
            con.execute(path.read_text(encoding="utf-8"))
        if s.table == "job_flags":
            con.execute("DELETE FROM metric_gpu_partitions")
            con.execute("INSERT INTO metric_gpu_partitions SELECT * FROM calc_gpu_partitions")
        if s.scope == "metric_day_scope" and not con.execute("SELECT count(*) FROM metric_day_scope").fetchone()[0]:
            con.execute("INSERT INTO metric_day_scope SELECT DISTINCT day FROM job_day")
        # the jobs of the scope only: lake_samples held every sample (EVERY_SAMPLE), also those of
        # jobs without a record; lake_job_metrics has a row per job record already
        scoped = f" SEMI JOIN {s.scope} USING ({KEY})" if _portable(s) and s.view != REQUEST_METRICS else ""
        order = f" ORDER BY {s.order}" if s.order else ""
        con.execute(f"CREATE TABLE {s.table} AS SELECT v.* FROM {s.view} v{scoped}{order}")
        for column in s.index:     # a few jobs' rows found without a scan of all (kept by DELETE and INSERT)
            con.execute(f"CREATE INDEX {s.table}_{column} ON {s.table} ({column})")
    if progress:
        progress(f"[{len(todo)}/{len(todo)}] done ({time.monotonic() - started:.1f} s)")
    days = con.execute("SELECT count(*) FROM metric_day_scope").fetchone()[0]
    _drop_views(con)
    _clear_scope(con)
    _set_state(con, ingest_watermark=watermark, last_refresh=f"full {n}" + ("" if every else f" {what}"),
               **{f"definitions.{s.table}": sums[s.table] for s in STORED})
    con.execute("DELETE FROM metric_state WHERE name = 'definitions'")      # the single checksum of old
    return Refresh("full", n, n, reason, days, tuple(s.table for s in todo), kept, skipped)


def _incremental(con, watermark: int, upto: int = len(STORED), lake_path: Optional[str] = None) -> Refresh:
    """The jobs ingested since ``watermark`` recomputed in STORED[:upto] (the rest is rebuilt)."""
    _clear_scope(con)
    # only jobs with an accounting record have results; samples of a job not yet known wait for it
    con.execute(f"""
        INSERT INTO metric_scope
        SELECT {KEY} FROM (
            SELECT DISTINCT {KEY} FROM (
                SELECT {KEY} FROM job WHERE ingest_id > $w OR ingest_id IS NULL
                UNION ALL SELECT {KEY} FROM step WHERE ingest_id > $w OR ingest_id IS NULL
                UNION ALL SELECT {KEY} FROM sample WHERE ingest_id > $w OR ingest_id IS NULL)
        ) changed SEMI JOIN job USING ({KEY})""", {"w": watermark})
    n = con.execute("SELECT count(*) FROM metric_scope").fetchone()[0]
    devices, cpu_hosts, metrics, job_day, flags, advice, savings, *summaries = STORED
    active = STORED[:upto]
    _create_views(con, lake_path=lake_path)
    for s in (devices, cpu_hosts, metrics):
        if s in active:
            _replace(con, s)
    _drop_views(con)
    n_flags = n_days = 0
    if flags in active:
        # partitions that gained or lost GPUs change the flags of every job in them
        con.execute("""
            CREATE OR REPLACE TEMP TABLE _gpu_partitions_changed AS
            (SELECT * FROM calc_gpu_partitions EXCEPT SELECT * FROM metric_gpu_partitions)
            UNION ALL
            (SELECT * FROM metric_gpu_partitions EXCEPT SELECT * FROM calc_gpu_partitions)""")
        con.execute(f"""
            INSERT INTO metric_flag_scope
            SELECT {KEY} FROM metric_scope
            UNION
            SELECT {KEY} FROM job WHERE (cluster, "partition") IN (SELECT (cluster, "partition") FROM _gpu_partitions_changed)""")
        con.execute("DROP TABLE _gpu_partitions_changed")
        con.execute("DELETE FROM metric_gpu_partitions")
        con.execute("INSERT INTO metric_gpu_partitions SELECT * FROM calc_gpu_partitions")
        n_flags = con.execute("SELECT count(*) FROM metric_flag_scope").fetchone()[0]
        # the days whose summaries change: those the jobs ran in before (flag scope: a job's flags
        # count on its days) and after the refresh
        days_of = f"SELECT DISTINCT day FROM job_day SEMI JOIN {{}} USING ({KEY})"
        con.execute(f"INSERT INTO metric_day_scope {days_of.format('metric_flag_scope')}")
    if job_day in active:
        _scoped_views(con, everything=False)     # every stored table exists: once for all the files
        _replace(con, job_day)
    if flags in active:
        con.execute(f"INSERT INTO metric_day_scope {days_of.format('metric_scope')} EXCEPT SELECT day FROM metric_day_scope")
        n_days = con.execute("SELECT count(*) FROM metric_day_scope").fetchone()[0]
    for s in (flags, advice, savings, *summaries):
        if s in active:
            if s.prices:
                _pricing_views(con, s)
            _replace(con, s)
            if s.prices:
                _drop_views(con, scoped=False)
    _drop_views(con)
    _clear_scope(con)
    _set_state(con, ingest_watermark=watermark_now(con), last_refresh=f"incremental {n} {n_flags} {n_days}")
    return Refresh("incremental", n, n_flags, days=n_days)


def _replace(con, s: Stored) -> None:
    """The stored rows of the jobs (or days) in the table's scope, replaced by freshly computed ones,
    appended in the table's order: a subject's rows of a refresh lie together, as a full build's do."""
    match = " AND ".join(f"t.{k} = s.{k}" for k in s.key.split(", "))   # a join, not a row IN: 2-3x faster
    con.execute(f"DELETE FROM {s.table} t USING {s.scope} s WHERE {match}")
    order = f" ORDER BY {s.order}" if s.order else ""
    con.execute(f"INSERT INTO {s.table} SELECT * FROM {s.view}{order}")


def _clear_scope(con) -> None:
    for scope in SCOPES:
        con.execute(f"DELETE FROM {scope}")


def last_refresh(con) -> Optional[str]:
    """What the last refresh did, e.g. "incremental 5 5 1" (jobs, jobs whose flags, days recomputed)."""
    row = con.execute("SELECT value FROM metric_state WHERE name = 'last_refresh'").fetchone()
    return row[0] if row else None
