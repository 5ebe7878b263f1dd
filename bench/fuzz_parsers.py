"""Coverage-guided fuzzing of the input parsers with atheris (not a project dependency).

    pip install --target /tmp/atheris-lib atheris
    PYTHONPATH=/tmp/atheris-lib:. .venv/bin/python bench/fuzz_parsers.py -atheris_runs=20000
    PYTHONPATH=/tmp/atheris-lib:. .venv/bin/python bench/fuzz_parsers.py -max_total_time=600 CORPUS_DIR

The first input byte picks the target (sacct text, sacct JSON, seff, sidecar CSV, nvidia-smi, PBS, LSF,
jobsight.toml, sidecar metadata JSON), the rest is the file; JOBSIGHT_FUZZ_ONLY=FORMAT (e.g. `config`,
`sidecar-meta`, `sacct`) fuzzes one target only, whatever the first byte says. Seeds: fixtures/ (and ../shared/realdata when
present), written to a corpus
folder on first use. Invariants, each a crash when broken: no exception escapes parse(); every
input row is accounted for (rows_in == rows in the frames + rejected + dropped, where the parser
keeps one frame row per input row); every reject carries a line number >= 1 and a reason.
jobsight.toml: load_config returns or raises ConfigError with one line naming the file, nothing else.
Metadata JSON: beside a fixed good sidecar CSV, any bytes leave the CSV's 4 rows parsed and accounted.
Prints the executions run per target at exit. JOBSIGHT_FUZZ_SKIP_KNOWN=1 skips inputs that hit a crash
already reported by a strict-xfail test, so the campaign can find the next one.
"""
from __future__ import annotations

import atexit
import os
import sys
import tempfile
from pathlib import Path

import atheris
import polars  # noqa: F401  imported first so only jobsight's own code is instrumented

with atheris.instrument_imports(include=["jobsight.analytics"]):   # module names, not folders
    from jobsight.analytics.config import ConfigError, load_config
    from jobsight.analytics.ingest.parsers import lsf, nvidia_smi, pbs, sacct_json, sacct_text, seff, sidecar_csv
    from jobsight.analytics.ingest.records import ParseOptions

ROOT = Path(__file__).resolve().parents[1]
PARSERS = [(sacct_text, ".txt"), (sacct_json, ".json"), (seff, ".txt"), (sidecar_csv, ".csv"), (nvidia_smi, ".csv"),
           (pbs, ""), (lsf, ".acct")]
CONFIG, META = len(PARSERS), len(PARSERS) + 1          # the two targets that are not parsers
NAMES = [m.FORMAT for m, _ in PARSERS] + ["config", "sidecar-meta"]
SEEDS = {0: ["fixtures/sacct/*.txt"], 1: ["fixtures/sacct_json/*.json"], 2: ["fixtures/seff/*.txt"],
         3: ["fixtures/sidecar/*.csv"], 4: ["fixtures/nvidia_smi/*.csv", "fixtures/nvidia_smi/*.log"],
         5: ["fixtures/pbs/*"], 6: ["fixtures/lsf/*"], CONFIG: ["docs/configuration.md"], META: ["fixtures/sidecar/*.meta.json"]}
META_CSV = ROOT / "fixtures" / "sidecar" / "jobsight-testclu-4242-gpu01-20261121T100000Z-999.csv"
META_ROWS = 4
OPTS = ParseOptions(timezone="Europe/Amsterdam", cluster="fuzz", job_id="4242")
TMP = Path(tempfile.mkdtemp(prefix="jobsight-fuzz-"))
runs = 0
per_target = [0] * len(NAMES)
ONLY = os.environ.get("JOBSIGHT_FUZZ_ONLY")
if ONLY and ONLY not in NAMES:
    sys.exit(f"JOBSIGHT_FUZZ_ONLY={ONLY!r}: one of {', '.join(NAMES)}")
# JOBSIGHT_FUZZ_SKIP_KNOWN=1: skip inputs that hit a crash already reported (xfail test), to find others
KNOWN = os.environ.get("JOBSIGHT_FUZZ_SKIP_KNOWN") == "1"


