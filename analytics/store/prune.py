"""`jobsight prune`: old samples leave the database for the Parquet lake; every per-job result stays.

    prune(db_path, before, lake_dir)

1. The writer's open (Database.open, with the settings the database holds): the stored results are
   brought up to date first, so every job's figures are computed from all its samples.
2. The check: for every (cluster, month, job) with samples before the cutoff, the lake's samples
   partition holds at least as many of that job's rows before the cutoff. Otherwise nothing is
   removed and the months the lake lacks are named (UserError: exit 2).
3. One transaction removes the samples before the cutoff and records what it removed (pruned_month,
   pruned_job: sql/schema/0012_sample_prune.sql). Samples of jobs still running or without
   accounting are kept: their results are not final, and would have nothing to be computed from.
   A refresh computes a pruned job's per-device and per-host rows again from the lake's samples
   and the database's (store/pruned.py), never from the samples left alone, and `lake export` of
   a pruned month reads the pruned rows back from the lake.
4. Compaction: a checkpoint frees the blocks of the removed rows (the row groups it can vacuum),
   which DuckDB reuses for the next writes (lowest first) but gives back to the file system only at
   the file's end. When a compaction would give back at least COMPACT_FREE of the file (its free
   blocks and the blocks of deleted rows left in place: reclaimable()), the database is copied into a new file (COPY FROM
   DATABASE: every table is decoded and compressed again, so this costs the whole file, not what
   was removed), fsynced, given the file's mode and group and swapped in with os.replace, all while
   the writer's connection (DuckDB's lock) is held: another writer waits or fails rather than write
   into the file being replaced. A crash leaves the old file whole (and a `.<name>.compact-*` file
   that the next prune removes). Below COMPACT_FREE (a daily prune of a day's samples) the file
   keeps its size and the next ingests fill the free blocks.
5. A new snapshot is published; after a compaction the spare (the previous, larger generation) is
   removed.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import duckdb

from jobsight.analytics.config import Config
from jobsight.analytics.errors import UserError
from jobsight.analytics.store import lake, pruned, snapshot
from jobsight.analytics.store.database import Database

KEY = "cluster, job_id_raw"
COMPACT_TAG = ".compact-"
COMPACT_FREE = 0.10     # compact when it would give back this share of the file
REMOVED = "_prune_removed"       # TEMP: (cluster, month, job_id_raw, n) of the samples being removed
# Samples that stay whatever their age: a running job's results are not final, and a job without
# accounting has none yet (both would otherwise be computed from what is left).
PRUNABLE = (f"SELECT s.cluster, s.job_id_raw, s.time FROM sample s SEMI JOIN "
            f"(SELECT {KEY} FROM job WHERE end_time IS NOT NULL) j USING ({KEY}) WHERE s.time < $before")


@dataclass
class Pruned:
    before: dt.datetime
    rows: int = 0                       # sample rows removed
    jobs: int = 0                       # jobs that lost samples
    months: list[tuple[str, str, int]] = field(default_factory=list)   # (cluster, month, rows)
    kept_rows: int = 0                  # samples before the cutoff kept (running jobs, no accounting)
    kept_jobs: int = 0
    size_before: int = 0
    size_after: int = 0
    free_after: int = 0                 # about the bytes a compaction gives back (reclaimable())
    compacted: bool = False
    snapshot: Optional[Path] = None


def parse_cutoff(text: str, option: str = "--samples-before") -> dt.datetime:
    """A date (midnight) or date and time, UTC, as the samples' naive UTC times."""
    try:
        when = dt.datetime.fromisoformat(text.strip())
    except (ValueError, AttributeError):
        raise UserError(f"{option} {text!r}: give a date (2026-10-01) or a date and time (2026-10-01T12:00), UTC") from None
    if when.tzinfo is not None:
        when = when.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return when


def retention_cutoff(days: int, now: Optional[dt.datetime] = None) -> dt.datetime:
    """[retention] samples_days: midnight UTC ``days`` days before today (the same cutoff all day)."""
    now = now or dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
    return dt.datetime.combine(now.date(), dt.time()) - dt.timedelta(days=days)


def lake_root(lake_dir: str | Path) -> str:
    """The lake's root as recorded and compared: absolute, without a trailing slash."""
    text = str(lake_dir)
    return text.rstrip("/") if "://" in text else str(Path(text).resolve())


def _to_remove(con, before: dt.datetime) -> None:
    """The TEMP table REMOVED: the prunable samples per cluster, month and job, in one pass over
    them; the lake check and the removal both read it (the writer's lock keeps it true)."""
    con.execute(f"CREATE OR REPLACE TEMP TABLE {REMOVED} AS SELECT cluster, {lake.SAMPLE_MONTH} AS month, "
                f"job_id_raw, count(*) AS n FROM ({PRUNABLE}) GROUP BY ALL", {"before": before})


