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


class ProtocolPage:
    """A page as the server sees it, without a browser (the dashboard benchmark's server-alone client).

    ``open``: GET the page (the server runs app.py for the new session and writes the HTML); over the websocket,
    the Bokeh protocol's ACK and PULL-DOC-REQ (the document) and, as a browser does once it has drawn that, the
    document_ready event; then the server's messages until one carries ``until`` (app.py builds the dashboard
    after the page has loaded). ``change``: a widget's value changed as a browser sends it, until the server's
    answer carries ``until``. Messages are parsed only for the models' ids and values, so this client costs
    little CPU beside the server it measures; static assets (JavaScript, CSS) are not requested."""

    def __init__(self) -> None:
        self.ws = None
        self.received = 0  # bytes over the websocket
        self.models: dict[str, dict] = {}  # id -> {"name": Bokeh type, **attributes} as the server sent them
        self._msgid = 0

    async def open(self, url: str, until: str = "summary-time") -> float:
        from tornado.httpclient import AsyncHTTPClient, HTTPRequest
        from tornado.websocket import websocket_connect

        t = time.perf_counter()
        page = (await AsyncHTTPClient().fetch(url, request_timeout=300)).body.decode()
        token = re.search(r'"token":"([^"]+)"', page).group(1)
        self.ws = await websocket_connect(
            HTTPRequest(url.replace("http://", "ws://") + "/ws", request_timeout=300),
            subprotocols=["bokeh", token],
            max_message_size=1 << 30,
        )
        while (await self._message())[0] != "ACK":
            pass
        await self._send("PULL-DOC-REQ", {})
        while (message := await self._message())[0] != "PULL-DOC-REPLY":
            pass
        await self._send("PATCH-DOC", READY)
        while until not in message[1]:
            message = await self._message()
        return time.perf_counter() - t

    def find(self, name: str) -> str:
        """The id of the first model of Bokeh type ``name`` the server has sent."""
        return next(i for i, m in self.models.items() if m["name"] == name)

    async def change(self, model_id: str, attr: str, value, until: str = "summary-time") -> float:
        t = time.perf_counter()
        event = {"kind": "ModelChanged", "model": {"id": model_id}, "attr": attr, "new": value}
        await self._send("PATCH-DOC", {"events": [event]})
        self.models[model_id][attr] = value
        while True:
            kind, content = await self._message()
            if kind == "PATCH-DOC" and until in content:
                return time.perf_counter() - t

    def close(self) -> None:
        if self.ws is not None:
            self.ws.close()

    async def _send(self, msgtype: str, content: dict) -> None:
        self._msgid += 1
        for frame in (json.dumps({"msgid": str(self._msgid), "msgtype": msgtype}), "{}", json.dumps(content)):
            await self.ws.write_message(frame)

    async def _message(self) -> tuple[str, str]:
        header = await self.ws.read_message()
        parts = [header] + [await self.ws.read_message() for _ in range(2)]  # metadata, content
        for _ in range(2 * json.loads(header).get("num_buffers", 0)):  # buffers: a header and the data each
            parts.append(await self.ws.read_message())
        self.received += sum(len(p) for p in parts)
        self._note(json.loads(parts[2]))
        return json.loads(header)["msgtype"], parts[2]

    def _note(self, value) -> None:
        """Remember every model the message defines, and the attributes later patches change."""
        if isinstance(value, dict):
            if value.get("type") == "object" and "id" in value and "name" in value:
                self.models.setdefault(value["id"], {"name": value["name"]}).update(value.get("attributes", {}))
            if value.get("kind") == "ModelChanged" and value.get("model", {}).get("id") in self.models:
                self.models[value["model"]["id"]][value["attr"]] = value.get("new")
            for v in value.values():
                self._note(v)
        elif isinstance(value, list):
            for v in value:
                self._note(v)


async def page_server_work(url: str, until: str = "summary-time") -> tuple[float, int]:
    """One page load's server side without a browser (``ProtocolPage.open``): (seconds, bytes received)."""
    page = ProtocolPage()
    try:
        return await page.open(url, until), page.received
    finally:
        page.close()
