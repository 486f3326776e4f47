"""The PostgreSQL guard on psycopg 3 (pgfence's tables; the Go test checks Go
and Python writers on one table both ways)."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest

from leasehq_lease import InvalidError, NotFoundError, StaleTokenError
from leasehq_lease.pg import PgGuard, update_row

from conftest import postgres_url, unique


def test_check_in_a_transaction(pg: Any) -> None:
    g = PgGuard(pg, table=unique("fence").replace("-", "_"))
    r = unique("job")
    with pg.transaction():
        g.check(pg, r, 5)
    with pg.transaction():
        g.check(pg, r, 5)  # at-least: the same holder writes again
    with pytest.raises(StaleTokenError) as e:
        with pg.transaction():
            g.check(pg, r, 4)
    assert (e.value.token, e.value.highest, e.value.resource) == (4, 5, r)
    # A check rolled back with its transaction records nothing.
    with pytest.raises(RuntimeError):
        with pg.transaction():
            g.check(pg, r, 9)
            raise RuntimeError("the write failed")
    assert g.highest(pg, r) == 5
    strict = PgGuard(pg, table=g.table.split(".")[1].strip('"'), mode="strict")
    with pytest.raises(StaleTokenError):
        with pg.transaction():
            strict.check(pg, r, 5)


def test_check_holds_the_resource_until_commit(pg: Any) -> None:
    # B's check waits for A's transaction, then sees A's committed token.
    table = unique("fence").replace("-", "_")
    g = PgGuard(pg, table=table)
    r = unique("job")
    other = psycopg.connect(postgres_url(), autocommit=True)
    result: list[BaseException | None] = []
    with pg.transaction():
        g.check(pg, r, 7)

        def b() -> None:
            try:
                with other.transaction():
                    g.check(other, r, 6)
                result.append(None)
            except BaseException as e:  # noqa: BLE001
                result.append(e)

        t = threading.Thread(target=b)
        t.start()
        t.join(0.5)
        assert t.is_alive(), "B's check did not wait for A's transaction"
    t.join(10)
    other.close()
    assert isinstance(result[0], StaleTokenError) and result[0].highest == 7


def test_update_row(pg: Any) -> None:
    table = unique("jobs").replace("-", "_")
    pg.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, value text, fencing_token bigint)".encode())
    pg.execute(f"INSERT INTO {table} VALUES (1, 'initial', NULL)".encode())
    update_row(pg, table, 1, {"value": "a"}, 3)
    update_row(pg, table, 1, {"value": "b"}, 3)
    with pytest.raises(StaleTokenError) as e:
        update_row(pg, table, 1, {"value": "late"}, 2)
    assert e.value.highest == 3
    with pytest.raises(StaleTokenError):
        update_row(pg, table, 1, {"value": "again"}, 3, mode="strict")
    with pytest.raises(NotFoundError):
        update_row(pg, table, 2, {"value": "x"}, 9)
    assert pg.execute(f"SELECT value, fencing_token FROM {table}".encode()).fetchone() == ("b", 3)
    for bad in ({"id": 1}, {"fencing_token": 1}):
        with pytest.raises(InvalidError):
            update_row(pg, table, 1, bad, 4)
    with pytest.raises(InvalidError):
        update_row(pg, table, 1, {"value": "x"}, 0)
    # Values that are not a mapping of column names are bad input too, not
    # a TypeError from sorting them.
    for values in ({1: "a", "b": 2}, {2: "a"}, None, [("value", "x")]):
        with pytest.raises(InvalidError):
            update_row(pg, table, 1, values, 4)  # type: ignore[arg-type]


def test_check_refuses_a_connection_outside_a_transaction(pg: Any) -> None:
    # On an autocommit connection outside ``with conn.transaction():`` the
    # upsert would commit alone and release the resource's lock at once, so
    # the write after it would be unfenced: a stale writer whose check came
    # first could write after a newer one. check must refuse, recording
    # nothing, on the connection and on a cursor of it.
    g = PgGuard(pg, table=unique("fence").replace("-", "_"))
    r = unique("job")
    for conn in (pg, pg.cursor()):
        with pytest.raises(InvalidError, match="transaction"):
            g.check(conn, r, 5)
    assert g.highest(pg, r) == 0
    # Inside a transaction block, and on a connection that is not in
    # autocommit (psycopg opens the transaction), it works.
    with pg.transaction():
        g.check(pg.cursor(), r, 5)
    other = psycopg.connect(postgres_url())
    try:
        g.check(other, r, 6)
        other.commit()
    finally:
        other.close()
    assert g.highest(pg, r) == 6


def test_guard_refuses_a_table_it_cannot_trust(pg: Any) -> None:
    # As pgfence.New: a text token compares as text ("10" <= "9" would admit
    # 9 after 10); an unlogged table is emptied by crash recovery.
    for what, ddl in {
        "text token": "CREATE TABLE {} (resource text PRIMARY KEY, token text NOT NULL)",
        "unlogged": "CREATE UNLOGGED TABLE {} (resource text PRIMARY KEY, token bigint NOT NULL)",
        "no token": "CREATE TABLE {} (resource text PRIMARY KEY, mark bigint NOT NULL)",
    }.items():
        table = unique("bad").replace("-", "_")
        pg.execute(ddl.format(table).encode())
        with pytest.raises(InvalidError, match="cannot hold"):
            PgGuard(pg, table=table)
