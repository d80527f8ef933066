"""The Ledger's settlement journal (a mixin of upgate.billing.ledger.Ledger): a settlement the store
did not take after its retries is appended, fsynced, to a local file, and replayed (idempotent
by hold id) once the store answers, by the reaper's loop.
"""
from __future__ import annotations

import asyncio
import glob
import logging
import os
import time

import orjson

from upgate.billing.reaper import REAPED_KEEP_MS
from upgate.store.errors import STORE_ERRORS, store_unavailable

log = logging.getLogger("upgate.billing.ledger")


class Journal:
    """Uses the Ledger's settings, _record_args, _settle_call and _run."""

    async def _journal(self, entry: dict) -> None:
        line = orjson.dumps(entry) + b"\n"
        await asyncio.to_thread(_append_line, self.settings.journal_path, line)
        self.journaled += 1

    async def replay_journal(self) -> int:
        """Re-apply journaled settlements (idempotent by hold id); returns how many the store
        took (applied now, or found already applied). Lines it cannot take while unreachable go
        back into the journal. A line it refuses outright (never expected) is logged as an error and
        moved to `<journal>.failed` for the operator.

        An unknown hold (settle.lua code 0) means the charge was applied already: a hold that was
        never settled keeps its record, open or reaped, for REAPED_KEEP_MS. A line older than that
        cannot be told apart from a lost record, so it goes to `<journal>.failed` with an error.
        (No per-request "settled" marker is kept: at full rate that would be millions of keys.)"""
        path = self.settings.journal_path
        exists = os.path.exists(path)
        if not exists and not self._replay_pending:
            return 0
        if exists:
            await asyncio.to_thread(_take_journal, path)
        done = 0
        self._replay_pending = False
        for taken in sorted(glob.glob(glob.escape(path) + ".replay.*")):
            try:
                with open(taken, "rb") as f:
                    lines = f.read().splitlines()
            except FileNotFoundError:  # another process of this node replayed it
                continue
            left: list[bytes] = []
            for raw in lines:
                if left:  # the store went away part-way: keep the rest for the next tick
                    left.append(raw)
                    continue
                try:
                    e = orjson.loads(raw)
                    rec = self._record_args(e["a"], e.get("r"), e.get("rt"))
                    call = self._settle_call(e["a"], e["h"], e["m"], int(e["c"]), int(e["p"]), int(e["q"]),
                                             int(e.get("x", 0)), rec)
                except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                    log.error("journal: unreadable line skipped (%d bytes)", len(raw))
                    continue
                try:
                    code = int((await self._run([call]))[0][0])
                except STORE_ERRORS as err:
                    if store_unavailable(err):
                        left.append(raw)
                        continue
                    log.error("journal: settlement of hold %s refused (%s); kept in %s.failed",
                              e["h"], err, path)
                    await asyncio.to_thread(_append_line, path + ".failed", raw + b"\n")
                    continue
                if code == 0 and time.time() - int(e.get("t", 0)) > REAPED_KEEP_MS / 1000:
                    log.error("journal: hold %s (account %s) is older than the store keeps hold records: "
                              "cannot tell whether its %d micro-toman were charged; check and charge it "
                              "by hand (line kept in %s.failed)", e["h"], e["a"], int(e["c"]), path)
                    await asyncio.to_thread(_append_line, path + ".failed", raw + b"\n")
                    continue
                done += 1
            if left:
                await asyncio.to_thread(_append_line, path, b"\n".join(left) + b"\n")
            try:
                os.unlink(taken)
            except FileNotFoundError:
                pass
            if left:
                break
        self.replayed += done
        if done:
            log.warning("journal: %d settlements replayed", done)
        return done


def _append_line(path: str, data: bytes) -> None:
    """Append under an exclusive lock, to the file still at `path` (a replay may have just
    moved it aside), and fsync: a journaled charge must survive this process."""
    import fcntl

    while True:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                same = os.fstat(fd).st_ino == os.stat(path).st_ino
            except FileNotFoundError:
                same = False
            if not same:
                continue
            os.write(fd, data)
            os.fsync(fd)
            return
        finally:
            os.close(fd)


def _take_journal(path: str) -> None:
    """Move the journal aside (under its lock) so appends go to a fresh file while it replays."""
    import fcntl

    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            if os.fstat(fd).st_ino == os.stat(path).st_ino:
                os.rename(path, f"{path}.replay.{time.time_ns()}.{os.getpid()}")
        except FileNotFoundError:
            pass
    finally:
        os.close(fd)
