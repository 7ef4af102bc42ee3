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
    bundled profiles only; ``root``: the checkout whose app.py is served (another one for a before/after).
    Raises RuntimeError with the server's log if it does not start within ``timeout``."""

    def __init__(
        self, profile: Path | None, log_path: Path, serve_args: list[str], timeout: float = 90, root: Path = ROOT
    ):
        self.port = free_port()
        self.log_path = log_path
        env = dict(os.environ)
        env.pop("UCUDNN_PROFILE", None)
        env.pop("UCUDNN_PROFILE_DIR", None)
        if profile is not None:
            env["UCUDNN_PROFILE"] = str(profile)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH", "")) if p)
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
            cwd=root,
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


READY = {  # BokehJS's message once a page has rendered its document: Panel runs its onload callbacks on it
    "events": [
        {
            "kind": "MessageSent",
            "msg_type": "bokeh_event",
            "msg_data": {"type": "event", "name": "document_ready", "values": {"type": "map", "entries": []}},
        }
    ]
}


async def page_server_work(url: str, until: str = "summary-time") -> tuple[float, int]:
    """One page load's server side as a browser makes it, without a browser: GET the page (the server runs
    app.py for the new session and writes the HTML); over the websocket, the Bokeh protocol's ACK and
    PULL-DOC-REQ (the document) and, as a browser does once it has rendered that, the document_ready event;
    then the server's messages until one carries ``until`` (app.py builds the dashboard after the page has
    loaded). Returns (seconds, bytes received over the websocket). Messages are counted, not decoded, so
    this client costs almost no CPU beside the server it measures; static assets (JavaScript, CSS), which a
    browser fetches too, are not requested."""
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
    received = 0

    async def message() -> tuple[str, str]:
        nonlocal received
        header = await ws.read_message()
        parts = [header] + [await ws.read_message() for _ in range(2)]  # metadata, content
        for _ in range(2 * json.loads(header).get("num_buffers", 0)):  # buffers: a header and the data each
            parts.append(await ws.read_message())
        received += sum(len(p) for p in parts)
        return json.loads(header)["msgtype"], parts[2]

    async def send(msgid: str, msgtype: str, content: dict) -> None:
        for frame in (json.dumps({"msgid": msgid, "msgtype": msgtype}), "{}", json.dumps(content)):
            await ws.write_message(frame)

    try:
        while (await message())[0] != "ACK":
            pass
        await send("1", "PULL-DOC-REQ", {})
        while True:
            kind, content = await message()
            if kind == "PULL-DOC-REPLY":
                break
        await send("2", "PATCH-DOC", READY)
        while until not in content:
            kind, content = await message()
        return time.perf_counter() - t, received
    finally:
        ws.close()
