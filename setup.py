"""upgate: an OpenAI-compatible LLM gateway with prepaid toman wallets."""
import re
from pathlib import Path

from setuptools import find_packages, setup

VERSION = re.search(r'__version__ = "([^"]+)"', Path("upgate/__init__.py").read_text()).group(1)

setup(
    name="upgate",
    version=VERSION,
    description="OpenAI-compatible LLM gateway with prepaid toman wallets and atomic Redis holds",
    long_description=Path("README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    python_requires=">=3.11",
    # lua/ lives at the top level (readable as Redis scripts) but ships inside the package
    # as upgate.lua, so a non-editable install carries every file the code opens.
    packages=find_packages(include=["upgate", "upgate.*", "admin_cli"]) + ["upgate.lua"],
    package_dir={"upgate.lua": "lua"},
    package_data={"upgate.lua": ["*.lua"], "upgate": ["*.toml"],
                  "upgate.console": ["templates/*.html", "static/*.css"],  # the console's pages
                  "upgate.dashboard": ["templates/*.html", "static/*.css", "static/*.js"],
                  "upgate.i18n": ["locale/*.csv"]},
    install_requires=[
        "tornado>=6.4",
        "pycurl>=7.45",
        "redis[hiredis]>=5.0",
        "click>=8.1",
        "rich>=13",
        "jdatetime>=5",
        "tzdata",  # Asia/Tehran where the OS has no zoneinfo
        "orjson>=3.9",
        "cryptography>=41",  # the console's session: the admin token encrypted at rest (Fernet)
        "fakeredis>=2.40",  # Redis Functions (FUNCTION LOAD, FCALL): the embedded store runs the library
        "lupa>=2.0",
        "prometheus-client>=0.20",
        "uvloop>=0.19; sys_platform != 'win32'",
    ],
    extras_require={
        "test": ["pytest>=8.4", "pytest-timeout>=2.3", "hypothesis>=6.100", "openai>=1.40", "httpx>=0.27",
                 "pytest-xdist>=3.6",  # the suite in parallel (tests/parallel.py)
                 "anthropic>=0.40",  # the Messages API (tests/anthropic/)
                 "playwright>=1.40",  # the console's browser tests drive Debian's chromium
                 "openapi-spec-validator>=0.7", "schemathesis>=4"],  # the management API's document
        "bench": ["openai>=1.40", "py-spy>=0.3"],  # py-spy: python -m bench --profile
    },
    entry_points={
        "console_scripts": [
            "upgate=upgate.cli:main",
            "upgate-admin=admin_cli.main:main",
        ]
    },
)
