"""``panel serve app.py`` in a subprocess on a free local port, for the browser tests and the dashboard
benchmark: both drive the app exactly as a user starts it; and a page load's server side without a browser."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PanelServer:
    """The app served with ``serve_args``; ``profile`` (a file) is what ``UCUDNN_PROFILE`` names, None for the
    bundled profiles only. Raises RuntimeError with the server's log if it does not start within ``timeout``."""

    def __init__(self, profile: Path | None, log_path: Path, serve_args: list[str], timeout: float = 90):
        self.port = free_port()
        self.log_path = log_path
        env = dict(os.environ)
        env.pop("UCUDNN_PROFILE", None)
        env.pop("UCUDNN_PROFILE_DIR", None)
        if profile is not None:
            env["UCUDNN_PROFILE"] = str(profile)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
        self._log = open(log_path, "w")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "panel",
                "serve",
                "app.py",
                "--port",
                str(self.port),
                "--address",
                "localhost",
                "--allow-websocket-origin",
                f"localhost:{self.port}",
                *serve_args,
            ],
            cwd=ROOT,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout
        while "Bokeh app running at" not in self.log():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"panel serve did not start:\n{self.log()}")
            time.sleep(0.2)
        self.url = f"http://localhost:{self.port}/app"

    def log(self) -> str:
        return self.log_path.read_text()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self._log.close()


async def page_server_work(url: str) -> tuple[float, int]:
    """One page load's server side as a browser starts it, without a browser: GET the page (the server runs
    app.py for the new session and writes the HTML), then over the websocket the Bokeh protocol's ACK and
    PULL-DOC-REQ, to the last frame of the document's reply. Returns (seconds, bytes of the reply). The reply
    is counted, not decoded, so this client costs almost no CPU beside the server it measures; static assets
    (JavaScript, CSS), which a browser fetches too, are not requested."""
    from tornado.httpclient import AsyncHTTPClient, HTTPRequest
    from tornado.websocket import websocket_connect

    t = time.perf_counter()
    page = (await AsyncHTTPClient().fetch(url, request_timeout=300)).body.decode()
    token = re.search(r'"token":"([^"]+)"', page).group(1)
    ws = await websocket_connect(
        HTTPRequest(url.replace("http://", "ws://") + "/ws", request_timeout=300),
        subprotocols=["bokeh", token],
        max_message_size=1 << 30,
    )
    try:

        async def message() -> tuple[dict, int]:
            header = json.loads(await ws.read_message())
            size = 0
            for _ in range(2 + 2 * header.get("num_buffers", 0)):  # metadata, content, buffers' headers and data
                size += len(await ws.read_message())
            return header, size

        while (await message())[0]["msgtype"] != "ACK":
            pass
        for frame in ('{"msgid": "1", "msgtype": "PULL-DOC-REQ"}', "{}", "{}"):
            await ws.write_message(frame)
        while True:
            header, size = await message()
            if header["msgtype"] == "PULL-DOC-REPLY":
                return time.perf_counter() - t, size
    finally:
        ws.close()
