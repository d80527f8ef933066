"""The console's own SVG renderer, and the number/date formatting it shares with the dashboard
(upgate/i18n: one Formatter for both) as the console uses it (pure functions)."""
from __future__ import annotations

import xml.etree.ElementTree as ET
from decimal import Decimal

from upgate.console import charts, view
from upgate.i18n import Formatter

fmt = Formatter("en")
fa = Formatter("fa")

SVG = "{http://www.w3.org/2000/svg}"


def _parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)  # well-formed XML, or this raises


def test_bars_have_an_accessible_title_a_bar_and_a_tooltip_per_value():
    svg = _parse(charts.bars(["01", "02", "03"], [3, 0, 12], "Requests per day", fmt.count,
                             ["1405-09-01", "1405-09-02", "1405-09-03"]))
    assert svg.get("role") == "img"
    assert svg.find(SVG + "title").text == "Requests per day"
    assert "1405-09-03: 12" in svg.find(SVG + "desc").text
    rects = svg.findall(SVG + "rect")
    assert [r.find(SVG + "title").text for r in rects] == ["1405-09-01: 3", "1405-09-02: 0", "1405-09-03: 12"]
    heights = [float(r.get("height")) for r in rects]
    assert heights[1] == 0 and heights[2] > heights[0] > 0
    assert heights[2] / heights[0] == 4  # to scale: 12 is four times 3
    ticks = [t.text for t in svg.findall(SVG + "text") if t.get("text-anchor") == "end"]
    assert ticks == ["0", "5", "10", "15"]


def test_line_and_hbars_take_decimal_money_text_and_escape_labels():
    svg = _parse(charts.line(["a", "b"], ["1500.000000", "250.500000"], "Charges", fmt.toman))
    assert len(svg.findall(SVG + "circle")) == 2
    assert svg.findall(SVG + "circle")[0].find(SVG + "title").text == "a: 1,500"
    hb = _parse(charts.hbars(["<script>/x", "b/y"], [Decimal("2"), Decimal("1")], "By model", fmt.toman))
    assert "<script>" not in charts.hbars(["<script>"], [1], "t")
    widths = [float(r.get("width")) for r in hb.findall(SVG + "rect")]
    assert widths[0] == 2 * widths[1]


def test_empty_charts_say_so():
    for draw in (charts.bars, charts.line, charts.hbars):
        svg = _parse(draw([], [], "Nothing"))
        assert "No data" in "".join(svg.itertext())


def test_nice_ticks_and_short_labels():
    assert charts.nice_ticks(0) == [0.0, 1.0]
    assert charts.nice_ticks(7) == [0, 2, 4, 6, 8]
    assert charts.nice_ticks(1_234_567)[-1] >= 1_234_567
    assert charts.short(1500) == "1.5k" and charts.short(3_000_000) == "3M" and charts.short(0.25) == "0.25"


def test_toman_amounts_for_people():
    # whole toman from 1,000 up, two decimals below; every digit in the tooltip
    assert fmt.toman("751987.088625") == "751,987" and fmt.exact("751987.088625") == "751,987.088625"
    assert fmt.toman("-20.000000") == "-20" and fmt.toman("0.000000") == "0" and fmt.toman(None) == "—"
    assert fmt.micro(1_500_250_000) == "1,500" and fmt.micro(12_500_000) == "12.50"
    assert fa.toman("751987.088625") == "۷۵۱٬۹۸۷" and fa.exact("0.5") == "۰٫۵"
    assert fmt.plain(1_500_000_000) == "1500" and fmt.plain(250_000) == "0.25" and fmt.plain(None) == ""
    assert view.money(fmt, "751987.088625") == '<span class="amt" dir="ltr" title="751,987.088625">751,987</span>'
    assert view.money(fmt, "1500.000000") == '<span class="amt" dir="ltr">1,500</span>'
    assert view.short_id("<a>") == '<span class="id trunc " dir="ltr" title="&lt;a&gt;">&lt;a&gt;</span>'


def test_jalali_tehran_times():
    # 2026-11-23T19:04:05Z is 22:34:05 in Tehran on 1405-09-02
    assert fmt.when("2026-11-23T19:04:05Z") == "1405/09/02 22:34"
    assert fmt.when(1795460645, seconds=True) == "1405/09/02 22:34:05"
    assert fa.when(1795460645) == "۱۴۰۵/۰۹/۰۲ ۲۲:۳۴"
    assert fmt.iso(1795460645) == "2026-11-23T19:04:05Z"
    assert fmt.when(None) == "—" and fmt.when(0) == "—"
    assert fmt.day("1405-09-02") == "09/02"