def check_lake(con, before: dt.datetime, root: str) -> dict[tuple[str, str], str]:
    """{(cluster, month): why} for the months whose samples before the cutoff the lake does not
    hold, compared job by job: empty when it holds them all. Leaves the TEMP table REMOVED."""
    _to_remove(con, before)
    want = con.execute(f"SELECT cluster, month, job_id_raw, n FROM {REMOVED}").fetchall()
    if not want:
        return []
    other = con.execute("SELECT cluster, month, lake FROM pruned_month WHERE lake <> ?", [root]).fetchall()
    moved = {(c, m): where for c, m, where in other}
    have: dict[tuple[str, str, str], int] = {}
    # the files of the partitions to prune only: a damaged partition elsewhere does not stop a prune
    paths = [f for c, m in sorted({(c, m) for c, m, _j, _n in want}) for f in pruned.files(root, c, m)]
    if paths:
        try:
            have = {(c, m, j): n for c, m, j, n in con.execute(
                f"SELECT cluster, month, job_id_raw, count(*) FROM {pruned.read_sql(paths)} "
                f"WHERE time < ? GROUP BY ALL", [before]).fetchall()}
        except duckdb.Error as exc:
            raise UserError(f"{root}: cannot read the lake's samples: {exc}") from None
    short: dict[tuple[str, str], list[int]] = {}
    for c, m, j, n in want:
        got = have.get((c, m, j), 0)
        if got < n:
            s = short.setdefault((c, m), [0, 0, 0])
            s[0] += 1
            s[1] += n
            s[2] += got
    out = {(c, m): f"{jobs} job(s) with {n:,} sample rows before the cutoff, the lake holds {got:,} of them"
           for (c, m), (jobs, n, got) in short.items()}
    wanted = {(c, m) for c, m, _j, _n in want}
    out |= {k: f"pruned earlier to another lake, {where}: prune to that one" for k, where in moved.items() if k in wanted}
    return dict(sorted(out.items()))


def _remove(con, before: dt.datetime, root: str, result: Pruned) -> None:
    """Remove the prunable samples (the TEMP table REMOVED, check_lake's) and record them, in one
    transaction."""
    params = {"before": before, "lake": root}
    con.execute("BEGIN TRANSACTION")
    try:
        result.months = [tuple(r) for r in con.execute(
            f"SELECT cluster, month, sum(n) FROM {REMOVED} GROUP BY ALL ORDER BY ALL").fetchall()]
        con.execute(f"""
            INSERT INTO pruned_job SELECT cluster, job_id_raw, $before, sum(n) FROM {REMOVED} GROUP BY ALL
            ON CONFLICT (cluster, job_id_raw) DO UPDATE SET before = greatest(before, excluded.before),
                rows_pruned = rows_pruned + excluded.rows_pruned""", {"before": before})
        con.execute(f"""
            INSERT INTO pruned_month
            SELECT cluster, month, $before, sum(n), $lake, now()::TIMESTAMP FROM {REMOVED} GROUP BY ALL
            ON CONFLICT (cluster, month) DO UPDATE SET before = greatest(before, excluded.before),
                rows_pruned = rows_pruned + excluded.rows_pruned, lake = excluded.lake, pruned_at = excluded.pruned_at""",
                    params)
        result.jobs = con.execute(f"SELECT count(*) FROM (SELECT DISTINCT {KEY} FROM {REMOVED})").fetchone()[0]
        result.rows = con.execute(f"DELETE FROM sample s USING (SELECT DISTINCT {KEY} FROM {REMOVED}) p "
                                  "WHERE s.cluster = p.cluster AND s.job_id_raw = p.job_id_raw AND s.time < $before",
                                  {"before": before}).fetchone()[0]
        con.execute(f"DROP TABLE temp.{REMOVED}")
        result.kept_rows, result.kept_jobs = con.execute(
            "SELECT count(*), count(DISTINCT (cluster, job_id_raw)) FROM sample WHERE time < ?", [before]).fetchone()
        con.execute("COMMIT")
    except BaseException:
        from jobsight.analytics.store.db import rollback
        rollback(con)
        raise


def from_lake(con, rebuilt: tuple[str, ...]) -> list[tuple[str, str]]:
    """(cluster, job_id_raw) of the pruned jobs whose per-device and per-host rows a rebuild of
    ``rebuilt`` computes again from the lake's samples (store/pruned.py): none when the rebuild
    leaves those tables alone."""
    from jobsight.analytics.store.results import MATERIALIZED, STORED
    frozen = {s.table for s in STORED if s.view in MATERIALIZED}
    if not frozen & set(rebuilt):
        return []
    return [tuple(r) for r in con.execute(f"SELECT {KEY} FROM pruned_job ORDER BY ALL").fetchall()]


