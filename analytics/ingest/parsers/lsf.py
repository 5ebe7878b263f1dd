"""LSF lsb.acct JOB_FINISH records -> job rows (source lsf).

A record is blank-separated fields, strings in double quotes with "" for a quote inside; a quoted
field may hold a newline, so a record ends at the first newline outside quotes. One record = one
input row (its first line is the line number). The variable-length parts are walked by their
counts: numAskedHosts + hosts, numExHosts + hosts (`16*host` = 16 slots), submitEXT (n + n
key/value pairs), numHostRusage (n entries of hostname mem swap utime stime [+ more in later
versions: the entry width is found from where the host names are). Records of versions 5.1 to
10.x end at different fields; the fields read after maxRSwap are optional.
Mapping (unavailable values "", 0 and -1 become NULL, the raw value kept in null_reasons; another
negative time, size or count rejects the record, as values beyond analytics/ingest/limits.py do):
  jobId [+ '[idx]' when idx > 0]     -> job_id_raw / job_id; array_job_id, array_task_id
  userName, queue, projectName, jobName -> user, partition, account, job_name
  submitTime, startTime, eventTime   -> submit_time, start_time, end_time (UTC epochs)
  runTime (else end - start)         -> elapsed_s;  runLimit -> timelimit_s
  execHosts slots (else numProcessors) -> ncpus; distinct hosts -> nnodes, node_list
  maxRMem (KB)                       -> mem_peak_bytes;  ru_utime + ru_stime -> cpu_time_s
  exitStatus (a wait status)         -> exit_code 'code:signal' (65280 -> '255:0', 9 -> '0:9')
  jStatus 64 DONE -> COMPLETED; 32 EXIT -> by exitInfo: 5 TERM_RUNLIMIT -> TIMEOUT, 8/9/14/15
  (owner/admin kill) -> CANCELLED, 16 TERM_MEMLIMIT -> OUT_OF_MEMORY, 1 TERM_PREEMPT -> PREEMPTED,
  else FAILED (never started and killed -> CANCELLED)
  GPUs: `ngpus_physical=N` in resReq / effectiveResReq / submitEXT values, or `-gpu "num=N"` in
  those or in the job script (#BSUB -gpu); N is per host, so ngpus = N x nnodes
Other events (JOB_RESIZE, EVENT_ADRSV_FINISH) and '#' lines are dropped and counted in a note.
Cluster: opts.cluster, else "default" (lsb.acct names none).
How: the file is read in blocks of lines, two at a time in threads. A block's plain records are
cut into their fields and walked by their counts column-wise with polars (lsf_walk); the others
one by one: cut with str.split on the quotes where that is exact (tokenize reads the rest), walked
by walk (the rule, whose reason a rejected record gets). The rows are converted column-wise
(lsf_frame), the reasons worded for the rejected ones only.
"""
from __future__ import annotations

import pathlib
import re
from collections import Counter
from functools import partial
from operator import itemgetter
from typing import Optional

import polars as pl

from jobsight.analytics.ingest import limits
from jobsight.analytics.ingest.parsers import lsf_frame, lsf_walk
from jobsight.analytics.ingest.parsers.line_blocks import _INT_MAX, close_records, in_file_order, iter_blocks, set_aside
from jobsight.analytics.ingest.records import ParseOptions, ParseResult, Reject

FORMAT = "lsf"
SOURCE = "lsf"
MAX_RECORD_LINES = 2000     # a quote left open this long is a broken record, not a script
PIPELINE = 2                # blocks made into rows at once (threads)

_TOKEN = re.compile(r'"((?:[^"]|"")*)"|([^\s"]+)')
_ALNUM = re.compile(r"[0-9A-Za-z]")
_NGPUS = re.compile(r"ngpus(?:_physical)?\s*=\s*(\d+)")
_GPUOPT = re.compile(r"-gpu\s+\"?[^\"\n]*?\bnum=(\d+)")

