# SPDX-License-Identifier: Apache-2.0
"""``ringfleet-dbsync`` as an operator and a DBA run it, and the database's timeouts.

Each command runs as its own process, as from a shell or a deployment tool:
its exit status, its one line on an error, and what it leaves behind.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conductor.common.exception import DatabaseUnavailable
from conductor.db import migration
from conductor.db.engine import Database
from tests import config_file_cases
from tests.dbutil import upgraded_by_a_newer_ringfleet
from tests.harness.process import REPO


def dbsync(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # A generous bound: without a connect timeout a hung server holds it forever.
    return subprocess.run(
        [sys.executable, "-m", "conductor.cmd.dbsync", "--config-file", str(config), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def config(tmp_path: Path, url: str) -> Path:
    path = tmp_path / "dbsync.conf"
    path.write_text(f"[DEFAULT]\nuse_stderr = true\n[database]\nconnection = {url}\n")
    return path


def test_check_says_whether_the_schema_needs_an_upgrade(tmp_path: Path) -> None:
    conf = config(tmp_path, f"sqlite:///{tmp_path / 'ringfleet.db'}")
    behind = dbsync(conf, "check")
    assert behind.returncode == 1, behind.stderr
    head = migration.head_version()
    assert f"schema at nothing, newest is {head}: run ringfleet-dbsync upgrade" in behind.stdout
    assert dbsync(conf, "upgrade").returncode == 0
    current = dbsync(conf, "check")
    assert (current.returncode, current.stdout.strip()) == (0, f"schema current at {head}")


def _one_line(done: subprocess.CompletedProcess[str], status: int = 2) -> str:
    """The one line a failed command writes, on stderr: nothing on stdout."""
    assert (done.returncode, done.stdout) == (status, ""), done
    [line] = done.stderr.splitlines()
    assert line.startswith("ringfleet-dbsync: ")
    return line


def _newer_database(tmp_path: Path) -> Path:
    """A database upgraded by a newer ringfleet: at a revision this code does not know."""
    return config(tmp_path, upgraded_by_a_newer_ringfleet(tmp_path / "ringfleet.db"))


def test_check_says_the_database_is_newer_than_the_code(tmp_path: Path) -> None:
    conf = _newer_database(tmp_path)
    head = migration.head_version()
    said = (
        f"the database is at revision 9999, which this ringfleet ({migration.release()}, "
        f"newest revision {head}) does not know: the database was upgraded by a newer "
        "ringfleet; upgrade this host's ringfleet"
    )
    ahead = dbsync(conf, "check")
    assert (ahead.returncode, ahead.stdout.strip(), ahead.stderr) == (3, said, "")
    # Upgrading cannot help: refused in one line, the database left as it is.
    refused = dbsync(conf, "upgrade")
    assert _one_line(refused) == f"ringfleet-dbsync: {said}"
    version = dbsync(conf, "version")
    assert (version.returncode, version.stdout.strip()) == (0, f"current: 9999  newest: {head}")


def test_upgrade_leaves_a_database_newer_than_the_code_as_it_is(tmp_path: Path) -> None:
    _newer_database(tmp_path)
    db = Database(f"sqlite:///{tmp_path / 'ringfleet.db'}")
    try:
        with pytest.raises(migration.SchemaNewerThanCode) as refused:
            migration.upgrade(db)
        assert refused.value.revision == "9999"
        assert migration.current_version(db) == "9999"
    finally:
        db.dispose()
    assert not migration.is_known("9999")
    assert migration.is_known(migration.head_version()) and migration.is_known("0001")
    assert not migration.is_known("head") and not migration.is_known("000")


@pytest.mark.parametrize(
    ("config_file", "said"),
    [
        *config_file_cases.CASES,
        ("binary.conf", "cannot read a configuration file (not text): 'utf-8' codec"),
        ("bad-value.conf", "{path}: [database] connect_timeout: not valid: invalid literal"),
    ],
)
def test_a_configuration_that_cannot_be_read_is_one_line(
    tmp_path: Path, config_file: str, said: str
) -> None:
    path = tmp_path / config_file
    config_file_cases.make(path)
    if config_file == "binary.conf":
        path.write_bytes(b"[database]\n\xff\xfe = 1\n")
    elif config_file == "bad-value.conf":
        path.write_text("[database]\nconnection = sqlite://\nconnect_timeout = soon\n")
    line = _one_line(dbsync(path, "check"))
    assert line.startswith(f"ringfleet-dbsync: {said.format(path=path)}"), line


@pytest.mark.skipif(
    os.geteuid() == 0,
    reason="root reads a file of mode 000: the directory case above is the unreadable file",
)
def test_a_configuration_file_without_read_permission_is_one_line(tmp_path: Path) -> None:
    path = config(tmp_path, "sqlite://")
    path.chmod(0)
    line = _one_line(dbsync(path, "check"))
    assert line == f"ringfleet-dbsync: Failed to open some config files: {path}"


def test_the_sql_of_an_upgrade_from_an_unknown_revision_is_one_line_and_no_sql(
    tmp_path: Path,
) -> None:
    pg = config(tmp_path, "postgresql+psycopg2://ringfleet:pw@127.0.0.1:1/ringfleet")
    line = _one_line(dbsync(pg, "upgrade", "--sql", "--from", "zzz"))
    assert line == (
        f"ringfleet-dbsync: --from: revision zzz is unknown to this ringfleet "
        f"({migration.release()}), whose newest revision is {migration.head_version()}"
    )
    for url, said in [
        ("not a url", "Could not parse SQLAlchemy URL"),
        ("nosuchdialect://h/db", "Can't load plugin: sqlalchemy.dialects:nosuchdialect"),
    ]:
        line = _one_line(dbsync(config(tmp_path, url), "upgrade", "--sql", "--from", "0005"))
        assert line.startswith(f"ringfleet-dbsync: [database] connection: unusable: {said}")


def test_the_sql_of_an_upgrade_is_written_whole_or_not_at_all() -> None:
    """PostgreSQL's SQL starts with BEGIN: none of it before a failure."""
    out = io.StringIO()
    url = "postgresql+psycopg2://ringfleet:pw@127.0.0.1:1/ringfleet"
    with pytest.raises(migration.UnknownRevision):
        migration.upgrade_sql(url, "zzz", out)
    assert out.getvalue() == ""
    migration.upgrade_sql(url, "0009", out)
    assert out.getvalue().startswith("BEGIN;") and "0010" in out.getvalue()


