"""Headless Chromium for bench/page_load_bench.py: selenium + chromedriver, a new empty profile, and
a monitor script in every page that says when the page is fully drawn (no request pending and no DOM
change for QUIET_MS), with the page's fetches and animation frames."""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

WINDOW = (1400, 1000)

MONITOR = r"""
(() => {
  if (window.__pl) return;
  const M = window.__pl = {fetches: [], pending: 0, lastMut: 0, frame: 0, done: null, quietMs: QUIET_MS};
  const origFetch = window.fetch;
  window.fetch = function (input, init) {
    const url = typeof input === 'string' ? input : ((input && input.url) || '');
    const rec = {url: String(url), output: '', start: performance.now(), head: null, end: null, status: 0};
    if (rec.url.indexOf('_dash-update-component') >= 0) {
      try { rec.output = JSON.parse(init.body).output; } catch (e) { rec.output = '?'; }
    }
    M.fetches.push(rec); M.pending++;
    const fin = () => { if (rec.end === null) { rec.end = performance.now(); M.pending--; } };
    return origFetch.apply(this, arguments).then(r => {
      rec.head = performance.now(); rec.status = r.status;
      r.clone().text().then(fin, fin);
      return r;
    }, e => { fin(); throw e; });
  };
  const mark = () => {
    M.lastMut = performance.now();
    if (!M.totals && document.getElementById('total-sbu')) M.totals = M.lastMut;   // the overview's first figure
    requestAnimationFrame(() => { M.frame = performance.now(); });
  };
  new MutationObserver(mark).observe(document, {subtree: true, childList: true, attributes: true,
                                                characterData: true});
  // main-thread time by script file (Long Animation Frames: frames over 50 ms, with their scripts)
  M.frames = {n: 0, total: 0, render: 0, scripts: {}};
  try {
    new PerformanceObserver(list => {
      for (const f of list.getEntries()) {
        M.frames.n++; M.frames.total += f.duration;
        if (f.renderStart > 0) M.frames.render += f.startTime + f.duration - f.renderStart;
        for (const s of f.scripts) {
          const file = (s.sourceURL || '(' + s.invokerType + ')').split('?')[0].split('/').pop() || '(inline)';
          M.frames.scripts[file] = (M.frames.scripts[file] || 0) + s.duration;
        }
      }
    }).observe({type: 'long-animation-frame', buffered: true});
  } catch (e) {}
  const spinning = () => {
    if (document.querySelector('[data-dash-is-loading="true"]')) return true;
    if (document.querySelector('.dash-graph--pending')) return true;     // a graph waiting for plotly.js
    for (const el of document.querySelectorAll('.dash-spinner, .dash-default-spinner, .dash-graph-spinner')) {
      if (el.offsetParent !== null) return true;
    }
    try { if (window.store && window.store.getState().isLoading) return true; } catch (e) {}
    return false;
  };
  const check = () => {
    if (M.done !== null) return;
    const now = performance.now();
    if (document.readyState !== 'complete' || M.pending > 0) return;
    // a Dash page: drawn only once a callback has been answered
    if (document.getElementById('_dash-config') && !M.fetches.some(f => f.output && f.end !== null)) return;
    if (now - M.lastMut < M.quietMs || spinning()) return;
    M.done = Math.max(M.frame, M.lastMut);
  };
  setInterval(check, 50);
})();
"""


class Chromium:
    """Headless Chromium through selenium + chromedriver, a new empty profile, the monitor installed."""

    def __init__(self, user: str | None, quiet_ms: int):
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
        opts = webdriver.ChromeOptions()
        for a in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                  f"--window-size={WINDOW[0]},{WINDOW[1]}", "--disable-notifications"):
            opts.add_argument(a)
        if os.environ.get("DASH_TEST_CHROMEPATH"):
            opts.binary_location = os.environ["DASH_TEST_CHROMEPATH"]
        self.profile = tempfile.mkdtemp(prefix="page-load-profile-")
        opts.add_argument(f"--user-data-dir={self.profile}")
        self.driver = webdriver.Chrome(options=opts, service=Service(shutil.which("chromedriver")))
        cdp = self.driver.execute_cdp_cmd
        cdp("Page.addScriptToEvaluateOnNewDocument", {"source": MONITOR.replace("QUIET_MS", str(int(quiet_ms)))})
        cdp("Performance.enable", {})
        cdp("Network.enable", {})
        if user:
            cdp("Network.setExtraHTTPHeaders", {"headers": {"X-Forwarded-User": user}})

    def measure(self, url: str, timeout: float = 60) -> dict:
        d = self.driver
        before = self.metrics()
        d.get(url)
        deadline = time.monotonic() + timeout
        while True:
            done = d.execute_script("return window.__pl ? window.__pl.done : -1")
            if done is not None:
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"{url}: not drawn within {timeout:.0f} s")
            time.sleep(0.1)
        if done == -1:
            raise SystemExit(f"{url}: the load monitor did not run")
        got = d.execute_script(r"""
            const nav = performance.getEntriesByType('navigation')[0];
            const res = performance.getEntriesByType('resource').map(r => ({
                name: r.name, type: r.initiatorType, start: r.startTime, end: r.responseEnd,
                ttfb: r.responseStart - r.requestStart, size: r.decodedBodySize, transfer: r.transferSize}));
            return {nav: {responseEnd: nav.responseEnd, dcl: nav.domContentLoadedEventEnd, load: nav.loadEventEnd,
                          size: nav.decodedBodySize, transfer: nav.transferSize},
                    res: res, fetches: window.__pl.fetches, done: window.__pl.done, frames: window.__pl.frames,
                    totals: window.__pl.totals || null};""")
        after = self.metrics()
        # the renderer's totals: this page's share when the process served the page before too
        same = after["TaskDuration"] >= before["TaskDuration"]
        got["cpu"] = {k: after[k] - (before[k] if same else 0.0) for k in after}
        got["errors"] = [e for e in d.get_log("browser") if e.get("level") == "SEVERE"]
        return got

    def metrics(self) -> dict[str, float]:
        """The tab's renderer main-thread totals (DevTools Performance.getMetrics), ms."""
        got = {m["name"]: m["value"] for m in self.driver.execute_cdp_cmd("Performance.getMetrics", {})["metrics"]}
        return {k: got.get(k, 0.0) * 1000 for k in ("TaskDuration", "ScriptDuration", "LayoutDuration",
                                                     "RecalcStyleDuration")}

    def screenshot(self, path: Path) -> None:
        """The whole page as a PNG: the window's width, as tall as the document."""
        import base64
        cdp = self.driver.execute_cdp_cmd
        size = cdp("Page.getLayoutMetrics", {})["cssContentSize"]
        shot = cdp("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": {
            "x": 0, "y": 0, "width": WINDOW[0], "height": max(size["height"], WINDOW[1]), "scale": 1}})
        path.write_bytes(base64.b64decode(shot["data"]))

    def blank(self) -> None:
        self.driver.get("about:blank")

    def quit(self) -> None:
        try:
            self.driver.quit()
        finally:
            shutil.rmtree(self.profile, ignore_errors=True)