SCHEMA = {
    "cluster": pl.String, "job_id": pl.String, "job_id_raw": pl.String, "array_job_id": pl.String,
    "array_task_id": pl.String, "job_name": pl.String, "user": pl.String, "account": pl.String,
    "partition": pl.String, "state": pl.String, "exit_code": pl.String, "submit_time": pl.Datetime("us"),
    "start_time": pl.Datetime("us"), "end_time": pl.Datetime("us"), "elapsed_s": pl.Int64,
    "timelimit_s": pl.Int64, "ncpus": pl.Int64, "nnodes": pl.Int64, "ngpus": pl.Int64,
    "mem_peak_bytes": pl.Int64, "cpu_time_s": pl.Float64, "node_list": pl.String,
    "null_reasons": pl.String, "source": pl.String,
}
_RUSAGE = ("ru_utime", "ru_stime", "ru_maxrss", "ru_ixrss", "ru_ismrss", "ru_idrss", "ru_isrss", "ru_minflt",
           "ru_majflt", "ru_nswap", "ru_inblock", "ru_oublock", "ru_ioch", "ru_msgsnd", "ru_msgrcv",
           "ru_nsignals", "ru_nvcsw", "ru_nivcsw", "ru_exutime")
_AFTER_RUSAGE = ("mailUser", "projectName", "exitStatus", "maxNumProcessors", "loginShell", "timeEvent", "idx",
                 "maxRMem", "maxRSwap")
_OPTIONAL = ("inFileSpool", "commandSpool", "rsvId", "sla", "exceptMask", "additionalInfo", "exitInfo",
             "warningAction", "warningTimePeriod", "chargedSAAP", "licenseProject", "app", "postExecCmd",
             "runtimeEstimation", "jgroup", "requeueEValues", "options2", "resizeNotifyCmd", "lastResizeTime",
             "rsvId2", "jobDescription")
_AFTER_HOSTRUSAGE = ("runLimit", "options3", "avgMem", "effectiveResReq", "srcCluster", "srcJobId", "dstCluster",
                     "dstJobId", "forwardTime", "flow_id", "acJobWaitTime", "totalProvisionTime", "outdir", "runTime")
_HEAD = ("event", "version", "eventTime", "jobId", "userId", "options", "numProcessors", "submitTime", "beginTime",
         "termTime", "startTime", "userName", "queue", "resReq", "dependCond", "preExecCmd", "fromHost", "cwd",
         "inFile", "outFile", "errFile", "jobFile")

def sniff(head: str, path: pathlib.Path) -> bool:
    lines = [ln for ln in head.splitlines() if ln.strip() and not ln.startswith("#")]
    return bool(lines) and lines[0].startswith('"JOB_FINISH" "') or any(
        ln.startswith(('"JOB_FINISH" "', '"JOB_RESIZE" "', '"EVENT_ADRSV_FINISH" "')) for ln in lines[:5])


def tokenize(text: str) -> list[tuple[str, bool]]:
    """Record text -> [(value, was_quoted)]; "" inside a quoted field is one quote."""
    # findall gives (quoted, bare); a bare word is never empty, so an empty one marks a quoted field
    return [(w, False) if w else ((q.replace('""', '"') if '""' in q else q), True) for q, w in _TOKEN.findall(text)]


def records(lines: list[str], final: bool = True) -> list[tuple[int, Optional[str], Optional[str]]]:
    """(line index, text, error) per record; error says why a record could not be delimited.
    Not final (more lines follow): stop before a record whose quote is still open at the last line,
    giving (index, None, "more") so that the caller reads it again with the lines after it.
    A line with an even number of quotes is a record of its own; one with an odd number opens a
    record that the next such line closes (quotes inside a record come in pairs otherwise)."""
    odd, taken = _delimit(lines, final)
    stop = odd[-1][0] if odd and odd[-1][2] == "more" else len(lines)
    skip = {k for k, _, _ in odd} | {j for a, b in taken for j in range(a, b)}
    out = [(j, ln, "comment" if ln[0] == "#" else None)
           for j, ln in enumerate(lines[:stop]) if j not in skip and ln and not ln.isspace()]
    return sorted(out + odd, key=itemgetter(0))


def _delimit(lines: list[str], final: bool) -> tuple[list, list]:
    """records() of the lines with an odd number of quotes: ([(index, text, error)] of the records
    that start on one, [(first, end)] index ranges of the lines after its first that a record takes).
    Every other line is a record of its own, a comment or blank."""
    n = len(lines)
    odd = [k for k, ln in enumerate(lines) if ln.count('"') & 1]
    out: list = []
    taken: list = []
    o = 0
    while o < len(odd):
        k = odd[o]
        o += 1
        if lines[k].startswith("#"):
            out.append((k, lines[k], "comment"))
            continue
        close = odd[o] if o < len(odd) else n
        if close - k <= MAX_RECORD_LINES and close < n:
            out.append((k, "\n".join(lines[k:close + 1]), None))
            taken.append((k + 1, close + 1))
            o += 1
            continue
        last = min(n - 1, k + MAX_RECORD_LINES)
        if not final and last + 1 >= n and last - k < MAX_RECORD_LINES:
            out.append((k, None, "more"))
            return out, taken
        out.append((k, lines[k], "a quoted field is never closed"))
    return out, taken


