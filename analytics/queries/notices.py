"""What `jobsight watch` reads to send its idle-GPU notices: the jobs due a notice (the view
watch_due, sql/views/), the notices a stopped watch left half-sent, and the settings they use."""
from __future__ import annotations

import datetime as dt


def due(db, at: dt.datetime) -> list[dict]:
    """The jobs to notify at `at` (naive UTC), rate_limited marked (watch_due)."""
    return db.rows("SELECT * FROM watch_due(?)", [at])


def interrupted(db) -> list[dict]:
    """Notices left 'sending' by a watch that stopped between sending and recording: never sent again."""
    return db.rows("SELECT cluster, job_id, \"user\", address, sent_at FROM watch_notice WHERE outcome = 'sending' "
                   "ORDER BY sent_at")


def setting(db, name: str) -> float:
    """A numeric setting the database holds (flags.gpu_idle_pct, watch.idle_hours, ...)."""
    return db.value("SELECT value FROM setting WHERE name = ?", [name])
