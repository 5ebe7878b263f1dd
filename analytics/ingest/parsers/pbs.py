"""PBS Pro / OpenPBS / Torque accounting logs (server_priv/accounting/YYYYMMDD) -> job rows (source pbs).

Line: `MM/DD/YYYY HH:MM:SS;<type>;<jobid>;key=value key=value ...`. The record time is the server's
local time (``opts.timezone``, default this machine's zone); ctime/qtime/etime/start/end are UTC
epochs. Every non-blank line is one input row, accounted as follows:
  E (job ended)      -> a final row: COMPLETED (Exit_status 0), FAILED (1..255 or negative JOB_EXEC
                        code), TIMEOUT / CANCELLED (killed by a signal: Exit_status > 256, or the
                        10000 + signal variant; TIMEOUT when walltime used >= the walltime limit)
  S (started)        -> RUNNING row;  Q (queued) -> PENDING row
  D (deleted)        -> CANCELLED row (end = record time) carrying what earlier records of the
                        same job in the file said; the E record that follows a run replaces it,
                        CANCELLED too unless it ended COMPLETED (a qdel'd job ends with its
                        signal: Exit_status 143, 271); who deleted it (requestor=user@host) is kept
                        in null_reasons["cancelled_by_uid"], as sacct --json's kill_request_user is
  A, R and the rest  -> dropped (counted, one note per type): A/R say nothing the E record does not
  '#' lines          -> dropped (comments);  unreadable lines -> Reject(line, reason)
Mapping: queue -> partition; account (or project, unless '_pbs_project_default') -> account;
Resource_List.walltime -> timelimit_s; resources_used.walltime -> elapsed_s (else end - start);
resources_used.cput -> cpu_time_s; resources_used.mem -> mem_peak_bytes; Resource_List.mem (else
pmem x ncpus) -> mem_req_bytes. Sizes 'kb/mb/gb/tb' are powers of 1024, a bare number is kB; a
value not in that form (e.g. '12.27M') is NULL with the raw text in null_reasons (XDMoD does the same).
ncpus: resources_used.ncpus, else exec_host slots counted (host/0+host/1, host/0-3, host/0*13),
else total_execution_slots, else the larger of Resource_List.ncpus and nodes x ppn.
GPUs: Resource_List.ngpus, else Torque nodes=N:ppn=M:gpus=G (N x G per '+' part; XDMoD's rule,
also in Resource_List.nodect), else the ngpus of exec_vnode. Resource_List.gpu is not read (XDMoD
ignores it too).
Job ids: `seq.server` -> job_id_raw 'seq'; arrays `123[4].server` -> array_job_id 123, task 4.
Cluster: opts.cluster, else the server's first name label ('6.edge.ccr.buffalo.edu' -> 'edge'),
else "default". A `YYYYMMDD:` prefix (grep over several accounting files) is removed.
How: the file is read in blocks of lines, two converted at once, column-wise with polars
(pbs_frame): a record's key=value words are split on blanks unless it holds quotes, option flags
or other odd words, which split_pairs reads. Durations (HH:MM:SS), sizes (an integer and a unit)
and exec_host (host/N, host/N-M, host/N*K) in their regular forms are computed with polars
expressions; the scalar rules below (sizes, exec_host, nodes=, durations) read the other values,
once per distinct value. The D records and the limits are settled over the file.
"""
from __future__ import annotations

import datetime as dt
import json
import pathlib
import re
import string
import zoneinfo
from collections import Counter
from functools import partial
from typing import Optional

import polars as pl

from jobsight.analytics.ingest import limits
from jobsight.analytics.ingest.parsers import pbs_frame
from jobsight.analytics.ingest.parsers.line_blocks import close_records, in_file_order, iter_blocks, set_aside
from jobsight.analytics.ingest.parsers.pbs_frame import exit_state
from jobsight.analytics.ingest.records import ParseOptions, ParseResult, Reject
from jobsight.analytics.ingest.timezones import local_zone_name
from jobsight.analytics.ingest.units import parse_duration, to_bytes