class BlockRecords:
    """A block's records as _delimit finds them, made into columns without a tuple per line.
    ``printable``: every line holds only printable ASCII (lsf_walk.PLAIN's bytes)."""

    def __init__(self, lines: list[str], odd: list, taken: list, printable: bool = False):
        self.lines, self.odd, self.taken, self.printable = lines, odd, taken, printable

    def frame(self, first: int) -> tuple[pl.DataFrame, int]:
        """(_line, text, err) as records() gives them, and their number."""
        lines, n = self.lines, len(self.lines)
        texts: list = lines
        errs: Optional[list] = None
        drop = [j for a, b in self.taken for j in range(a, b)]
        if self.odd:
            texts, errs = list(lines), [None] * n
            for k, text, err in self.odd:
                texts[k], errs[k] = text, err
        for j, ln in enumerate(lines):   # the blank lines and the comments
            if not ln or ln[0] == "#" or ln.isspace():
                if ln and not ln.isspace():
                    if errs is None:
                        errs = [None] * n
                    errs[j] = "comment"
                else:
                    drop.append(j)
        numbers = pl.int_range(first, first + n, dtype=pl.Int64, eager=True)
        if drop:   # the lines taken by a record before them, and the blank ones: left out of the lists
            gone = set(drop)
            kept = [j for j in range(n) if j not in gone]
            texts, errs = [texts[j] for j in kept], ([errs[j] for j in kept] if errs else None)
            numbers, n = pl.Series(kept, dtype=pl.Int64) + first, len(kept)
        frame = pl.DataFrame({"_line": numbers, "text": pl.Series(texts, dtype=pl.String),
                              "err": pl.Series(errs, dtype=pl.String) if errs else pl.repeat(None, n, dtype=pl.String, eager=True)})
        return frame, frame.height


_STRAY = re.compile(r"(?:^|\s)[^\s0-9A-Za-z]+(?=\s|$)")   # an unquoted word without a letter or digit
_UNUSUAL = re.compile(r"[^\s0-9A-Za-z.+\-]")   # a cheap first look for it
_PACKED = re.compile(r"0\d+")


def fields_of(text: str, notes: Counter) -> Optional[list[str]]:
    """A record's field values, or None when it does not start with a quoted event name. Cut on the
    quotes when that is exact (no "" inside a string, no stray bytes, no packed counts); else by
    tokenize, which removes stray unquoted bytes and reads '02' as '0 2' (each noted)."""
    parts = text.split('"')
    if parts[0] == "" and len(parts) > 2 and "" not in parts[2:-1:2]:
        bare = " ".join(parts[0::2])
        if not (_UNUSUAL.search(bare) and _STRAY.search(bare)):
            out: list[str] = []
            add, more = out.append, out.extend
            for k in range(1, len(parts) - 1, 2):
                add(parts[k])
                if parts[k + 1] != " ":
                    more(parts[k + 1].split())
            if len(out) <= 22 or not _PACKED.fullmatch(out[22]):
                return out
    toks = tokenize(text)
    if not toks or not toks[0][1]:
        return None
    stray = [v for v, quoted in toks if not quoted and not v[0].isalnum() and not _ALNUM.search(v)]
    if stray:   # LSF writes no unquoted token without a letter or digit: stray bytes (lsb.acct gl-26)
        toks = [t for t in toks if t[1] or _ALNUM.search(t[0])]
        notes[f"stray unquoted bytes {' '.join(stray)!r} removed"] += 1
    # "02" where "0 2" was meant (a blank lost by hand-editing): numAskedHosts 0, numExHosts 2
    if len(toks) > 22 and _PACKED.fullmatch(toks[22][0]) and not toks[22][1]:
        v = toks[22][0]
        toks[22:23] = [("0", False), (v[1:], False)]
        notes[f"numAskedHosts/numExHosts written together as {v!r}: read as 0 and {v[1:]}"] += 1
    return [v for v, _ in toks]


