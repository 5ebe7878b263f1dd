"""PBS and LSF ingest speed against DuckDB reading the same file as one text column, side by side.

    .venv/bin/python bench/accounting_bench.py                      # small: 50k records of each
    .venv/bin/python bench/accounting_bench.py --records 1000000 --repeat 2   # the full size

For each input it times, each in a fresh process at nice 5 (so peak RSS is that run's own):
  duckdb   CREATE TABLE t AS SELECT * FROM read_csv('<file>', columns={'line': 'VARCHAR'}, delim=<none>)
  jobsight ingest of the same file into a new database (the whole command: ingest, the stored
           metrics' refresh and the snapshot publish)
The inputs are generated: a PBS Pro / Torque accounting log (Q, S, E, D records of each job, some A
and R records; PBS Pro select/exec_vnode and Torque nodes=N:ppn=M jobs, GPUs, arrays, a value with
spaces now and then) and an LSF 10.1 lsb.acct of JOB_FINISH records (the real field layout, exec
hosts as 'N*host', host rusage entries, quoted scripts with "" and a newline now and then).
Target: jobsight <= 3x DuckDB (wall and CPU), peak RSS <= 3 GB. Under each run, where jobsight's time
went (as in ingest_bench: parse, load/merge, store refresh, snapshot publish), and "ingest alone", the
ratio without the stored metrics' refresh and the publish. This prints figures; it asserts nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from measure import Phases, alone_ratio, peak_rss_mb, phase_line  # noqa: E402

T0 = 1_735_689_600   # 2025-01-01 UTC
QUEUES = ["batch", "long", "short", "gpu", "debug", "bigmem"]


def _pbs_time(epoch: int) -> str:
    return time.strftime("%m/%d/%Y %H:%M:%S", time.gmtime(epoch))


def _hms(s: int) -> str:
    return f"{s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}"


def gen_pbs(path: Path, nrecords: int, seed: int = 1) -> int:
    """A PBS accounting log of about nrecords lines: per job Q, then S and E (or D while queued)."""
    rnd = random.Random(seed)
    lines: list[str] = []
    job = 100_000
    with open(path, "w") as fh:
        n = 0
        while n < nrecords:
            job += 1
            ctime = T0 + job * 7 + rnd.randrange(5)
            user, group = f"u{rnd.randrange(2000):04d}", f"g{rnd.randrange(80):02d}"
            queue = rnd.choice(QUEUES)
            array = f"[{rnd.randrange(1, 200)}]" if rnd.random() < 0.08 else ""
            jid = f"{job}{array}.pbs01.cluster.example.org"
            acct = f"proj{rnd.randrange(300):03d}"
            name = f"job_{rnd.randrange(10**6)}"
            torque = rnd.random() < 0.3
            nodes = rnd.choice([1, 1, 1, 1, 2, 4, 8])
            ppn = rnd.choice([4, 8, 16, 32, 64])
            gpus = rnd.choice([1, 2, 4]) if queue == "gpu" else 0
            wall = rnd.choice([3600, 7200, 14400, 86400, 172800])
            start = ctime + rnd.randrange(10, 20000)
            used = min(wall + rnd.randrange(60), rnd.randrange(30, wall + 60))
            end = start + used
            hosts = [f"cn{rnd.randrange(2000):04d}" for _ in range(nodes)]
            qline = f"{_pbs_time(ctime)};Q;{jid};queue={queue}"
            if torque:
                rl = (f"Resource_List.nodes={nodes}:ppn={ppn}" + (f":gpus={gpus}" if gpus else "") +
                      f" Resource_List.neednodes={nodes}:ppn={ppn} Resource_List.nodect={nodes}"
                      f" Resource_List.walltime={_hms(wall)} Resource_List.mem={nodes * ppn * 4}gb")
                exec_host = "+".join(f"{h}/0-{ppn - 1}" if rnd.random() < 0.5 else
                                     "+".join(f"{h}/{c}" for c in range(min(ppn, 8))) for h in hosts)
                head = f"user={user} group={group} account={acct} jobname={name} queue={queue}"
            else:
                sel = f"{nodes}:ncpus={ppn}:mem={ppn * 4}gb" + (f":ngpus={gpus}" if gpus else "")
                rl = (f"Resource_List.ncpus={nodes * ppn} Resource_List.nodect={nodes}"
                      f" Resource_List.place=scatter:excl Resource_List.select={sel}"
                      f" Resource_List.walltime={_hms(wall)} Resource_List.mem={nodes * ppn * 4}gb"
                      + (f" Resource_List.ngpus={nodes * gpus}" if gpus else ""))
                exec_host = "+".join(f"{h}/0*{ppn}" for h in hosts)
                rl += " exec_vnode=" + "+".join(f"({h}:ncpus={ppn}" + (f":ngpus={gpus}" if gpus else "") + ")"
                                                 for h in hosts)
                head = f"user={user} group={group} project={acct} jobname={name} queue={queue}"
            times = f"ctime={ctime} qtime={ctime} etime={ctime}"
            lines.append(qline)
            if rnd.random() < 0.05:   # deleted while queued
                lines.append(f"{_pbs_time(ctime + 300)};D;{jid};requestor={user}@login01.cluster.example.org")
                if rnd.random() < 0.5:
                    lines.append(f"{_pbs_time(ctime + 301)};A;{jid};")
            else:
                req = ""
                if torque and rnd.random() < 0.1:   # Torque 6's request: a value with spaces
                    req = f" Resource_Request_2.0=-L tasks={nodes}:lprocs={ppn}:memory={ppn * 4}GB -L tasks=1:lprocs=1"
                lines.append(f"{_pbs_time(start)};S;{jid};{head} {times} start={start} exec_host={exec_host} {rl}"
                             f" session={rnd.randrange(1, 99999)}{req}")
                if rnd.random() < 0.01:
                    lines.append(f"{_pbs_time(start + 5)};R;{jid};")
                status = rnd.choices([0, 1, 2, 271, 265, -11], [80, 8, 4, 5, 2, 1])[0]
                mem_kb = rnd.randrange(1000, nodes * ppn * 4 * 1024 * 1024)
                cput = int(used * nodes * ppn * rnd.random())
                ncpus = f" resources_used.ncpus={nodes * ppn}" if not torque else ""
                lines.append(f"{_pbs_time(end)};E;{jid};{head} {times} start={start} exec_host={exec_host} {rl}"
                             f" session={rnd.randrange(1, 99999)} end={end} Exit_status={status}"
                             f" resources_used.cpupercent={rnd.randrange(0, 100 * ppn)} resources_used.cput={_hms(cput)}"
                             f" resources_used.mem={mem_kb}kb{ncpus} resources_used.vmem={mem_kb * 2}kb"
                             f" resources_used.walltime={_hms(used)} run_count=1{req}")
            if len(lines) >= 10000:
                n += len(lines)
                fh.write("\n".join(lines) + "\n")
                lines = []
        if lines:
            n += len(lines)
            fh.write("\n".join(lines) + "\n")
    return n


def _q(s: str) -> str:
    return '"' + s.replace('"', '""') + '"'


def gen_lsf(path: Path, nrecords: int, seed: int = 2) -> int:
    """An lsb.acct of nrecords JOB_FINISH records in LSF 10.1's layout (version "10.108")."""
    rnd = random.Random(seed)
    out: list[str] = []
    n = 0
    with open(path, "w") as fh:
        for i in range(nrecords):
            job = 200_000 + i
            submit = T0 + i * 5
            start = submit + rnd.randrange(0, 3600)
            run = rnd.randrange(1, 86400)
            end = start + run
            nhosts = rnd.choice([1, 1, 1, 2, 4])
            slots = rnd.choice([1, 4, 16, 32])
            hosts = [f"cn{rnd.randrange(2000):04d}.cluster.example.org" for _ in range(nhosts)]
            exec_hosts = " ".join(_q(f"{slots}*{h}" if slots > 1 else h) for h in hosts)
            user, queue = f"u{rnd.randrange(2000):04d}", rnd.choice(QUEUES)
            gpu = queue == "gpu"
            res = f"select[type == any] rusage[mem=4000{':ngpus_physical=2' if gpu else ''}] span[ptile={slots}]"
            idx = rnd.randrange(1, 100) if rnd.random() < 0.08 else 0
            name = f"sim_{i}" + ("[1-100]" if idx else "")
            r = rnd.random()
            if r < 0.005:
                cmd = f'#!/bin/bash\n#BSUB -n {slots}\n./sim --in "data set"'   # a script with newlines
            elif r < 0.03:
                cmd = f'./run.sh --label "run {i}" --x=1'
            else:
                cmd = f"./sim -n {slots * nhosts} input_{i}.dat"
            jstatus, exit_status, exit_info = rnd.choices(
                [(64, 0, 0), (32, 256, 0), (32, 9, 5), (32, 15, 8), (32, 9, 16)], [80, 10, 5, 3, 2])[0]
            utime, stime = run * slots * rnd.random(), run * 0.01
            maxrmem = rnd.randrange(1000, 64 * 1024 * 1024)
            rusage = f"{nhosts} " + " ".join(f"{_q(h)} {maxrmem // nhosts} 0 {utime / nhosts:.2f} {stime:.2f} 0"
                                             for h in hosts) if rnd.random() < 0.5 else "0"
            ext = '5 1110 "default" 1041 "jfincache" 1086 "-1 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 " 1032 "0" 1033 "0"'
            rec = (f'"JOB_FINISH" "10.108" {end} {job} {1500 + rnd.randrange(500)} 33554450 {slots * nhosts} {submit} 0 0 '
                   f'{start} "{user}" "{queue}" {_q(res)} "" "" "login01.cluster.example.org" "/home/{user}/work" "" '
                   f'"/home/{user}/out.%J" "" "{submit}.{job}" 0 {nhosts} {exec_hosts} {jstatus} 100.0 {_q(name)} '
                   f'{_q(cmd)} {utime:.6f} {stime:.6f} {maxrmem} 0 -1 0 0 {rnd.randrange(10**6)} 4 0 936 32 -1 0 0 0 '
                   f'{rnd.randrange(10**4)} {rnd.randrange(100)} -1 "" "proj{rnd.randrange(300):03d}" {exit_status} '
                   f'{slots * nhosts} "/bin/sh" "" {idx} {maxrmem} {maxrmem // 2} "" "" "" "" 0 "" {exit_info} "" -1 '
                   f'"" "" "" "" -1 "" "" 6160 "" {submit} "" "" {ext} {rusage} {rnd.choice([3600, 86400, -1])} '
                   f'4194304 {maxrmem // 2} {_q(res + " ")} "" -1 "" -1 0 "" 0 0 "" {run} "/home/{user}/work" 0 "" '
                   f'0.000000 0.00 0.00 0.00 0.00 {nhosts} {" ".join(_q(h) for h in hosts)} -1 0 0 0 0 1 '
                   f'"schedulingOverhead" "0.00"')
            out.append(rec)
            if len(out) >= 10000:
                n += len(out)
                fh.write("\n".join(out) + "\n")
                out = []
        if out:
            n += len(out)
            fh.write("\n".join(out) + "\n")
    return n


