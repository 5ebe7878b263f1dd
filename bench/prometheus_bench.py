"""Time a Prometheus scrape of the dashboard's /metrics, and each query behind it, on a database.

    .venv/bin/python bench/prometheus_bench.py --db PATH [--rounds 10] [--as-of 2026-10-30T12:00]

PATH is a jobsight database (e.g. one `bench/dashboard_bench.py --phase generate --jobs 1000000`
made); its snapshot is published first when it has none. The scrape is a GET /metrics with the
metrics token through the Flask test client of the real app, reading the snapshot as the server
does. --as-of pins the scrape's time (default: noon of the newest day with usage, so that the 7-
and 30-day windows hold data in a generated database whose days are in the past).
"""
from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jobsight.analytics.queries import prometheus  # noqa: E402
from jobsight.analytics.store.snapshot import SnapshotReader, publish, snapshot_path  # noqa: E402
from jobsight.dashboard.app import create_app  # noqa: E402
from jobsight.dashboard.auth import Auth, Roles  # noqa: E402

TOKEN = "bench-token-" + "x" * 20


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", required=True)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--as-of", type=dt.datetime.fromisoformat)
    args = ap.parse_args()
    if not snapshot_path(args.db).exists():
        publish(args.db)
    reader = SnapshotReader(args.db)
    with reader.cursor() as h:
        as_of = args.as_of or h.value("SELECT max(day) FROM dash_day") + dt.timedelta(hours=12)
        jobs, running = h.execute("SELECT count(*), count(*) FILTER (WHERE state = 'RUNNING') FROM job_metrics").fetchone()
        print(f"jobs {jobs:,}, samples {h.value('SELECT count(*) FROM sample'):,}, running {running:,}; as of {as_of}")
        for source in prometheus.SOURCES:
            times = []
            for _ in range(args.rounds):
                t = time.perf_counter()
                h.fetch(source.sql, [as_of] if source.as_of else None)
                times.append(time.perf_counter() - t)
            print(f"  {source.sql:60s} median {statistics.median(times) * 1000:6.0f} ms")
    prometheus.utc_now = lambda: as_of
    client = create_app(reader, Auth("none", Roles(), metrics_token=TOKEN)).server.test_client()
    times = []
    for _ in range(args.rounds):
        t = time.perf_counter()
        r = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
        times.append(time.perf_counter() - t)
        assert r.status_code == 200, r.status_code
    body = r.get_data(as_text=True)
    print(f"GET /metrics: median {statistics.median(times) * 1000:.0f} ms, max {max(times) * 1000:.0f} ms "
          f"({body.count(chr(10) + 'jobsight_')} samples, {len(body):,} bytes)")
    reader.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
