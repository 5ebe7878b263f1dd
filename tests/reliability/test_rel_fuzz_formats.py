"""Inputs under fuzzing that the per-parser tests do not cover: jobsight.toml and the sidecar's
metadata JSON, plus one property over every input format at once.

- jobsight.toml: random edits of the documented example (docs/configuration.md), a wrong type at every known key, huge
  numbers, NULs, invalid UTF-8 -> a Config or ONE ConfigError line naming the file (and the line and
  key where the problem is a value); every command given `--config` exits 2 with that line and no
  traceback; valid values at every numeric key load.
- metadata JSON beside a sidecar CSV: garbage, wrong types, huge strings -> the CSV still ingests
  whole (metadata is optional) and each unusable key is named in a note.
- every format: a real sample truncated anywhere, with CRLF, NULs, invalid UTF-8 or a huge field
  -> no exception; stored + updated + unchanged + rejected + dropped = rows in; each reject has
  a line and a reason.
"""
from __future__ import annotations

import contextlib
import io
import json
import math
import re
import shutil
import subprocess
from datetime import datetime
from pathlib import Path

import pytest
from conftest import FIXTURES, REALDATA, accounted, fresh_memory_db, jobsight_cmd
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from relhelp import ROOT

from jobsight.analytics import cli
from jobsight.analytics.config import DEFAULT_FLAGS, DEFAULT_SAMPLES, RATE_KEYS, ConfigError, load_config, range_of
from jobsight.analytics.ingest import files as ingest
from jobsight.analytics.ingest.parsers import lsf, nvidia_smi, pbs, sacct_json, sacct_text, seff, sidecar_csv
from jobsight.analytics.ingest.records import ParseOptions


def fuzz(n: int) -> settings:
    return settings(max_examples=n, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


# ------------------------------------------------------------------------------------------------
# jobsight.toml

CONFIG_DOC = ROOT / "docs" / "configuration.md"


def documented_example() -> str:
    """The jobsight.toml example in docs/configuration.md (its first ```toml block)."""
    text = CONFIG_DOC.read_text(encoding="utf-8")
    m = re.search(r"```toml\n(.*?)```", text, re.S)
    assert m, f"{CONFIG_DOC} has no ```toml example"
    return m.group(1)


# Every section and key docs/configuration.md and config.py name, with the type it takes.
NUMBER_KEYS = ([f"flags.{k}" for k in DEFAULT_FLAGS] + [f"samples.{k}" for k in DEFAULT_SAMPLES]
               + ["charging.factor", "budgets.proj-astro"] + [f"charging.rates.{k}" for k in RATE_KEYS])
STRING_KEYS = ["cluster", "charging.rates.partition", "charging.rates.gpu_type"]
TABLE_KEYS = ["charging", "flags", "samples", "budgets", "roles", "report", "email", "dashboard"]

# TOML literals by type
NUMBERS = st.one_of(st.integers(-10**6, 10**12).map(str),
                    st.floats(allow_nan=False, allow_infinity=False, width=64).map(repr))
STRINGS = st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=30).map(lambda t: json.dumps(t, ensure_ascii=False))
HUGE = st.sampled_from(["1" + "0" * 400, "-" + "9" * 400, "inf", "-inf", "nan", "1e400"])
WRONG_FOR_NUMBER = st.one_of(STRINGS, st.sampled_from(["true", "false", "[1, 2]", "{a = 1}", "1979-05-27T07:32:00Z",
                                                       "07:32:00"]), HUGE)
WRONG_FOR_STRING = st.one_of(NUMBERS, st.sampled_from(["true", "[\"a\"]", "{a = \"b\"}", "1979-05-27"]))
WRONG_FOR_TABLE = st.one_of(NUMBERS, STRINGS, st.sampled_from(["true", "[1]", "2026-01-01"]))


def toml_with(key: str, literal: str) -> tuple[str, int]:
    """A config setting `key` to the TOML literal, and the 1-based line it is on."""
    lead = '[charging]\npolicy = "table"\n'
    if key in TABLE_KEYS:
        return f"{key} = {literal}\n", 1
    if key == "cluster":
        return f"cluster = {literal}\n{lead}", 1
    if key.startswith("charging.rates."):
        field = key.rsplit(".", 1)[1]
        lines = ["[charging]", 'policy = "table"', "[[charging.rates]]", 'partition = "gpu"', "[[charging.rates]]"]
        if field != "partition":
            lines.append('partition = "cpu"')
        lines.append(f"{field} = {literal}")
        return "\n".join(lines) + "\n", len(lines)
    section, name = key.split(".", 1)
    if section == "charging":
        return f"{lead}{name} = {literal}\n", 3
    return f"{lead}[{section}]\n{name} = {literal}\n", 4


