"""Output for the CLI: aligned text tables, CSV and JSON, from rows of dicts or from a query's
column names and tuples (``Database.fetch``: no dict per row, for outputs of 10^5 rows).

Everything a user wrote (job names, users, accounts, hosts) is data, never a terminal command or a
spreadsheet formula; the rules live here, once, for every writer:

- terminal: control characters (C0, DEL, C1) and the bidi controls that reorder what is shown are
  printed as visible escapes (``\\x1b``, ``\\u202e``): tables and text always, CSV when stdout is a
  terminal. JSON writes them as ``\\u`` escapes, which any JSON reader turns back into the data.
- CSV: a text cell that a spreadsheet would run as a formula (first character, after any leading
  spaces or control characters, one of ``= + - @``, or a leading tab or CR) gets a leading ``'``
  (OWASP's CSV-injection rule: ``-`` too, however it goes on; ``--A1`` is Excel's double negation).
  A cell holding a comma, a quote, a CR or a LF is quoted. Numbers stay numbers.
  One exception, by provenance rather than content: a column the caller names as jobsight's own
  text (``options``: the advice of ``jobsight flags``, made by the SQL from fixed words, numbers and
  jobsight.toml, never from what a user wrote) keeps a cell that starts with a command-line
  option, ``--`` and a letter (``--mem=27G``), as it is.
"""
from __future__ import annotations

import datetime as dt
import json
import math
import re
import sys
from typing import Any, Collection, Iterable, Sequence, TextIO

# C0, DEL, C1; the bidi embeddings, overrides and isolates; the bidi marks (ALM, LRM, RLM)
_UNSAFE_CHARS = "\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_UNSAFE = re.compile(f"[{_UNSAFE_CHARS}]")
_UNSAFE_JSON = re.compile("[\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_FORMULA_START = ("=", "+", "-", "@")
# what a spreadsheet may skip before it looks for a formula: whitespace, controls, invisible marks
_LEADING_CHARS = "\\s\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff"
_LEADING = re.compile(f"[{_LEADING_CHARS}]*")
_CSV_QUOTE = re.compile('[,"\r\n]')
_OPTION = re.compile("--[a-z]")       # a command-line option: in an ``options`` column, not guarded
# text that csv_field leaves as it is (for a terminal or not): its first character can start neither
# a formula nor what a spreadsheet skips before one, and it holds nothing to escape or quote
_PLAIN_CSV_TEXT = re.compile(f'(?![{_LEADING_CHARS}=+@-])[^,"{_UNSAFE_CHARS}]*')
_NONE = type(None)


def _escape(ch: str) -> str:
    code = ord(ch)
    return _NAMED.get(ch) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def terminal_safe(text: str, keep: str = "") -> str:
    """``text`` with every control and bidi character shown as a visible escape, so a job name cannot
    drive the terminal. ``keep``: layout characters of the output's own (``"\\n"`` for a whole text)."""
    return _UNSAFE.sub(lambda m: m.group(0) if m.group(0) in keep else _escape(m.group(0)), text)


def is_terminal(stream: TextIO | None = None) -> bool:
    stream = sys.stdout if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):       # no isatty, or closed
        return False


def csv_safe(value: Any, option: bool = False) -> Any:
    """A text value a spreadsheet would run as a formula, with a leading apostrophe; others as they
    are. ``option``: the value is jobsight's own text, and one starting with ``--x`` stays as it is."""
    if option and isinstance(value, str) and _OPTION.match(value):
        return value
    if isinstance(value, str) and (value.startswith(("\t", "\r"))
                                   or value[_LEADING.match(value).end():].startswith(_FORMULA_START)):
        return "'" + value
    return value


