"""The trust model (docs/ingest.md#trust-model): whose files ingest believes, and for which jobs.

`jobsight ingest` often runs as root over folders users write to, so a file's owner decides what it
may change:

- Who answers for a file is judged by its whole path (ingest_trust_path): the file and every
  folder from / down to it, as given and as resolved.
- Scheduler accounting (every format but SAMPLE_FORMATS) is read only from a trusted file: it and
  its whole path owned by root or by the user running the ingest, writable by no one else; any
  other file is not read (`skipped` in a folder walk, `unreadable` when named), so no user can
  rewrite a job's user, account or billing.
- Samples (sidecar CSV and its metadata, nvidia-smi logs) from a file another user answers for count
  only for that user's jobs: the owner's uid against the job's uid, else the owner's passwd name
  against the job's user. Rows of another user's job are rejected; rows of a job that no accounting
  names a user for yet are held in sample_pending with the owner, and moved into sample by the
  ingest whose accounting shows the job is the owner's. Table sample holds only counted rows, so
  every reader (metrics, dashboard, lake, `jobsight job`) gets the rule without knowing it.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

import polars as pl

from jobsight.analytics.ingest.merge import ArrowStream, quote_name, select_casts, table_columns
from jobsight.analytics.ingest.trust_path import PathJudge, Verdict, opened_where, trusted_uid, user_name

SAMPLE_FORMATS = ("sidecar", "nvidia-smi")
KEY = ("cluster", "job_id_raw")
SAMPLE_KEY = ("cluster", "job_id_raw", "host", "device", "time")


@dataclass(frozen=True)
class Owner:
    """The owner of a file that is not trusted: its uid, and its passwd name (None when it has none)."""
    uid: int
    user: Optional[str]

    def __str__(self) -> str:
        return f"{self.user} (uid {self.uid})" if self.user else f"uid {self.uid} (no passwd entry)"


@dataclass(frozen=True)
class Ownership:
    """The file a route loads, as it was when its owner was decided: the loader checks before its
    commit that the path is still that file (a file swapped after the check is not loaded)."""
    path: str
    dev: int
    ino: int
    uid: int
    owner: Optional[Owner]     # None: a trusted file

    @classmethod
    def of(cls, path, st: os.stat_result, verdict: Verdict) -> "Ownership":
        return cls(str(path), st.st_dev, st.st_ino, st.st_uid, owner_of(verdict))

    def changed(self) -> Optional[str]:
        """Why the path is no longer the file whose owner was checked, or None."""
        try:
            st = os.stat(self.path)
        except OSError as exc:
            return f"gone while it was read ({exc.strerror or exc}): not loaded"
        if (st.st_dev, st.st_ino, st.st_uid) != (self.dev, self.ino, self.uid):
            return "replaced, or given to another owner, while it was read: not loaded"
        return None


def trusted(uid: int) -> bool:
    """Root and the user running the ingest: their files are the site's own."""
    return trusted_uid(uid)


def owner_of(verdict: Verdict) -> Optional[Owner]:
    """The Owner who answers for a file with this verdict (ingest_trust_path), or None when it is trusted."""
    return None if verdict.controller is None else Owner(verdict.controller, user_name(verdict.controller))


def judge_opened(fd: int, path, st: os.stat_result, judge: Optional[PathJudge] = None,
                 given: Optional[str] = None) -> Verdict:
    """The whole-path verdict of the file open on fd (fstat st), found under `given` (the root named
    on the command line; the file itself when None)."""
    real = opened_where(fd, path)
    return (judge or PathJudge()).file(real, st, given if given is not None else os.path.abspath(path))


def trust_note(verdict: Verdict, fmt: Optional[str]) -> str:
    """Why a file was or was not trusted, for the ingest summary."""
    if verdict.refused:
        return f"not read: {verdict.why}"
    if verdict.controller is None:
        return f"trusted: {verdict.why}"
    who = Owner(verdict.controller, user_name(verdict.controller))
    what = "accounting is never read from it" if fmt not in SAMPLE_FORMATS else f"its samples count for {who.user or who}'s jobs only"
    return f"read as {who}'s: {verdict.why}; {what}"


