"""A throw-away PostgreSQL server for tests: initdb into a temporary folder, pg_ctl start on
a free loopback port, stop and remove at the end. As root (CI machines) the server runs as
the ``postgres`` user that Debian's package creates, since PostgreSQL refuses to run as
root."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


def find_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return candidates[-1] if candidates else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    def __init__(self) -> None:
        initdb, pg_ctl = find_bin("initdb"), find_bin("pg_ctl")
        if initdb is None or pg_ctl is None:
            raise FileNotFoundError("initdb / pg_ctl not found (Debian package postgresql)")
        self.initdb, self.pg_ctl = initdb, pg_ctl
        self.root = Path(tempfile.mkdtemp(prefix="stragglers-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self._as_user: Callable[[], None] | None = None
        if os.geteuid() == 0:
            pw = pwd.getpwnam("postgres")
            os.chown(self.root, pw.pw_uid, pw.pw_gid)

            def drop() -> None:
                os.setgid(pw.pw_gid)
                os.setuid(pw.pw_uid)

            self._as_user = drop

    def _run(self, *cmd: str) -> None:
        subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=180,
                       preexec_fn=self._as_user, cwd=self.root)

    def start(self) -> str:
        self._run(self.initdb, "-D", str(self.data), "-A", "trust", "-U", "smon",
                  "-E", "UTF8", "--no-sync")
        self.resume()
        return self.url

    @property
    def url(self) -> str:
        return f"postgresql://smon@127.0.0.1:{self.port}/postgres"

    def halt(self) -> None:
        """Stop the server as a crash would (its data stays: :meth:`resume` starts it)."""
        self._run(self.pg_ctl, "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def resume(self) -> None:
        opts = (f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 "
                "-c fsync=off -c max_connections=50")
        self._run(self.pg_ctl, "-D", str(self.data), "-o", opts, "-l",
                  str(self.root / "log"), "-w", "-t", "120", "start")

    def stop(self) -> None:
        try:
            self._run(self.pg_ctl, "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


@contextmanager
def running_postgres(what: str) -> Iterator[PostgresServer]:
    """A started throw-away server, stopped at the end; when PostgreSQL is not installed,
    ``what`` is skipped (and fails under ``CI=true``)."""
    import pytest

    from tests.service.helpers import in_ci

    try:
        server = PostgresServer()
    except FileNotFoundError as exc:
        if in_ci():
            pytest.fail(f"{what} need initdb in CI: {exc}")
        pytest.skip(f"{what} skipped: {exc}")
    server.start()
    try:
        yield server
    finally:
        server.stop()

