"""Small SVG charts drawn on the server: bars by day, a line by day, horizontal bars by name.

Input is lists of numbers (the same numbers the API serves, as Decimal, int or decimal text)
and their labels; output is one ``<svg>`` string with a ``<title>`` and ``<desc>`` for screen
readers, a ``<title>`` per bar or point (the exact value, shown as a tooltip), a y axis with
round ticks and x labels thinned to fit. Geometry is in a fixed viewBox; CSS scales it.
"""
from __future__ import annotations

import itertools
import math
from decimal import Decimal
from html import escape
from typing import Callable, Sequence

from upgate.i18n import numbers

W, H = 560, 220  # viewBox
LEFT, RIGHT, TOP, BOTTOM = 84, 24, 12, 30  # plot margins: y labels on the left, x labels below
_ids = itertools.count(1)

Fmt = Callable[[object], str]


def _num(v) -> float:
    try:
        return float(Decimal(str(v)))
    except Exception:  # a missing or malformed value draws as zero; its label still says what it was
        return 0.0


def nice_ticks(top: float, n: int = 4, whole: bool = False) -> list[float]:
    """0 and round steps (1, 2 or 5 × 10^k) up to at least `top`: about n intervals. `whole`:
    the values are counts, so no step is smaller than 1 (no tick at 0.5 requests)."""
    if top <= 0:
        return [0.0, 1.0]
    raw = top / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    if whole:
        step = max(1, step)
    count = math.ceil(top / step - 1e-9)
    return [i * step for i in range(count + 1)]


def short(v: float) -> str:
    """An axis label in English: 1200 → "1.2k", 3500000 → "3.5M" (i18n.numbers.short)."""
    return numbers.short(v, "en")


def _open(title: str, desc: str, height: int = H, kind: str = "") -> tuple[str, list[str]]:
    cid = f"chart{next(_ids)}"
    # the geometry is left to right on every page: on a right-to-left one, text-anchor="end"
    # would otherwise mean the left end and labels would run into the bars
    head = (f'<svg class="chart{kind}" viewBox="0 0 {W} {height}" direction="ltr" role="img" '
            f'aria-labelledby="{cid}-t {cid}-d" xmlns="http://www.w3.org/2000/svg">'
            f'<title id="{cid}-t">{escape(title)}</title><desc id="{cid}-d">{escape(desc)}</desc>')
    return cid, [head]


def _desc(labels: Sequence[str], values: Sequence, fmt: Fmt) -> str:
    if not labels:
        return "No data."
    return "; ".join(f"{lab}: {fmt(v)}" for lab, v in zip(labels, values))


EMPTY = "No data in this period"


def _empty(parts: list[str], height: int = H, text: str = EMPTY) -> str:
    parts.append(f'<text class="empty" x="{W / 2}" y="{height / 2}" text-anchor="middle">{escape(text)}</text></svg>')
    return "".join(parts)


def _y_axis(parts: list[str], ticks: list[float], y_of, digits: Callable[[str], str] = str,
            axis: Callable[[float], str] | None = None) -> None:
    """`axis` (i18n.Formatter.axis: the language's digits and words) labels the ticks; without
    it, the English short form through `digits`."""
    for t in ticks:
        y = y_of(t)
        parts.append(f'<line class="grid" x1="{LEFT}" x2="{W - RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>'
                     f'<text class="tick" x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{escape(axis(t) if axis else digits(short(t)))}</text>')


def _x_labels(parts: list[str], labels: Sequence[str], x_of) -> None:
    every = max(1, math.ceil(len(labels) / 8))  # at most ~8 labels fit under the plot
    for i, lab in enumerate(labels):
        if i % every == 0 or i == len(labels) - 1 and len(labels) <= 8:
            parts.append(f'<text class="tick" x="{x_of(i):.1f}" y="{H - BOTTOM + 16}" '
                         f'text-anchor="middle">{escape(lab)}</text>')