def accounting_refusal(fmt: str, owner: Optional[Owner], verdict: Optional[Verdict] = None) -> Optional[str]:
    """Why a file of this format, answered for by `owner` (None: trusted), is not read, or None."""
    if fmt in SAMPLE_FORMATS or owner is None:
        return None
    me = os.geteuid()
    by = "root" if me == 0 else f"root or {user_name(me) or f'uid {me}'} (the user running the ingest)"
    where = verdict.why if verdict is not None and verdict.why else f"owned by {owner}"
    return (f"{fmt} accounting in a file {owner} answers for ({where}): accounting is read only from files that, "
            f"with every folder above them, are owned by {by} and writable by no one else: not read")


def meta_refusal(meta_st: os.stat_result, csv_st: os.stat_result) -> Optional[str]:
    """Why a sidecar's metadata file is not used: owned by an untrusted user other than its CSV's
    owner (it names the job and cluster of the CSV's rows, so it must not speak for another owner)."""
    if trusted(meta_st.st_uid) or meta_st.st_uid == csv_st.st_uid:
        return None
    return f"owned by {Owner(meta_st.st_uid, user_name(meta_st.st_uid))}, not by the owner of the CSV"


def _verdict_sql(j: str, uid: str, user: str) -> str:
    """'match', 'other' or 'pending' for the job row j (all NULL when the job has no record) against
    an owner: the job's uid when its accounting has one, else its user name; 'pending' while no
    record names the job's user."""
    return (f"CASE WHEN {j}.cluster IS NULL THEN 'pending' "
            f"WHEN {j}.uid IS NOT NULL THEN (CASE WHEN {j}.uid = {uid} THEN 'match' ELSE 'other' END) "
            f"WHEN {j}.\"user\" IS NOT NULL THEN (CASE WHEN {j}.\"user\" = {user} THEN 'match' ELSE 'other' END) "
            f"ELSE 'pending' END")


def _job_user(j: str) -> str:
    return f"coalesce({j}.\"user\", 'uid ' || {j}.uid::VARCHAR)"


OWNER_COLUMNS = ("owner_uid", "owner_user", "_owner")   # per row: the file owner's uid, passwd name, str(Owner)


def owner_columns(owner: Owner) -> dict[str, pl.Expr]:
    """OWNER_COLUMNS of one owner, for frame.with_columns."""
    return {"owner_uid": pl.lit(owner.uid, dtype=pl.Int64), "owner_user": pl.lit(owner.user, dtype=pl.String),
            "_owner": pl.lit(str(owner), dtype=pl.String)}


_OWNED = (*KEY, "owner_uid", "owner_user")


def _owner_verdicts(con, keys: pl.DataFrame) -> pl.DataFrame:
    """Per distinct (cluster, job_id_raw, owner_uid, owner_user) of keys: _verdict of the job against
    that owner, and the job's _job_user."""
    _keys = ArrowStream(keys.select(_OWNED))   # noqa: F841 - read by DuckDB's replacement scan
    rows = con.execute(f"SELECT k.cluster, k.job_id_raw, k.owner_uid, k.owner_user, "
                       f"{_verdict_sql('j', 'k.owner_uid', 'k.owner_user')}, {_job_user('j')} "
                       "FROM (SELECT DISTINCT cluster, job_id_raw, owner_uid, owner_user FROM _keys) k "
                       "LEFT JOIN job j ON j.cluster = k.cluster AND j.job_id_raw = k.job_id_raw").fetchall()
    return pl.DataFrame(rows, schema={"cluster": pl.String, "job_id_raw": pl.String, "owner_uid": pl.Int64,
                                      "owner_user": pl.String, "_verdict": pl.String, "_job_user": pl.String},
                        orient="row")


def verdicts(con, keys: pl.DataFrame, owner: Owner) -> pl.DataFrame:
    """Per distinct (cluster, job_id_raw) of keys: _verdict against owner, and the job's _job_user."""
    owned = keys.select(KEY).with_columns(**owner_columns(owner))
    return _owner_verdicts(con, owned).drop("owner_uid", "owner_user")


