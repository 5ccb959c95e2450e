"""Dependency-free inline SVG charts for the storm report: line charts and heatmaps.

Hand-written so the report is one self-contained HTML file with no JavaScript and no plotting
library to pin; hovering a point or cell shows its value (SVG <title>). Either axis of a line chart
can be a decade (log) scale, which callers choose with `spans_decade` when values differ by 10× or
more, so small series do not lie flat beside large ones. A series keeps its colour in every chart
(`Palette`: a target, a request kind or a process is one colour throughout a report), and a point
can be drawn hollow with a note (a step that was not judged on every request kind).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f",
           "#bcbd22")
#: Names that are the same thing in every report keep the same colour: the targets first of all.
FIXED = {"namesrv": PALETTE[0], "java": PALETTE[1], "ceiling": PALETTE[8], "server": PALETTE[0],
         "generator": PALETTE[3], "subscribers": PALETTE[2], "GET_ROUTEINFO_BY_TOPIC": PALETTE[0],
         "REGISTER_BROKER": PALETTE[1], "BROKER_HEARTBEAT": PALETTE[2], "QUERY_DATA_VERSION": PALETTE[4],
         "ROUTE_CHANGED": PALETTE[6]}


class Palette:
    """One colour per name for a whole report: FIXED ones first, any other the next unused one, for good."""

    def __init__(self) -> None:
        self._colors = dict(FIXED)
        self._next = 0

    def __call__(self, name: str) -> str:
        if name not in self._colors:
            taken = set(self._colors.values())
            free = [color for color in PALETTE if color not in taken] or list(PALETTE)
            self._colors[name] = free[self._next % len(free)]
            self._next += 1
        return self._colors[name]


_FONT = 'font-family="sans-serif" font-size="11"'


@dataclass(frozen=True, slots=True)
class Series:
    name: str
    xs: Sequence[float]
    ys: Sequence[float]
    #: Its colour (None: the next of PALETTE by position in the chart).
    color: str | None = None
    #: Per point: a note shown on hover, and the point drawn hollow (empty: none).
    notes: Sequence[str] = ()


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values covering [low, high] (1-2-5 steps)."""
    if not math.isfinite(low) or not math.isfinite(high):
        raise ValueError(f"ticks need a finite range, got {low}..{high}")
    if high <= low:
        high = low + (abs(low) or 1.0)
    raw = (high - low) / max(count, 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    first = math.floor(low / step) * step
    ticks = []
    value = first
    while value <= high + step * 1e-9:
        ticks.append(round(value, 12))
        value += step
    if ticks[-1] < high:
        ticks.append(round(value, 12))
    return ticks


def format_number(value: float) -> str:
    """A tick or hover label: at most 3 significant digits, k/M for large values."""
    if value == 0:
        return "0"
    if abs(value) >= 1e6:
        return f"{value / 1e6:.3g}M"
    if abs(value) >= 1e4:
        return f"{value / 1e3:.3g}k"
    if abs(value) >= 100:
        return f"{value:.0f}"
    return f"{value:.3g}"


#: Positive values spanning at least this factor get a log axis (64/s beside 5,000/s is not a flat line).
LOG_SPAN = 10.0


def spans_decade(values: Sequence[float]) -> bool:
    """Whether the positive `values` span LOG_SPAN× or more: then a linear axis would flatten the small ones."""
    positive = [v for v in values if v is not None and math.isfinite(v) and v > 0]
    return bool(positive) and max(positive) >= LOG_SPAN * min(positive)


@dataclass(frozen=True, slots=True)
class Reference:
    """A dashed horizontal line across the plot (an SLO, a limit), in data units."""

    y: float
    label: str


def line_chart(series: Sequence[Series], *, title: str, x_label: str, y_label: str,
               x_tick_labels: dict[float, str] | None = None, markers: bool = False, y_log: bool = False,
               x_log: bool = False, references: Sequence[Reference] = (), width: int = 660,
               height: int = 300) -> str:
    """Lines over a shared x axis; `x_tick_labels` replaces numeric x ticks (e.g. percentile positions).

    `y_log`/`x_log` plot that axis on a decade scale (latency spectra span microseconds to
    seconds; throughputs of 64/s and 5,000/s share a chart) and say so in the axis label; points
    that are not positive have no place on a log axis and are left out. `references` draw
    horizontal lines such as an SLO.
    """
    series = [_on_log_axes(s, x_log, y_log) for s in series]
    series = [s for s in series if len(s.xs)]
    x_label, y_label = _log_label(x_label, x_log), _log_label(y_label, y_log)
    refs = [(math.log10(r.y) if y_log else r.y, r.label) for r in references
            if math.isfinite(r.y) and (r.y > 0 or not y_log)]
    left, right, top, bottom = 64, 190, 28, 42
    plot_w, plot_h = width - left - right, height - top - bottom
    parts = [_svg_open(width, height, title), _text(left, 16, title, weight="bold")]
    if not series:
        parts.append(_text(left + plot_w / 2, top + plot_h / 2, "no data", anchor="middle"))
        return "".join(parts) + "</svg>"
    xs = [x for s in series for x in s.xs]
    ys = [y for s in series for y in s.ys] + [y for y, _ in refs]
    if x_tick_labels:
        x_ticks = sorted(x_tick_labels)
    else:
        x_ticks = _decade_ticks(xs) if x_log else nice_ticks(min(xs), max(xs))
    y_ticks = _decade_ticks(ys) if y_log else nice_ticks(min(0.0, min(ys)), max(ys))
    x0, x1 = min(x_ticks[0], min(xs)), max(x_ticks[-1], max(xs))
    y0, y1 = y_ticks[0], y_ticks[-1]

    def sx(x: float) -> float:
        return left + (x - x0) / ((x1 - x0) or 1.0) * plot_w

    def sy(y: float) -> float:
        return top + plot_h - (y - y0) / ((y1 - y0) or 1.0) * plot_h

    parts.append(_axes(left, top, plot_w, plot_h, x_label, y_label))
    for tick in y_ticks:
        parts.append(_grid_y(left, plot_w, sy(tick), format_number(10 ** tick if y_log else tick)))
    for tick in x_ticks:
        label = x_tick_labels[tick] if x_tick_labels else format_number(10 ** tick if x_log else tick)
        parts.append(_tick_x(sx(tick), top + plot_h, label))
    for y, label in refs:
        parts.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{sy(y):.1f}" y2="{sy(y):.1f}" stroke="#555" '
                     f'stroke-dasharray="5,3"><title>{escape(label)}</title></line>'
                     + _text(left + plot_w - 4, sy(y) - 4, label, anchor="end"))
    for index, s in enumerate(series):
        color = s.color or PALETTE[index % len(PALETTE)]
        points = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in zip(s.xs, s.ys))
        parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.6" points="{points}">'
                     f"<title>{escape(s.name)}</title></polyline>")
        if markers:
            for x, y, note in zip(s.xs, s.ys, s.notes or [""] * len(s.xs)):
                shown = format_number(10 ** y if y_log else y) + (f" ({note})" if note else "")
                fill = f'fill="white" stroke="{color}" stroke-width="1.5" class="unjudged"' if note else \
                    f'fill="{color}"'
                parts.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="{3.5 if note else 2.5}" {fill}>'
                             f"<title>{escape(s.name)}: {escape(shown)}</title></circle>")
        legend_y = top + 6 + index * 15
        parts.append(f'<rect x="{left + plot_w + 12}" y="{legend_y - 8}" width="10" height="10" fill="{color}"/>')
        parts.append(_text(left + plot_w + 26, legend_y + 1, _shorten(s.name, 26)))
    return "".join(parts) + "</svg>"


