"""The samples `jobsight prune` moved to the Parquet lake, read back from it.

Two readers: a refresh that recomputes pruned jobs' per-device and per-host rows (results.py: the
lake's samples of those jobs join the database's as the input of the same portable SQL), and the
read API's time series of one pruned job (analytics/queries/samples.py).

Both read only the partitions that can hold the rows wanted: the files of each (cluster, month)
named by `pruned_month` (one job: only the months from its start to its cutoff), listed one by one,
never a glob over the whole lake. A partition that cannot be read is skipped; a job whose rows the
readable partitions do not give whole (fewer than `pruned_job.rows_pruned` before its cutoff) is
read from none of them, and the caller is told which jobs those are.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import duckdb

from jobsight.analytics.store import lake

KEY = "cluster, job_id_raw"
HIVE = "hive_partitioning = true, hive_types = {'cluster': VARCHAR, 'month': VARCHAR}"
# TEMP tables of one refresh: the pruned jobs in its scope read from the lake, and those kept as stored
FROM_LAKE = "_pruned_from_lake"
KEPT = "_pruned_kept"
SHORT = "_pruned_short"   # the keys of the jobs the lake did not give whole


def _quote(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def files(root: str, cluster: str, month: str) -> list[str]:
    """The Parquet files of one samples partition (a remote root: the partition's glob)."""
    where = lake._under(root, "samples", f"cluster={cluster}", f"month={month}")
    if "://" in root:
        return [lake._under(where, "*.parquet")]
    return [str(p) for p in sorted(Path(where).glob("*.parquet"))]


def read_sql(paths: list[str]) -> str:
    """read_parquet() of these files, with cluster and month from their directory names."""
    return f"read_parquet([{', '.join(_quote(p) for p in paths)}], {HIVE})"


def partitions(con, cluster: Optional[str] = None, first: Optional[str] = None,
               last: Optional[str] = None, root: Optional[str] = None) -> list[tuple[str, str, str]]:
    """(cluster, month, lake root) of the pruned partitions, of one cluster and months first..last
    if given; ``root`` instead of the recorded lake ([lake] path, when the lake has moved)."""
    rows = con.execute("SELECT cluster, month, lake FROM pruned_month WHERE (? IS NULL OR cluster = ?) "
                       "AND month >= ? AND month <= ? ORDER BY ALL",
                       [cluster, cluster, first or "0000-00", last or "9999-99"]).fetchall()
    return [(c, m, root or r) for c, m, r in rows]


def readable(con, parts: list[tuple[str, str, str]], jobs: str) -> tuple[list[str], dict, list[str]]:
    """(the files of the partitions that could be read, {(cluster, job_id_raw): rows} of the jobs
    of the table ``jobs`` (cluster, job_id_raw, before) in them before the job's cutoff, why
    each unreadable partition was skipped)."""
    good, counts, why = [], {}, []
    for cluster, month, root in parts:
        paths = files(root, cluster, month)
        if not paths:
            why.append(f"{cluster} {month}: no files in {lake._under(root, 'samples', f'cluster={cluster}', f'month={month}')}")
            continue
        try:
            got = con.execute(f"SELECT r.cluster, r.job_id_raw, count(*) FROM {read_sql(paths)} r "
                              f"JOIN {jobs} p USING ({KEY}) WHERE r.time < p.before GROUP BY ALL").fetchall()
        except duckdb.Error as exc:
            why.append(f"{cluster} {month}: {str(exc).splitlines()[0]}")
            continue
        good += paths
        for c, j, n in got:
            counts[(c, j)] = counts.get((c, j), 0) + n
    return good, counts, why


def scope_samples(con, scope: str, root: Optional[str] = None) -> tuple[Optional[str], list[tuple[str, str]], list[str]]:
    """For a refresh whose jobs are listed in the table ``scope``: (a SELECT of the lake's samples
    of its pruned jobs before their cutoffs, the columns of the `samples` view and time_ms, or None when it has none that the
    lake gives whole; the pruned jobs of the scope the lake does not give whole, which keep their
    stored rows; why partitions were skipped). ``root``: the lake to read ([lake] path) instead of the
    one each month was pruned to. Leaves the TEMP tables FROM_LAKE and KEPT."""
    con.execute(f"CREATE OR REPLACE TEMP TABLE {FROM_LAKE} AS SELECT p.cluster, p.job_id_raw, p.before, "
                f"p.rows_pruned FROM pruned_job p SEMI JOIN {scope} USING ({KEY})")
    con.execute(f"CREATE OR REPLACE TEMP TABLE {KEPT} AS SELECT * FROM {FROM_LAKE} LIMIT 0")
    months = con.execute(f"SELECT list(DISTINCT cluster), max(strftime(before, '%Y-%m')) FROM {FROM_LAKE}").fetchone()
    if not months[0]:
        return None, [], []
    parts = [p for p in partitions(con, last=months[1], root=root) if p[0] in set(months[0])]
    good, counts, why = readable(con, parts, FROM_LAKE)
    pruned = con.execute(f"SELECT cluster, job_id_raw, rows_pruned FROM {FROM_LAKE}").fetchall()
    short = sorted((c, j) for c, j, n in pruned if counts.get((c, j), 0) < n)
    if short:   # by the key's two columns (a joined text would let "a/b"+"c" match "a"+"b/c")
        con.execute(f"CREATE OR REPLACE TEMP TABLE {SHORT} (cluster VARCHAR, job_id_raw VARCHAR)")
        con.executemany(f"INSERT INTO {SHORT} VALUES (?, ?)", short)
        con.execute(f"INSERT INTO {KEPT} SELECT * FROM {FROM_LAKE} SEMI JOIN {SHORT} USING ({KEY})")
        con.execute(f"DELETE FROM {FROM_LAKE} f USING {SHORT} s "
                    "WHERE f.cluster = s.cluster AND f.job_id_raw = s.job_id_raw")
    if not good or len(short) == len(pruned):
        return None, short, why
    return (f"SELECT r.* EXCLUDE (month) FROM {read_sql(good)} r JOIN {FROM_LAKE} p USING ({KEY}) WHERE r.time < p.before",
            short, why)


def drop(con) -> None:
    for table in (FROM_LAKE, KEPT, SHORT):
        con.execute(f"DROP TABLE IF EXISTS temp.{table}")


def named(jobs: list[tuple[str, str]], shown: int = 5) -> str:
    """'N job(s): cluster a (n): 1, 2, 3, ...; cluster b (m): ...' — a count and a few ids per cluster."""
    by: dict[str, list[str]] = {}
    for c, j in jobs:
        by.setdefault(c, []).append(j)
    parts = [f"cluster {c} ({len(js):,}): {', '.join(js[:shown])}" + (", ..." if len(js) > shown else "")
             for c, js in sorted(by.items())]
    return f"{len(jobs):,} job(s): " + "; ".join(parts)


def kept_message(kept, skipped) -> str:
    """What a refresh says of the pruned jobs it could not recompute from the lake."""
    return (f"the Parquet lake did not give the pruned samples of {named(list(kept))}: they keep their "
            "per-GPU and per-host figures, and the figures computed from them, as computed under the "
            "earlier settings" + "".join(f"\n  skipped {w}" for w in skipped))
