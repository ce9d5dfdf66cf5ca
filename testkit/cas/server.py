"""A real CAS 2.0/3.0 server on loopback for the CAS login tests: django-cas-server in its own
Django process (testkit/cas/settings.py), started once per session; `reset()` puts the accounts
back between tests. `sign_in()` is a student at its login form, scripted."""

import json
import re
import socket
import subprocess
import sys
import time
from html import unescape
from pathlib import Path

import httpx
from django.conf import settings

ACCOUNT = "2023010001"
PASSWORD = "cas-test-password"
ATTRIBUTES = {"cn": "林同学", "college": "计算机学院", "userType": "本科生", "mail": "2023010001@example.edu.cn"}
INPUT = re.compile(r"<input\b[^>]*>")
ATTR = re.compile(r'(\w+)="([^"]*)"')


class CasServer:
    def __init__(self, tmp_dir: Path):
        self.tmp_dir = tmp_dir
        self.accounts_file = tmp_dir / "accounts.json"
        self.proc: subprocess.Popen | None = None
        self.url = ""

    @property
    def cas_url(self) -> str:
        """What CAS_SERVER_URL names: the server's CAS root."""
        return f"{self.url}/cas/"

    def reset(self) -> None:
        self.accounts_set({ACCOUNT: {"password": PASSWORD, "attributes": ATTRIBUTES}})

    def accounts_set(self, accounts: dict) -> None:
        self.accounts_file.write_text(json.dumps(accounts, ensure_ascii=False), encoding="utf-8")

    def attributes_set(self, **changes: str) -> None:
        """The default account's directory entry changed (e.g. userType="研究生")."""
        self.accounts_set({ACCOUNT: {"password": PASSWORD, "attributes": {**ATTRIBUTES, **changes}}})

    def start(self, timeout: float = 60) -> "CasServer":
        self.reset()
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        self.url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        env = {
            "PATH": "/usr/bin:/bin",
            "PYTHONUNBUFFERED": "1",
            "TESTKIT_CAS_DB": str(self.tmp_dir / "cas.sqlite3"),
            "TESTKIT_CAS_ACCOUNTS": str(self.accounts_file),
        }
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "testkit.cas.serve", str(listener.fileno())],
                cwd=settings.BASE_DIR,
                env=env,
                pass_fds=[listener.fileno()],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        finally:
            listener.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"CAS server exited with {self.proc.returncode}:\n{self.proc.stdout.read()}")
            try:
                httpx.get(f"{self.cas_url}login", timeout=5)
                return self
            except httpx.TransportError:
                time.sleep(0.1)
        raise RuntimeError("CAS server did not answer in time")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def sign_in(self, client: httpx.Client, *, service: str, username: str = ACCOUNT, password: str = PASSWORD) -> str:
        """The student at the CAS login page for `service`, with `client` as their browser (it keeps
        the CAS server's cookie, so a second call for the same client is a single sign-on). Returns
        where the server sends them: `service` with `ticket=ST-…`."""
        page = client.get(f"{self.cas_url}login", params={"service": service})
        if page.status_code == 302:  # already signed in at the CAS server
            return page.headers["location"]
        assert page.status_code == 200, page.text
        fields = {}
        for tag in INPUT.findall(page.text):
            attrs = dict(ATTR.findall(tag))
            if "name" in attrs:
                fields[attrs["name"]] = unescape(attrs.get("value", ""))
        fields.update(username=username, password=password)
        fields.pop("warn", None)
        answer = client.post(f"{self.cas_url}login", data=fields, headers={"Referer": f"{self.cas_url}login"})
        assert answer.status_code == 302, answer.text[:2000]
        return answer.headers["location"]

    def sign_out(self, client: httpx.Client) -> httpx.Response:
        """The student signs out at the CAS server: it POSTs a logoutRequest to every service it
        gave this sign-on a ticket for (single logout), before it answers."""
        return client.get(f"{self.cas_url}logout")
