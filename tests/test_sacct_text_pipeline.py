"""sacct text: a file cut into many small blocks (converted two at a time in the pipeline threads)
gives exactly the rows, rejects, line numbers and counts of one block and of the per-line path,
with a header change across a block boundary and rejects in several blocks."""
import threading
import time

from polars.testing import assert_frame_equal

from jobsight.analytics.ingest.parsers import sacct_text
from jobsight.analytics.ingest.records import ParseOptions

HDR1 = "JobID|JobIDRaw|State|Start|End|Elapsed|NCPUS|ReqMem|AllocTRES|JobName"
HDR2 = "JobName|JobID|State|Elapsed|NCPUS"   # the second section: other columns, other order
N1, N2 = 400, 300


def _dump(path):
    """(expected reject line numbers, comment count, blank count): laid out here, not read back."""
    lines, rejects, comments, blanks = [HDR1], [], 0, 0
    for i in range(N1):
        jid = str(5000 + i // 2) + ("" if i % 2 == 0 else ".batch")
        name = "a|b" if i % 50 == 7 else f"job{i}"      # a '|' in the name: recovered per line
        elapsed = "20H" if i % 61 == 9 else "00:10:00"   # bad duration: rejected
        lines.append(f"{jid}|{jid}|COMPLETED|2026-03-01T10:00:00|2026-03-01T10:10:00|{elapsed}|4|2Gc|"
                     f"billing=4,cpu=4,gres/gpu=1,mem=8G|{name}" + ("\r" if i % 3 == 0 else ""))
        if elapsed == "20H":
            rejects.append(len(lines))
        if i % 40 == 5:
            lines.append("# a comment")
            comments += 1
        if i % 70 == 3:
            lines.append("")
            blanks += 1
    lines.append(HDR2)
    for i in range(N2):
        lines.append(f"n{i}|{9000 + i}|{'COMPLETED' if i % 45 != 4 else 'NO SUCH STATE!'}|00:01:00|2")
        if i % 45 == 4:
            rejects.append(len(lines))
    path.write_text("\n".join(lines) + "\n")
    return rejects, comments, blanks


def _parse(path, monkeypatch, block=None, fast=True, pipeline=2):
    pieces, busy = [], []

    def on_piece(jobs, steps):   # never two calls at once
        busy.append(threading.get_ident())
        time.sleep(0.001)
        assert len(busy) == 1
        pieces.append((jobs.height, steps.height))
        busy.pop()

    with monkeypatch.context() as m:
        if block:
            m.setattr(sacct_text, "_BLOCK_BYTES", block)
        m.setattr(sacct_text, "PIPELINE", pipeline)
        return sacct_text.parse(path, ParseOptions(timezone="Europe/Amsterdam"), on_piece=on_piece, fast_path=fast), pieces


def _same(a, b):
    assert_frame_equal(a.jobs, b.jobs, check_exact=True)
    assert_frame_equal(a.steps, b.steps, check_exact=True)
    assert [(r.line_no, r.reason, r.raw) for r in a.rejects] == [(r.line_no, r.reason, r.raw) for r in b.rejects]
    assert (a.rows_in, a.dropped, a.notes) == (b.rows_in, b.dropped, b.notes)


def test_small_blocks_match_one_block_and_the_per_line_path(tmp_path, monkeypatch):
    path = tmp_path / "dump.txt"
    rejects, comments, blanks = _dump(path)
    size = path.stat().st_size
    hdr2_at = path.read_text().index(HDR2)
    block = 1500   # ~25 lines a block; the header change falls inside a block, not at its start
    assert size > 20 * block and hdr2_at % block not in (0, 1)

    small, pieces = _parse(path, monkeypatch, block=block)
    one, _ = _parse(path, monkeypatch)
    per_line, _ = _parse(path, monkeypatch, fast=False)
    in_turn, _ = _parse(path, monkeypatch, block=block, pipeline=1)
    _same(small, one)
    _same(small, per_line)
    _same(small, in_turn)

    # the figures laid out above: bad Elapsed at i = 9, 70, 131, 192, 253, 314, 375 (even i: a job, odd: its
    # .batch step), bad State at i = 4, 49, ..., 274 of the second section (all jobs)
    assert [r.line_no for r in small.rejects] == rejects and len(rejects) == 14
    text = path.read_bytes()
    starts = [0] + [k + 1 for k, c in enumerate(text) if c == ord("\n")]
    assert len({starts[r - 1] // block for r in rejects}) >= 10          # rejects in many blocks
    assert (small.jobs.height, small.steps.height) == (N1 // 2 - 3 + N2 - 7, N1 // 2 - 4)
    assert small.rows_in == N1 + N2 + comments and small.dropped == comments   # blank lines and headers are not rows
    assert blanks > 0 and len(small.notes) == 1
    second = small.jobs.filter(small.jobs["job_id"].cast(int) >= 9000)
    assert second.height == N2 - 7 and set(second["ncpus"]) == {2} and second["elapsed_s"].unique().to_list() == [60]
    assert second["job_name"].to_list()[:3] == ["n0", "n1", "n2"]
    assert sum(j + s for j, s in pieces) == N1 + N2 - 14 and len(pieces) > 10
    assert small.steps.filter(small.steps["job_id"] == "5003")["step_name"].to_list() == ["a|b"]   # i = 7
    job = small.jobs.filter(small.jobs["job_id"] == "5000").row(0, named=True)
    assert (job["mem_req_bytes"], job["ngpus"], job["elapsed_s"]) == (2 * 4 * 1024 ** 3, 1, 600)
    assert str(job["start_time"]) == "2026-03-01 09:00:00"   # 10:00 in Amsterdam (CET) in UTC