def _frame(parts: list[str], values: Sequence, n: int, digits: Callable[[str], str] = str, axis=None,
           whole: bool = False):
    """The value axis of a day chart, drawn into `parts`: (numbers, slot width, x of the i-th
    slot's centre, y of a value). Bars and lines share it, so charts of one period line up."""
    nums = [_num(v) for v in values]
    ticks = nice_ticks(max(nums + [0.0]), whole=whole)
    top = ticks[-1] or 1.0
    plot_h = H - TOP - BOTTOM
    slot = (W - LEFT - RIGHT) / n

    def y_of(v: float) -> float:
        return TOP + plot_h * (1 - max(v, 0.0) / top)

    _y_axis(parts, ticks, y_of, digits, axis)
    return nums, slot, (lambda i: LEFT + (i + 0.5) * slot), y_of


def bars(labels: Sequence[str], values: Sequence, title: str, fmt: Fmt = str,
         tips: Sequence[str] | None = None, *, empty: str = EMPTY, digits: Callable[[str], str] = str,
         axis: Callable[[float], str] | None = None, whole: bool = False) -> str:
    """Vertical bars, one per label (days). `tips` are the x labels' long form for tooltips.
    Another language's page passes its `empty` text and `digits` (the axis numbers' script);
    `whole`: the values are counts (ticks at whole numbers only)."""
    _cid, parts = _open(title, _desc(tips or labels, values, fmt))
    if not labels:
        return _empty(parts, text=empty)
    nums, slot, x_of, y_of = _frame(parts, values, len(labels), digits, axis, whole)
    for i, (v, raw) in enumerate(zip(nums, values)):
        y = y_of(v)
        bw = max(1.0, slot * 0.7)
        tip = (tips or labels)[i]
        parts.append(f'<rect class="bar" x="{LEFT + i * slot + (slot - bw) / 2:.1f}" y="{y:.1f}" '
                     f'width="{bw:.1f}" height="{max(0.0, H - BOTTOM - y):.1f}">'
                     f'<title>{escape(tip)}: {escape(fmt(raw))}</title></rect>')
    _x_labels(parts, labels, x_of)
    parts.append("</svg>")
    return "".join(parts)


def line(labels: Sequence[str], values: Sequence, title: str, fmt: Fmt = str,
         tips: Sequence[str] | None = None, *, empty: str = EMPTY, digits: Callable[[str], str] = str,
         axis: Callable[[float], str] | None = None) -> str:
    """One line with a dot per label (days)."""
    _cid, parts = _open(title, _desc(tips or labels, values, fmt))
    if not labels:
        return _empty(parts, text=empty)
    nums, _slot, x_of, y_of = _frame(parts, values, len(labels), digits, axis)
    points = " ".join(f"{x_of(i):.1f},{y_of(v):.1f}" for i, v in enumerate(nums))
    parts.append(f'<polyline class="line" points="{points}"/>')
    for i, (v, raw) in enumerate(zip(nums, values)):
        tip = (tips or labels)[i]
        parts.append(f'<circle class="dot" cx="{x_of(i):.1f}" cy="{y_of(v):.1f}" r="3.5">'
                     f'<title>{escape(tip)}: {escape(fmt(raw))}</title></circle>')
    _x_labels(parts, labels, x_of)
    parts.append("</svg>")
    return "".join(parts)


def hbars(labels: Sequence[str], values: Sequence, title: str, fmt: Fmt = str, *, empty: str = EMPTY) -> str:
    """Horizontal bars, one row per label (models), the value written at each bar's end."""
    row = 26
    height = max(60, TOP + row * len(labels) + 8)
    _cid, parts = _open(title, _desc(labels, values, fmt), height, " hbars")
    if not labels:
        return _empty(parts, height, text=empty)
    nums = [_num(v) for v in values]
    top = max(nums + [0.0]) or 1.0
    name_w = 200
    span = W - name_w - 110
    for i, (lab, v, raw) in enumerate(zip(labels, nums, values)):
        y = TOP + i * row
        text = lab if len(lab) <= 28 else lab[:27] + "…"
        bw = max(1.0, span * max(v, 0.0) / top)
        parts.append(f'<text class="tick" x="{name_w - 8}" y="{y + 16}" text-anchor="end">{escape(text)}</text>'
                     f'<rect class="bar" x="{name_w}" y="{y + 4}" width="{bw:.1f}" height="{row - 8}">'
                     f'<title>{escape(lab)}: {escape(fmt(raw))}</title></rect>'
                     f'<text class="value" x="{name_w + bw + 6:.1f}" y="{y + 16}">{escape(fmt(raw))}</text>')
    parts.append("</svg>")
    return "".join(parts)