def _on_log_axes(s: Series, x_log: bool, y_log: bool) -> Series:
    """`s` in the chart's coordinates: log10 of a log axis's values, its non-positive points dropped."""
    points = [(x, y) for x, y in zip(s.xs, s.ys)
              if x is not None and y is not None and math.isfinite(x) and math.isfinite(y)
              and (x > 0 or not x_log) and (y > 0 or not y_log)]
    notes = [note for x, y, note in zip(s.xs, s.ys, s.notes or [""] * len(s.xs))
             if x is not None and y is not None and math.isfinite(x) and math.isfinite(y)
             and (x > 0 or not x_log) and (y > 0 or not y_log)]
    return Series(s.name, [math.log10(x) if x_log else x for x, _ in points],
                  [math.log10(y) if y_log else y for _, y in points], s.color, notes if s.notes else ())


def _log_label(label: str, log: bool) -> str:
    return label + " (log scale)" if log and "log scale" not in label else label


def _decade_ticks(logs: Sequence[float]) -> list[float]:
    """Whole decades covering the log10 values (at least two ticks)."""
    ticks = [float(k) for k in range(math.floor(min(logs)), math.ceil(max(logs)) + 1)]
    return ticks if len(ticks) > 1 else [ticks[0], ticks[0] + 1]