def test_an_unreachable_database_is_one_line_naming_it_without_its_password(
    tmp_path: Path, closed_port: int
) -> None:
    url = f"postgresql+psycopg2://ringfleet:s3cret@127.0.0.1:{closed_port}/ringfleet"
    for command in ("check", "upgrade", "version"):
        done = dbsync(config(tmp_path, url), command)
        assert done.returncode == 2
        assert done.stdout == ""
        [line] = done.stderr.splitlines()
        assert line.startswith(
            f"ringfleet-dbsync: database postgresql+psycopg2://ringfleet:***@127.0.0.1:"
            f"{closed_port}/ringfleet unreachable: "
        )
        assert "Connection refused" in line and "s3cret" not in line


def test_a_server_that_never_answers_is_unreachable_after_the_connect_timeout(
    tmp_path: Path, silent_server: int
) -> None:
    url = f"postgresql+psycopg2://ringfleet:pw@127.0.0.1:{silent_server}/ringfleet"
    path = config(tmp_path, url)
    path.write_text(path.read_text() + "connect_timeout = 2\n")
    done = dbsync(path, "check")
    assert done.returncode == 2
    assert "timeout expired" in done.stderr


@pytest.mark.parametrize(
    "url",
    [
        "postgresql+psycopg2://ringfleet:pw@127.0.0.1:{port}/ringfleet",
        "mysql+pymysql://ringfleet:pw@127.0.0.1:{port}/ringfleet",
    ],
)
def test_the_engine_bounds_connecting_for_each_server(silent_server: int, url: str) -> None:
    """PostgreSQL: the connect timeout covers the whole start-up; PyMySQL
    reads the server's greeting under the statement timeout."""
    db = Database(url.format(port=silent_server), connect_timeout=1, statement_timeout=1)
    failed: list[BaseException] = []

    def read() -> None:
        try:
            with db.read() as connection:
                connection.exec_driver_sql("SELECT 1")
        except BaseException as error:  # recorded for the assertion below
            failed.append(error)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(60)  # without a connect timeout: never
    db.dispose()
    assert not reader.is_alive()
    [error] = failed
    assert isinstance(error, DatabaseUnavailable)


def test_the_sql_of_an_upgrade_is_written_without_connecting(tmp_path: Path) -> None:
    database = tmp_path / "never-created.db"
    conf = config(tmp_path, f"sqlite:///{database}")
    whole = dbsync(conf, "upgrade", "--sql")
    assert whole.returncode == 0, whole.stderr
    assert "CREATE TABLE nodes" in whole.stdout
    assert f"'{migration.head_version()}'" in whole.stdout
    assert "INFO" not in whole.stdout  # SQL only: a DBA pipes it to a file
    assert not database.exists()
    # PostgreSQL's SQL from a given revision: only what comes after it.
    pg = config(tmp_path, "postgresql+psycopg2://ringfleet:pw@127.0.0.1:1/ringfleet")
    step = dbsync(pg, "upgrade", "--sql", "--from", "0005")
    assert step.returncode == 0, step.stderr
    assert "CREATE TABLE nodes" not in step.stdout  # nothing before 0005 again
    assert "CREATE TABLE quota_limits" in step.stdout
    assert "ALTER TABLE nodes ADD COLUMN backend_state" in step.stdout
    assert "TIMESTAMP WITHOUT TIME ZONE" in step.stdout  # PostgreSQL's dialect
    refused = dbsync(conf, "upgrade", "--from", "0005")
    assert refused.returncode == 2 and "--from is only for --sql" in refused.stderr


def test_a_service_waits_for_its_database_with_one_warning(
    closed_port: int, caplog: pytest.LogCaptureFixture
) -> None:
    db = Database(f"postgresql+psycopg2://u:pw@127.0.0.1:{closed_port}/x", connect_timeout=1)
    stopping = threading.Event()
    result: list[bool] = []
    waiter = threading.Thread(
        target=lambda: result.append(db.wait_reachable(stopping, interval=0.05)), daemon=True
    )
    with caplog.at_level("INFO", logger="conductor.db.engine"):
        waiter.start()
        waiter.join(0.5)
        assert waiter.is_alive()  # it keeps trying
        stopping.set()
        waiter.join(30)
    db.dispose()
    assert result == [False]
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1, warnings
    assert f"postgresql+psycopg2://u:***@127.0.0.1:{closed_port}/x unreachable" in warnings[0]


def test_a_reachable_database_is_waited_for_not_at_all(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'ringfleet.db'}")
    assert db.wait_reachable(threading.Event())
    db.dispose()