def config_error(tmp_path: Path, text: str | bytes) -> tuple[Path, str | None]:
    p = tmp_path / "jobsight.toml"
    p.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    try:
        load_config(p)
    except ConfigError as exc:
        return p, str(exc)
    return p, None


def shown_key(key: str) -> str:
    """How an error names the key: rates by their index (the second [[charging.rates]] is [1])."""
    return key.replace("charging.rates.", "charging.rates[1].")


@fuzz(60)
@given(data=st.data(), key=st.sampled_from(NUMBER_KEYS + STRING_KEYS + TABLE_KEYS))
def test_wrong_type_at_every_key_names_file_line_and_key(tmp_path, data, key):
    wrong = WRONG_FOR_NUMBER if key in NUMBER_KEYS else WRONG_FOR_STRING if key in STRING_KEYS else WRONG_FOR_TABLE
    literal = data.draw(wrong)
    text, line = toml_with(key, literal)
    p, err = config_error(tmp_path, text)
    assert err is not None, text
    assert "\n" not in err and len(err) < 400
    assert err.startswith(f"{p}, line {line}: "), (err, text)
    assert shown_key(key) in err, (err, text)


IN_RANGE = {"pct": lambda x: 0 <= x <= 100, ">0": lambda x: x > 0, ">=0": lambda x: x >= 0, ">=1": lambda x: x >= 1}


@fuzz(40)
@given(key=st.sampled_from(NUMBER_KEYS), value=NUMBERS)
def test_number_at_every_numeric_key_loads_or_names_its_range(tmp_path, key, value):
    assume(not key.startswith("charging.rates."))
    text, line = toml_with(key, value)
    p, err = config_error(tmp_path, text)
    want = float(value)
    if not IN_RANGE[range_of(key)](want):
        assert err is not None and err.startswith(f"{p}, line {line}: {key} must "), (err, text)
        assert "\n" not in err and len(err) < 400
        return
    assert err is None, err
    cfg = load_config(p)
    section, name = key.split(".", 1)
    got = {"flags": cfg.flags, "samples": cfg.samples, "budgets": cfg.budgets}.get(section)
    assert (cfg.factor if key == "charging.factor" else got[name]) == want


def test_valid_rate_values_load(tmp_path):
    text, _ = toml_with("charging.rates.per_gpu_h", "32.5")
    p = tmp_path / "jobsight.toml"
    p.write_text(text, encoding="utf-8")
    assert load_config(p).rates == [{"partition": "gpu"}, {"partition": "cpu", "per_gpu_h": 32.5}]


@st.composite
def mutated_toml(draw) -> bytes:
    data = bytearray(documented_example().encode("utf-8"))
    for _ in range(draw(st.integers(1, 5))):
        op = draw(st.sampled_from(["insert", "delete", "replace", "truncate", "crlf", "huge", "dupline"]))
        pos = draw(st.integers(0, len(data)))
        if op == "insert":
            data[pos:pos] = draw(st.sampled_from([b"\x00", b"\xff", b"\xc3", b'"', b"[", b"]", b"=", b"\n", b"#",
                                                  b"0", b"-", b".", b"e9", b"\xe2\x98\x83"]))
        elif op == "delete":
            del data[pos:pos + draw(st.integers(1, 8))]
        elif op == "replace" and pos < len(data):
            data[pos] = draw(st.integers(0, 255))
        elif op == "truncate":
            del data[pos:]
        elif op == "crlf":
            data = bytearray(bytes(data).replace(b"\n", b"\r\n"))
        elif op == "huge":
            data[pos:pos] = draw(st.sampled_from([b"9" * 5000, b"x" * 100_000, b"[" * 2000]))
        else:
            lines = bytes(data).split(b"\n")
            i = draw(st.integers(0, len(lines) - 1))
            lines.insert(i, lines[i])
            data = bytearray(b"\n".join(lines))
    return bytes(data)


@fuzz(150)
@given(raw=mutated_toml())
def test_mutated_config_loads_or_gives_one_error_naming_the_file(tmp_path, raw):
    p, err = config_error(tmp_path, raw)
    if err is not None:
        assert err.startswith(f"{p}") and "\n" not in err and len(err) < 1000, err


def test_documented_example_loads(tmp_path):
    p, err = config_error(tmp_path, documented_example())
    assert err is None
    cfg = load_config(p)
    assert (cfg.policy, cfg.flags["gpu_low_util_pct"], cfg.budgets) == ("table", 25.0, {"proj-astro": 50000.0, "proj-astro/alice": 8000.0})


