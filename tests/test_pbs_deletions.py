"""PBS D records over a file: the deleted jobs' rows change where they stand, the D records that
stand come in at their lines, and the rows of other jobs (the same job number on another server
too) are left exactly as read, in file order, however the file is cut into blocks."""
from __future__ import annotations

import json

import pytest
from conftest import accounted

from jobsight.analytics.ingest.parsers import pbs
from jobsight.analytics.ingest.records import ParseOptions

T0 = 1709287200   # 03/01/2024 10:00:00 UTC
LINES = [
    "03/01/2024 10:00:00;Q;100.srva;queue=q",
    "03/01/2024 10:00:00;Q;100.srvb;queue=q",
    f"03/01/2024 10:00:01;S;100.srva;user=u queue=q start={T0 + 1} exec_host=h1/0",
    f"03/01/2024 10:00:01;S;100.srvb;user=v queue=q start={T0 + 1} exec_host=h2/0",
    "03/01/2024 10:00:02;Q;101.srva;queue=q",
    "03/01/2024 10:00:03;D;100.srva;requestor=alice@login",
    f"03/01/2024 10:00:04;E;100.srva;user=u queue=q start={T0 + 1} end={T0 + 4} exec_host=h1/0 Exit_status=1",
    f"03/01/2024 10:00:05;E;100.srvb;user=v queue=q start={T0 + 1} end={T0 + 5} exec_host=h2/0 Exit_status=1",
    "03/01/2024 10:00:06;D;102.srva;requestor=bob@login",
    "03/01/2024 10:00:07;Q;103.srvb;queue=q",
]
ALICE = {"cancelled_by_uid": "alice@login"}
EXPECTED = [   # (cluster, job_id, state, user, node_list, null_reasons), one row per line in file order
    ("srva", "100", "PENDING", None, None, None),
    ("srvb", "100", "PENDING", None, None, None),
    ("srva", "100", "RUNNING", "u", "h1", None),
    ("srvb", "100", "RUNNING", "v", "h2", None),
    ("srva", "101", "PENDING", None, None, None),
    ("srva", "100", "CANCELLED", "u", "h1", ALICE),    # the D record carries the S record before it
    ("srva", "100", "CANCELLED", "u", "h1", ALICE),    # deleted, then ended FAILED: CANCELLED by alice
    ("srvb", "100", "FAILED", "v", "h2", None),        # the same job number on another server: as read
    ("srva", "102", "CANCELLED", None, None, {"cancelled_by_uid": "bob@login"}),   # a D record alone
    ("srvb", "103", "PENDING", None, None, None),
]


@pytest.mark.parametrize("block_bytes", [None, 90, 300])
def test_deleted_jobs_change_in_place_and_others_stay_as_read(tmp_path, monkeypatch, block_bytes):
    p = tmp_path / "acct"
    p.write_text("\n".join(LINES) + "\n")
    if block_bytes:
        real = pbs.iter_blocks
        monkeypatch.setattr(pbs, "iter_blocks", lambda path: real(path, block_bytes))
    r = pbs.parse(p, ParseOptions(timezone="UTC"))
    assert accounted(r) and not r.rejects and r.rows_in == len(LINES)
    got = [(c, j, s, u, n, json.loads(nr) if nr else None) for c, j, s, u, n, nr in
           r.jobs.select("cluster", "job_id", "state", "user", "node_list", "null_reasons").iter_rows()]
    assert got == EXPECTED
    d = r.jobs.row(5, named=True)
    assert (d["end_time"].isoformat(), d["exit_code"]) == ("2024-03-01T10:00:03", None)


def test_a_deleted_job_only_on_another_server_changes_nothing(tmp_path):
    """A D record of 100.srvc: no row of 100.srva or 100.srvb is its job's."""
    p = tmp_path / "acct"
    p.write_text("\n".join([*LINES[:5], LINES[7], "03/01/2024 10:00:06;D;100.srvc;requestor=carol@login"]) + "\n")
    r = pbs.parse(p, ParseOptions(timezone="UTC"))
    assert accounted(r) and not r.rejects
    states = r.jobs.select("cluster", "state", "null_reasons").rows()
    assert states == [("srva", "PENDING", None), ("srvb", "PENDING", None), ("srva", "RUNNING", None),
                      ("srvb", "RUNNING", None), ("srva", "PENDING", None), ("srvb", "FAILED", None),
                      ("srvc", "CANCELLED", json.dumps({"cancelled_by_uid": "carol@login"}))]
