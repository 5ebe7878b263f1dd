"""Concurrency: the dashboard (waitress, 127.0.0.1, a free port) answers a scripted load from 4
threads while `jobsight ingest` adds files in between: no failed request, and the jobs of each
ingest are visible to every request made after that ingest (which publishes the snapshot) returned.
Always: 100 requests over ~6 s and 2 ingests; JOBSIGHT_LONG=1: 1,000 requests over ~60 s."""
from __future__ import annotations

import json
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from relhelp import LONG, ROOT, generated_cluster, run_ingest


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    return generated_cluster(tmp_path_factory)

REQUESTS, SECONDS = (1000, 60.0) if LONG else (100, 6.0)
THREADS = 4


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _job_ids(sacct_text: Path) -> set[str]:
    lines = sacct_text.read_text(encoding="utf-8").splitlines()
    i = lines[0].split("|").index("JobIDRaw")
    return {ln.split("|")[i] for ln in lines[1:] if "." not in ln.split("|")[i]}


def _json_ids(path: Path) -> set[str]:
    return {str(j["job_id"]) for j in json.loads(path.read_text(encoding="utf-8"))["jobs"]}


class Client:
    def __init__(self, port: int):
        self.base = f"http://127.0.0.1:{port}"

    def get(self, path: str) -> tuple[int, str]:
        with urllib.request.urlopen(self.base + path, timeout=60) as r:
            return r.status, r.read().decode()

    def job(self, jid: str) -> tuple[int, str]:
        body = {"output": "job-content.children", "outputs": {"id": "job-content", "property": "children"},
                "inputs": [{"id": "job-key", "property": "data", "value": {"cluster": "demo", "id": jid}}],
                "changedPropIds": ["job-key.data"]}
        req = urllib.request.Request(self.base + "/_dash-update-component", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read().decode()

    def flagged(self) -> tuple[int, str]:
        key = "..fl-table.rowData...fl-status.children...fl-table.columnDefs.."
        ins = ["fl-period.start_date", "fl-period.end_date", "fl-code.value", "fl-severity.value", "fl-user.value",
               "fl-account.value", "fl-partition.value"]
        body = {"output": key, "outputs": [{"id": "fl-table", "property": "rowData"},
                                           {"id": "fl-status", "property": "children"},
                                           {"id": "fl-table", "property": "columnDefs"}],
                "inputs": [{"id": p.split(".")[0], "property": p.split(".")[1], "value": None} for p in ins],
                "changedPropIds": ins[:1]}
        req = urllib.request.Request(self.base + "/_dash-update-component", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read().decode()


@pytest.fixture()
def server(cluster, tmp_path):
    root, _ = cluster
    db = tmp_path / "live.duckdb"
    first = sorted((root / "sacct").glob("*.txt"))[0]
    assert run_ingest(db, first).returncode == 0
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "jobsight.analytics.cli", "dashboard", "--db", str(db), "--port", str(port),
                             "--auth", "none", "--threads", "4"], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    client = Client(port)
    deadline = time.monotonic() + 60
    while True:
        try:
            if client.get("/")[0] == 200:
                break
        except (urllib.error.URLError, ConnectionError):
            pass
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < deadline, "dashboard did not start"
        time.sleep(0.3)
    yield db, client, first
    proc.terminate()
    proc.wait(timeout=30)
    proc.stderr.close()


def test_dashboard_under_load_while_ingesting(cluster, server):
    root, _ = cluster
    db, client, first = server
    seen = _job_ids(first)
    batches = [sorted((root / "sacct").glob("*.txt"))[1]] + sorted((root / "sacct-json").glob("*.json"))
    if not LONG:
        batches = batches[:2]
    new_ids = []
    for b in batches:
        ids = (_job_ids(b) if b.suffix == ".txt" else _json_ids(b)) - seen
        assert ids, b
        new_ids.append(sorted(ids)[0])
        seen |= ids
    known = sorted(_job_ids(first))[:5]

    latencies, failures, _stop = [], [], threading.Event()
    per_thread = REQUESTS // THREADS
    pause = SECONDS / per_thread

    def worker(n: int):
        for i in range(per_thread):
            kind = (n + i) % 3
            t0 = time.monotonic()
            try:
                status, text = (client.get("/") if kind == 0 else
                                client.job(known[i % len(known)]) if kind == 1 else client.flagged())
                ok = status == 200 and "Traceback" not in text and (kind != 1 or "No such job" not in text)
                if not ok:
                    failures.append((kind, status, text[:200]))
            except Exception as exc:   # a refused or reset connection is a failed request
                failures.append((kind, repr(exc)))
            latencies.append(time.monotonic() - t0)
            time.sleep(pause)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(THREADS)]
    for t in threads:
        t.start()
    stale = []
    gap = SECONDS / (len(batches) + 1)
    for b, jid in zip(batches, new_ids):
        time.sleep(gap)
        assert "No such job" in client.job(jid)[1], f"{jid} visible before its ingest"
        proc = run_ingest(db, b)
        assert proc.returncode == 0, proc.stderr
        # no stale data after the refresh: every request made after the ingest that published the job
        # returned sees it, THREADS at once (so on several server workers), next to the load above
        with ThreadPoolExecutor(THREADS) as pool:
            after = list(pool.map(lambda _: client.job(jid)[1], range(THREADS)))  # noqa: B023 (called before the loop moves on)
        stale += [jid for text in after if "No such job" in text]
    for t in threads:
        t.join()
    lat = sorted(latencies)
    p50, p95 = statistics.median(lat), lat[int(0.95 * (len(lat) - 1))]
    print(f"\nload: {len(lat)} requests from {THREADS} threads, {len(failures)} failed, {len(batches)} ingests, "
          f"p50 {p50 * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms")
    assert len(lat) == per_thread * THREADS
    assert not failures, failures[:5]
    assert not stale, f"jobs not visible after their ingest published: {stale}"
