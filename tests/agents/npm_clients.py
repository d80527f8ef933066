"""The real agent CLIs (Claude Code, Codex) and the Vercel AI SDK, installed from the npm
registry at the versions tests/agents/clients.json pins, into a private prefix
(UPGATE_AGENTS_PREFIX, default ~/.cache/upgate-agents/<versions' hash>): never the user's own.

`python -m tests.agents.npm_clients` installs them (.ci/run does); the agents suite installs
them itself when they are missing and skips only when node is not installed at all.
Claude Code and Codex ship their native binaries inside registry packages (platform
optionalDependencies), so no install script needs to run.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

PINS = Path(__file__).with_name("clients.json")


def versions() -> dict[str, str]:
    return {k: v for k, v in json.loads(PINS.read_text()).items() if not k.startswith("_")}


def prefix() -> Path:
    pins = versions()
    tag = hashlib.sha256(json.dumps(pins, sort_keys=True).encode()).hexdigest()[:12]
    default = Path.home() / ".cache" / "upgate-agents" / tag
    return Path(os.environ.get("UPGATE_AGENTS_PREFIX") or default)


def _installed(root: Path) -> bool:
    for name, version in versions().items():
        manifest = root / "node_modules" / name / "package.json"
        if not manifest.is_file() or json.loads(manifest.read_text()).get("version") != version:
            return False
    return True


def install() -> Path:
    """The prefix, with every pinned package at its version (installed when missing; one
    installer at a time: the suite's parallel workers wait for the first)."""
    root = prefix()
    if _installed(root):
        return root
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _installed(root):
            specs = [f"{name}@{version}" for name, version in versions().items()]
            subprocess.run(["npm", "install", "--prefix", str(root), "--no-audit", "--no-fund", "--no-save",
                            "--loglevel=error", *specs], check=True, timeout=900)
            if not _installed(root):
                raise RuntimeError(f"npm did not install {specs} into {root}")
    return root


def claude(root: Path) -> str:
    """Claude Code's native binary (the platform package's; the wrapper's postinstall copy is
    not needed)."""
    for name in ("claude-code-linux-x64", "claude-code-linux-arm64", "claude-code-linux-x64-musl",
                 "claude-code-linux-arm64-musl", "claude-code-darwin-arm64", "claude-code-darwin-x64"):
        binary = root / "node_modules" / "@anthropic-ai" / name / "claude"
        if binary.is_file():
            return str(binary)
    return str(root / "node_modules" / ".bin" / "claude")


def codex(root: Path) -> list[str]:
    return [shutil.which("node") or "node", str(root / "node_modules" / "@openai" / "codex" / "bin" / "codex.js")]


if __name__ == "__main__":
    print(install(), file=sys.stderr)
