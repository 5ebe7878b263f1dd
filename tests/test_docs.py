"""The documentation covers what the code accepts (datasette's "every option documented" rule).

- Every option of every `jobsight` command, found by walking `build_parser()` and its subparsers
  (nested ones such as `jobsight lake export` included), appears in that command's section of
  docs/cli.md: the text under the heading that names it (`## \\`jobsight ingest\\``), down to the
  next heading of the same or a higher level. So do the choices of options that have them.
- Every option of the sidecar (`build_parser(wrapper=False)` and `(wrapper=True)`) appears in the
  sections of docs/sidecar.md that name `jobsight sidecar` and `jobsight sidecar run`.
- Every jobsight.toml key the code accepts appears, as `key`, in its section of
  docs/configuration.md (`## \\`[flags]\\``). The keys come from the code: its tables of defaults
  (DEFAULT_FLAGS, DEFAULT_SAMPLES, RATE_KEYS, ...) and the "(known: ...)" list each validator names
  when it meets an unknown key; where the code keeps no list (the keys of [charging]), from the
  documented example, which must load through every validator.
- README.md stays short, links between the pages resolve, and commit ids appear only in the
  one-line measurement header of a benchmark table.
"""
from __future__ import annotations

import argparse
import importlib
import pkgutil
import re
import tomllib
from pathlib import Path

import pytest

from jobsight.analytics import cli
from jobsight.analytics.config import (
    DEFAULT_FLAGS,
    DEFAULT_SAMPLES,
    POLICIES,
    PRESETS,
    RATE_DIVISORS,
    RATE_KEYS,
    Config,
    ConfigError,
    load_config,
    parse_config,
)
from jobsight.analytics.errors import UserError
from jobsight.analytics.reports import settings as report_settings
from jobsight.dashboard.auth import AuthError, Roles

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
README_MAX_BYTES = 15_000

HEADING_RE = re.compile(r"^(#{1,6})\s+(.*)$")
FENCE_RE = re.compile(r"^\s*(```|~~~)")


# ------------------------------------------------------------------------------------------------
# Markdown sections


def headings(text: str) -> list[tuple[int, int, str]]:
    """(line index, level, heading text) of every heading outside fenced code blocks."""
    out, fenced = [], False
    for i, line in enumerate(text.splitlines()):
        if FENCE_RE.match(line):
            fenced = not fenced
            continue
        m = None if fenced else HEADING_RE.match(line)
        if m:
            out.append((i, len(m.group(1)), m.group(2)))
    return out


