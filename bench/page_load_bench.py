"""Dashboard page load in headless Chromium, on the demo's data, against the browser's own floor.

    .venv/bin/python bench/page_load_bench.py [--rounds 10] [--page-rounds 3] [--workdir DIR] [--db PATH]
        [--quiet-ms 500] [--skip-pages] [--screenshots DIR] [--json]

Builds the demo's data (`jobsight demo --no-serve --out WORKDIR/demo`, defaults: 3,000 jobs over
28 days; a second run reuses it), unless --db names a database already. Starts `jobsight dashboard
--auth header` on it, in its own process on loopback (its config makes root an admin and the
heaviest project's heaviest user its lead), and drives headless Chromium with selenium and
Debian's chromedriver, the driver tests/test_dashboard_browser.py uses through Dash's test browser
(same flags: --headless --no-sandbox --disable-gpu --disable-dev-shm-usage; window 1400 x 1000).
Who the browser is goes in the trusted proxy's `X-Forwarded-User` header (DevTools
`Network.setExtraHTTPHeaders`), as a proxy would set it.

"Fully drawn", precisely: a script installed before any page script runs
(`Page.addScriptToEvaluateOnNewDocument`) wraps `window.fetch`, through which Dash's renderer asks
for the layout, the dependencies and every callback (`_dash-update-component`), and watches the
document with a MutationObserver. The page counts as fully drawn once the document has loaded, at
least one callback has been answered, no fetch is pending (response bodies read), no element is
`data-dash-is-loading="true"`, no loading spinner (`.dash-spinner`, `.dash-default-spinner`,
`.dash-graph-spinner`) is visible, Dash's store says it is not loading, and nothing in the DOM has
changed for --quiet-ms. The figure is the time from navigation start (`performance.timeOrigin`,
the origin of `performance.now()`) to the first animation frame after the last DOM change before
that quiet spell: the last callback applied, the last grid row and chart trace inserted, and a
frame to paint them. The quiet spell itself is not counted.

Cases:
- fresh: a new Chromium with a new empty profile (no cache) for every round; its first navigation.
- warm: one Chromium per case kept across rounds; each round navigates about:blank, then the page
  (a new navigation, so the page's scripts come from the HTTP cache and its data from the server).
- baseline "static page, same bytes": a page from a waitress server in this process with the same
  number of requests as the overview's load, each of the same size (the document, each script and
  stylesheet, and every fetch incl. each callback's response), the scripts inert padding, the
  fetches all started at once and drawn into the page when all are in: what the browser needs to
  fetch and parse the overview's bytes, with no app work and no chain of callbacks.
- baseline "trivial page": a one-line HTML page from the same server: the floor of a navigation.

Rounds interleave the cases (overview, static, trivial), so load from other processes hits each
alike. Then, warm only and --page-rounds each, every page per role: an admin, a project lead, a
researcher (a member of that project, not its lead) and a user who ran no jobs. --screenshots DIR:
then a full-page screenshot (1400 px wide, as tall as the page) of each of those pages per role,
DIR/<role>-<page>.png, to look at.

Where the time goes (printed for the overview): navigation milestones (document received,
DOMContentLoaded, load, layout and dependencies fetched), and each callback's start, its server
time (time to first byte of its response, from Resource Timing) and its end, p50 over the rounds;
the renderer's main-thread time split into script, layout and style (DevTools
`Performance.getMetrics`); and the bytes served. Long animation frames name the script of each
task's entry point, not where the time went: Dash loads @babel/polyfill (its renderer needs the
polyfill's regeneratorRuntime), whose setImmediate React's scheduler prefers, so all of React's
rendering is counted under polyfill@7...min.js there; the V8 profile (--profile) gives self time
by file (the polyfill's own is tens of ms, mostly its String.prototype.trim).

Targets: overview fully drawn <= 1 s warm and <= 1.5 s in a fresh browser (p50, and said for p95).
The machine may be shared: compare the ratio to the baselines, not seconds to another day's.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from page_browser import Chromium

ROOT = Path(__file__).resolve().parents[1]
_SCRIPT = Path(sys.executable).with_name("jobsight")
JOBSIGHT = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "jobsight.analytics.cli"]
TARGET_WARM_S, TARGET_FRESH_S = 1.0, 1.5
ADMIN, NEWCOMER = "root", "newcomer"


# ------------------------------------------------------------------------------------ statistics


def pct(values: list[float], q: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, int(round(q * (len(v) - 1))))]


def p50(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


# ----------------------------------------------------------------------------------------- data


def demo_db(workdir: Path) -> Path:
    out = workdir / "demo"
    t0 = time.monotonic()
    subprocess.run([*JOBSIGHT, "demo", "--no-serve", "--out", str(out)], check=True, cwd=workdir,
                   stdout=subprocess.DEVNULL)
    print(f"demo data: {out} ({time.monotonic() - t0:.0f} s)", file=sys.stderr, flush=True)
    return out / "demo.duckdb"


def cli_json(*args: str) -> list[dict]:
    r = subprocess.run([*JOBSIGHT, *args, "--format", "json"], check=True, capture_output=True, text=True)
    return json.loads(r.stdout)


def people(db: Path) -> dict:
    """The project with the most SBU, its heaviest user (its lead), another member (a researcher),
    a job to open."""
    accounts = sorted(cli_json("usage", "--db", str(db), "--by", "account"), key=lambda r: -(r["sbu"] or 0))
    project = accounts[0]["account"]
    users = sorted(cli_json("usage", "--db", str(db), "--by", "user", "--account", project),
                   key=lambda r: -(r["sbu"] or 0))
    flags = cli_json("flags", "--db", str(db))
    return {"project": project, "lead": users[0]["user"], "researcher": users[1]["user"],
            "job": (flags[0]["cluster"], flags[0]["job_id"])}


def pages(who: dict) -> dict[str, tuple[str, list[str]]]:
    """role -> (user, the pages that role opens)."""
    cluster, job = who["job"]
    return {
        "admin": (ADMIN, ["/", "/users", "/projects", "/flagged", "/running", "/jobs",
                          f"/project?name={who['project']}", f"/user?name={who['researcher']}",
                          f"/job?cluster={cluster}&id={job}"]),
        "lead": (who["lead"], ["/", f"/project?name={who['project']}", "/jobs", "/flagged"]),
        "researcher": (who["researcher"], ["/", "/jobs", "/flagged"]),
        "no jobs": (NEWCOMER, ["/", "/jobs"]),
    }


# ------------------------------------------------------------------------------------- servers


class Dashboard:
    """`jobsight dashboard --auth header` in its own process on a free loopback port."""

    def __init__(self, db: Path, workdir: Path, lead: str, project: str):
        self.port = free_port()
        cfg = workdir / "page-load.toml"
        cfg.write_text(f'[roles]\nadmins = ["{ADMIN}"]\nleads = {{ "{project}" = ["{lead}"] }}\n', encoding="utf-8")
        self.log = open(workdir / "dashboard.log", "w")
        self.proc = subprocess.Popen([*JOBSIGHT, "dashboard", "--db", str(db), "--config", str(cfg), "--auth", "header",
                                      "--host", "127.0.0.1", "--port", str(self.port)],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 120
        while True:
            try:
                req = urllib.request.Request(self.url + "/", headers={"X-Forwarded-User": ADMIN})
                with urllib.request.urlopen(req, timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"jobsight dashboard did not start: see {workdir / 'dashboard.log'}")
            time.sleep(0.3)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


class Baseline:
    """A waitress server in this process: /trivial, and /static built to the sizes of a measured load."""

    def __init__(self):
        import waitress.server
        self.files: dict[str, tuple[bytes, str, str]] = {
            "/trivial": (b"<!doctype html><title>trivial</title><p>trivial page</p>\n", "text/html", "no-cache")}
        self.server = waitress.server.create_server(self.app, host="127.0.0.1", port=0, threads=8)
        threading.Thread(target=self.server.run, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.effective_port}"

    def app(self, environ, start_response):
        got = self.files.get(environ.get("PATH_INFO", ""))
        if got is None:
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"not found\n"]
        body, ctype, cache = got
        start_response("200 OK", [("Content-Type", ctype), ("Content-Length", str(len(body))), ("Cache-Control", cache)])
        return [body]

    def mimic(self, doc_bytes: int, resources: list[dict]) -> None:
        """/static: a document of ``doc_bytes``, a script or stylesheet of the same size for each the
        overview loaded, and every fetch of it (layout, dependencies, callbacks) as a file of its size."""
        head, tail, fetches = [], [], []
        for i, r in enumerate(resources):
            size = max(int(r["size"]), 8)
            if r["type"] == "css":
                path = f"/pad/{i}.css"
                self.files[path] = (b"/*" + b"c" * (size - 4) + b"*/", "text/css", "public, max-age=31536000")
                head.append(f'<link rel="stylesheet" href="{path}">')
            elif r["type"] == "script":
                path = f"/pad/{i}.js"
                self.files[path] = (b"/*" + b"s" * (size - 4) + b"*/", "application/javascript",
                                    "public, max-age=31536000")
                tail.append(f'<script src="{path}"></script>')
            else:
                path = f"/pad/{i}.json"
                self.files[path] = (b'"' + b"f" * (size - 2) + b'"', "application/json", "no-store")
                fetches.append(path)
        script = ("<script>Promise.all(" + json.dumps(fetches) + ".map(u => fetch(u).then(r => r.text())))"
                  ".then(() => { document.getElementById('out').textContent = 'drawn'; });</script>")
        page = ("<!doctype html><html><head><title>static</title>" + "".join(head) + "</head><body><div id=out></div>"
                + "".join(tail) + script)
        pad = max(0, doc_bytes - len(page) - len("<!---->\n</body></html>"))
        self.files["/static"] = ((page + "<!--" + "p" * pad + "-->\n</body></html>").encode(), "text/html", "no-cache")

    def stop(self) -> None:
        self.server.close()


# ------------------------------------------------------------------------------------- browser


def profile(url: str, user: str, quiet_ms: int, rounds: int) -> tuple[dict, dict, float]:
    """Sampled V8 CPU profiles (DevTools Profiler) of warm loads of ``url``: self time by script file
    and by function (ms, summed over ``rounds``), and the profiled loads' p50 fully-drawn time."""
    b = Chromium(user, quiet_ms)
    by_file: dict[str, float] = {}
    by_fn: dict[str, float] = {}
    done = []
    try:
        b.measure(url)       # the page's scripts in the cache, its process running
        cdp = b.driver.execute_cdp_cmd
        cdp("Profiler.enable", {})
        cdp("Profiler.setSamplingInterval", {"interval": 500})
        for _ in range(rounds):
            cdp("Profiler.start", {})
            done.append(b.measure(url)["done"])
            prof = cdp("Profiler.stop", {})["profile"]
            nodes = {n["id"]: n for n in prof["nodes"]}
            self_us: dict[int, float] = {}
            for sid, dt in zip(prof["samples"], prof["timeDeltas"]):
                self_us[sid] = self_us.get(sid, 0.0) + dt
            for nid, us in self_us.items():
                cf = nodes[nid]["callFrame"]
                name = cf["functionName"] or "(anonymous)"
                file = cf["url"].split("?")[0].rsplit("/", 1)[-1] or name
                by_file[file] = by_file.get(file, 0.0) + us / 1000
                if cf["url"]:
                    key = f"{file}:{name}"
                    by_fn[key] = by_fn.get(key, 0.0) + us / 1000
    finally:
        b.quit()
    return by_file, by_fn, p50(done)


