"""Shared test fixtures: where ../shared/realdata is, and how service-backed tests skip or fail.

Locally a test whose service (real Slurm, Chromium, gcc) is missing is skipped with the reason.
Under CI (.ci/run sets JOBSIGHT_REQUIRE_SERVICES=1) the same situation fails the test instead,
so a broken harness can never turn into a silent pass.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"
REALDATA = ROOT.parent / "shared" / "realdata"


def require_service(available: bool, reason: str) -> None:
    """Skip (locally) or fail (CI) when a service a test needs is not there."""
    if available:
        return
    if os.environ.get("JOBSIGHT_REQUIRE_SERVICES"):
        pytest.fail(f"required service missing under CI: {reason}", pytrace=False)
    pytest.skip(reason)


def harness_user(name: str):
    """The passwd entry of one of the Slurm harness's users, for a test that chowns a file to them:
    needs root and the user (skips with the reason otherwise)."""
    import pwd
    if os.geteuid() != 0:
        require_service(False, f"chowns a file to {name}: run as root")
    try:
        return pwd.getpwnam(name)
    except KeyError:
        require_service(False, f"no Unix user {name}: run scripts/slurm-harness.sh start as root (it creates them)")


XDIST_WORKER = bool(os.environ.get("PYTEST_XDIST_WORKER"))     # this process is a pytest-xdist worker

# A pytest-xdist worker gets COLUMNS=80 in its environment; the command-line tests expect the
# width a plain pytest run gives (no terminal: the commands' own default).
if XDIST_WORKER:
    os.environ.pop("COLUMNS", None)
    os.environ.pop("LINES", None)

SLURM_MODULES = "tests/test_slurm_"    # the real-Slurm modules' names start so (checked below)
SLURM_WORKER = "gw0"     # the pytest-xdist worker that submits the session's batch of Slurm jobs and runs their modules
SLURM_AFTER_S = 150      # ... after this long: the batch takes 2-3 minutes on the node, meanwhile that worker runs other modules


def _is_slurm_module(nodeid: str) -> bool:
    return nodeid.startswith(SLURM_MODULES)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """pytest-xdist (scripts/test.sh: -n 2) runs each module whole in one worker, so its
    module-scoped fixtures are built once, and the real-Slurm modules together in one worker, as
    they share the harness node and its queue (tests/slurm_batch.py); modules in collection order.

    The Slurm modules go to SLURM_WORKER, which submitted their batch of jobs as it started its first
    test (pytest_runtest_setup below), once SLURM_AFTER_S have passed: their first fixture waits
    until the whole batch is final, and that worker runs other modules while the jobs run rather
    than wait for them. The other worker never takes them: it has not submitted their jobs."""
    import time

    from xdist.scheduler import LoadFileScheduling

    class ModuleScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return SLURM_MODULES if _is_slurm_module(nodeid) else nodeid.split("::", 1)[0]

        def schedule(self) -> None:
            if not hasattr(self, "started"):
                self.started = time.monotonic()
            super().schedule()

        def _assign_work_unit(self, node) -> None:
            if SLURM_MODULES in self.workqueue:
                others = [scope for scope in self.workqueue if scope != SLURM_MODULES]
                live = {n.gateway.id for n in self.nodes if not n.shutting_down}
                mine = node.gateway.id == SLURM_WORKER or SLURM_WORKER not in live
                if mine and (not others or time.monotonic() - self.started >= SLURM_AFTER_S):
                    self.workqueue.move_to_end(SLURM_MODULES, last=False)
                elif others:
                    self.workqueue.move_to_end(others[0], last=False)
                    self.workqueue.move_to_end(SLURM_MODULES)
                else:
                    return      # only the Slurm modules are left: they wait for their worker
            super()._assign_work_unit(node)
            if not self.workqueue:      # a worker left waiting above has nothing more to come
                for n in self.nodes:
                    if n is not node and not n.shutting_down:
                        n.shutdown()

    return ModuleScheduling(config, log)


def pytest_collection_modifyitems(config, items) -> None:
    """Under pytest-xdist no real-Slurm test may run outside the Slurm modules' worker."""
    if not XDIST_WORKER:
        return
    strays = {item.nodeid.split("::", 1)[0] for item in items
              if item.get_closest_marker("slurm") and not _is_slurm_module(item.nodeid)}
    if strays:
        raise pytest.UsageError(f"real-Slurm tests outside {SLURM_MODULES}*.py run beside them: {sorted(strays)}")


def pytest_collection_finish(session) -> None:
    """Submit the jobs of the selected real-Slurm test modules now, so that they run in the harness
    while the rest of the session runs (tests/slurm_batch.py). A pytest-xdist worker collects every
    test but runs only some: there SLURM_WORKER submits them as its first test starts, another
    worker only if a Slurm test comes to it after all."""
    if session.config.option.collectonly:
        return
    modules = {getattr(item, "module", None) for item in session.items if item.get_closest_marker("slurm")}
    submitters = [m.submit_slurm_jobs for m in modules if hasattr(m, "submit_slurm_jobs")]
    if submitters:
        import slurm_batch
        if XDIST_WORKER:
            slurm_batch.collected.extend(submitters)
        else:
            slurm_batch.submit(submitters)


_first_test = True


def pytest_runtest_setup(item) -> None:
    global _first_test
    first, _first_test = _first_test, False
    if XDIST_WORKER and (item.get_closest_marker("slurm") or (first and os.environ["PYTEST_XDIST_WORKER"] == SLURM_WORKER)):
        import slurm_batch
        slurm_batch.submit(slurm_batch.collected)     # once: submit() skips modules already submitted