def plain(value: Any) -> Any:
    """JSON-ready value: timestamps as ISO-8601 UTC with Z, NaN as null."""
    if isinstance(value, dt.datetime):
        return value.strftime("%Y-%m-%dT%H:%M:%SZ")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def cell(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return "-" if math.isnan(value) else f"{value:,.{digits}f}"
    if isinstance(value, dt.datetime):
        return value.strftime("%Y-%m-%d %H:%M")
    return terminal_safe(str(value))


def table(rows: Sequence[dict], columns: Sequence[str], headers: Sequence[str] | None = None) -> str:
    return table_of(list(columns), [tuple(r.get(c) for c in columns) for r in rows], columns, headers)


def table_of(names: Sequence[str], data: Sequence[tuple], columns: Sequence[str],
             headers: Sequence[str] | None = None, width: int | None = None, cut_first: Sequence[str] = ()) -> str:
    """The text table of ``columns`` of the tuples ``data`` (whose fields are ``names``): numbers
    right-aligned, everything else left-aligned, every cell terminal-safe. Built column by column.
    ``width``: the lines fit it, text cut with an ellipsis (numbers never): the columns of
    ``cut_first`` first, then the widest text columns."""
    headers = [terminal_safe(str(h)) for h in (headers or columns)]
    cols, right = [], []
    for c in columns:
        i = list(names).index(c)
        values = [r[i] for r in data]
        cols.append(_cells(values))
        # numbers right-aligned; a column of nothing but blanks is not a number column
        right.append(any(v is not None for v in values) and all(_is_number(v) for v in values))
    widths = [max([len(h)] + [len(v) for v in col]) for h, col in zip(headers, cols)]
    if width is not None:
        fitted = _fit(widths, right, headers, width, [list(columns).index(c) for c in cut_first if c in columns])
        cols = [col if w == f else [v if len(v) <= f else v[:f - 1] + ELLIPSIS for v in col]
                for col, w, f in zip(cols, widths, fitted)]
        widths = fitted
    fmt = "  ".join(f"{{:{'>' if r else '<'}{w}}}" for r, w in zip(right, widths))
    lines = [fmt.format(*headers).rstrip(), fmt.format(*["-" * w for w in widths]).rstrip()]
    lines += [fmt.format(*row).rstrip() for row in zip(*cols)]
    return "\n".join(lines)


ELLIPSIS = "…"
MIN_CUT_WIDTH = 10      # a text column is never cut narrower (nor narrower than its header)


def _fit(widths: list[int], right: list[bool], headers: list[str], width: int, first: list[int]) -> list[int]:
    """Column widths whose line (two spaces between columns) fits ``width``: the text columns of
    ``first`` are narrowed first, then the widest text column, one character at a time, while any
    can be."""
    out = list(widths)
    floor = [max(len(h), MIN_CUT_WIDTH) for h in headers]
    excess = sum(out) + 2 * (len(out) - 1) - width
    for i in first:
        if not right[i] and excess > 0:
            step = min(excess, max(0, out[i] - floor[i]))
            out[i] -= step
            excess -= step
    while excess > 0:
        cuttable = [i for i, w in enumerate(out) if not right[i] and w > floor[i]]
        if not cuttable:
            break
        i = max(cuttable, key=lambda k: out[k])
        out[i] -= 1
        excess -= 1
    return out


def _cells(values: list) -> list[str]:
    """[cell(v) for v in values], without a call per cell for a column of text or of numbers."""
    kinds = {type(v) for v in values}
    if kinds <= {str, _NONE}:
        return ["-" if v is None else terminal_safe(v) if _UNSAFE.search(v) else v for v in values]
    if kinds <= {int, float, _NONE}:
        return ["-" if v is None or v != v else f"{v:,.1f}" if type(v) is float else str(v) for v in values]
    return [cell(v) for v in values]


def _is_number(v: Any) -> bool:
    return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))


def csv_field(value: Any, terminal: bool = False, option: bool = False) -> str:
    """One CSV cell: None and NaN empty, times ISO-8601, text formula-guarded (and escaped for a
    terminal); ``option``: see csv_safe."""
    value = plain(value)
    if value is None:
        return ""
    if isinstance(value, str):
        value = csv_safe(value, option)
        if terminal:
            value = terminal_safe(value)
    text = str(value)
    return '"' + text.replace('"', '""') + '"' if _CSV_QUOTE.search(text) else text


def csv_line(values: Sequence[Any], terminal: bool = False) -> str:
    cells = [csv_field(v, terminal) for v in values]
    return (",".join(cells) if cells != [""] else '""') + "\n"    # a lone empty cell is not an empty line


def to_csv(rows: Iterable[dict], columns: Sequence[str], terminal: bool = False) -> str:
    """The one CSV writer (CLI output and the CSV report). ``terminal``: stdout is a terminal."""
    return csv_of(list(columns), [tuple(r.get(c) for c in columns) for r in rows], columns, terminal)


