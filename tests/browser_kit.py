"""What every browser test shares: Debian's chromium driven by Playwright (never a browser
Playwright would download), one browser per test module, and the screenshots' folder.

A test module starts with `sync_api = need_browser()`: it is skipped, and says why, where no
chromium or no Playwright is installed."""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("UPGATE_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
SHOTS = Path(__file__).with_name(".screenshots")


def need_browser():
    """Playwright's sync API, or skip the calling module."""
    if not os.path.exists(CHROMIUM):
        pytest.skip("no chromium executable (apt-get install chromium)", allow_module_level=True)
    sync_api = pytest.importorskip("playwright.sync_api")
    _screenshots_retry(sync_api)
    return sync_api


def _screenshots_retry(sync_api) -> None:
    """A screenshot is taken again once when Chromium answers "Unable to capture screenshot": with
    four workers' browsers rastering tall pages at once, the compositor now and then misses a
    frame. It is the picture that failed, never the page: every assertion still runs on the page."""
    for cls in (sync_api.Page, sync_api.Locator):
        if getattr(cls.screenshot, "_retries", False):
            continue
        first = cls.screenshot

        def screenshot(self, *args, _first=first, **kw):
            try:
                return _first(self, *args, **kw)
            except sync_api.Error as e:
                if "Unable to capture screenshot" not in str(e):
                    raise
                time.sleep(0.5)
                return _first(self, *args, **kw)

        screenshot._retries = True
        cls.screenshot = screenshot


@pytest.fixture(scope="module")
def browser():
    sync_api = need_browser()
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


# The layout measure of a page a person reads (docs/testing.md): nothing wider than the viewport,
# no text cut by its box, every control at least 40 px high and wide (text links inside a
# sentence excepted, as WCAG's target-size rule does). Run in the page; returns what is wrong.
LAYOUT_MEASURE = """(width) => {
  const bad = [];
  const name = (e) => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') +
    (e.className && typeof e.className === 'string' ? '.' + e.className.trim().split(/\\s+/).join('.') : '') +
    ' "' + (e.innerText || e.value || '').trim().slice(0, 30) + '"';
  if (document.documentElement.scrollWidth > width) {
    bad.push('page is ' + document.documentElement.scrollWidth + ' px wide');
    for (const e of document.querySelectorAll('body *')) {  // what sticks out, innermost first
      const r = e.getBoundingClientRect();
      if ((r.right > width + 1 || r.left < -1) && !e.closest('.scroll') &&
          ![...e.children].some((c) => { const q = c.getBoundingClientRect(); return q.right > width + 1 || q.left < -1; }))
        bad.push('sticks out: ' + name(e));
    }
  }
  for (const e of document.querySelectorAll('body *')) {
    const s = getComputedStyle(e);
    if (s.display === 'none' || s.visibility === 'hidden' || e.closest('svg') || e.closest('.skip')) continue;
    const head = e.closest('thead');  // a table read as cards keeps its headings for screen readers only
    if (head && head.getBoundingClientRect().width <= 1) continue;
    const r = e.getBoundingClientRect();
    if (!r.width && !r.height) continue;
    if ((s.overflowX === 'hidden' || s.overflowX === 'clip' || s.textOverflow === 'ellipsis') &&
        e.scrollWidth > e.clientWidth + 1 && !e.classList.contains('chartbox')) bad.push('cut: ' + name(e));
    const control = e.matches('button, input:not([type=hidden]), select, textarea, summary, a.button, nav a, .tools a');
    if (control && (r.height < 40 || r.width < 40)) bad.push('small target ' + Math.round(r.width) + 'x' + Math.round(r.height) + ': ' + name(e));
  }
  return bad;
}"""


def layout_problems(page, width: int) -> list[str]:
    return page.evaluate(LAYOUT_MEASURE, width)