def sections_naming(path: Path, code: str) -> list[str]:
    """The text of every section whose heading has `code` as a code span, down to the next heading
    of the same or a higher level (so a section includes its subsections)."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    heads = headings(text)
    found = []
    for n, (i, level, title) in enumerate(heads):
        if code not in re.findall(r"`([^`]+)`", title):
            continue
        end = next((j for j, lv, _ in heads[n + 1:] if lv <= level), len(lines))
        found.append("\n".join(lines[i:end]))
    return found


def mentions(text: str, word: str) -> bool:
    """`word` appears as a whole token: `--since` does not count for `--since-x`, `x` not for `max_x`."""
    return re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", text) is not None


# ------------------------------------------------------------------------------------------------
# CLI options


def walk(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(command path, parser) for the parser and every subparser below it, depth first."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from walk(sub, path + (name,))


def documented_options(parser: argparse.ArgumentParser) -> list[tuple[str, list[str]]]:
    """(option string, its choices) for every option a user can give: the long form when there is
    one; help and hidden (SUPPRESS) options left out."""
    out = []
    for action in parser._actions:
        if not action.option_strings or isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
            continue
        longs = [s for s in action.option_strings if s.startswith("--")]
        out.append(((longs or action.option_strings)[0], [str(c) for c in (action.choices or [])]))
    return out


def cli_commands() -> list[tuple[str, argparse.ArgumentParser]]:
    return [("jobsight " + " ".join(path), p) for path, p in walk(cli.build_parser()) if path]


def sidecar_build_parser():
    """build_parser of the sidecar, wherever the collector package keeps it."""
    try:
        from jobsight.collector.sidecar import build_parser
        return build_parser
    except ImportError:
        import jobsight.collector as collector
        for mod in pkgutil.iter_modules(collector.__path__):
            if mod.name.startswith("_"):      # __main__ runs the sidecar when imported
                continue
            module = importlib.import_module(f"jobsight.collector.{mod.name}")
            if callable(getattr(module, "build_parser", None)):
                return module.build_parser
        raise


CLI_CASES = [(cmd, opt, choices) for cmd, p in cli_commands() for opt, choices in documented_options(p)]
SIDECAR_CASES = [(f"jobsight sidecar{f' {mode}' if mode else ''}", opt, choices)
                 for mode in (None, "run", "prolog", "epilog")
                 for opt, choices in documented_options(sidecar_build_parser()(mode=mode))]


def test_the_walk_finds_every_command_and_nested_ones():
    commands = {cmd for cmd, _ in cli_commands()}
    assert {f"jobsight {c}" for c in cli.SUBCOMMANDS} <= commands
    assert {"jobsight sidecar", "jobsight lake export", "jobsight lake metrics", "jobsight lake query"} <= commands
    assert len(CLI_CASES) > 50 and {opt for _, opt, _ in SIDECAR_CASES} >= {"--interval", "--out", "--gpus"}


@pytest.mark.parametrize("command", [cmd for cmd, _ in cli_commands()])
def test_every_command_has_a_section_in_cli_md(command):
    assert sections_naming(DOCS / "cli.md", command), f"docs/cli.md has no heading naming `{command}`"


@pytest.mark.parametrize("command,option,choices", CLI_CASES, ids=[f"{c}:{o}" for c, o, _ in CLI_CASES])
def test_every_cli_option_is_documented_in_its_section(command, option, choices):
    text = "\n".join(sections_naming(DOCS / "cli.md", command))
    assert mentions(text, option), f"docs/cli.md: the section of `{command}` does not mention {option}"
    missing = [c for c in choices if not mentions(text, c)]
    assert not missing, f"docs/cli.md: the section of `{command}` does not name {option}'s choices {missing}"


@pytest.mark.parametrize("command,option,choices", SIDECAR_CASES, ids=[f"{c}:{o}" for c, o, _ in SIDECAR_CASES])
def test_every_sidecar_option_is_documented(command, option, choices):
    text = "\n".join(sections_naming(DOCS / "sidecar.md", command))
    assert text, f"docs/sidecar.md has no heading naming `{command}`"
    assert mentions(text, option), f"docs/sidecar.md: the section of `{command}` does not mention {option}"
    missing = [c for c in choices if not mentions(text, c)]
    assert not missing, f"docs/sidecar.md: the section of `{command}` does not name {option}'s choices {missing}"


# ------------------------------------------------------------------------------------------------
# jobsight.toml keys

CONFIG_DOC = DOCS / "configuration.md"


def documented_example() -> str:
    m = re.search(r"```toml\n(.*?)```", CONFIG_DOC.read_text(encoding="utf-8"), re.S)
    assert m, "docs/configuration.md has no ```toml example"
    return m.group(1)


def known_list(message: str) -> list[str]:
    """The key names of a validator's "(known: a, b, c)"."""
    m = re.search(r"\(known: ([^)]*)\)", message)
    assert m, f"no '(known: ...)' in {message!r}"
    return [k.strip() for k in m.group(1).split(",")]


def rejects_unknown(check) -> list[str]:
    """What a validator lists as known when given a key nobody would define."""
    with pytest.raises((ConfigError, UserError, AuthError)) as exc:
        check("zz_not_a_key")
    return known_list(str(exc.value))


def top_level_keys() -> list[str]:
    return rejects_unknown(lambda k: parse_config({k: 1}))


def section_keys() -> dict[str, list[str]]:
    """Every (section -> keys) the code accepts. `[charging]` keeps no list in the code: its keys
    come from the documented example (which test_documented_example_loads checks)."""
    example = tomllib.loads(documented_example())
    rate_keys = set(RATE_KEYS)
    for rate in example["charging"]["rates"]:
        rate_keys |= set(rate)
    return {
        "charging": sorted(example["charging"]),
        "[charging.rates]": sorted(rate_keys),
        "flags": rejects_unknown(lambda k: parse_config({"flags": {k: 1}})),
        "samples": rejects_unknown(lambda k: parse_config({"samples": {k: 1}})),
        "advice": rejects_unknown(lambda k: parse_config({"advice": {k: 1}})),
        "budget_options": rejects_unknown(lambda k: parse_config({"budget_options": {k: 1}})),
        "dashboard": rejects_unknown(lambda k: parse_config({"dashboard": {k: 1}})),
        "roles": rejects_unknown(lambda k: Roles.from_config({k: 1})),
        "report": rejects_unknown(lambda k: report_settings.from_config(Config(report={k: 1}))),
        "email": rejects_unknown(lambda k: report_settings.from_config(Config(email={k: 1}))),
        "watch": rejects_unknown(lambda k: parse_config({"watch": {k: 1}})),
    }


