"""`/metrics`: the figures Prometheus scrapes, in its text exposition format (version 0.0.4).

Every number comes from the read API (analytics/queries/prometheus.py), read from the same
published snapshot as the pages (so a scrape never waits for ingest); this module serves it. Only
an admin, or a request carrying the `[dashboard] metrics_token_file` token as `Authorization:
Bearer` (checked in dashboard/auth.py), gets them.
"""
from __future__ import annotations

import flask

from jobsight.analytics.queries.prometheus import exposition
from jobsight.dashboard import common
from jobsight.dashboard.auth import current_scope, metrics_token_accepted

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
PATH = "metrics"        # under the app's URL prefix: /metrics, or /jobsight/metrics


def install(app, prefix: str) -> None:
    """Serve /metrics under the app's URL prefix, from the snapshot the pages read."""
    def metrics():
        if not metrics_token_accepted() and current_scope().role != "admin":
            return flask.Response("Forbidden: the metrics are for admins and the metrics token\n", status=403,
                                  mimetype="text/plain")
        with flask.current_app.config[common.READER_KEY].cursor() as h:
            body = exposition(h)
        return flask.Response(body, headers={"Content-Type": CONTENT_TYPE, "Cache-Control": "no-store"})

    app.server.add_url_rule(prefix + PATH, "jobsight_metrics", metrics, methods=["GET"])