def _hostrusage_width(toks: list[str], start: int, n: int) -> int:
    """Width of a hostRusage entry: 5 (hostname mem swap utime stime) in the manual, 6 in 9.x/10.x
    files. The right width puts a host name at every entry start and a number right after."""
    for w in (5, 6, 7, 8):
        end = start + n * w
        if end > len(toks):
            break
        if all(not _NUMBER.fullmatch(toks[start + k * w]) for k in range(n)) and \
                all(_NUMBER.fullmatch(toks[start + k * w + 1]) for k in range(n)) and \
                (end == len(toks) or _INT.fullmatch(toks[end])):
            return w
    raise ValueError(f"numHostRusage={n}: host entries not found")


_NUMBER = re.compile(r"-?[\d.]+")
_INT = re.compile(r"-?\d+")
_COUNT = re.compile(r"\d+")
# the fields a job row reads, in this order (walk's tuple); None where a record ends before one
WALKED = ("event", "eventTime", "jobId", "numProcessors", "submitTime", "startTime", "userName", "queue", "resReq",
          "jStatus", "hostFactor", "jobName", "command", "ru_utime", "ru_stime", "projectName", "exitStatus", "idx",
          "maxRMem", "exitInfo", "runLimit", "effectiveResReq", "runTime")
_AT_HEAD = {k: _HEAD.index(k) for k in ("event", "eventTime", "jobId", "numProcessors", "submitTime", "startTime",
                                        "userName", "queue", "resReq")}
_AFTER_HOSTS = ("jStatus", "hostFactor", "jobName", "command") + _RUSAGE + _AFTER_RUSAGE
_AT_AFTER_HOSTS = {k: _AFTER_HOSTS.index(k) for k in ("jStatus", "hostFactor", "jobName", "command", "ru_utime",
                                                      "ru_stime", "projectName", "exitStatus", "idx", "maxRMem")}
_EXIT_INFO = _OPTIONAL.index("exitInfo")
_HEAD_GET, _AFTER_GET = itemgetter(*_AT_HEAD.values()), itemgetter(*_AT_AFTER_HOSTS.values())


def _ends(name: str, pos: int) -> ValueError:
    return ValueError(f"record ends before {name} (field {pos + 1}): truncated")


def _count(t: list[str], pos: int, name: str) -> int:
    if pos >= len(t):
        raise _ends(name, pos)
    if not _COUNT.fullmatch(t[pos]):
        raise ValueError(f"{name}={t[pos]!r} is not a count (field {pos + 1})")
    return int(t[pos])


def walk(t: list[str]) -> tuple:
    """A record's fields -> (WALKED values..., exec slots, hosts, 'h1,h2', GPUs per host), walked by
    the counts of its variable-length parts; ValueError says where the record breaks."""
    n = len(t)
    if n < len(_HEAD):
        raise _ends(_HEAD[n], n)
    out = dict(zip(_AT_HEAD, _HEAD_GET(t)))
    p = len(_HEAD)
    p += 1 + _count(t, p, "numAskedHosts")
    if p > n:
        raise _ends("askedHosts", n)
    ne = _count(t, p, "numExHosts")
    if p + 1 + ne > n:
        raise _ends("execHosts", n)
    hosts = t[p + 1:p + 1 + ne]
    p += 1 + ne
    if p + len(_AFTER_HOSTS) > n:
        raise _ends(_AFTER_HOSTS[n - p], n)
    out.update(zip(_AT_AFTER_HOSTS, _AFTER_GET(t[p:p + len(_AFTER_HOSTS)])))
    p += len(_AFTER_HOSTS)
    rest = n - p
    if rest > _EXIT_INFO:
        out["exitInfo"] = t[p + _EXIT_INFO]
    if rest > len(_OPTIONAL):
        p += len(_OPTIONAL)
        m = _count(t, p, "submitEXT")
        if p + 1 + 2 * m > n:
            raise _ends("submitEXT key" if (n - p - 1) % 2 == 0 else "submitEXT value", n)
        ext = dict(zip(t[p + 1:p + 1 + 2 * m:2], t[p + 2:p + 2 + 2 * m:2]))
        p += 1 + 2 * m
        if p < n:
            h = _count(t, p, "numHostRusage")
            p += 1 + (h * _hostrusage_width(t, p + 1, h) if h else 0)
            for i, k in enumerate(_AFTER_HOSTRUSAGE):
                if p + i >= n:
                    break
                if k in ("runLimit", "effectiveResReq", "runTime"):
                    out[k] = t[p + i]
    else:
        ext = {}
    slots, names = expand_hosts(hosts)
    gpu = None
    if any("gpu" in x for x in (out["resReq"], out.get("effectiveResReq") or "", out["command"], *ext.values())):
        gpu = gpus_per_host({**out, "submitEXT": ext})
    for what, v in (("execHosts slots", slots), ("GPUs per host", gpu)):
        if v is not None and v > _INT_MAX:
            raise ValueError(f"{what} {str(v)[:40]}: a number too large")
    return (*(out.get(k) for k in WALKED), slots, len(names), ",".join(names), gpu)


