"""Real proxies on loopback in front of test servers: nginx, as `apt-get install -y nginx`
installs it, run from a configuration written for the test (its own prefix, ports and logs);
and tinyproxy, a forward proxy (`apt-get install -y tinyproxy`) as clients reach servers
through with `HTTP_PROXY`/`HTTPS_PROXY`.

    with Nginx(folder, [upstream_url, ...]) as nginx:   # nginx.urls[i] proxies upstream i
    with Tinyproxy(folder) as proxy:                     # proxy.url, proxy.requests()
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
needs_nginx = pytest.mark.skipif(
    NGINX is None, reason="nginx is not installed: apt-get install -y nginx"
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Nginx:
    """nginx with one server per upstream, each on its own loopback port (nginx's defaults
    otherwise: proxy_buffering on, its own error pages); `extra`: more `http` directives;
    `keepalive` False leaves nginx's upstream defaults."""

    def __init__(
        self, folder: Path, upstreams: list[str], extra: str = "", keepalive: bool = True
    ) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.ports = [free_port() for _ in upstreams]
        self.urls = [f"http://127.0.0.1:{port}" for port in self.ports]
        # keep-alive upstream connections, or nginx's defaults (HTTP/1.0 upstream, one connection
        # per request), with which nginx hands an aiohttp server's stream on whole
        upstream_http = (
            'proxy_http_version 1.1; proxy_set_header Connection ""; ' if keepalive else ""
        )
        servers = "".join(
            f"  server {{ listen 127.0.0.1:{port}; location / {{ proxy_pass {upstream}; "
            f"{upstream_http}}} }}\n"
            for port, upstream in zip(self.ports, upstreams, strict=True)
        )
        temp = " ".join(f"{kind}_temp_path {folder}/{kind};" for kind in
                        ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))  # fmt: skip
        # as root, nginx's workers would run as nobody, who cannot write the test's folder
        user = f"user {pwd.getpwuid(os.geteuid()).pw_name};\n" if os.geteuid() == 0 else ""
        (folder / "nginx.conf").write_text(
            f"{user}daemon off;\nworker_processes 1;\npid {folder}/nginx.pid;\n"
            f"error_log {folder}/error.log warn;\nevents {{ worker_connections 512; }}\n"
            f"http {{\n  access_log off;\n  {temp}\n  {extra}\n{servers}}}\n"
        )
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Nginx:
        assert NGINX is not None
        with (self.folder / "stderr.log").open("wb") as stderr:
            self.process = subprocess.Popen(
                [NGINX, "-p", str(self.folder), "-c", str(self.folder / "nginx.conf")],
                stdout=subprocess.DEVNULL, stderr=stderr,
            )  # fmt: skip
        deadline = time.monotonic() + 60
        for port in self.ports:
            while True:
                assert self.process.poll() is None, (self.folder / "stderr.log").read_text()
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    assert time.monotonic() < deadline, "nginx did not listen in time"
                    time.sleep(0.1)
        return self

    def __exit__(self, *_: object) -> None:
        if self.process is not None:
            self.process.terminate()  # nginx's fast shutdown; its workers go with it
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


TINYPROXY = shutil.which("tinyproxy")
needs_tinyproxy = pytest.mark.skipif(
    TINYPROXY is None, reason="tinyproxy is not installed: apt-get install -y tinyproxy"
)


def _wait_listening(process: subprocess.Popen[bytes], port: int, log: Path, name: str) -> None:
    deadline = time.monotonic() + 60
    while True:
        assert process.poll() is None, log.read_text()
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            assert time.monotonic() < deadline, f"{name} did not listen in time"
            time.sleep(0.1)


class Tinyproxy:
    """tinyproxy on a loopback port, logging every request it forwards; `basic_auth`
    ("user:password") makes it answer 407 to requests without those credentials."""

    def __init__(self, folder: Path, basic_auth: str | None = None) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = folder / "tinyproxy.log"
        auth = f"BasicAuth {basic_auth.replace(':', ' ', 1)}\n" if basic_auth else ""
        (folder / "tinyproxy.conf").write_text(
            f'Port {self.port}\nListen 127.0.0.1\nTimeout 120\nLogFile "{self.log}"\n'
            f"LogLevel Info\nMaxClients 200\nAllow 127.0.0.1\nDisableViaHeader Yes\n{auth}"
        )
        self.process: subprocess.Popen[bytes] | None = None

    def requests(self) -> list[str]:
        """The request lines it received (`POST http://host:port/path`, `CONNECT host:port`)."""
        text = self.log.read_text() if self.log.exists() else ""
        return re.findall(r"Request \(file descriptor \d+\): (\S+ \S+)", text)

    def __enter__(self) -> Tinyproxy:
        assert TINYPROXY is not None
        stderr_log = self.folder / "stderr.log"
        with stderr_log.open("wb") as stderr:
            self.process = subprocess.Popen(
                [TINYPROXY, "-d", "-c", str(self.folder / "tinyproxy.conf")],
                stdout=subprocess.DEVNULL, stderr=stderr,
            )  # fmt: skip
        _wait_listening(self.process, self.port, stderr_log, "tinyproxy")
        return self

    def __exit__(self, *_: object) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