def test_documented_example_loads(tmp_path):
    p = tmp_path / "jobsight.toml"
    p.write_text(documented_example(), encoding="utf-8")
    cfg = load_config(p)
    report_settings.from_config(cfg)
    Roles.from_config(cfg.roles)
    assert cfg.policy in POLICIES


def test_key_lists_come_from_the_code():
    keys = section_keys()
    assert set(keys["flags"]) == set(DEFAULT_FLAGS) and set(keys["samples"]) == set(DEFAULT_SAMPLES)
    assert set(keys["[charging.rates]"]) >= set(RATE_KEYS) | {"partition", "gpu_type"}
    # every key the example uses is accepted (the example loads), and [charging] has at least these
    assert {"policy", "preset", "factor", "rates"} <= set(keys["charging"])
    assert {"charging", "flags", "samples", "budgets", "roles", "report", "email"} <= set(top_level_keys())


@pytest.mark.parametrize("key", top_level_keys())
def test_every_top_level_key_is_documented(key):
    text = CONFIG_DOC.read_text(encoding="utf-8")
    if sections_naming(CONFIG_DOC, f"[{key}]"):
        return
    assert f"`{key}`" in text, f"docs/configuration.md documents neither a [{key}] section nor the key `{key}`"


@pytest.mark.parametrize("section,key", [(s, k) for s, ks in section_keys().items() for k in ks])
def test_every_key_is_documented_in_its_section(section, key):
    text = "\n".join(sections_naming(CONFIG_DOC, f"[{section}]"))
    assert text, f"docs/configuration.md has no heading naming `[{section}]`"
    assert f"`{key}`" in text, f"docs/configuration.md: the `[{section}]` section does not document `{key}`"


def test_config_values_are_documented():
    text = CONFIG_DOC.read_text(encoding="utf-8")
    for value in POLICIES + tuple(PRESETS) + report_settings.BUDGET_PERIODS:
        assert f'"{value}"' in text, f"docs/configuration.md does not name the value \"{value}\""
    for divisor in RATE_DIVISORS:
        assert mentions(text, divisor)
    charging = (DOCS / "charging.md").read_text(encoding="utf-8")
    for rate in PRESETS["snellius"]:
        assert f"`{rate['partition']}`" in charging, f"docs/charging.md: the preset's {rate['partition']} is missing"


# ------------------------------------------------------------------------------------------------
# README, links, wording


def doc_files() -> list[Path]:
    return [README] + sorted(DOCS.glob("*.md"))


def test_readme_is_short():
    size = len(README.read_bytes())
    assert size <= README_MAX_BYTES, f"README.md is {size} bytes; keep it to {README_MAX_BYTES} and move detail to docs/"


def anchor(title: str) -> str:
    """GitHub's anchor for a heading."""
    slug = re.sub(r"[^\w\- ]", "", title.strip().lower())
    return slug.replace(" ", "-")


@pytest.mark.parametrize("page", doc_files(), ids=lambda p: p.name)
def test_links_resolve(page):
    text = page.read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+://|mailto:", target):
            continue
        file, _, frag = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        assert dest.exists(), f"{page.name}: link to {target}: no such file"
        if frag and dest.suffix == ".md":
            anchors = {anchor(title) for _, _, title in headings(dest.read_text(encoding="utf-8"))}
            assert frag in anchors, f"{page.name}: link to {target}: no such heading in {dest.name}"


COMMIT_RE = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")


@pytest.mark.parametrize("page", doc_files(), ids=lambda p: p.name)
def test_timeless_wording(page):
    """Docs say what the software does, not how it got there: no issue numbers or sessions, and a
    commit id only in a benchmark table's one-line measurement header ("Measured <date>, commit ...")."""
    for no, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        assert not re.search(r"\bissues? #?\d+|\bsession \d", line, re.I), f"{page.name}:{no}: {line}"
        if COMMIT_RE.search(line):
            assert line.startswith("Measured ") and page.name == "benchmarks.md", f"{page.name}:{no}: commit id: {line}"