def fresh(url: str, user: str | None, quiet_ms: int) -> dict:
    b = Chromium(user, quiet_ms)
    try:
        return b.measure(url)
    finally:
        b.quit()


# ------------------------------------------------------------------------------------- analysis


def served(m: dict) -> tuple[int, list[dict]]:
    """The document's size and every resource of a load, as the static baseline copies them."""
    out = []
    for r in m["res"]:
        kind = "css" if r["name"].split("?")[0].endswith(".css") else "script" if r["type"] == "script" else "fetch"
        out.append({"type": kind, "size": r["size"]})
    return int(m["nav"]["size"]), out


def short(output: str) -> str:
    """A callback's outputs as Dash names them ("..a.b...c.d.." for two, "x.y@hash"), readable."""
    return ", ".join(o.split("@")[0] for o in output.strip(".").split("...") if o)


def breakdown(runs: list[dict]) -> list[tuple[str, float, float, float]]:
    """(step, start, server ms, end) p50 over the loads: milestones and each callback in order."""
    rows: dict[str, list[tuple[float, float, float]]] = {}
    order: list[str] = []

    def add(name, start, ttfb, end):
        if name not in rows:
            rows[name], _ = [], order.append(name)
        rows[name].append((start, ttfb, end))
    for m in runs:
        nav = m["nav"]
        add("document received", 0.0, float("nan"), nav["responseEnd"])
        add("DOMContentLoaded", 0.0, float("nan"), nav["dcl"])
        add("load event", 0.0, float("nan"), nav["load"])
        posts = [r for r in m["res"] if "_dash-update-component" in r["name"]]
        seen: dict[str, int] = {}
        for f in m["fetches"]:
            path = f["url"].split("?")[0].rsplit("/", 1)[-1]
            name = f"callback {short(f['output'])}" if f["output"] else f"GET {path}"
            seen[name] = seen.get(name, 0) + 1
            if seen[name] > 1:
                name += f" #{seen[name]}"
            ttfb = float("nan")
            if f["output"] and posts:
                r = min(posts, key=lambda r, f=f: abs(r["start"] - f["start"]))
                ttfb = r["ttfb"]
            add(name, f["start"], ttfb, f["end"] if f["end"] is not None else float("nan"))
        if m.get("totals"):
            add("the totals shown (#total-sbu in the DOM)", 0.0, float("nan"), m["totals"])
        add("fully drawn", 0.0, float("nan"), m["done"])
    return [(n, p50([x[0] for x in rows[n]]), p50([x[1] for x in rows[n]]), p50([x[2] for x in rows[n]]))
            for n in sorted(order, key=lambda n: p50([x[2] for x in rows[n]]))]