def seed_corpus(corpus: Path) -> None:
    corpus.mkdir(parents=True, exist_ok=True)
    if any(corpus.iterdir()):
        return
    for k, globs in SEEDS.items():
        for g in globs:
            for p in sorted(ROOT.glob(g)):
                data = p.read_bytes()[:200_000]
                if k == CONFIG:      # the documented jobsight.toml example (its first ```toml block)
                    text = data.decode("utf-8")
                    data = text.split("```toml\n", 1)[1].split("```", 1)[0].encode()
                (corpus / f"{k}-{p.name}").write_bytes(bytes([k]) + data)


def one_input(data: bytes) -> None:
    global runs
    runs += 1
    if not data:
        return
    target = NAMES.index(ONLY) if ONLY else data[0] % len(NAMES)
    per_target[target] += 1
    if target == CONFIG:
        return fuzz_config(data[1:])
    if target == META:
        return fuzz_meta(data[1:])
    mod, ext = PARSERS[target]
    if KNOWN and mod is sidecar_csv:
        try:
            text = data[1:].decode("utf-8")
        except UnicodeDecodeError:
            return          # known: test_rel_badinput.py::test_invalid_utf8_in_a_sidecar_line_rejects_that_line
        if not sidecar_csv.sniff(text[:65536], Path("x.csv")):
            return          # known: --format sidecar on another format fails the file with polars' message
    path = TMP / f"jobsight-fuzz-4242-gpu01-20261121T100000Z-1{ext}"
    path.write_bytes(data[1:])
    try:
        res = mod.parse(path, OPTS)
    except polars.exceptions.ComputeError:
        if KNOWN and mod is sidecar_csv:
            return          # known: test_rel_badinput.py::test_fuzz_crash_sidecar_ragged_lines
        raise
    for r in res.rejects:
        if not r.reason or (r.line_no is not None and r.line_no < 1):
            raise AssertionError(f"{mod.FORMAT}: reject without a reason or line: {r}")
    # sacct text and JSON fold steps into jobs and seff/sidecar add no frame row for some lines,
    # so the exact per-row sum is checked where a row maps to one frame row: samples
    if mod in (sidecar_csv, nvidia_smi):
        frames = res.frame_rows()
        if res.rows_in != frames + len(res.rejects) + res.dropped:
            raise AssertionError(f"{mod.FORMAT}: rows_in {res.rows_in} != {frames} rows + {len(res.rejects)} "
                                 f"rejected + {res.dropped} dropped")


def fuzz_config(body: bytes) -> None:
    path = TMP / "jobsight.toml"
    path.write_bytes(body)
    try:
        load_config(path)
    except ConfigError as exc:
        msg = str(exc)
        if not msg.startswith(str(path)) or "\n" in msg or len(msg) > 1000:
            raise AssertionError(f"config: error not one line naming the file: {msg[:300]!r}") from None


def fuzz_meta(body: bytes) -> None:
    folder = TMP / "meta"
    folder.mkdir(exist_ok=True)
    csv = folder / META_CSV.name
    if not csv.exists():
        csv.write_bytes(META_CSV.read_bytes())
    (folder / (META_CSV.stem + ".meta.json")).write_bytes(body)
    res = sidecar_csv.parse(csv, OPTS)
    if (res.rows_in, len(res.samples), len(res.rejects), res.dropped) != (META_ROWS, META_ROWS, 0, 0):
        raise AssertionError(f"sidecar-meta: the CSV's {META_ROWS} rows became {res.rows_in} in, "
                             f"{len(res.samples)} stored, {len(res.rejects)} rejected")
    if res.sidecar_runs is not None and len(res.sidecar_runs) != 1:
        raise AssertionError("sidecar-meta: more than one sidecar_run row")


def main() -> None:
    args = list(sys.argv)
    dirs = [a for a in args[1:] if not a.startswith("-")]
    if not dirs:
        corpus = TMP / "corpus"
        args.append(str(corpus))
    else:
        corpus = Path(dirs[0])
    if not corpus.is_file():        # a file given is an input to replay (a crash), not a corpus
        seed_corpus(corpus)
    atexit.register(lambda: print(f"fuzz_parsers: {runs} executions ("
                                  + ", ".join(f"{n} {c}" for n, c in zip(NAMES, per_target) if c) + ")",
                                  file=sys.stderr))
    atheris.Setup(args, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    os.environ.setdefault("TZ", "UTC")
    main()
