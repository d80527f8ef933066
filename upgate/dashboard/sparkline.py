"""A 30-day sparkline: a tiny inline SVG of bars (no script, no image request), drawn the same
way in both directions (time runs left to right, as on every chart of the dashboard)."""
from __future__ import annotations

from html import escape

W, H, GAP = 120, 28, 1


def svg(values: list[int], label: str) -> str:
    """Bars for `values` (oldest first), scaled to the largest; `label` is what a screen reader
    says (and the tooltip)."""
    n = max(1, len(values))
    top = max(values, default=0) or 1
    bar = (W - GAP * (n - 1)) / n
    rects = []
    for i, v in enumerate(values):
        h = 0 if v <= 0 else max(1.5, v / top * (H - 2))
        if h:
            rects.append(f'<rect x="{i * (bar + GAP):.2f}" y="{H - h:.2f}" width="{bar:.2f}" height="{h:.2f}"/>')
    base = f'<line x1="0" y1="{H - 0.5}" x2="{W}" y2="{H - 0.5}" class="base"/>'
    return (f'<svg class="spark" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" '
            f'aria-label="{escape(label)}"><title>{escape(label)}</title>{base}{"".join(rects)}</svg>')
