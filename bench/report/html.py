"""The report's HTML pieces: its style, its tables, and numbers rounded to what they mean.

Numbers are formatted for reading here only; the CSV tables keep them raw.
"""
from __future__ import annotations

import math
from html import escape

import pandas as pd

CSS = """body{font-family:sans-serif;margin:24px;color:#222;max-width:1500px}
h1{font-size:22px;margin:0 0 8px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ccc}h3{font-size:15px}
.scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;font-size:12px;margin:8px 0}th,td{border:1px solid #ccc;padding:3px 6px}
th{background:#f2f2f2}td.w{overflow-wrap:anywhere;max-width:26em}
td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.note{font-size:13px;color:#444}.details{font-size:12px;color:#555;margin:2px 0;overflow-wrap:anywhere}
.warn{font-size:13px;color:#8a1c00;background:#fff1e6;padding:4px 8px}
#verdict{margin:0 0 10px}.verdict{font-size:15px;padding:6px 8px;background:#eef6ee;margin:0}
.verdict-detail{font-size:13px;margin:3px 8px}
.first{display:flex;flex-wrap:wrap;gap:16px;align-items:flex-start}.first h3{margin:0}.at-knee{flex:1;min-width:420px}
pre.lines{font-size:12px;background:#f7f7f7;padding:6px;white-space:pre-wrap;overflow-wrap:anywhere}
.charts{display:flex;flex-wrap:wrap;gap:12px}.charts svg{border:1px solid #eee}"""
#: Text cells longer than this may break anywhere (a reason, a configuration); shorter ones keep their words.
WRAPPED = 24
#: Columns holding microseconds, shown in milliseconds.
LATENCY_COLUMNS = {c: 1000.0 for c in ("p0", "p50", "p90", "p99", "p99_9", "max", "send_delay_p99", "mean",
                                        "client_p50", "client_p99", "server_p50", "server_p99")}


def table(frame: pd.DataFrame, divide: dict[str, float], headers: dict[str, str] | None = None) -> str:
    """An HTML table that fits the page: long text cells wrap anywhere, headers break after an
    underscore, numbers never (a scrolling box is the last resort, so a wide one never widens the page).

    Numbers are rounded to what they mean (see format_cell); `divide` maps columns to the divisor
    that makes them milliseconds; `headers` renames columns for display.
    """
    headers = headers or {}
    head = "".join(f"<th>{escape(headers.get(c) or header(c, divide)).replace('_', '_<wbr>')}</th>"
                   for c in frame.columns)
    rows = []
    for record in frame.itertuples(index=False):
        cells = []
        for column, value in zip(frame.columns, record):
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                cells.append(f"<td class=n>{format_cell(column, value, divide)}</td>")
            else:
                text = "" if value is None else str(value)
                cells.append(f"<td{' class=w' if len(text) > WRAPPED else ''}>{escape(text)}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return f"<div class=scroll><table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"


def header(column: str, divide: dict[str, float]) -> str:
    if column in divide:
        return column.replace("_us", "") + " (ms)"
    return column


def format_cell(column: str, value: float, divide: dict[str, float]) -> str:
    """A number rounded to what its column means: rates to whole requests/s, milliseconds to the
    microsecond, shares as percentages, ratios to two decimals, MiB to one; never raw floats."""
    if pd.isna(value):
        return "–"
    if column in divide:
        return ms(value / divide[column])
    name = column.lower()
    if name.endswith("_ratio"):
        return f"{value:,.2f}×"
    if name in ("error_rate", "share") or name.endswith(("_rate", "_share")):
        return percent(value)
    if "per_s" in name and "per_answer" not in name:
        return rate(value)
    if name.endswith("_ms"):
        return ms(value)
    if name.endswith(("_mib", "_per_answer")):
        return f"{value:,.1f}"
    if name.endswith("_percent"):
        return f"{value:,.0f}"
    return plain(value)


def ms(value: float) -> str:
    """Milliseconds to the microsecond (HDR values are exact to 0.1 %)."""
    return f"{value:,.3f}"


def percent(share: float) -> str:
    """A share as a percentage with up to 3 decimals; tiny non-zero shares say so instead of "0.000%"."""
    if share == 0:
        return "0%"
    percent = share * 100.0
    if percent >= 1:
        return f"{percent:,.2f}%"
    return f"{percent:.3f}%" if percent >= 0.001 else "<0.001%"


def plain(value: object) -> str:
    """Any other number: integers with separators, fractions to 3 significant digits (at most 3 decimals)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    value = float(value)
    if value.is_integer():
        return f"{int(value):,}"
    magnitude = abs(value)
    decimals = 0 if magnitude >= 100 else 1 if magnitude >= 10 else 2 if magnitude >= 1 else 3
    return f"{value:,.{decimals}f}"




def rate(value: float) -> str:
    return f"{float(value):,.0f}"


def page(title: str, body: list[str]) -> str:
    return (f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>{escape(title)}</title>"
            f"<style>{CSS}</style></head><body>{''.join(body)}</body></html>\n")