def heatmap(rows: Sequence[str], columns: Sequence[str], values: dict[tuple[str, str], float], *, title: str,
            row_label: str, column_label: str, higher_is_better: bool, formatter: Callable[[float], str],
            cell_w: int = 92, cell_h: int = 30) -> str:
    """A grid of colored cells: green = better, red = worse; missing points stay grey."""
    left, top = max(110, 7 * len(row_label) + 16), 48
    width = int(max(left + cell_w * max(len(columns), 1), left + 7 * len(column_label), 8 + 7 * len(title)) + 20)
    height = top + cell_h * max(len(rows), 1) + 40
    parts = [_svg_open(width, height, title), _text(8, 16, title, weight="bold"),
             _text(left, 32, column_label, weight="bold"), _text(8, top - 2, row_label, weight="bold")]
    present = [v for v in values.values() if v is not None and math.isfinite(v)]
    low, high = (min(present), max(present)) if present else (0.0, 1.0)
    for c, column in enumerate(columns):
        parts.append(_text(left + c * cell_w + cell_w / 2, top - 2, _shorten(column, 16), anchor="middle"))
    for r, row in enumerate(rows):
        y = top + r * cell_h
        parts.append(_text(8, y + cell_h / 2 + 4, _shorten(row, 22)))
        for c, column in enumerate(columns):
            x = left + c * cell_w
            value = values.get((row, column))
            if value is None or not math.isfinite(value):
                fill, label = "#e0e0e0", "–"
            else:
                share = 0.5 if high == low else (value - low) / (high - low)
                fill, label = _red_to_green(share if higher_is_better else 1 - share), formatter(value)
            parts.append(f'<rect x="{x}" y="{y}" width="{cell_w - 2}" height="{cell_h - 2}" fill="{fill}">'
                         f"<title>{escape(row)} / {escape(column)}: {escape(label)}</title></rect>")
            parts.append(_text(x + cell_w / 2 - 1, y + cell_h / 2 + 3, label, anchor="middle"))
    return "".join(parts) + "</svg>"


def _red_to_green(share: float) -> str:
    """0 = red, 0.5 = yellow, 1 = green (light enough for black text)."""
    share = min(max(share, 0.0), 1.0)
    red = 230 if share < 0.5 else int(230 - (share - 0.5) * 2 * 110)
    green = int(120 + share * 2 * 90) if share < 0.5 else 210
    return f"#{red:02x}{green:02x}8c"


def _svg_open(width: int, height: int, title: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}">')


def _text(x: float, y: float, text: str, anchor: str = "start", weight: str = "normal") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" {_FONT} text-anchor="{anchor}" font-weight="{weight}">'
            f"{escape(text)}</text>")


def _axes(left: int, top: int, plot_w: int, plot_h: int, x_label: str, y_label: str) -> str:
    bottom = top + plot_h
    return (f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#888"/>'
            + _text(left + plot_w / 2, bottom + 34, x_label, anchor="middle")
            + f'<text transform="translate(14,{top + plot_h / 2:.1f}) rotate(-90)" {_FONT} text-anchor="middle">'
            f"{escape(y_label)}</text>")


def _grid_y(left: int, plot_w: int, y: float, label: str) -> str:
    return (f'<line x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>'
            + _text(left - 6, y + 4, label, anchor="end"))


def _tick_x(x: float, bottom: float, label: str) -> str:
    return (f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{bottom}" y2="{bottom + 4}" stroke="#888"/>'
            + _text(x, bottom + 16, label, anchor="middle"))


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"
