"""Coverage-guided fuzzing of the input parsers with atheris (not a project dependency).

    pip install --target /tmp/atheris-lib atheris
    PYTHONPATH=/tmp/atheris-lib:. .venv/bin/python bench/fuzz_parsers.py -atheris_runs=20000
    PYTHONPATH=/tmp/atheris-lib:. .venv/bin/python bench/fuzz_parsers.py -max_total_time=600 CORPUS_DIR

The first input byte picks the parser (sacct text, sacct JSON, seff, sidecar CSV, nvidia-smi, PBS, LSF),
the rest is the file. Seeds: fixtures/ (and ../shared/realdata when present), written to a corpus
folder on first use. Invariants, each a crash when broken: no exception escapes parse(); every
input row is accounted for (rows_in == rows in the frames + rejected + dropped, where the parser
keeps one frame row per input row); every reject carries a line number >= 1 and a reason.
Prints the executions run at exit. JOBSIGHT_FUZZ_SKIP_KNOWN=1 skips inputs that hit a crash
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

with atheris.instrument_imports(include=["analytics"]):
    from analytics.parsers import lsf, nvidia_smi, pbs, sacct_json, sacct_text, seff, sidecar_csv
    from analytics.records import ParseOptions

ROOT = Path(__file__).resolve().parents[1]
PARSERS = [(sacct_text, ".txt"), (sacct_json, ".json"), (seff, ".txt"), (sidecar_csv, ".csv"), (nvidia_smi, ".csv"),
           (pbs, ""), (lsf, ".acct")]
SEEDS = {0: ["fixtures/sacct/*.txt"], 1: ["fixtures/sacct_json/*.json"], 2: ["fixtures/seff/*.txt"],
         3: ["fixtures/sidecar/*.csv"], 4: ["fixtures/nvidia_smi/*.csv", "fixtures/nvidia_smi/*.log"],
         5: ["fixtures/pbs/*"], 6: ["fixtures/lsf/*"]}
OPTS = ParseOptions(timezone="Europe/Amsterdam", cluster="fuzz", job_id="4242")
TMP = Path(tempfile.mkdtemp(prefix="jobsight-fuzz-"))
runs = 0
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
                (corpus / f"{k}-{p.name}").write_bytes(bytes([k]) + data)


def one_input(data: bytes) -> None:
    global runs
    runs += 1
    if not data:
        return
    mod, ext = PARSERS[data[0] % len(PARSERS)]
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


def main() -> None:
    args = list(sys.argv)
    dirs = [a for a in args[1:] if not a.startswith("-")]
    if not dirs:
        corpus = TMP / "corpus"
        args.append(str(corpus))
    else:
        corpus = Path(dirs[0])
    seed_corpus(corpus)
    atexit.register(lambda: print(f"fuzz_parsers: {runs} executions", file=sys.stderr))
    atheris.Setup(args, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    os.environ.setdefault("TZ", "UTC")
    main()
