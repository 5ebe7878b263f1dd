"""The table metrics_bench.py prints: one row per measured command with its baseline, ratio,
peak RSS and target, then where the time went."""
from __future__ import annotations

from metrics_bench import CHANGES, _parts_text


def _s(secs: float) -> str:
    return f"{secs * 1000:.0f} ms" if secs < 1 else f"{secs:.2f} s" if secs < 10 else f"{secs:.1f} s"


def _mb(mb: float) -> str:
    return f"{mb:.0f} MB" if mb < 1024 else f"{mb / 1024:.2f} GB"


def _cpu_ratio(a: dict, b: dict) -> str:
    """CPU seconds (all threads) of a over b: what the load of a shared machine skews less than wall time."""
    return f" (CPU {a['cpu_s'] / b['cpu_s']:.1f}x)" if a.get("cpu_s") and b.get("cpu_s") else ""


def _met(*misses: tuple[str, bool]) -> str:
    bad = [name for name, missed in misses if missed]
    return "met" if not bad else "MISSED (" + ", ".join(bad) + ")"


def rows_for(figs: dict) -> list[tuple[str, ...]]:
    """(what, jobsight, baseline, ratio, peak RSS, target, met?)"""
    rows: list[tuple[str, ...]] = []
    info, q = figs["info"], figs.get("queries", {})
    for key, what in (("build", "build: `jobsight ingest` of the generated sacct dump + sidecar CSVs"),):
        bd = figs.get(key)
        if bd:
            g, i = bd["generate"], bd["ingest"]
            rows.append((f"{what} ({g['jobs']:,} jobs, {g['samples']:,} samples, {g['mb']:,.0f} MB)", _s(i["seconds"]),
                         f"generating them {_s(g['seconds'])}", "", _mb(i["maxrss_mb"]), "", ""))
    if "job" in q:
        b, s = q["job"]["big"], q["job"]["small"]
        r = b["seconds"] / s["seconds"]
        rows.append((f"`jobsight job {info['job_id']}` (2 GPUs)", _s(b["seconds"]), f"17-job db {_s(s['seconds'])}",
                     f"{r:.2f}x{_cpu_ratio(b, s)}", _mb(b["maxrss_mb"]), "<= 1.5x, <= 400 MB",
                     _met(("time", r > 1.5), ("RSS", b["maxrss_mb"] > 400))))
    for key, what in (("usage_week", f"`jobsight usage` week {info['week'][0]}..{info['week'][1]}"),
                      ("usage_month", f"`jobsight usage` month {info['month'][0]}..{info['month'][1]}"),
                      ("flags_day", f"`jobsight flags` day {info['day']}"),
                      ("flags_week", f"`jobsight flags` week {info['week'][0]}..{info['week'][1]}"),
                      ("report_user", f"`jobsight report --week {info['iso_week']} --for user:u7 --format md`")):
        if key in q:
            m = q[key]
            lines = f", {m['out_lines']:,} lines out" if key.startswith("flags") else ""
            rows.append((what + lines, _s(m["seconds"]), "", f"(CPU {m['cpu_s']:.1f} s)", _mb(m["maxrss_mb"]),
                         "<= 2 s, <= 1 GB",
                         _met(("time", m["seconds"] > 2), ("RSS", m["maxrss_mb"] > 1024))))
    for key, free, what in (("held_job", ("job", "big"), f"`jobsight job {info['job_id']}` while a writer holds the database"),
                            ("held_usage_week", ("usage_week",), "`jobsight usage` week while a writer holds the database")):
        if key in q:
            m, without = q[key], q
            for k in free:
                without = without.get(k, {}) if isinstance(without, dict) else {}
            base = without.get("seconds") if isinstance(without, dict) else None
            r = m["seconds"] / base if base else None
            rows.append((what, _s(m["seconds"]), f"without {_s(base)}" if base else "", f"{r:.2f}x" if r else "",
                         _mb(m["maxrss_mb"]), "as fast as without", _met(("time", r is not None and r > 1.2))))
    for key in ("ingest_5", "ingest_day"):
        if key in q:
            g, e = q[key]["big"], q[key]["empty"]
            limit = 2 * e["seconds"] + 1
            rows.append((f"`jobsight ingest` {q[key]['label']}", _s(g["seconds"]), f"into an empty db {_s(e['seconds'])}",
                         f"{g['seconds'] / e['seconds']:.1f}x{_cpu_ratio(g, e)}", _mb(g["maxrss_mb"]), f"<= 2x + 1 s = {_s(limit)}",
                         _met(("time", g["seconds"] > limit))))
    if "dashboard" in q:
        d = q["dashboard"]
        cbs = d["callbacks"]["callbacks"]
        for label, c in cbs.items():
            rows.append((f"dashboard callback p95: {label} (n={c['n']}, max {c['max_ms']:.0f} ms)", f"{c['p95_ms']:.0f} ms",
                         "", "", _mb(d["maxrss_mb"]), f"<= {c['target_ms']} ms", _met(("time", c["p95_ms"] > c["target_ms"]))))
    if "recompute" in q:
        rc, base = q["recompute"], q["recompute"]["baseline"]
        for key, what, text in CHANGES:
            for step, label in (("changed", f"recompute after `{' '.join(text.split())}` ({what})"),
                                ("back", "the same, back to the defaults")):
                m = rc[f"{key}_{step}"]
                r = m["seconds"] / base["seconds"]
                rows.append((label, _s(m["seconds"]), f"GROUP BY {_s(base['seconds'])} ({_mb(base['maxrss_mb'])})",
                             f"{r:.1f}x{_cpu_ratio(m, base)}", _mb(m["maxrss_mb"]), "<= 5x, <= 3 GB",
                             _met(("time", r > 5), ("RSS", m["maxrss_mb"] > 3072))))
    return rows