GENERATORS = {"pbs": gen_pbs, "lsf": gen_lsf}


def child(kind: str, src: str, dbpath: str, fmt: str) -> None:
    t0 = time.perf_counter()
    phases = None
    if kind == "duckdb":
        import duckdb
        con = duckdb.connect(dbpath)
        # the file as one text column: no delimiter, no quoting, every line one row
        con.execute(f"CREATE TABLE t AS SELECT * FROM read_csv('{src}', columns={{'line': 'VARCHAR'}}, delim='\\0', "
                    "quote='', escape='', header=false, auto_detect=false)")
        con.close()
    else:
        import contextlib
        import io

        from jobsight.analytics import cli
        from jobsight.analytics.ingest.parsers import lsf, pbs
        phases = Phases()
        phases.install({"pbs": pbs, "lsf": lsf}[fmt], "parse")
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = cli.main(["ingest", "--db", dbpath, "--timezone", "UTC", "--format", fmt, "--quiet", "--json", src])
        summary = json.loads(out.getvalue())
        assert rc == 0 and summary["snapshot"]["error"] is None, summary
        print(json.dumps({k: summary["totals"][k] for k in ("rows_in", "stored", "unchanged", "rejected", "dropped")}),
              file=sys.stderr)
    secs = time.perf_counter() - t0
    ru = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"seconds": secs, "cpu_seconds": ru.ru_utime + ru.ru_stime, "maxrss_mb": peak_rss_mb(),
                      "phases": phases.t if phases else {}}))


