"""A non-editable install (`pip install .`) carries the console's templates and stylesheet.

setup.py's `build_py` step — what pip's wheel build runs to collect the packages and their
package data — writes into a scratch directory (no network, no wheel package needed), and
every template is loaded from there, away from the source tree."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONSOLE = ROOT / "upgate" / "console"

CHECK = """
import sys, pathlib, tornado.template
import upgate.app, admin_cli.main  # every package the route table and the CLI import is there
import upgate.console.base as base
assert pathlib.Path(base.__file__).is_relative_to(pathlib.Path(sys.argv[1])), base.__file__
loader = tornado.template.Loader(base.TEMPLATES)
names = sorted(p.name for p in pathlib.Path(base.TEMPLATES).glob("*.html"))
for name in names:
    loader.load(name)  # compiles, extends base.html
print(" ".join(names))
print(" ".join(sorted(p.name for p in pathlib.Path(base.STATIC).iterdir())))
"""


def test_pip_install_carries_the_console(tmp_path):
    target = tmp_path / "site"
    subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(target)],
                   check=True, cwd=ROOT, timeout=240, capture_output=True)
    out = subprocess.run([sys.executable, "-c", CHECK, str(target)], cwd=tmp_path, check=True, timeout=60,
                         capture_output=True, text=True, env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"})
    templates, static = out.stdout.split("\n")[:2]
    assert templates.split() == sorted(p.name for p in (CONSOLE / "templates").glob("*.html"))
    assert static.split() == sorted(p.name for p in (CONSOLE / "static").iterdir())