def reclaimable(con: duckdb.DuckDBPyConnection) -> tuple[int, int]:
    """(about the bytes a compaction would give back, the file's bytes): its free blocks, and in each
    table the share of its blocks that holds deleted rows the checkpoint did not vacuum (DuckDB's
    estimated_size counts them, count(*) does not)."""
    total, free, block = con.execute("SELECT total_blocks, free_blocks, block_size FROM pragma_database_size() "
                                     "WHERE database_name = current_database()").fetchone()
    dead = 0.0
    for name, rows in con.execute("SELECT table_name, estimated_size FROM duckdb_tables() WHERE "
                                  "database_name = current_database() AND estimated_size > 0").fetchall():
        quoted = name.replace('"', '""')
        live = con.execute(f'SELECT count(*) FROM "{quoted}"').fetchone()[0]
        if live < rows:
            blocks = con.execute("SELECT count(DISTINCT block_id) FROM pragma_storage_info(?) WHERE block_id >= 0",
                                 [name]).fetchone()[0]
            dead += blocks * (1 - live / rows)
    return int((free + dead) * block), total * block


def compact(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    """Write the database of ``con`` (the writer's connection to ``path``) into a new file and swap
    it in: the space of deleted rows is given back. ``con`` keeps DuckDB's lock on the old file
    until the caller closes it, after the swap; the old file's blocks are freed then."""
    con.execute("CHECKPOINT")           # everything in the file itself, no .wal to lose
    for stale in path.parent.glob(f".{path.name}{COMPACT_TAG}*"):
        stale.unlink(missing_ok=True)   # left by a crash of an earlier prune
    tmp = path.with_name(f".{path.name}{COMPACT_TAG}{os.getpid()}")
    catalog = con.execute("SELECT current_database()").fetchone()[0].replace('"', '""')
    try:
        con.execute(f"ATTACH '{str(tmp).replace(chr(39), chr(39) * 2)}' AS jobsight_compact")
        try:
            con.execute(f'COPY FROM DATABASE "{catalog}" TO jobsight_compact')
        finally:
            con.execute("DETACH jobsight_compact")
        snapshot.fsync_path(tmp)
        snapshot.same_access(path, tmp)
        os.replace(tmp, path)
        snapshot.fsync_path(path.parent, directory=True)
    except duckdb.Error as exc:
        raise UserError(f"{path}: cannot write its compacted copy {tmp} (the database is unchanged "
                        f"but for the samples removed): {exc}") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot swap in its compacted copy {tmp}: {exc}") from None
    finally:
        for p in (tmp, tmp.with_name(tmp.name + ".wal")):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()


def prune(db_path: str | Path, before: dt.datetime, lake_dir: str | Path, cfg: Optional[Config] = None,
          dry_run: bool = False) -> Pruned:
    """Remove the samples before ``before`` that the lake at ``lake_dir`` holds; see the module
    docstring. UserError, with nothing removed, when the lake lacks any of them."""
    path = Path(db_path)
    root = lake_root(lake_dir)
    result = Pruned(before=before, size_before=path.stat().st_size if path.is_file() else 0)
    with Database.open(path, cfg or Config(), write_settings=False, must_exist=True, say=None) as db:
        con = db.con
        missing = check_lake(con, before, root)
        if missing:
            months = sorted(m for _c, m in missing)
            raise UserError(f"{root} does not hold the samples to prune; nothing was removed:\n  "
                            + "\n  ".join(f"{c} {m}: {why}" for (c, m), why in missing.items())
                            + f"\nexport those months first: jobsight lake export --db {path} --out {root} "
                              f"--since {months[0]} --until {months[-1]}")
        if dry_run:
            result.months = [tuple(r) for r in con.execute(
                f"SELECT cluster, month, sum(n) FROM {REMOVED} GROUP BY ALL ORDER BY ALL").fetchall()]
            result.rows = sum(n for _c, _m, n in result.months)
            return result
        _remove(con, before, root, result)
        if result.rows:
            con.execute("CHECKPOINT")       # the removed rows' blocks freed (DuckDB vacuums deletes here)
            result.free_after, size = reclaimable(con)
            if result.free_after >= COMPACT_FREE * size:
                compact(con, path)
                result.compacted = True
    result.size_after = path.stat().st_size
    if result.rows or snapshot.snapshot_path(path).is_file():
        result.snapshot = snapshot.publish(path)
        if result.compacted:            # the larger generation's disk freed now
            snapshot.drop_spare(path)
    return result
