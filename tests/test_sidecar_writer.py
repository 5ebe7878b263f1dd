"""The sidecar's output files: modes, symlink refusal, write failures, cell formatting."""
from __future__ import annotations

import json
import os
import stat

import pytest

from jobsight.collector import writer

COLS = ("time", "device", "util_pct")


@pytest.fixture
def umask022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_csv_file_mode_0640_and_header_and_rows(tmp_path, umask022):
    path = tmp_path / "a.csv"
    w = writer.CsvWriter(str(path), COLS)
    assert w.write_row({"time": "t1", "device": "cpu", "util_pct": 50.0})
    assert w.write_row({"time": "t2", "device": "GPU-x"})
    w.close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert path.read_text() == "time,device,util_pct\nt1,cpu,50\nt2,GPU-x,\n"
    assert w.rows_written == 2


def test_out_dir_created_0750(tmp_path, umask022):
    out = tmp_path / "a" / "b"
    writer.ensure_dir(str(out))
    assert stat.S_IMODE(out.stat().st_mode) == 0o750


def test_refuses_planted_symlink_and_leaves_target_alone(tmp_path):
    target = tmp_path / "victim"
    target.write_text("precious\n")
    link = tmp_path / "a.csv"
    link.symlink_to(target)
    with pytest.raises(writer.OutputError, match="refusing to write"):
        writer.CsvWriter(str(link), COLS)
    assert target.read_text() == "precious\n"


def test_refuses_dangling_symlink_without_creating_its_target(tmp_path):
    link = tmp_path / "a.csv"
    link.symlink_to(tmp_path / "would_be_created")
    with pytest.raises(writer.OutputError):
        writer.write_json_new(str(link), {"x": 1})
    assert not (tmp_path / "would_be_created").exists()


def test_refuses_existing_file(tmp_path):
    (tmp_path / "a.csv").write_text("someone else's\n")
    with pytest.raises(writer.OutputError, match="already exists"):
        writer.CsvWriter(str(tmp_path / "a.csv"), COLS)
    assert (tmp_path / "a.csv").read_text() == "someone else's\n"


def test_unusable_out_dir_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(writer.OutputError, match=str(blocker / "sub")):
        writer.ensure_dir(str(blocker / "sub"))


def test_disk_full_warns_once_and_stops_writing(tmp_path):
    warnings = []
    w = writer.CsvWriter(str(tmp_path / "a.csv"), COLS, warn=lambda key, msg: warnings.append(msg))
    full = os.open("/dev/full", os.O_WRONLY)
    os.dup2(full, w.fd)  # the kernel answers every write with ENOSPC
    os.close(full)
    assert w.write_row({"device": "cpu"}) is False
    assert w.write_row({"device": "cpu"}) is False
    w.close()
    assert w.failed and len(warnings) == 1
    assert "No space left on device" in warnings[0] and "a.csv" in warnings[0]


def test_replace_json_rewrites_own_file(tmp_path, umask022):
    p = tmp_path / "m.meta.json"
    writer.write_json_new(str(p), {"a": 1})
    writer.replace_json(str(p), {"a": 2})
    assert json.loads(p.read_text()) == {"a": 2}
    assert stat.S_IMODE(p.stat().st_mode) == 0o640
    assert sorted(os.listdir(tmp_path)) == ["m.meta.json"]


@pytest.mark.parametrize("value,text", [
    (None, ""), (3, "3"), (12.5, "12.5"), (0.0, "0"), (1.23456, "1.235"), (float("nan"), ""),
    (123456789.5, "123456789.5"), ("GPU-abc", "GPU-abc"), ("a,b", '"a,b"'), ('say "hi"', '"say ""hi"""'),
])
def test_format_cell(value, text):
    assert writer.format_cell(value) == text
