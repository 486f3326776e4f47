"""The PostgreSQL guard on psycopg 3 (pgfence's tables; the Go test checks Go
and Python writers on one table both ways)."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest

from leasehq_lease import MAX_TOKEN, InvalidError, NotFoundError, StaleTokenError, UnavailableError
from leasehq_lease.pg import PgGuard, go_sql, update_row, update_row_sql

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


def test_check_refuses_an_ended_transaction(pg: Any) -> None:
    # Go's TestCheckRefusesAnEndedTransaction: a COMMIT, ROLLBACK or END
    # sent through the connection inside ``with conn.transaction():`` ends
    # the transaction behind psycopg's back; a check after it would commit
    # alone. It is refused, and records nothing.
    g = PgGuard(pg, table=unique("fence").replace("-", "_"))
    for end in ("COMMIT", "ROLLBACK", "END"):
        r = unique("ended-by-" + end)
        with pytest.raises(InvalidError, match="transaction"):
            with pg.transaction():
                pg.execute(end.encode())
                g.check(pg, r, 5)
        assert g.highest(pg, r) == 0


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


CORRUPT_MARKS = ["NULL", "0", "-5", "9007199254740993", "9223372036854775807"]
"""Tokens, as SQL literals, that no guard writes but that a table of the
operator's making (without the guard's CHECK) can hold: Go's
sqlguardtest.CorruptMarks."""


@pytest.mark.parametrize("mode", ["at-least", "strict"])
def test_corrupt_mark_refused(pg: Any, mode: str) -> None:
    # Go's TestCorruptMarkRefused. Before, a mark of 0 or -5 admitted every
    # token (and recorded it over the mark), NULL failed with a TypeError
    # from int(None), and one above 2^53 came back as a stale token naming
    # it as the highest accepted.
    table = unique("ops").replace("-", "_")
    pg.execute(f"CREATE TABLE {table} (resource text PRIMARY KEY, token bigint)".encode())
    g = PgGuard(pg, table=table, mode=mode)

    def stored(res: str) -> str:
        row = pg.execute(f"SELECT coalesce(token::text, 'NULL') FROM {table} WHERE resource = %s".encode(), (res,)).fetchone()
        assert row is not None
        return str(row[0])

    failures = []
    for i, mark in enumerate(CORRUPT_MARKS):
        res = f"corrupt-{i}"
        pg.execute(f"INSERT INTO {table} (resource, token) VALUES (%s, {mark})".encode(), (res,))
        for tok in (1, 7, MAX_TOKEN):
            try:
                with pg.transaction():
                    g.check(pg, res, tok)
                failures.append(f"mark {mark}: check with token {tok} admitted")
            except UnavailableError:
                pass
            except Exception as err:  # noqa: BLE001
                failures.append(f"mark {mark}: check with token {tok} raised {err!r}, want UnavailableError")
            if (got := stored(res)) != mark:
                failures.append(f"mark {mark}: after check with token {tok} the row holds {got}")
        try:
            h = g.highest(pg, res)
            failures.append(f"mark {mark}: highest = {h}, want UnavailableError")
        except UnavailableError:
            pass
        except Exception as err:  # noqa: BLE001
            failures.append(f"mark {mark}: highest raised {err!r}, want UnavailableError")
    assert not failures, "\n".join(failures)
    # A real mark beside them is still kept as ever.
    with pg.transaction():
        g.check(pg, "corrupt-none", 3)
    with pytest.raises(StaleTokenError) as stale:
        with pg.transaction():
            g.check(pg, "corrupt-none", 2)
    assert stale.value.highest == 3


@pytest.mark.parametrize("check_while_dropped", [True, False])
def test_table_replaced_under_a_running_guard(pg: Any, check_while_dropped: bool) -> None:
    # Go's TestTableReplacedUnderARunningGuard: a guard whose table was
    # dropped and made again (by another process's guard, say) refuses its
    # checks rather than admit tokens against the new, empty table. Before,
    # the old guard took the new table as its own: token 5 was admitted
    # after token 6 had committed.
    table = unique("replaced").replace("-", "_")
    g = PgGuard(pg, table=table)
    # More checks than psycopg's prepare_threshold (5), so that the upsert
    # is a prepared statement when the table goes: PostgreSQL must analyse
    # it anew, and resolve the table's name again. Without a check in
    # between, the first statement after the remake is that re-analysis.
    for tok in range(1, 7):
        with pg.transaction():
            g.check(pg, "job", tok)
    pg.execute(f'DROP TABLE "{table}"'.encode())
    if check_while_dropped:
        with pytest.raises(psycopg.errors.UndefinedTable):
            with pg.transaction():
                g.check(pg, "job", 5)
    other = PgGuard(pg, table=table)  # makes it again, empty
    for tok in (5, 6, 7):
        with pytest.raises(UnavailableError, match="dropped and made again"):
            with pg.transaction():
                g.check(pg, "job", tok)
    assert other.highest(pg, "job") == 0, "the old guard recorded into the new table"
    # A guard made on the new table uses it: the loss is the operator's to
    # repair, and a new guard cannot tell a lost table from a first one.
    with pg.transaction():
        other.check(pg, "job", 5)
    assert other.highest(pg, "job") == 5


def test_partitioned_table(pg: Any) -> None:
    # Go's TestPartitionedTable: a partitioned table under the guard's name
    # is taken, and its checks are not mistaken for a replaced table's (each
    # row's tableoid names its partition, not the table).
    table = unique("part").replace("-", "_")
    for ddl in (
        f'CREATE TABLE {table} (resource text COLLATE "C" PRIMARY KEY, token bigint NOT NULL) PARTITION BY HASH (resource)',
        f"CREATE TABLE {table}_0 PARTITION OF {table} FOR VALUES WITH (MODULUS 2, REMAINDER 0)",
        f"CREATE TABLE {table}_1 PARTITION OF {table} FOR VALUES WITH (MODULUS 2, REMAINDER 1)",
    ):
        pg.execute(ddl.encode())
    g = PgGuard(pg, table=table)
    for i in range(8):
        res = f"job-{i}"
        with pg.transaction():
            g.check(pg, res, 3)
        with pytest.raises(StaleTokenError):
            with pg.transaction():
                g.check(pg, res, 2)


def test_names_with_a_percent_sign(pg: Any) -> None:
    # PostgreSQL and pgfence take any name (up to 63 bytes, no NUL), "%"
    # included; psycopg reads "%" in a statement with arguments as a
    # placeholder. Before, a guard on a table named "pct%s…" sent four
    # placeholders for two arguments, one on "pct%d…" an unknown
    # placeholder, upsert_sql named table "pct$1…", and update_row on such
    # a table or column failed alike.
    for name in (unique("pct%s").replace("-", "_"), unique("pct%d").replace("-", "_"), unique("pct%%").replace("-", "_")):
        g = PgGuard(pg, table=name)
        assert f'"{name}"' in g.upsert_sql and "VALUES ($1, $2)" in g.upsert_sql
        with pg.transaction():
            g.check(pg, "job", 3)
        with pytest.raises(StaleTokenError):
            with pg.transaction():
                g.check(pg, "job", 2)
        assert g.highest(pg, "job") == 3
        rows = "rows_" + name
        pg.execute(f'CREATE TABLE "{rows}" (id int PRIMARY KEY, "v%s" text, fencing_token bigint)'.encode())
        pg.execute(f"INSERT INTO \"{rows}\" VALUES (1, 'initial', NULL)".encode())
        update_row(pg, rows, 1, {"v%s": "a"}, 3)
        with pytest.raises(StaleTokenError):
            update_row(pg, rows, 1, {"v%s": "late"}, 2)
        with pytest.raises(NotFoundError):
            update_row(pg, rows, 2, {"v%s": "x"}, 9)
        assert pg.execute(f'SELECT "v%s", fencing_token FROM "{rows}"'.encode()).fetchone() == ("a", 3)
        sql, _ = update_row_sql(rows, 1, {"v%s": "a"}, 3)
        assert go_sql(sql) == (
            f'UPDATE "{rows}" SET "v%s" = $1, "fencing_token" = $2 WHERE "id" = $3 AND coalesce("fencing_token", 0) <= $2::bigint'
        )