def test_nul_and_invalid_utf8_name_the_line(tmp_path):
    p, err = config_error(tmp_path, b'[flags]\nmin_runtime_s = 300\ngpu_idle_pct = "\xff"\n')
    assert err == f"{p}, line 3: not valid TOML: not UTF-8 (byte 0xff)"
    p, err = config_error(tmp_path, b"[flags]\nmin_runtime_s = 3\x0000\n")
    assert err.startswith(f"{p}: not valid TOML: ") and "line 2" in err


def test_huge_number_is_named(tmp_path):
    p, err = config_error(tmp_path, "[charging]\nfactor = 1" + "0" * 400 + "\n")
    assert err == f"{p}, line 2: charging.factor must be a finite number, got {('1' + '0' * 400)[:57]}..."


COMMANDS = [["ingest", "--db", "{db}", "{data}"], ["flags", "--db", "{db}"], ["usage", "--db", "{db}"],
            ["job", "--db", "{db}", "1"], ["report", "--db", "{db}", "--week", "last", "--for", "admin", "--out", "{out}"],
            ["dashboard", "--db", "{db}"]]
BAD_CONFIGS = [('[flags]\nmin_runtime_s = "long"\n', "line 2: flags.min_runtime_s must be a number"),
               ('flags = 3\n', "line 1: flags must be a table"),
               ('[[charging.rates]]\npartition = 1\n', "line 2: charging.rates[0].partition must be a string"),
               (b'[budgets]\nproj = 1\xff\n', "line 2: not valid TOML: not UTF-8"),
               ('[charging]\nfactor = -1\n', "line 2: charging.factor must be greater than 0, got -1")]


@pytest.mark.parametrize("command", COMMANDS, ids=[c[0] for c in COMMANDS])
@pytest.mark.parametrize("text,message", BAD_CONFIGS, ids=["type", "section", "rates", "utf8", "range"])
def test_every_command_reports_a_bad_config_in_one_line(tmp_path, command, text, message):
    cfg = tmp_path / "bad.toml"
    cfg.write_bytes(text if isinstance(text, bytes) else text.encode())
    args = [a.format(db=tmp_path / "j.duckdb", data=FIXTURES / "sidecar", out=tmp_path / "out") for a in command]
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = cli.main(args + ["--config", str(cfg)])   # any other exception fails the test
    assert rc == 2
    assert err.getvalue() == f"jobsight {command[0]}: error: {cfg}, {message}" + err.getvalue().split(message, 1)[1]
    assert err.getvalue().count("\n") == 1