def owns_job(con, owner: Owner, cluster: str, job_id_raw: str) -> bool:
    """The job's accounting shows it is the owner's."""
    keys = pl.DataFrame([(cluster, job_id_raw)], schema=list(KEY), orient="row")
    return verdicts(con, keys, owner)["_verdict"][0] == "match"


@dataclass
class Split:
    """Users' samples sorted by the trust rule."""
    counted: pl.DataFrame        # rows of the owner's jobs: into sample
    held: pl.DataFrame           # rows of jobs with no accounting naming a user yet (with the owner): into sample_pending
    rejects: pl.DataFrame        # line_no, reason (and _file when the rows have it): rows of another user's jobs
    notes: list[str]


def split_samples(con, frame: pl.DataFrame, owner: Owner) -> Split:
    """Sort the samples of a file owned by `owner` (the parsers' _line column gives each row's line)."""
    split = split_owned(con, frame.with_columns(**owner_columns(owner)))
    split.counted = split.counted.drop(OWNER_COLUMNS)
    split.notes = [held_note(split.held)] if split.held.height else []
    return split


def split_owned(con, frame: pl.DataFrame) -> Split:
    """Sort samples whose rows carry their file's owner (OWNER_COLUMNS), of one file or of many (a
    `_file` column then goes with each reject). Notes: none (held_note says what a file's held rows are)."""
    v = _owner_verdicts(con, frame)
    extra = [c for c in ("_file",) if c in frame.columns]
    no_rejects = pl.DataFrame(schema={"line_no": pl.Int64, "reason": pl.String, **{c: frame.schema[c] for c in extra}})
    if v["_verdict"].eq("match").all():
        return Split(frame, frame.clear(), no_rejects, [])
    tagged = frame.join(v, on=list(_OWNED), how="left", maintain_order="left", nulls_equal=True)
    other = tagged.filter(pl.col("_verdict") == "other")
    line = pl.col("_line").cast(pl.Int64) if "_line" in frame.columns else pl.lit(None, dtype=pl.Int64)
    rejects = other.select(line.alias("line_no"), pl.format(
        "job {} of cluster {} is {}'s, and this file is owned by {}: a user's samples count only for their own jobs",
        "job_id_raw", "cluster", "_job_user", "_owner").alias("reason"), *extra)
    held = tagged.filter(pl.col("_verdict") == "pending").drop("_verdict", "_job_user")
    counted = tagged.filter(pl.col("_verdict") == "match").drop("_verdict", "_job_user")
    return Split(counted, held, rejects, [])


def held_note(held: pl.DataFrame) -> str:
    """What one file's held rows (split_owned's `held`) are."""
    jobs = held.select(KEY).unique().height
    owner = held["owner_user"][0] or held["owner_uid"][0]
    return (f"{held.height} samples of {jobs} job(s) that no accounting names a user for yet are held "
            f"(table sample_pending): they count once it shows the job is {owner}'s")


def hold(con, frame: pl.DataFrame, ingest_id: int) -> tuple[int, int]:
    """Store held samples (split_owned's `held`: with their owner) in sample_pending; returns
    (stored, duplicates): a row whose key the same owner has held before, or repeated in the frame,
    is a duplicate. An ingest_id column, where the frame has one, is each row's ingest."""
    if frame.height == 0:
        return 0, 0
    total = frame.height
    frame = frame.unique(subset=list(SAMPLE_KEY) + ["owner_uid"], keep="first", maintain_order=True)
    cols, sel = select_casts(con, frame, "sample_pending", ingest_id)
    same = " AND ".join(f"p.{quote_name(c)} = i.{quote_name(c)}" for c in SAMPLE_KEY + ("owner_uid",))
    _incoming = ArrowStream(frame)   # noqa: F841 - read by DuckDB's replacement scan
    stored = con.execute(f"INSERT INTO sample_pending ({', '.join(quote_name(c) for c in cols)}) SELECT * FROM "
                         f"(SELECT {sel} FROM _incoming) i WHERE NOT EXISTS (SELECT 1 FROM sample_pending p WHERE {same})"
                         ).fetchall()[0][0]
    return stored, total - stored


