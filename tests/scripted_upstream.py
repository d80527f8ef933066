"""A provider that sends exactly the body pieces a test scripts, at the times it sets: for
upstream output the mock provider does not make (odd shapes, events split across chunks)."""
from __future__ import annotations

import asyncio

import orjson

from tests.gateway import LoopThread
from tests.procs import free_port
from upgate.upstream.providers import Provider


class ScriptedUpstream:
    def __init__(self) -> None:
        self.port = free_port()
        self.script: list[tuple[float, bytes]] = []  # (seconds to wait, body piece)
        self.scripts: list[list[tuple[float, bytes]]] = []  # one per request first, then `script`
        self.thread = LoopThread("scripted-upstream")
        self.thread.run(self._start())

    async def _start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)

    async def _serve(self, reader, writer) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)
        await reader.readexactly(length)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
        for delay, piece in (self.scripts.pop(0) if self.scripts else self.script):
            await asyncio.sleep(delay)
            writer.write(b"%x\r\n%b\r\n" % (len(piece), piece))
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        writer.close()

    def provider(self) -> Provider:
        return Provider(name="mock", base_url=f"http://127.0.0.1:{self.port}/v1", api_key="sk-x",
                        dialect="openai", available=True)

    def close(self) -> None:
        self.server.close()

        async def stop_serving() -> None:  # a script still sleeping when its test is over
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        self.thread.run(stop_serving())
        self.thread.close()


def event(obj) -> bytes:
    return b"data: " + (obj if isinstance(obj, bytes) else orjson.dumps(obj)) + b"\n\n"


def content(text: str) -> dict:
    return {"id": "x", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": text}}]}