def measure(kind: str, src: Path, workdir: Path, fmt: str) -> dict:
    dbpath = workdir / f"{kind}-{src.stem}.duckdb"

    def clean():
        for p in (dbpath, Path(str(dbpath) + ".wal"), Path(str(dbpath) + ".snapshot")):
            p.unlink(missing_ok=True)
    clean()
    out = subprocess.run(["nice", "-n", "5", sys.executable, __file__, "--child", kind, str(src), str(dbpath), fmt],
                         capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        raise SystemExit(f"{kind} on {src} failed:\n{out.stderr[-3000:]}")
    if out.stderr.strip():
        print(f"    {kind}: {out.stderr.strip()[-300:]}", file=sys.stderr)
    clean()
    return json.loads(out.stdout.strip().splitlines()[-1])


def _row(name, n, size, d, j, load) -> str:
    ratio, cpu_ratio = j["seconds"] / d["seconds"], j["cpu_seconds"] / d["cpu_seconds"]
    met = max(ratio, cpu_ratio) <= 3 and j["maxrss_mb"] <= 3072
    return (f"{name:5} {n:>10,} {size / 1e6:>6.0f} | {d['seconds']:>7.2f} {d['cpu_seconds']:>6.1f} {d['maxrss_mb']:>6.0f} | "
            f"{j['seconds']:>7.2f} {j['cpu_seconds']:>6.1f} {j['maxrss_mb']:>6.0f} | {ratio:>5.2f}x {cpu_ratio:>5.2f}x "
            f"{load:>5.1f} {'met' if met else 'over target'}" + alone_ratio(d, j))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=50_000, help="records per file")
    ap.add_argument("--repeat", type=int, default=1, help="measure each pair this many times (median printed)")
    ap.add_argument("--only", choices=tuple(GENERATORS), action="append", default=[])
    ap.add_argument("--workdir", default=None, help="where to write the generated inputs (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="generate the inputs into --workdir and keep them")
    ap.add_argument("--child", nargs=4, metavar=("KIND", "SRC", "DB", "FORMAT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return 0
    rows = []
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        work = Path(args.workdir) if args.keep and args.workdir else Path(tmp)
        for fmt in args.only or GENERATORS:
            src = work / f"{fmt}-{args.records}.acct"
            if not (args.keep and src.exists()):
                t = time.perf_counter()
                n = GENERATORS[fmt](src, args.records)
                print(f"generated {src.name}: {n:,} lines, {src.stat().st_size / 1e6:.0f} MB in "
                      f"{time.perf_counter() - t:.1f} s", file=sys.stderr)
            n = sum(1 for _ in open(src, "rb"))
            for _ in range(args.repeat):
                load = os.getloadavg()[0]
                rows.append((fmt, n, src.stat().st_size, measure("duckdb", src, work, fmt),
                             measure("jobsight", src, work, fmt), load))
                print(_row(*rows[-1]), file=sys.stderr)
                print(phase_line(rows[-1][4]), file=sys.stderr)
            if not args.keep:
                src.unlink()
    print(f"{'input':5} {'lines':>10} {'MB':>6} | {'duckdb s':>7} {'cpu s':>6} {'RSS MB':>6} | {'jobsight s':>7} "
          f"{'cpu s':>6} {'RSS MB':>6} | {'ratio':>6} {'cpu':>6} {'load':>5}")
    for r in rows:
        print(_row(*r))
    if args.repeat > 1:
        print(f"median of {args.repeat} pairs (each figure its own median):")
        for name in dict.fromkeys(r[0] for r in rows):
            mine = [r for r in rows if r[0] == name]
            d, j = ({k: statistics.median(r[i][k] for r in mine) for k in ("seconds", "cpu_seconds", "maxrss_mb")}
                    for i in (3, 4))
            j["phases"] = {k: statistics.median(r[4]["phases"].get(k, 0) for r in mine) for k in mine[0][4]["phases"]}
            print(_row(name, mine[0][1], mine[0][2], d, j, statistics.median(r[5] for r in mine)))
            print(phase_line(j))
    return 0


if __name__ == "__main__":
    sys.exit(main())
