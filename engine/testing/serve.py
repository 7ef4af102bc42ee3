"""``panel serve app.py`` in a subprocess on a free local port, for the browser tests and the dashboard
benchmark: both drive the app exactly as a user starts it."""

from __future__ import annotations

import os
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
