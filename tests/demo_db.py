"""A published database of the demo generator's jobs, for tests that read it through the real code."""
from __future__ import annotations

from pathlib import Path

from jobsight.analytics.cli import main as jobsight
from jobsight.analytics.demo import SUBDIRS, generate
from jobsight.analytics.store.snapshot import publish


def demo_db(root: Path, *, jobs: int, days: int, seed: int, clusters: tuple[str, ...] = ("demo",)) -> tuple[Path, Path]:
    """Generate demo input in ROOT, ingest it once per cluster (the same ids on each) with the
    default settings, publish the snapshot; returns the database and its config file."""
    db, config, out = root / "demo.duckdb", root / "jobsight.toml", root / "data"
    config.write_text("# defaults\n", encoding="utf-8")
    generate(out, jobs=jobs, days=days, seed=seed)
    for cluster in clusters:
        rc = jobsight(["ingest", "--db", str(db), "--config", str(config), "--timezone", "UTC", "--cluster", cluster,
                       "--quiet"] + [str(out / d) for d in SUBDIRS if (out / d).is_dir()])
        assert rc == 0, f"ingest of the demo data for cluster {cluster} failed"
    publish(db)
    return db, config
