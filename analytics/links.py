"""Where a job's page is on the dashboard: the one path the dashboard's links and the reports' links
to a job are built with. ``job_path`` is relative to the dashboard's root (its --url-prefix, which
the dashboard adds to every path of its own); ``job_url`` puts it under a dashboard's address
(`[report] dashboard_url`, the prefix included)."""
from __future__ import annotations

from urllib.parse import urlencode

JOB_PAGE = "job"        # the job page, /job?cluster=C&id=JOBIDRAW (dashboard/app.py routes it)


def job_path(cluster: str | None, job_id_raw: str) -> str:
    """``job?cluster=C&id=JOBIDRAW``: every value percent-encoded, an unknown cluster left out."""
    return JOB_PAGE + "?" + urlencode({k: v for k, v in (("cluster", cluster), ("id", job_id_raw)) if v})


def job_url(base: str, cluster: str | None, job_id_raw: str) -> str:
    """The job's page under the dashboard at ``base`` (``https://host/prefix/``)."""
    return base.rstrip("/") + "/" + job_path(cluster, job_id_raw)