def expand_hosts(hosts: list[str]) -> tuple[int, list[str]]:
    """['16*h1', 'h2', 'h2'] -> (18, ['h1', 'h2'])."""
    slots, seen = 0, []
    for h in hosts:
        n, star, name = h.partition("*")
        if star and n.isdigit():
            slots += int(n)
        else:
            name, slots = h, slots + 1
        if name not in seen:
            seen.append(name)
    return slots, seen


def gpus_per_host(f: dict) -> Optional[int]:
    texts = [f.get("resReq") or "", f.get("effectiveResReq") or ""] + list((f.get("submitEXT") or {}).values())
    for t in texts:
        m = _NGPUS.search(t) or _GPUOPT.search(t)
        if m:
            return int(m.group(1))
    m = re.search(r"#BSUB\s+-gpu\s+\"?[^\";\n]*?\bnum=(\d+)", f.get("command") or "")
    return int(m.group(1)) if m else None


def parse(path: pathlib.Path, opts: ParseOptions) -> ParseResult:
    path = pathlib.Path(path)
    result = ParseResult(format=FORMAT)
    cluster = opts.cluster or "default"
    notes: Counter = Counter()
    other: Counter = Counter()
    parts: list[pl.DataFrame] = []
    comments = 0
    # records are cut in file order here (a quoted field may go on in the next block); their
    # fields and rows are made two blocks at a time in threads, collected in file order
    long_lines: list = []   # lines over lengths.MAX_LINE_BYTES, skipped unread
    calls = (partial(_block, first, recs, cluster) for first, recs in _record_blocks(path, long_lines))
    for rows, rejects, ncom, rows_in, block_notes, block_other in in_file_order(calls, PIPELINE, "jobsight-lsf"):
        notes.update(block_notes)
        other.update(block_other)
        parts.append(rows)
        result.rejects.extend(rejects)
        comments += ncom
        result.rows_in += rows_in
    if parts:
        jobs = pl.concat(parts, how="vertical")
        if jobs.height:
            result.jobs = jobs
    close_records(result, long_lines, comments, sum(other.values()))
    for ev, n in sorted(other.items()):
        result.notes.append(f"{n} {ev} record(s) skipped: only JOB_FINISH records describe finished jobs")
    result.notes.extend(f"{n} record(s): {what}" for what, n in notes.items())
    return result


def _record_blocks(path: pathlib.Path, long_lines: list):
    """(first line number, BlockRecords) per block of the file, records whole. A
    record never goes on past a line set aside as too long (into long_lines): the block before
    it is read as if the file ended there."""
    carry: list[str] = []
    carry_first, carry_printable = 1, True
    blocks = set_aside(iter_blocks(path), long_lines)
    nxt = next(blocks, None)
    while nxt is not None:
        first, text = nxt
        nxt = next(blocks, None)
        lines = text.split("\n")
        printable = lsf_walk.printable(text)
        if "\r" in text:
            lines = [ln[:-1] if ln.endswith("\r") else ln for ln in lines]
        if carry:
            first, lines, printable = carry_first, carry + lines, printable and carry_printable
            carry = []
        odd, taken = _delimit(lines, final=nxt is None or nxt[0] != first + len(lines))
        if odd and odd[-1][2] == "more":
            i = odd.pop()[0]
            carry, carry_first, carry_printable, lines = lines[i:], first + i, printable, lines[:i]
        yield first, BlockRecords(lines, odd, taken, printable)


