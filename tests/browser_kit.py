"""What every browser test shares: Debian's chromium driven by Playwright (never a browser
Playwright would download), one browser per test module, and the screenshots' folder.

A test module starts with `sync_api = need_browser()`: it is skipped, and says why, where no
chromium or no Playwright is installed."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("UPGATE_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
SHOTS = Path(__file__).with_name(".screenshots")


def need_browser():
    """Playwright's sync API, or skip the calling module."""
    if not os.path.exists(CHROMIUM):
        pytest.skip("no chromium executable (apt-get install chromium)", allow_module_level=True)
    return pytest.importorskip("playwright.sync_api")


@pytest.fixture(scope="module")
def browser():
    sync_api = need_browser()
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()