@pytest.fixture(scope="session")
def realdata() -> Path:
    if not REALDATA.is_dir():
        pytest.skip(f"../shared/realdata not present at {REALDATA}")
    return REALDATA


def jobsight_cmd() -> list[str]:
    """The `jobsight` command as users run it: the venv's console script, else the module."""
    exe = ROOT / ".venv" / "bin" / "jobsight"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "jobsight.analytics.cli"]


def accounted(result) -> bool:
    """A parser's row accounting: every input row is a frame row, a reject or a drop, exactly once."""
    return result.rows_in == result.frame_rows() + len(result.rejects) + result.dropped


def post_callback(client, key: str, spec: dict, value_of, user: str):
    """POST one Dash callback request, as the browser would, to a Flask test ``client`` as ``user``
    (header auth). ``key``: the callback's output key in ``app.callback_map``; ``spec``: its entry;
    ``value_of(prop)``: the value sent for each input and state ``"id.property"``."""
    def item(d):
        return {"id": d["id"], "property": d["property"], "value": value_of(f"{d['id']}.{d['property']}")}
    outs = key.strip(".").split("...") if key.startswith("..") else [key]
    outputs = [{"id": o.split(".", 1)[0], "property": o.split(".", 1)[1]} for o in outs]
    body = {"output": key, "outputs": outputs if len(outputs) > 1 else outputs[0],
            "inputs": [item(i) for i in spec["inputs"]], "state": [item(s) for s in spec.get("state", [])],
            "changedPropIds": [f"{i['id']}.{i['property']}" for i in spec["inputs"]]}
    return client.post("/_dash-update-component", data=json.dumps(body), content_type="application/json",
                       headers={"X-Forwarded-User": user})


def record_instances(monkeypatch, module, name: str) -> list:
    """Every instance of module.<name> made while the test runs (through a recording subclass), so a
    test can tell which road the code took and how that ended. The subclass replaces the class in
    `module` and in the module that defines it, where its callers look it up when `module` only
    re-exports it (the class there may be an earlier recording subclass)."""
    made: list = []
    real = getattr(module, name)

    class Recording(real):
        def __init__(self, *args, **kwargs):
            made.append(self)
            super().__init__(*args, **kwargs)
    homes = {sys.modules[c.__module__] for c in real.__mro__}
    for target in {module, *(m for m in homes if getattr(m, name, None) is real)}:
        monkeypatch.setattr(target, name, Recording)
    return made



_EMPTY_DB: dict = {}     # the connection fresh_memory_db() keeps, its template file, a counter


def _catalog(con, name: str) -> list:
    """What catalog ``name`` of ``con`` holds: its objects with their SQL, and each table's row count."""
    objects = con.execute(
        "SELECT 'table', schema_name, table_name, sql FROM duckdb_tables() WHERE database_name = $1 UNION ALL "
        "SELECT 'view', schema_name, view_name, sql FROM duckdb_views() WHERE database_name = $1 AND NOT internal "
        "UNION ALL SELECT 'index', schema_name, index_name, sql FROM duckdb_indexes() WHERE database_name = $1 "
        "UNION ALL SELECT 'sequence', schema_name, sequence_name, sql FROM duckdb_sequences() WHERE database_name = $1 "
        "UNION ALL SELECT 'constraint', schema_name, table_name, constraint_text FROM duckdb_constraints() "
        "WHERE database_name = $1 UNION ALL SELECT 'macro', schema_name, function_name, macro_definition "
        "FROM duckdb_functions() WHERE database_name = $1 AND NOT internal ORDER BY ALL", [name]).fetchall()
    rows = [(table, con.execute(f'SELECT count(*) FROM "{name}"."{schema}"."{table}"').fetchone()[0])
            for kind, schema, table, _ in objects if kind == "table"]
    return objects + rows


def fresh_memory_db():
    """A context manager giving a connection to a new, empty in-memory jobsight database, as
    ``db.connect(":memory:")`` gives, for property tests that need one per example: that costs
    ~0.5 s each (a DuckDB instance, the schema's migrations). Here one instance, set up as
    db.connect sets it, is kept, and each example gets its own catalog, a copy of a database
    migrated once (COPY FROM DATABASE: tables, views, indexes, sequences, macros and rows; the
    first copy is checked to hold all of them), the only jobsight catalog attached while the
    example runs; it is dropped afterwards, with the example's temporary tables."""
    import contextlib
    import itertools
    import tempfile

    import duckdb

    from jobsight.analytics.store import db

    @contextlib.contextmanager
    def attached():
        first = not _EMPTY_DB
        if first:
            template = Path(tempfile.mkdtemp(prefix="jobsight-empty-db-")) / "empty.duckdb"
            db.connect(template).close()
            con = duckdb.connect(":memory:")
            db.configure_engine(con)
            _EMPTY_DB.update(con=con, template=template, names=itertools.count())
        con, name = _EMPTY_DB["con"], f"example{next(_EMPTY_DB['names'])}"
        con.execute(f"ATTACH '{_EMPTY_DB['template']}' AS template (READ_ONLY)")
        try:
            con.execute(f"ATTACH ':memory:' AS {name}")
            con.execute(f"COPY FROM DATABASE template TO {name}")
            if first:
                assert _catalog(con, name) == _catalog(con, "template"), "COPY FROM DATABASE left something out"
        finally:
            con.execute("DETACH template")
        con.execute(f"USE {name}")
        try:
            yield con
        finally:
            with contextlib.suppress(duckdb.Error):
                con.execute("ROLLBACK")
            con.execute("USE memory")
            con.execute(f"DETACH {name}")
            for (temp,) in con.execute("SELECT table_name FROM duckdb_tables() WHERE database_name = 'temp'").fetchall():
                con.execute(f'DROP TABLE temp.main."{temp}"')
    return attached()