_WALK_SCHEMA = {"_line": pl.Int64, **{k: pl.String for k in WALKED}, "slots": pl.Int64, "nhosts": pl.Int64,
                "hosts": pl.String, "gpus": pl.Int64}


class _Texts:
    """A block's record texts by line number, looked up only for the records rejected."""

    def __init__(self, frame: pl.DataFrame):
        self.frame, self.by_line = frame, None

    def __getitem__(self, line: int) -> str:
        if self.by_line is None:
            self.by_line = dict(self.frame.select("_line", "text").iter_rows())
        return self.by_line[line]


def _block(first: int, recs: list, cluster: str, bulk: bool = True):
    """A block's records -> (job rows, rejects, comments, rows read, notes, other events). ``bulk``:
    plain records walked column-wise (lsf_walk), the rest one by one; else all one by one."""
    rejects, walked = [], []
    notes: Counter = Counter()
    other: Counter = Counter()
    # the records as columns (no loop over them here): (index, text, error) transposed
    if isinstance(recs, BlockRecords):
        frame, nrecs = recs.frame(first)
    else:
        idx, txt, errs = zip(*recs) if recs else ((), (), ())
        frame = pl.DataFrame({"_line": pl.Series(idx, dtype=pl.Int64) + first, "text": pl.Series(txt, dtype=pl.String),
                              "err": pl.Series(errs, dtype=pl.String)})
        nrecs = len(recs)
    comments = int((frame["err"] == "comment").sum())
    for line, text, err in frame.filter(pl.col("err").is_not_null() & (pl.col("err") != "comment")).iter_rows():
        rejects.append(Reject(line, f"lsb.acct record: {err}", text[:1000]))
    frame = frame.filter(pl.col("err").is_null()).drop("err")
    texts = _Texts(frame)
    parts = []
    good = [] if bulk else list(frame.iter_rows())
    if bulk and frame.height:
        rows, events, left = lsf_walk.walk_block(frame, all_printable=getattr(recs, "printable", False))
        parts.append(rows)
        other.update(dict(events["event"].value_counts().iter_rows()))
        good = sorted(left.iter_rows())
    for line, text in good:
        vals = fields_of(text, notes)
        if vals is None:
            rejects.append(Reject(line, "not an lsb.acct record (does not start with a quoted event name)", text[:1000]))
            continue
        if vals[0] != "JOB_FINISH":
            other[vals[0]] += 1
            continue
        try:
            walked.append((line, *walk(vals)))
        except ValueError as exc:
            rejects.append(Reject(line, f"JOB_FINISH: {exc}", text[:1000]))
    if walked:
        parts.append(pl.DataFrame(walked, schema=_WALK_SCHEMA, orient="row"))
    walked = pl.concat(parts).sort("_line") if parts else None
    if walked is None or not walked.height:
        return pl.DataFrame(schema=SCHEMA), rejects, comments, nrecs, notes, other
    rows = lsf_frame.convert(walked, cluster)
    failed = rows.filter(pl.col("_check").is_not_null())
    for line, code, raw in failed.select("_line", "_check", "_raw").iter_rows():
        rejects.append(Reject(line, f"JOB_FINISH: {lsf_frame.CHECKS[code][1](raw)}", texts[line][:1000]))
    rows = lsf_frame.null_reasons(rows.filter(pl.col("_check").is_null()))
    cols = {c: rows.schema[c] for c in SCHEMA if c in limits.RECORD}
    over = (limits.out_of_range(cols) | (pl.col("_mem_f") > limits.MAX_BYTES).fill_null(False))
    rows = rows.with_columns(_over=over)
    keep = []
    for r in rows.filter(pl.col("_over")).iter_rows(named=True):
        row = {c: r[c] for c in SCHEMA}
        if (r["_mem_f"] or 0) > limits.MAX_BYTES:
            row["mem_peak_bytes"] = lsf_frame.exact_mem(r["_raw"]["maxRMem"])
        try:
            limits.check(row)
            keep.append(r["_line"])
        except (ValueError, KeyError) as exc:
            rejects.append(Reject(r["_line"], f"JOB_FINISH: {exc}", texts[r["_line"]][:1000]))
    rows = rows.filter(~pl.col("_over") | pl.col("_line").is_in(keep))
    return rows.select([pl.col(c).cast(t, strict=False) for c, t in SCHEMA.items()]), rejects, comments, nrecs, notes, other
