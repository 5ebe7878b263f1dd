"""Driving the real dashboard app in tests as the browser does: its Dash callbacks POSTed through
the Flask test client (header auth) under the app's URL prefix, a component found in a serialised
layout, and the job a link opens."""
from __future__ import annotations

import json
from urllib.parse import parse_qs, urlsplit

from conftest import post_callback


class _Under:
    """A test client whose requests go under the app's URL prefix."""
    def __init__(self, app):
        self.client, self.prefix = app.server.test_client(), app.config.url_base_pathname.rstrip("/")

    def post(self, path: str, **kw):
        return self.client.post(self.prefix + path, **kw)


def post(app, key: str, values: dict, user: str):
    """The callback ``key``'s response as ``user``, with the inputs and states ``values``."""
    r = post_callback(_Under(app), key, app.callback_map[key], lambda prop: values.get(prop), user)
    assert r.status_code == 200, r.data[:300]
    return json.loads(r.data)["response"]


def find(tree, cid: str):
    """The component with id ``cid`` in a serialised layout."""
    if isinstance(tree, dict):
        if tree.get("props", {}).get("id") == cid:
            return tree
        tree = tree.get("props", {}).get("children")
    if isinstance(tree, list):
        for t in tree:
            got = find(t, cid)
            if got is not None:
                return got
    elif isinstance(tree, dict):
        return find(tree, cid)
    return None


def opens(app, href: str, user: str) -> str:
    """The job a link opens: the router's page for its path (under the app's prefix), then the job
    page's content; its heading's job id."""
    url = urlsplit(href)
    assert url.path == app.config.url_base_pathname + "job" and not url.netloc
    page = post(app, "page.children", {"url.pathname": url.path, "url.search": "?" + url.query}, user)
    key = find(page["page"]["children"], "job-key")["props"]["data"]
    assert key == {k: v[0] for k, v in parse_qs(url.query).items()}
    content = post(app, "job-content.children", {"job-key.data": key}, user)["job-content"]["children"]
    heading = content[0]["props"]["children"]
    assert heading.startswith("Job ")
    return heading[len("Job "):]
