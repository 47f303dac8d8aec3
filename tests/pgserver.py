"""A throwaway PostgreSQL server for tests: Debian's `postgresql` binaries (`make test` installs
the package), a cluster made by `initdb` in a temp dir, listening on 127.0.0.1 at a free port
and on a socket in that dir, with no password (trust) and no fsync. PostgreSQL refuses to run
as root, and CI runs as root: as root it runs as the `postgres` account (else `nobody`) through
`runuser`. Every wait is bounded (`pg_ctl -w -t`)."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

import psycopg
from edtservice import free_port

#: Seconds `pg_ctl` may wait for the server to start or stop.
WAIT_S = 60
#: Set to 0 to skip the PostgreSQL runs where PostgreSQL is not installed.
ENABLED_ENV = "EDT_TEST_POSTGRESQL"
SUPERUSER = "edt"


def binaries() -> Path | None:
    """The newest installed PostgreSQL's bin directory (Debian keeps them by major version
    under /usr/lib/postgresql), else the one `initdb` on PATH is in."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: int(Path(p).parent.parent.name),
    )
    initdb = found[-1] if found else shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def enabled() -> bool:
    return os.environ.get(ENABLED_ENV, "1") != "0"


class PostgresServer:
    """One PostgreSQL cluster: `start`, `stop` (a fast shutdown, as an outage), `start` again
    on the same data, `remove` at the end. `database()` makes a fresh database and gives its
    SQLAlchemy URL (the psycopg driver)."""

    def __init__(self) -> None:
        bindir = binaries()
        if bindir is None:
            raise RuntimeError(
                "PostgreSQL is not installed: `make postgresql` installs Debian's package "
                f"(or set {ENABLED_ENV}=0 to skip the PostgreSQL runs)."
            )
        self.bin = bindir
        self.root = Path(tempfile.mkdtemp(prefix="edt-postgresql-"))
        self.data = self.root / "data"
        self.log_path = self.root / "server.log"
        self.account = _account()
        if self.account is not None:  # root: the cluster's files are the account's
            entry = pwd.getpwnam(self.account)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        self.port = 0
        self._run(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            SUPERUSER,
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        )

    def start(self) -> None:
        """Start the server (again: on the same data and port) and wait until it answers.
        A first start takes a free port, and another one if that was taken meanwhile."""
        for _ in range(3 if not self.port else 1):
            port = self.port or free_port()
            options = (
                f"-c listen_addresses=127.0.0.1 -p {port} -c unix_socket_directories={self.root} "
                "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
                "-c shared_buffers=16MB -c max_connections=60"
            )
            done = self._pg_ctl("start", "-l", str(self.log_path), "-o", options, check=False)
            if done.returncode == 0:
                self.port = port
                return
        raise RuntimeError(f"PostgreSQL did not start:\n{done.stdout}\n{self.log()}")

    def stop(self, mode: str = "fast") -> None:
        """Stop the server: `fast` ends every session at once, as a database that goes away."""
        self._pg_ctl("stop", "-m", mode)

    def running(self) -> bool:
        return self._pg_ctl("status", check=False).returncode == 0

    def remove(self) -> None:
        if self.running():
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def database(self) -> str:
        """A new, empty database's URL."""
        name = f"edt_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.conninfo("postgres"), autocommit=True) as db:
            db.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-3000:]
        except OSError:
            return ""

    def conninfo(self, database: str) -> str:
        """psycopg's connection string for `database` (an administrator's)."""
        return (
            f"host=127.0.0.1 port={self.port} user={SUPERUSER} dbname={database} connect_timeout=10"
        )

    def _pg_ctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self._run(
            "pg_ctl", "-D", str(self.data), "-w", "-t", str(WAIT_S), *args, check=check
        )

    def _run(self, tool: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        command = [str(self.bin / tool), *args]
        if self.account is not None:
            command = ["runuser", "-u", self.account, "--", *command]
        done = subprocess.run(
            command,
            cwd=self.root,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=WAIT_S + 30,
            check=False,
        )
        if check and done.returncode != 0:
            raise RuntimeError(
                f"{' '.join(command)} failed:\n{done.stdout}{done.stderr}{self.log()}"
            )
        return done


def _account() -> str | None:
    """Whom the server runs as: nobody else than this process unless it is root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    raise RuntimeError("As root, PostgreSQL needs another account to run as (postgres, nobody).")