FORMAT = "pbs"
SOURCE = "pbs"
PIPELINE = 2   # blocks converted at once (threads)

_LINE = re.compile(r"^(?:\d{8}:)?(\d{2})/(\d{2})/(\d{4}) (\d{2}):(\d{2}):(\d{2});([A-Za-z]);([^;]*);?(.*)$")
_PAIR = re.compile(r'([A-Za-z_][\w.\-]*)=("[^"]*"|\S*)')
_WORD = re.compile(r'(?:[^\s"]+|"[^"]*")+|"[^"]*$')
_FLAG = re.compile(r"^-[A-Za-z]$")
_KEY = re.compile(r"[A-Za-z_][\w.\-]*")
_MEM = re.compile(r"^(\d+(?:\.\d+)?)(b|w|kb|mb|gb|tb|pb)?$", re.IGNORECASE)
_MEM_POW = {"b": 0, "kb": 1, "mb": 2, "gb": 3, "tb": 4, "pb": 5}
_SKIP = {"A": "A (aborted by the server) records", "R": "R (rerun) records", "B": "B (reservation) records",
         "F": "F (reservation end) records", "K": "K (reservation removed) records", "k": "k records",
         "L": "L (licence) records", "M": "M (moved) records", "P": "P (provisioning) records",
         "T": "T (restarted from checkpoint) records", "U": "U (reservation request) records",
         "Y": "Y (reservation confirmed) records", "C": "C (checkpointed) records", "a": "a (altered) records"}

_E_CARRIES = "the job's E record carries its outcome"
_WHY_SKIPPED = {"L": "they are the licence server's counts of licences, no job's record"}
_REQUESTOR = r"(?:^|[\s;])requestor=(\S+)"

SCHEMA = {
    "cluster": pl.String, "job_id": pl.String, "job_id_raw": pl.String, "array_job_id": pl.String,
    "array_task_id": pl.String, "job_name": pl.String, "user": pl.String, "group": pl.String,
    "account": pl.String, "partition": pl.String, "state": pl.String, "exit_code": pl.String,
    "submit_time": pl.Datetime("us"), "eligible_time": pl.Datetime("us"), "start_time": pl.Datetime("us"),
    "end_time": pl.Datetime("us"), "elapsed_s": pl.Int64, "timelimit_s": pl.Int64, "ncpus": pl.Int64,
    "nnodes": pl.Int64, "ngpus": pl.Int64, "mem_req_bytes": pl.Int64, "mem_peak_bytes": pl.Int64,
    "cpu_time_s": pl.Float64, "node_list": pl.String, "restarts": pl.Int32, "null_reasons": pl.String,
    "source": pl.String,
}