def where_time_went(figs: dict) -> list[str]:
    out = []
    q = figs.get("queries", {})
    items = [("build", figs.get("build", {}).get("ingest"))]
    items += [("job, big db", q.get("job", {}).get("big")), ("job, 17 jobs", q.get("job", {}).get("small"))]
    items += [(k, q.get(k)) for k in ("usage_week", "usage_month", "flags_day", "flags_week", "report_user")]
    for k in ("ingest_5", "ingest_day"):
        if k in q:
            items += [(f"{k}, big db", q[k]["big"]), (f"{k}, empty db", q[k]["empty"])]
    if "recompute" in q:
        items += [(f"recompute ({k})", m) for k, m in q["recompute"].items() if k != "baseline"]
    for label, m in items:
        if m and m.get("parts") is not None and "imports_s" in m:
            out.append(f"- {label}: {_s(m['seconds'])} = {_parts_text(m)} (s)")
    if "recompute" in q:
        base = q["recompute"]["baseline"]
        out.append(f"- baseline GROUP BY (python + connect + query): {_s(base['seconds'])}, query {base['main_s']:.2f}, "
                   f"CPU {base.get('cpu_s', 0):.1f} (s)")
    return out


def render(figs: dict) -> str:
    m, info = figs["machine"], figs["info"]
    head = [f"jobsight stored metrics: {m['started']}, commit {m['commit']}, {m['cpu']}, {m['cores']} cores, "
            f"{m['ram_gib']:.1f} GiB RAM, load {' / '.join(f'{x:.2f}' for x in m['load_before'])} before, "
            f"{' / '.join(f'{x:.2f}' for x in figs['load_after'])} after (1/5/15 min)",
            f"database: {info['jobs']:,} jobs, {info['samples']:,} samples, {info['db_gb']:.2f} GB"
            + (" (reused)" if figs.get("reused") else "") + f"; Python {m['python']}, duckdb {m['duckdb']}; "
            f"median of {figs['rounds']} runs per command; wall time {figs['wall_s'] / 60:.1f} min"]
    for key, err in figs.get("errors", {}).items():
        head.append(f"step {key} FAILED: {err.strip().splitlines()[-1] if err.strip() else ''}")
    cols = ("what", "jobsight", "baseline", "ratio", "peak RSS", "target", "met?")
    rows = [cols] + rows_for(figs)
    widths = [max(len(r[i]) for r in rows) for i in range(len(cols))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |" for r in rows]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    tail = ["", "where the time went (seconds; open = connect + settings + refresh + views; RSS after a step: the "
                "process's peak so far, shown from 400 MB; CPU: user + system seconds of all threads):"]
    tail += where_time_went(figs)
    return "\n".join(head + [""] + lines + tail)