def csv_of(names: Sequence[str], data: Sequence[tuple], columns: Sequence[str], terminal: bool = False,
           options: Collection[str] = ()) -> str:
    """CSV of ``columns`` of the tuples ``data``: csv_line's cells, made column by column (a column
    of plain numbers needs no guarding, quoting or escaping). ``options``: the columns of
    jobsight's own text whose cells may start with a command-line option (module docstring)."""
    cols = []
    for c in columns:
        i = list(names).index(c)
        values = [r[i] for r in data]
        kinds = {type(v) for v in values}
        option = c in options
        if kinds <= {int, float, _NONE}:
            cols.append(["" if v is None or v != v else str(v) for v in values])
        elif kinds <= {str, _NONE}:
            cols.append(["" if v is None else v if _PLAIN_CSV_TEXT.fullmatch(v) else csv_field(v, terminal, option)
                         for v in values])
        else:
            cols.append([csv_field(v, terminal, option) for v in values])
    if len(columns) == 1:       # a lone empty cell is not an empty line
        cols[0] = [v or '""' for v in cols[0]]
    return csv_line(columns, terminal) + "".join(",".join(row) + "\n" for row in zip(*cols))


def to_json(obj: Any) -> str:
    def conv(o):
        if isinstance(o, dict):
            return {k: conv(v) for k, v in o.items()}
        if isinstance(o, (list, tuple)):
            return [conv(v) for v in o]
        return plain(o)
    # json.dumps escapes C0 in strings; DEL, C1 and the bidi controls become \\u escapes too (the same
    # data to a reader). Only strings hold them: the layout's own newlines and spaces are left alone.
    return _UNSAFE_JSON.sub(lambda m: f"\\u{ord(m.group(0)):04x}", json.dumps(conv(obj), indent=2, ensure_ascii=False))


def _json_default(o: Any) -> Any:
    if isinstance(o, (dt.date, dt.datetime)):
        return plain(o)
    raise TypeError(f"{type(o).__name__} is not JSON serializable")


def json_of(names: Sequence[str], data: Sequence[tuple]) -> str:
    """The tuples as a JSON list of objects, one object a line (the same data as to_json)."""
    try:
        # the C encoder (no indent); a NaN (null in to_json) falls back to the full conversion
        lines = [json.dumps(dict(zip(names, r)), ensure_ascii=False, allow_nan=False, default=_json_default)
                 for r in data]
    except ValueError:
        return to_json([dict(zip(names, r)) for r in data])
    if not lines:
        return "[]"
    return _UNSAFE_JSON.sub(lambda m: f"\\u{ord(m.group(0)):04x}", "[\n  " + ",\n  ".join(lines) + "\n]")


SPARK = "▁▂▃▄▅▆▇█"


def sparkline(values: Sequence[float | None], width: int = 60) -> str:
    """Utilisation 0..100 as a one-line bar chart, averaged into at most `width` buckets."""
    vals = [v for v in values]
    if not vals:
        return ""
    n = min(width, len(vals))
    out = []
    for i in range(n):
        chunk = [v for v in vals[i * len(vals) // n:(i + 1) * len(vals) // n] if v is not None]
        if not chunk:
            out.append(" ")
            continue
        v = max(0.0, min(100.0, sum(chunk) / len(chunk)))
        out.append(SPARK[min(len(SPARK) - 1, int(v / 100 * len(SPARK)))])
    return "".join(out)


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def select_list(columns: Sequence[str]) -> str:
    return ", ".join(quote_ident(c) for c in columns)


def emit(rows: Sequence[dict], fmt: str, columns: Sequence[str], table_columns: Sequence[str] | None = None,
         empty: str = "no rows") -> None:
    """Print rows as --format json|csv|table (the table may show fewer columns than CSV/JSON)."""
    if fmt == "json":
        print(to_json(list(rows)))
    else:
        emit_rows(list(columns), [tuple(r.get(c) for c in columns) for r in rows], fmt, columns, table_columns, empty)


def emit_rows(names: Sequence[str], data: Sequence[tuple], fmt: str, columns: Sequence[str],
              table_columns: Sequence[str] | None = None, empty: str = "no rows", width: int | None = None,
              options: Collection[str] = (), cut_first: Sequence[str] = ()) -> None:
    """``emit`` for a query's names and tuples (``fetch``); JSON objects hold ``columns``; the
    table fits ``width`` (see table_of); ``options``: see csv_of."""
    if fmt == "json":
        keep = [list(names).index(c) for c in columns]
        print(json_of(columns, [tuple(r[i] for i in keep) for r in data]))
    elif fmt == "csv":
        print(csv_of(names, data, columns, terminal=is_terminal(), options=options), end="")
    else:
        print_text(table_of(names, data, table_columns or columns, width=width, cut_first=cut_first) if data else empty)


def print_text(text: str) -> None:
    """Print human-readable text: its own newlines kept, any control character left in it escaped."""
    print(terminal_safe(text, keep="\n"))