def sniff(head: str, path: pathlib.Path) -> bool:
    lines = [ln for ln in head.splitlines() if ln.strip() and not ln.startswith("#")][:20]
    return bool(lines) and sum(1 for ln in lines if _LINE.match(ln)) >= max(1, len(lines) // 2)


def split_pairs(text: str) -> dict[str, str]:
    """'user=u Resource_Request_2.0=-L tasks=1:lprocs=1 -L tasks=2 end=5' -> dict.

    A word that is not key=value continues the previous value, and so does a key=value word right
    after an option flag ('-L tasks=...'): Torque's Resource_Request_2.0 holds spaces."""
    if '"' not in text:
        return _split_unquoted(text)
    out: dict[str, str] = {}
    key = None
    for word in _WORD.findall(text):
        m = _PAIR.fullmatch(word)
        if m and not (key and _FLAG.match(out[key].split(" ")[-1] if out[key] else "")):
            key = m.group(1)
            val = m.group(2)
            out[key] = val[1:-1] if len(val) >= 2 and val[0] == val[-1] == '"' else val
        elif key is not None:
            out[key] = f"{out[key]} {word}" if out[key] else word
        else:
            raise ValueError(f"text before the first key=value: {word!r}")
    return out


# the words _FLAG matches ('-L'): a word of text.split() holds no newline for its '$' to pass
_FLAGS = frozenset(f"-{c}" for c in string.ascii_letters)
_KEY_FORM: dict[str, bool] = {}   # key text -> has _KEY's form (the few keys a log uses, read once)


def _key_form(k: str) -> bool:
    ok = _KEY_FORM.get(k)
    if ok is None:
        ok = _KEY.fullmatch(k) is not None
        if len(_KEY_FORM) < 4096:
            _KEY_FORM[k] = ok
    return ok


def _split_unquoted(text: str) -> dict[str, str]:
    """split_pairs for a text without quotes, where its words are the runs of non-blanks: each
    key's form tested once a log, whether the value's last word is a flag kept for the next word."""
    out: dict[str, str] = {}
    key, after_flag = None, False
    for word in text.split():
        k, eq, value = word.partition("=")
        if eq and not after_flag and _key_form(k):
            out[k] = value
            key, after_flag = k, value in _FLAGS
            continue
        if key is None:
            raise ValueError(f"text before the first key=value: {word!r}")
        out[key] = f"{out[key]} {word}" if out[key] else word
        after_flag = word in _FLAGS
    return out


def pbs_mem(text: str) -> Optional[int]:
    """'2031040kb' -> bytes (kb = 1024); a bare number is kB; 'w' = 8-byte words."""
    m = _MEM.match(text.strip())
    if not m:
        raise ValueError(f"not a PBS size: {text!r}")
    num, unit = m.groups()
    unit = (unit or "kb").lower()
    if unit == "w":
        return to_bytes(float(num) * 8, text)
    return to_bytes(float(num) * 1024 ** _MEM_POW[unit], text)


def exec_host_slots(text: str) -> tuple[int, list[str]]:
    """'h1/0+h1/1' -> (2, [h1]); 'h/0-3' -> 4; PBS Pro 'c1/0*13' -> 13 (a '*0' counts as 0)."""
    slots, hosts = 0, []
    for part in text.split("+"):
        host, _, cpus = part.partition("/")
        if host and host not in hosts:
            hosts.append(host)
        if not cpus:
            slots += 1
            continue
        if "*" in cpus:
            slots += int(cpus.split("*", 1)[1])
            continue
        for rng in cpus.split(","):
            a, _, b = rng.partition("-")
            slots += (int(b) - int(a) + 1) if b else 1
    return slots, hosts


def nodes_spec(text: str) -> tuple[Optional[int], Optional[int], int]:
    """Torque nodes '2:ppn=16:gpus=2+1:ppn=4' -> (nodes, cores, gpus); a host name counts as 1 node."""
    nodes = cores = 0
    gpus = 0
    known = False
    for part in text.split("+"):
        fields = part.split(":")
        n = int(fields[0]) if fields[0].isdigit() else 1
        ppn = None
        for f in fields[1:]:
            k, _, v = f.partition("=")
            if k == "ppn" and v.isdigit():
                ppn = int(v)
            elif k in ("gpus", "gpu") and v.isdigit():
                gpus += n * int(v)
        nodes += n
        if ppn is not None:
            cores += n * ppn
            known = True
    return nodes or None, (cores if known else None), gpus


def vnode_gpus(text: str) -> int:
    return sum(int(x) for x in re.findall(r"ngpus=(\d+)", text))


def exec_host_slots_text(text: str) -> tuple[int, int, str]:
    """exec_host_slots as (slots, hosts, 'h1,h2'): the columns the reader keeps."""
    slots, hosts = exec_host_slots(text)
    return slots, len(hosts), ",".join(hosts)


def _exit(status: int, elapsed: Optional[float], limit: Optional[float]) -> tuple[str, str]:
    """Exit_status -> (state, 'code:signal'), by pbs_frame.exit_state (the rule) for one record."""
    one = pl.DataFrame({"s": [status], "e": [elapsed], "l": [limit]}, schema={"s": pl.Int64, "e": pl.Float64, "l": pl.Float64})
    state, code = exit_state(pl.col("s"), pl.col("e"), pl.col("l"))
    return one.select(state.alias("state"), code.alias("code")).row(0)


_HEAD = re.compile(r"^(?:\d{8}:)?(\d{2})/(\d{2})/(\d{4}) (\d{2}):(\d{2}):(\d{2})$")


def _to_utc(head: str, zone) -> dt.datetime:
    """The record time (server local time) in UTC; a time a zone skips counts with the offset before it."""
    mo, d, y, hh, mi, ss = (int(g) for g in _HEAD.match(head).groups())
    t = dt.datetime(y, mo, d, hh, mi, ss)
    t = t.replace(tzinfo=zone)
    return t.astimezone(dt.timezone.utc).replace(tzinfo=None)


class _Rules:
    """The scalar rules pbs_frame applies once per distinct value."""
    parse_duration = staticmethod(parse_duration)
    exec_host_slots_text = staticmethod(exec_host_slots_text)
    nodes_spec = staticmethod(nodes_spec)
    vnode_gpus = staticmethod(vnode_gpus)
    pbs_mem = staticmethod(pbs_mem)


def _block(first: int, text: str, zone_name: str, cluster: Optional[str]):
    """One block -> (rows as pbs_frame.convert gives them, rejects, comments, skipped types, rows_in)."""
    recs, rejects, comments, skipped, rows_in = pbs_frame.read_block(first, text, split_pairs)
    local = pl.col("head").str.slice(-19).str.strptime(pl.Datetime("us"), "%m/%d/%Y %H:%M:%S", strict=False)
    if zone_name != "UTC":
        local = (local.dt.replace_time_zone(zone_name, ambiguous="earliest", non_existent="null")
                 .dt.convert_time_zone("UTC").dt.replace_time_zone(None))
    recs = recs.with_columns(rtime=local)
    odd = recs.filter(pl.col("rtime").is_null())
    if odd.height:   # an impossible date, or a time the zone skips: the one-by-one rule says which
        zone, fixed, refused = zoneinfo.ZoneInfo(zone_name), [], []
        for line, rtype, jobid, head, raw in odd.select("_line", "rtype", "jobid", "head", "text").iter_rows():
            try:
                fixed.append((line, _to_utc(head, zone)))
            except (ValueError, OverflowError) as exc:
                rejects.append(Reject(line, f"PBS {rtype} record {jobid}: {exc}", raw[:1000]))
                refused.append(line)
        fix = pl.DataFrame(fixed, schema={"_line": pl.Int64, "_rt": pl.Datetime("us")}, orient="row")
        recs = (recs.filter(~pl.col("_line").is_in(refused)).join(fix, on="_line", how="left", maintain_order="left")
                .with_columns(rtime=pl.coalesce("rtime", "_rt")).drop("_rt"))
    slim, deletions = _settle(pbs_frame.convert(recs, cluster, _Rules), rejects)
    return slim, deletions, rejects, comments, skipped, rows_in


def parse(path: pathlib.Path, opts: ParseOptions) -> ParseResult:
    path = pathlib.Path(path)
    result = ParseResult(format=FORMAT)
    zone_name = opts.timezone or local_zone_name()
    zoneinfo.ZoneInfo(zone_name)   # an unknown zone fails here, before any work
    parts, dparts, skipped, comments = [], [], Counter(), 0
    # blocks converted two at a time (polars releases the GIL), collected in file order
    long_lines: list = []   # lines over lengths.MAX_LINE_BYTES, skipped unread
    calls = (partial(_block, first, text, zone_name, opts.cluster)
             for first, text in set_aside(iter_blocks(path), long_lines))
    for rows, deletions, rejects, ncom, skip, rows_in in in_file_order(calls, PIPELINE, "jobsight-pbs"):
        parts.append(rows)
        dparts.append(deletions)
        result.rejects.extend(rejects)
        comments += ncom
        skipped.update(skip)
        result.rows_in += rows_in
    if parts:
        rows, deletions = pl.concat(parts, how="vertical"), pl.concat(dparts, how="vertical")
        if deletions.height:
            rows = _deletions(rows, deletions, result.rejects)
        if rows.height:
            result.jobs = rows.select([pl.col(c).cast(t, strict=False) for c, t in SCHEMA.items()])
    close_records(result, long_lines, comments, sum(skipped.values()))
    for rtype, n in sorted(skipped.items()):
        what = _SKIP.get(rtype, f"{rtype} records")
        result.notes.append(f"{n} {what} skipped: {_WHY_SKIPPED.get(rtype, _E_CARRIES)}")
    return result


def _reject(rejects: list, rows: pl.DataFrame, why) -> None:
    """Reject rows (with _line, rtype, jobid, text, _raw) for the reason why(row) gives."""
    for r in rows.select("_line", "rtype", "jobid", "text", "_raw", "_check").iter_rows(named=True):
        rejects.append(Reject(r["_line"], f"PBS {r['rtype']} record {r['jobid']}: {why(r)}", r["text"][:1000]))


def _exact(row: dict, raw: dict, f: dict) -> dict:
    """A row whose sizes are beyond what a column holds: the exact ints of the rule, for check()."""
    if (f.get("_mem_peak_f") or 0) > limits.MAX_BYTES:
        row["mem_peak_bytes"] = pbs_mem(raw["resources_used.mem"])
    if (f.get("_mem_req_f") or 0) > limits.MAX_BYTES:
        given = raw.get("Resource_List.mem")
        row["mem_req_bytes"] = pbs_mem(given) if given else pbs_mem(raw["Resource_List.pmem"]) * row["ncpus"]
    return row


def _over_limits(rows: pl.DataFrame, rejects: list, full: Optional[pl.DataFrame] = None,
                 only: Optional[pl.Expr] = None) -> pl.DataFrame:
    """Rows without the ones beyond analytics/ingest/limits.py, rejected with check()'s reason.
    ``full``: where the rows' _raw, text and jobid are, by _line, when rows lack them. ``only``: the
    rows to look at (the others are kept as they are)."""
    cols = {c: rows.schema[c] for c in SCHEMA if c in limits.RECORD}
    flag = (limits.out_of_range(cols) | (pl.col("_mem_req_f") > limits.MAX_BYTES).fill_null(False)
            | (pl.col("_mem_peak_f") > limits.MAX_BYTES).fill_null(False))
    if only is not None:
        flag = flag & only
    rows = rows.with_columns(_over=flag)
    over = rows.filter(pl.col("_over"))
    if not over.height:
        return rows.drop("_over")
    if full is not None:
        over = over.join(full.select("_line", "jobid", "text", "_raw"), on="_line", how="left", maintain_order="left")
    keep = []
    for r in over.iter_rows(named=True):
        row = _exact({c: r[c] for c in SCHEMA}, r["_raw"], r)
        try:
            limits.check(row)
            keep.append(r["_line"])
        except (ValueError, KeyError) as exc:
            rejects.append(Reject(r["_line"], f"PBS {r['rtype']} record {r['jobid']}: {exc}", r["text"][:1000]))
    return rows.filter(~pl.col("_over") | pl.col("_line").is_in(keep)).drop("_over")


_CARRIED = [c for c in SCHEMA if c not in ("state", "exit_code", "end_time")]


def _settle(rows: pl.DataFrame, rejects: list) -> tuple[pl.DataFrame, pl.DataFrame]:
    """A block's converted rows -> (its job rows, with _line and rtype; its D records with all
    columns): failed checks and values beyond the limits rejected. The D records stay among the
    rows as read, in their place; _deletions settles them (and their limits) over the file."""
    failed = rows.filter(pl.col("_check").is_not_null())
    if failed.height:
        _reject(rejects, failed, lambda r: pbs_frame.CHECKS[r["_check"]][1](r["_raw"]))
        rows = rows.filter(pl.col("_check").is_null())
    nr = pl.col("_nr_peak").is_not_null() | pl.col("_nr_req").is_not_null() | pl.col("_nr_exit").is_not_null()
    texts = {ln: json.dumps({k: v for k, v in (("mem_peak_bytes", p), ("mem_req_bytes", q), ("exit_code", e)) if v is not None})
             for ln, p, q, e in rows.filter(nr).select("_line", "_nr_peak", "_nr_req", "_nr_exit").iter_rows()}
    rows = rows.with_columns(null_reasons=pl.col("_line").replace_strict(texts, default=None, return_dtype=pl.String)
                             if texts else pl.lit(None, dtype=pl.String))
    is_d = pl.col("rtype") == "D"
    # the rows without their raw fields (a struct of every key) and text, which only a rejected one needs
    slim = rows.select("_line", "rtype", *SCHEMA, "_mem_req_f", "_mem_peak_f")
    slim = _over_limits(slim, rejects, rows, only=~is_d).select("_line", "rtype", *SCHEMA)
    return slim, rows.filter(is_d)


def _deletions(rows: pl.DataFrame, deletions: pl.DataFrame, rejects: list) -> pl.DataFrame:
    """A D record names only the requestor: it keeps what the job's last earlier record in the file
    said (state CANCELLED, its own time as the end). Without an earlier record it stands as read.
    Only the rows of deleted jobs are read again; every row stays in its place (a deleted job's
    records can change only their state and null_reasons; a D record, among the rows as read,
    takes what it carries) and only a D record refused by the limits is taken out."""
    key = ["cluster", "job_id"]
    deleted = deletions.select(key).unique()
    if not rows["_line"].is_sorted():   # the blocks come in file order; kept exact if not
        rows = rows.sort("_line")
    # the rows of deleted jobs: those whose job id a D record names (a test of one column), then by the key
    named = rows.select(pl.col("job_id").is_in(deleted["job_id"].implode()).fill_null(False)).to_series()
    mine = (rows.filter(named).with_columns(_pos=named.arg_true())
            .join(deleted, on=key, how="semi", maintain_order="left"))
    is_d = pl.col("rtype") == "D"
    earlier, read = mine.filter(~is_d), mine.filter(is_d)
    done = _deleted_jobs(earlier.drop("_pos"), deletions, rejects)
    kept, stand = done.filter(~is_d), done.filter(is_d)
    if not kept["_line"].equals(earlier["_line"]):   # a non-D record is never dropped nor moved
        raise RuntimeError("PBS deletions: the deleted jobs' records changed lines")
    if not read["_line"].equals(deletions["_line"].sort()):   # every D record is among the rows
        raise RuntimeError("PBS deletions: a D record is not among the rows")
    refused = read.filter(~pl.col("_line").is_in(stand["_line"].implode()))
    if refused.height:
        read = read.filter(pl.col("_line").is_in(stand["_line"].implode()))
    rows = rows.with_columns(rows[c].clone().scatter(earlier["_pos"], kept[c]) for c in ("state", "null_reasons"))
    # a D record's columns that it carries from an earlier record (or its state and null_reasons)
    at = read["_pos"]
    new = [c for c in SCHEMA if not rows[c].gather(at).equals(stand[c])]
    rows = rows.with_columns(rows[c].clone().scatter(at, stand[c]) for c in new)
    return rows.filter(~pl.col("_line").is_in(refused["_line"].implode())) if refused.height else rows


def _deleted_jobs(rows: pl.DataFrame, deletions: pl.DataFrame, rejects: list) -> pl.DataFrame:
    """_deletions for the rows of jobs that have a D record in the file."""
    key = ["cluster", "job_id"]
    rows = pl.concat([rows, deletions.select(rows.columns)]).sort("_line").with_row_index("_i").with_columns(
        _base=pl.when(pl.col("rtype") != "D").then(pl.col("_i")).forward_fill().over(key).cast(pl.Int64))
    is_d = pl.col("rtype") == "D"
    carried = rows.filter(is_d & pl.col("_base").is_not_null())
    if carried.height:
        base = rows.select(pl.col(_CARRIED)).gather(carried["_base"])
        carried = pl.concat([carried.drop(_CARRIED), base], how="horizontal").with_columns(
            state=pl.lit("CANCELLED"), exit_code=pl.lit(None, dtype=pl.String))
        # the earlier record passed the limits: only the D record's own end time is new
        extra = deletions.select("_line", "jobid", "text", "_raw").with_columns(
            _mem_req_f=pl.lit(None, dtype=pl.Float64), _mem_peak_f=pl.lit(None, dtype=pl.Float64))
        carried = _over_limits(carried.join(extra, on="_line", how="left", maintain_order="left"), rejects)
        carried = carried.select(rows.columns)
    alone_lines = rows.filter(is_d & pl.col("_base").is_null())["_line"]
    alone = _standalone_deletions(deletions.filter(pl.col("_line").is_in(alone_lines.implode())), rejects)
    alone = alone.select("_line", "rtype", *SCHEMA).with_columns(_i=pl.lit(0, dtype=pl.UInt32), _base=pl.lit(None, dtype=pl.Int64))
    out = pl.concat([rows.filter(~is_d), carried, alone.select(rows.columns)]).sort("_line").drop("_i", "_base")
    return _cancelled_by(out, deletions)


def _cancelled_by(rows: pl.DataFrame, deletions: pl.DataFrame) -> pl.DataFrame:
    """A job deleted with qdel: from its first D record on, its rows are CANCELLED (an E record that
    ended COMPLETED stays so), and the D record's requestor (user@host: the owner or an operator)
    is who cancelled it, in null_reasons["cancelled_by_uid"] (PBS logs no uid)."""
    first = (deletions.sort("_line").group_by("cluster", "job_id", maintain_order=True)
             .agg(_dline=pl.col("_line").first(), _who=pl.col("text").str.extract(_REQUESTOR).first()))
    rows = rows.join(first, on=["cluster", "job_id"], how="left", maintain_order="left")
    hit = (pl.col("_line") >= pl.col("_dline")).fill_null(False) & (pl.col("state") != "COMPLETED").fill_null(True)
    rows = rows.with_columns(state=pl.when(hit).then(pl.lit("CANCELLED")).otherwise(pl.col("state")), _hit=hit)
    who = rows.filter(pl.col("_hit") & pl.col("_who").is_not_null())
    if who.height:
        texts = {}
        for line, nr, name in who.select("_line", "null_reasons", "_who").iter_rows():
            texts[line] = json.dumps({**(json.loads(nr) if nr else {}), "cancelled_by_uid": name})
        rows = rows.with_columns(null_reasons=pl.when(pl.col("_line").is_in(list(texts))).then(
            pl.col("_line").replace_strict(texts, default=None, return_dtype=pl.String)).otherwise(pl.col("null_reasons")))
    return rows.drop("_dline", "_who", "_hit")


def _standalone_deletions(rows: pl.DataFrame, rejects: list) -> pl.DataFrame:
    """D records with no earlier non-D record of their job, in file order: the first of a job
    stands as read, a later one carries it (each within the limits, as check() says)."""
    out, seen = [], {}
    for r in rows.sort("_line").iter_rows(named=True):
        k = (r["cluster"], r["job_id"])
        if k in seen:
            r = {**r, **{c: seen[k][c] for c in _CARRIED}, "state": "CANCELLED", "exit_code": None}
            row = {c: r[c] for c in SCHEMA}
        else:
            row = _exact({c: r[c] for c in SCHEMA}, r["_raw"], r)
        try:
            limits.check(row)
        except (ValueError, KeyError) as exc:
            rejects.append(Reject(r["_line"], f"PBS D record {r['jobid']}: {exc}", r["text"][:1000]))
            continue
        seen[k] = r
        out.append(r)
    return pl.DataFrame(out, schema=rows.schema, orient="row") if out else rows.head(0)