def test_bad_config_from_the_shell_exits_2_without_traceback(tmp_path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text('[charging]\npolicy = "table"\n[[charging.rates]]\npartition = "gpu"\nper_gpu_h = "lots"\n')
    proc = subprocess.run(jobsight_cmd() + ["flags", "--db", str(tmp_path / "j.duckdb"), "--config", str(cfg)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr == (f"jobsight flags: error: {cfg}, line 5: charging.rates[0].per_gpu_h must be a number, "
                           "got 'lots'\n")


# ------------------------------------------------------------------------------------------------
# sidecar metadata JSON

SIDECAR_CSV = FIXTURES / "sidecar" / "jobsight-testclu-4242-gpu01-20261121T100000Z-999.csv"
SIDECAR_META = SIDECAR_CSV.with_name(SIDECAR_CSV.stem + ".meta.json")
SIDECAR_ROWS = 4          # the fixture's data lines, all good
# what docs/sidecar.md ("Metadata JSON") says each stored key is
META_TYPES = {"job_id": "job_id", "cluster": "text", "host": "text", "scheduler": "text", "cpu_method": "text",
              "driver_version": "text", "nvml_version": "text", "started_at": "time", "interval_s": "seconds",
              "alloc_cores": "count", "gpus": "list"}


def is_utc_time(v: str) -> bool:
    if not re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?Z", v):
        return False
    try:
        datetime.fromisoformat(v[:-1])
    except ValueError:
        return False
    return True


def usable(kind: str, v) -> bool:
    """The test's own judgement of a metadata value (None = absent, always fine)."""
    if v is None:
        return True
    if kind == "job_id" and isinstance(v, int) and not isinstance(v, bool):
        return True                      # a job id written as a JSON number is still a job id
    if kind in ("text", "time", "job_id"):
        ok = isinstance(v, str) and len(v) <= 1000 and "\x00" not in v
        return ok and (kind != "time" or is_utc_time(v))
    if kind == "seconds":
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
    if kind == "count":
        return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**31
    return isinstance(v, list)


JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(), st.text(max_size=20),
              st.sampled_from(["x" * 200_000, "a\x00b", "2026-11-21T10:00:00.000Z", "2026-13-45T99:00:00Z"])),
    lambda kids: st.one_of(st.lists(kids, max_size=3), st.dictionaries(st.text(max_size=5), kids, max_size=3)),
    max_leaves=6)


def ingest_sidecar(tmp_path: Path, meta: bytes | None):
    d = tmp_path / "run"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir()
    csv = d / SIDECAR_CSV.name
    shutil.copyfile(SIDECAR_CSV, csv)
    if meta is not None:
        csv.with_name(SIDECAR_META.name).write_bytes(meta)
    res = sidecar_csv.parse(csv, ParseOptions())
    with fresh_memory_db() as con:
        rep = ingest.load_result(con, res, str(csv), None, {})
        runs = con.execute("SELECT cluster, job_id_raw, host FROM sidecar_run").fetchall()
    assert accounted(res)
    assert (rep.rows_in, rep.stored, rep.rejected, rep.dropped) == (SIDECAR_ROWS, SIDECAR_ROWS, 0, 0)
    return res, runs


@fuzz(80)
@given(changes=st.dictionaries(st.sampled_from(sorted(META_TYPES)), JSON_VALUES, min_size=1, max_size=4))
def test_metadata_of_wrong_types_is_noted_and_the_csv_still_ingests(tmp_path, changes):
    meta = json.loads(SIDECAR_META.read_text(encoding="utf-8"))
    meta.update(changes)
    res, runs = ingest_sidecar(tmp_path, json.dumps(meta).encode())
    bad = {k for k, v in changes.items() if not usable(META_TYPES[k], v)}
    noted = {k for k in META_TYPES if any(f"{SIDECAR_META.name}: {k} ignored" in n for n in res.notes)}
    assert noted == bad, res.notes
    assert len(runs) == 1     # the run row is kept; identity falls back to the samples' own

    def given(key: str, fallback: str) -> str:
        v = meta.get(key)
        return fallback if key in bad or v is None or str(v) == "" else str(v)

    assert runs[0] == (given("cluster", "testclu"), given("job_id", "4242"), given("host", "gpu01"))


@fuzz(80)
@given(cut=st.integers(0, 2000), junk=st.sampled_from([b"", b"\xff", b"\x00", b"{", b"]", b"\r\n", b"[" * 50_000]),
       pos=st.integers(0, 2000))
def test_garbage_metadata_is_ignored_with_a_note(tmp_path, cut, junk, pos):
    raw = SIDECAR_META.read_bytes()[:cut]
    raw = raw[:pos] + junk + raw[pos:]
    res, runs = ingest_sidecar(tmp_path, raw)
    try:
        ok = isinstance(json.loads(raw.decode("utf-8")), dict)
    except (ValueError, RecursionError):
        ok = False
    if not ok:
        assert runs == [] and any(n.startswith(f"{SIDECAR_META.name}: metadata ignored (") for n in res.notes)


# ------------------------------------------------------------------------------------------------
# every input format

FORMATS = {
    sacct_text: ["sacct/*.txt"], sacct_json: ["sacct_json/*.json"], seff: ["seff/*.txt"],
    sidecar_csv: ["sidecar/*.csv"], nvidia_smi: ["nvidia_smi/*.csv", "nvidia_smi/*.log"], pbs: ["pbs/*"], lsf: ["lsf/*"],
}
OPTS = ParseOptions(timezone="Europe/Amsterdam", cluster="fuzz", job_id="4242")


def samples_of(mod) -> list[Path]:
    """Our fixtures and, when ../shared/realdata is there, the real files of that format (read in place)."""
    found = [p for g in FORMATS[mod] for p in sorted(FIXTURES.glob(g)) if p.is_file() and p.stat().st_size < 300_000]
    real = REALDATA / {sacct_text: "sacct", sacct_json: "sacct_json", seff: "seff", sidecar_csv: "sidecar",
                       nvidia_smi: "nvidia_smi", pbs: "pbs", lsf: "lsf"}[mod]
    if real.is_dir():
        found += [p for p in sorted(real.iterdir()) if p.is_file() and p.stat().st_size < 300_000]
    return found


def mutate(data: bytes, op: str, pos: int) -> bytes:
    pos = min(pos, len(data))
    if op == "truncate":
        return data[:pos]
    if op == "crlf":
        return data.replace(b"\n", b"\r\n")
    if op == "nul":
        return data[:pos] + b"\x00" + data[pos:]
    if op == "utf8":
        return data[:pos] + b"\xff\xfe\xc3" + data[pos:]
    return data[:pos] + b"7" * 200_000 + data[pos:]      # huge field


@pytest.mark.parametrize("mod", list(FORMATS), ids=[m.FORMAT for m in FORMATS])
@fuzz(25)
@given(data=st.data(), ops=st.lists(st.sampled_from(["truncate", "crlf", "nul", "utf8", "huge"]), min_size=1, max_size=3))
def test_every_format_mutated_real_sample_keeps_the_invariant(tmp_path, mod, data, ops):
    files = samples_of(mod)
    assert files, mod.FORMAT
    raw = data.draw(st.sampled_from(files)).read_bytes()
    for op in ops:
        raw = mutate(raw, op, data.draw(st.integers(0, len(raw))))
    p = tmp_path / f"jobsight-fuzz-4242-gpu01-20261121T100000Z-1{'.json' if mod is sacct_json else '.csv'}"
    p.write_bytes(raw)
    res = mod.parse(p, OPTS)                                   # no exception escapes
    for r in res.rejects:
        assert r.reason and isinstance(r.line_no, int) and r.line_no >= 1, r
    with fresh_memory_db() as con:
        rep = ingest.load_result(con, res, str(p), None, {})   # raises AccountingError if the sum is off
    assert rep.stored + rep.updated + rep.unchanged + rep.rejected + rep.dropped == rep.rows_in == res.rows_in


# ------------------------------------------------------------------------------------------------
# regressions: each crash these properties found, as a plain test

@pytest.mark.parametrize("text,message", [
    ("[budgets]\nx = " + "9" * 5000 + "\n", "not usable TOML: Exceeds the limit (4300 digits)"),
    ("x = " + "[" * 2000 + "\n", "not usable TOML: maximum recursion depth exceeded"),
])
def test_regression_config_that_made_tomllib_raise(tmp_path, text, message):
    p, err = config_error(tmp_path, text)     # was: ValueError / RecursionError traceback
    assert err.startswith(f"{p}: {message}")


@pytest.mark.parametrize("meta,note", [
    ({"alloc_cores": 99999999999999}, "alloc_cores ignored: not a core count: 99999999999999"),   # was: polars Int32 overflow
    ({"cluster": ["x"]}, "cluster ignored: not a string: ['x']"),                                 # was: polars cast error
    ({"scheduler": {"a": 1}}, "scheduler ignored: not a string: {'a': 1}"),
    ({"host": {"a": 1}}, "host ignored: not a string: {'a': 1}"),                                 # was: host "{'a': 1}"
    ({"interval_s": float("nan")}, "interval_s ignored: not a number of seconds: nan"),
])
def test_regression_metadata_that_failed_the_whole_file(tmp_path, meta, note):
    res, runs = ingest_sidecar(tmp_path, json.dumps(meta).encode())
    assert res.notes == [f"{SIDECAR_META.name}: {note}"]
    assert runs == [("testclu", "4242", "gpu01")]     # the samples' identity (was: cluster 'default')


def test_regression_sacct_json_with_a_5000_digit_number(tmp_path):
    p = tmp_path / "huge.json"
    p.write_text('{"jobs": [{"job_id": ' + "7" * 5000 + "}]}")
    res = sacct_json.parse(p, OPTS)                   # was: ValueError out of json.loads
    assert res.rows_in == 1 and len(res.rejects) == 1 and res.rejects[0].line_no == 1
    assert res.rejects[0].reason.startswith("not usable JSON: Exceeds the limit (4300 digits)")


@pytest.mark.parametrize("epoch", [10**17, 10**15, 10**20])
def test_regression_sacct_json_time_out_of_range_rejects_the_job(tmp_path, epoch):
    # found by bench/fuzz_parsers.py: an eligible time of 1e17 raised OSError (EOVERFLOW) out of parse()
    p = tmp_path / "far.json"
    p.write_text(json.dumps({"jobs": [{"job_id": 7, "time": {"eligible": epoch}},
                                      {"job_id": 8, "time": {"eligible": 1700000000}}]}))
    res = sacct_json.parse(p, OPTS)
    assert res.rows_in == 2 and res.jobs["job_id_raw"].to_list() == ["8"]
    assert [(r.line_no, r.reason) for r in res.rejects] == [(1, f"job 1: time.eligible {epoch} is after 2200-01-01")]
