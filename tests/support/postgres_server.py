"""Start and stop a throwaway PostgreSQL server on 127.0.0.1 for the `jdbc` tests.

Why not pytest-postgresql (issue 10, item 8), which we evaluated (10.0.0 installs fine next
to this project's pins: pip would add mirakuru and port-for): it cannot do what these
tests need, as CI runs them, as root.

- PostgreSQL refuses to run as root, and pytest-postgresql runs ``pg_ctl`` (``initdb``,
  ``start``, ``status``, ``stop``) as the current user with no way to run it as another:
  as root its ``PostgreSQLExecutor.start()`` fails with "pg_ctl: cannot be run as root".
- Pointing its ``executable`` at a wrapper that runs ``pg_ctl`` as ``postgres`` does not get
  further: the password file it hands to ``initdb --pwfile`` is a root-owned 0600
  ``NamedTemporaryFile``, which ``postgres`` cannot read ("could not open file ... for
  reading: Permission denied"), and its data directory lives under pytest's 0700 base
  temp directory, which ``postgres`` cannot enter. Without a password it initialises with
  ``--auth=trust``, but the tests need real password authentication: the JDBC reads and
  the Airflow connection log in with a password, and the secret-scan tests look for it.
- It is a pytest fixture factory, while the scheduler tier's :class:`AirflowServices`
  (tests/support/airflow_services.py) and ``benchmarks/pg.py``/``benchmarks/chaos.py`` start this
  server outside any fixture; those benchmarks import this module.

It uses Debian's PostgreSQL binaries (`apt-get install postgresql
libpostgresql-jdbc-java`, which `.ci/run` does). PostgreSQL refuses to run as root, so as
root the server runs as the `postgres` user. Without the binaries the tests skip with that
reason, unless EOD_REQUIRE_POSTGRES is set (CI sets it) and they fail instead.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass

import pytest

from tests.support.loopback import free_port
from tests.support.reaper import Reaper, stop_postgres, watch

JDBC_JAR = "/usr/share/java/postgresql.jar"
USER = "eod_loader"
PASSWORD = "s3cr3t-Pa55-for-eod-tests"
DATABASE = "shop"


def _bindir() -> str | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return os.path.dirname(found[-1]) if found else None


@dataclass
class PostgresServer:
    bindir: str
    datadir: str
    port: int
    as_user: list[str]
    reaper: Reaper | None = None

    host = "127.0.0.1"
    user = USER
    password = PASSWORD
    database = DATABASE

    @property
    def jdbc_url(self) -> str:
        return f"jdbc:postgresql://{self.host}:{self.port}/{self.database}"

    @classmethod
    def start(cls) -> PostgresServer:
        bindir = _bindir()
        if bindir is None or not os.path.exists(JDBC_JAR):
            reason = (
                "PostgreSQL server binaries or its JDBC jar are not installed "
                "(apt-get install postgresql libpostgresql-jdbc-java; .ci/run installs them)"
            )
            if os.environ.get("EOD_REQUIRE_POSTGRES"):
                pytest.fail(reason)
            pytest.skip(reason)
        # EOD_PG_ROOT: where the server's directory goes (a test of the watcher gives each
        # run its own); short, because the server's Unix socket lives in it.
        root = tempfile.mkdtemp(prefix="eod-pg-", dir=os.environ.get("EOD_PG_ROOT", "/tmp"))
        datadir = os.path.join(root, "data")
        as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        # pg_ctl daemonizes the server: if this process dies without stop() (a SIGKILL, a
        # SIGTERM, a second Ctrl-C), the watcher stops it and removes its directory.
        reaper = watch([{"stop_postgres": datadir, "bindir": bindir, "as_user": as_user}, {"rmtree": root}])
        server = cls(bindir, datadir, free_port(), as_user, reaper)
        try:
            server._init_and_start(root)
        except BaseException:
            server.stop()
            raise
        return server

    def _init_and_start(self, root: str) -> None:
        os.chmod(root, 0o755)
        pwfile = os.path.join(root, "pw")
        with open(pwfile, "w") as fh:
            fh.write(PASSWORD)
        if self.as_user:
            shutil.chown(root, "postgres", "postgres")
            shutil.chown(pwfile, "postgres", "postgres")
        subprocess.run(
            [
                *self.as_user,
                f"{self.bindir}/initdb",
                "-D",
                self.datadir,
                "-U",
                USER,
                "--auth=scram-sha-256",
                f"--pwfile={pwfile}",
                "-E",
                "UTF8",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        subprocess.run(
            [
                *self.as_user,
                f"{self.bindir}/pg_ctl",
                "-D",
                self.datadir,
                "-l",
                os.path.join(root, "log"),
                "-w",
                "-o",
                f"-p {self.port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off",
                "start",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        conn = self.connect("postgres")
        conn.autocommit = True  # CREATE DATABASE cannot run in a transaction block
        try:
            conn.cursor().execute(f"CREATE DATABASE {DATABASE}")
        finally:
            conn.close()

    def connect(self, database: str | None = None):  # type: ignore[no-untyped-def]
        import psycopg2

        conn = psycopg2.connect(
            host=self.host, port=self.port, user=USER, password=PASSWORD, dbname=database or DATABASE
        )
        return conn

    def execute(
        self, sql: str, params: tuple[object, ...] | list[tuple[object, ...]] = (), many: bool = False
    ) -> None:
        with self.connect() as conn, conn.cursor() as cur:
            if many:
                cur.executemany(sql, params)
            else:
                cur.execute(sql, params)

    def rows(self, sql: str) -> list[tuple[object, ...]]:
        with self.connect() as conn, conn.cursor() as cur:
            cur.execute(sql)
            return [tuple(r) for r in cur.fetchall()]

    def stop(self) -> None:
        stop_postgres(self.datadir, self.bindir, self.as_user)
        shutil.rmtree(os.path.dirname(self.datadir), ignore_errors=True)
        if self.reaper is not None:
            self.reaper.release()