def row(label: str, xs: list[float], target: float | None = None) -> str:
    s = f"| {label} | {len(xs)} | {p50(xs):,.0f} | {pct(xs, 0.95):,.0f} | {min(xs):,.0f}–{max(xs):,.0f} | |"
    if target is not None:
        met = p50(xs) <= target * 1000
        s += f" ≤ {target * 1000:,.0f} | {'yes' if met else 'no'} (p95 {'within' if pct(xs, 0.95) <= target * 1000 else 'over'}) |"
    else:
        s += " | |"
    return s


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=10, help="rounds of the overview and its baselines, fresh and warm")
    ap.add_argument("--page-rounds", type=int, default=3, help="warm rounds of every page per role")
    ap.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "jobsight-page-load"))
    ap.add_argument("--db", help="an existing jobsight database instead of the demo's")
    ap.add_argument("--quiet-ms", type=int, default=500, help="no DOM change for this long: drawn")
    ap.add_argument("--skip-pages", action="store_true", help="the overview and its baselines only")
    ap.add_argument("--screenshots", metavar="DIR", help="a full-page screenshot of every page per role into DIR")
    ap.add_argument("--profile", type=int, default=3, metavar="N",
                    help="then N warm overview loads under V8's sampling profiler (0: none)")
    ap.add_argument("--json", action="store_true", help="also print the figures as one JSON line")
    args = ap.parse_args()
    if not (shutil.which("chromium") and shutil.which("chromedriver")):
        raise SystemExit("chromium/chromedriver not installed (scripts/browser-setup.sh start, as root)")
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    db = Path(args.db) if args.db else demo_db(workdir)
    who = people(db)
    print(f"load {load()}; project {who['project']}, lead {who['lead']}, researcher {who['researcher']}",
          file=sys.stderr, flush=True)
    dash_srv = Dashboard(db, workdir, who["lead"], who["project"])
    base = Baseline()
    res: dict[str, list[dict]] = {}
    t_start = time.time()
    try:
        ov = dash_srv.url + "/"
        # the server's very first page (its caches cold), then what the baseline copies
        first = fresh(ov, ADMIN, args.quiet_ms)
        doc, resources = served(first)
        base.mimic(doc, resources)
        kinds = {"overview": ov, "static page, same bytes": base.url + "/static", "trivial page": base.url + "/trivial"}
        for i in range(args.rounds):
            for k, url in kinds.items():
                res.setdefault(f"fresh {k}", []).append(fresh(url, ADMIN, args.quiet_ms))
            print(f"fresh round {i + 1}/{args.rounds} (load {load()})", file=sys.stderr, flush=True)
        warm = Chromium(ADMIN, args.quiet_ms)
        try:
            for url in kinds.values():       # fill the cache
                warm.blank()
                warm.measure(url)
            for i in range(args.rounds):
                for k, url in kinds.items():
                    warm.blank()
                    res.setdefault(f"warm {k}", []).append(warm.measure(url))
                print(f"warm round {i + 1}/{args.rounds} (load {load()})", file=sys.stderr, flush=True)
        finally:
            warm.quit()
        if not args.skip_pages:
            for role, (user, paths) in pages(who).items():
                b = Chromium(user, args.quiet_ms)
                try:
                    for path in paths:
                        b.blank()
                        b.measure(dash_srv.url + path)
                        for _ in range(args.page_rounds):
                            b.blank()
                            res.setdefault(f"page {role} {path}", []).append(
                                b.measure(dash_srv.url + path))
                        if args.screenshots:
                            shots = Path(args.screenshots)
                            shots.mkdir(parents=True, exist_ok=True)
                            name = path.strip("/").split("?")[0] or "overview"
                            b.screenshot(shots / f"{role.replace(' ', '-')}-{name}.png")
                finally:
                    b.quit()
                print(f"pages as {role} done (load {load()})", file=sys.stderr, flush=True)
        prof = profile(ov, ADMIN, args.quiet_ms, args.profile) if args.profile else None
    finally:
        base.stop()
        dash_srv.stop()
    t_end = time.time()

    ms = {k: [m["done"] for m in v] for k, v in res.items()}
    print(f"\n{time.strftime('%Y-%m-%d %H:%M', time.gmtime(t_start))}–{time.strftime('%H:%M', time.gmtime(t_end))} UTC, "
          f"load now {load()}; database {db}; quiet spell {args.quiet_ms} ms (not counted)")
    print(f"server's first page ever (fresh browser): {first['done']:,.0f} ms\n")
    print("| load, ms from navigation start to fully drawn | n | p50 | p95 | min–max | overview / this (p50) | target | met? |")
    print("|---|---|---|---|---|---|---|---|")
    for mode, target in (("fresh", TARGET_FRESH_S), ("warm", TARGET_WARM_S)):
        o = ms[f"{mode} overview"]
        print(row(f"{mode}: overview", o, target=target))
        for k in ("static page, same bytes", "trivial page"):
            b = ms[f"{mode} {k}"]
            print(f"| {mode}: {k} | {len(b)} | {p50(b):,.0f} | {pct(b, 0.95):,.0f} | {min(b):,.0f}–{max(b):,.0f} | "
                  f"{p50(o) / p50(b):.2f} | | |")
    size = first["nav"]["size"] + sum(r["size"] for r in first["res"])
    cbs = [f for f in first["fetches"] if f["output"]]
    print(f"\noverview: {len(first['res']) + 1} requests, {size / 1e6:.2f} MB decoded "
          f"({(first['nav']['transfer'] + sum(r['transfer'] for r in first['res'])) / 1e6:.2f} MB transferred), "
          f"{len(cbs)} callbacks")
    for mode in ("fresh", "warm"):
        runs = res[f"{mode} overview"]
        cpu = {k: p50([m["cpu"][k] for m in runs]) for k in runs[0]["cpu"]}
        print(f"\nwhere the time goes, {mode} overview (p50 ms): renderer main thread {cpu['TaskDuration']:,.0f} "
              f"(script {cpu['ScriptDuration']:,.0f}, layout {cpu['LayoutDuration']:,.0f}, "
              f"style {cpu['RecalcStyleDuration']:,.0f})")
        fr = [m["frames"] for m in runs if m.get("frames")]
        if fr:
            files = sorted({f for x in fr for f in x["scripts"]}, key=lambda f: -p50([x["scripts"].get(f, 0) for x in fr]))
            print(f"long animation frames (over 50 ms): {p50([x['n'] for x in fr]):.0f} frames, "
                  f"{p50([x['total'] for x in fr]):,.0f} ms, of which rendering (style, layout, paint) "
                  f"{p50([x['render'] for x in fr]):,.0f} ms; by the file of each task's entry point (all of "
                  "React's rendering runs from the setImmediate of @babel/polyfill, so it is counted there; "
                  "self time by file: the V8 profile): "
                  + ", ".join(f"{f} {p50([x['scripts'].get(f, 0) for x in fr]):,.0f}" for f in files[:8]))
        print("| step | start | server (TTFB) | end |\n|---|---|---|---|")
        for name, s, t, e in breakdown(runs):
            print(f"| {name} | {s:,.0f} | {'' if t != t else f'{t:,.0f}'} | {e:,.0f} |")
    if prof:
        by_file, by_fn, drawn = prof
        total = sum(v for f, v in by_file.items() if f != "(idle)")
        print(f"\nV8 CPU profile of {args.profile} warm overview loads (p50 {drawn:,.0f} ms drawn, profiler on): "
              f"{total / args.profile:,.0f} ms busy per load; self time per load by file: "
              + ", ".join(f"{f} {v / args.profile:,.0f}" for f, v in sorted(by_file.items(), key=lambda x: -x[1])[:10]))
        print("top functions per load: " + ", ".join(
            f"{f} {v / args.profile:,.0f}" for f, v in sorted(by_fn.items(), key=lambda x: -x[1])[:12]))
    if not args.skip_pages:
        print(f"\npages per role, warm, {args.page_rounds} rounds each")
        print("| role | page | p50 ms | max ms |\n|---|---|---|---|")
        for k, v in ms.items():
            if k.startswith("page "):
                role = next(r for r in ("admin", "lead", "researcher", "no jobs") if k.startswith(f"page {r} "))
                print(f"| {role} | {k[len(f'page {role} '):]} | {p50(v):,.0f} | {max(v):,.0f} |")
    errors = [(k, e["message"]) for k, v in res.items() for m in v for e in m["errors"]]
    for k, msg in errors[:10]:
        print(f"browser console error on {k}: {msg[:200]}", file=sys.stderr)
    if args.json:
        print(json.dumps({"first_ms": first["done"], **{k: {"n": len(v), "p50": p50(v), "p95": pct(v, 0.95)}
                                                         for k, v in ms.items()}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
