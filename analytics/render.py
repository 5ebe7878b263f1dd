"""Output for the CLI: aligned text tables, CSV and JSON from rows of dicts.

User-supplied strings (job names, accounts) are made inert for each target: control and escape
characters are shown as visible escapes in the terminal, and CSV cells that a spreadsheet would
run as a formula get a leading apostrophe.
"""
from __future__ import annotations

import csv
import datetime as dt
import io
import json
import math
import re
from typing import Any, Iterable, Sequence

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def terminal_safe(text: str) -> str:
    """Escape control characters (ANSI sequences, newlines) so a job name cannot drive the terminal."""
    return _CONTROL.sub(lambda m: repr(m.group(0))[1:-1] if m.group(0) != "\x1b" else "\\x1b", text)


def csv_safe(value: Any) -> Any:
    if isinstance(value, str) and value.startswith(_FORMULA_START):
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
    headers = list(headers or columns)
    body = [[cell(r.get(c)) for c in columns] for r in rows]
    widths = [max([len(h)] + [len(row[i]) for row in body]) for i, h in enumerate(headers)]
    numeric = [all(_is_number(r.get(c)) for r in rows) and rows for c in columns]
    def fmt(values):
        return "  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)).rstrip()
    lines = [fmt(headers), fmt(["-" * w for w in widths])] + [fmt(r) for r in body]
    return "\n".join(lines)


def _is_number(v: Any) -> bool:
    return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))


def to_csv(rows: Iterable[dict], columns: Sequence[str]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    for r in rows:
        w.writerow([csv_safe(plain(r.get(c))) if r.get(c) is not None else "" for c in columns])
    return buf.getvalue()


def to_json(obj: Any) -> str:
    def conv(o):
        if isinstance(o, dict):
            return {k: conv(v) for k, v in o.items()}
        if isinstance(o, (list, tuple)):
            return [conv(v) for v in o]
        return plain(o)
    return json.dumps(conv(obj), indent=2, ensure_ascii=False)


def rows_of(con, sql: str, params: Sequence | None = None) -> list[dict]:
    cur = con.execute(sql, params or [])
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r)) for r in cur.fetchall()]


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
    elif fmt == "csv":
        print(to_csv(rows, columns), end="")
    else:
        print(table(rows, table_columns or columns) if rows else empty)