def promote(con, touched: pl.DataFrame, ingest_id: int) -> list[str]:
    """Move the held samples of the jobs an accounting file just touched into sample, where the job
    is their owner's (a key already in sample is dropped); those of another user's job stay held,
    never counted. Returns notes for the file's report."""
    pending_cols = {c for c, _ in table_columns(con, "sample_pending")}   # none: a database older than the rule
    if not pending_cols or not con.execute("SELECT EXISTS (SELECT 1 FROM sample_pending)").fetchall()[0][0]:
        return []
    _touched = ArrowStream(touched.select(KEY))   # noqa: F841 - read by DuckDB's replacement scan
    con.execute(f"""CREATE OR REPLACE TEMP TABLE _held AS
        SELECT p.*, {_verdict_sql('j', 'p.owner_uid', 'p.owner_user')} AS _verdict, {_job_user('j')} AS _job_user
        FROM sample_pending p JOIN job j ON j.cluster = p.cluster AND j.job_id_raw = p.job_id_raw
        WHERE (p.cluster, p.job_id_raw) IN (SELECT cluster, job_id_raw FROM _touched)""")
    notes = []
    cols = [c for c, _ in table_columns(con, "sample") if c in pending_cols]
    sel = ", ".join(f"{int(ingest_id)}::BIGINT" if c == "ingest_id" else f"h.{quote_name(c)}" for c in cols)
    same = " AND ".join(f"s.{quote_name(c)} = h.{quote_name(c)}" for c in SAMPLE_KEY)
    moved = con.execute(f"INSERT INTO sample ({', '.join(quote_name(c) for c in cols)}) SELECT {sel} FROM "
                        f"(SELECT DISTINCT ON ({', '.join(SAMPLE_KEY)}) * FROM _held WHERE _verdict = 'match') h "
                        f"WHERE NOT EXISTS (SELECT 1 FROM sample s WHERE {same})").fetchall()[0][0]
    if moved:
        notes.append(f"{moved} held samples now count: the accounting shows their jobs are their files' owners'")
    held_key = " AND ".join(f"h.{quote_name(c)} = p.{quote_name(c)}" for c in SAMPLE_KEY + ("owner_uid",))
    con.execute(f"DELETE FROM sample_pending p WHERE EXISTS (SELECT 1 FROM _held h WHERE h._verdict = 'match' AND {held_key})")
    for job, cluster, owner, job_user, n in con.execute(
            "SELECT job_id_raw, cluster, coalesce(owner_user, 'uid ' || owner_uid::VARCHAR), _job_user, count(*) "
            "FROM _held WHERE _verdict = 'other' GROUP BY ALL ORDER BY ALL").fetchall():
        notes.append(f"{n} held samples of job {job} of cluster {cluster}, from files owned by {owner}, do not count: "
                     f"the job is {job_user}'s")
    con.execute("DROP TABLE _held")
    return notes


def sidecar_runs(con, frame: Optional[pl.DataFrame], owner: Owner) -> tuple[Optional[pl.DataFrame], list[str]]:
    """The metadata rows of a user's sidecar file, with the owner; one of another user's job is not
    stored (a note says so)."""
    if frame is None or frame.height == 0:
        return frame, []
    tagged = frame.join(verdicts(con, frame, owner), on=list(KEY), how="left", maintain_order="left")
    notes = [f"metadata of job {job} of cluster {cluster} not stored: the job is {user}'s, and this file is owned by {owner}"
             for job, cluster, user in tagged.filter(pl.col("_verdict") == "other")
             .select("job_id_raw", "cluster", "_job_user").iter_rows()]
    kept = tagged.filter(pl.col("_verdict") != "other").drop("_verdict", "_job_user").with_columns(
        owner_uid=pl.lit(owner.uid, dtype=pl.Int64), owner_user=pl.lit(owner.user, dtype=pl.String))
    return kept, notes
