"""The PostgreSQL guard on psycopg 3 (the optional extra ``leasehq-lease[pg]``),
on the same tables as Go's fence/pgfence, so that Go and Python writers guard
one resource alike (I6):

- ``PgGuard.check(conn, resource, token)`` admits a token inside the writer's
  own transaction and records it in pgfence's table (``public.lease_fence``:
  ``resource text COLLATE "C" PRIMARY KEY, token bigint``) with pgfence's
  conditional upsert, which keeps the resource's row locked until the
  transaction ends; use it when a write touches several rows or tables.
- ``update_row(conn, table, id, values, token)`` is pgfence.UpdateRow: one
  fenced UPDATE of a row that carries its own token column,
  ``UPDATE t SET ..., fencing_token = $t WHERE id = $id AND
  coalesce(fencing_token, 0) <= $t`` (< in "strict" mode).

In READ COMMITTED (PostgreSQL's default) a check or update that waited for
another writer's row lock sees that writer's committed token; in REPEATABLE
READ or SERIALIZABLE it fails with a serialization error instead, and the
caller retries the transaction. The module imports psycopg only for types.

As pgfence, a guard refuses with UnavailableError what it cannot judge: a
resource whose row holds a token no guard writes (NULL, below 1 or above
MAX_TOKEN, put by hand in a table without the guard's CHECK), and a table
that is not the one the guard was made with (it knows the table's OID: one
dropped and made again, by another process's guard say, or restored from a
dump, has lost its marks). A guard made after that cannot tell the new table
from a first one: restore the marks first."""

from __future__ import annotations

from collections import abc
from typing import TYPE_CHECKING, Any, Final, Mapping, Sequence

from ._errors import MAX_TOKEN, NotFoundError, StaleTokenError, UnavailableError, quote
from ._errors import InvalidError as _Invalid
from ._fenced import AT_LEAST, STRICT, admits, check_mode, check_token
from ._wire import check_name

if TYPE_CHECKING:
    from psycopg import Connection, Cursor

    Executor = Connection[Any] | Cursor[Any]

__all__ = ["DEFAULT_SCHEMA", "DEFAULT_TABLE", "PgGuard", "update_row", "update_row_sql"]

DEFAULT_SCHEMA: Final = "public"
DEFAULT_TABLE: Final = "lease_fence"
"""pgfence's default table: public.lease_fence."""
MAX_IDENT_BYTES: Final = 63
"""PostgreSQL's NAMEDATALEN - 1."""


def ident(what: str, name: object) -> str:
    """name quoted as one identifier, checked as pgfence checks it."""
    if not isinstance(name, str) or name == "":
        raise _Invalid(f"lease: pg: {what} is empty")
    try:
        n = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        raise _Invalid(f"lease: pg: {what} is not valid Unicode") from None
    if n > MAX_IDENT_BYTES:
        raise _Invalid(f"lease: pg: {what} {name!r} is {n} bytes, more than PostgreSQL's {MAX_IDENT_BYTES}")
    if "\0" in name:
        raise _Invalid(f"lease: pg: {what} contains a NUL character")
    return '"' + name.replace('"', '""') + '"'


def _table(table: str | Sequence[str]) -> tuple[str, str]:
    """The quoted table and its name for errors: a name, or (schema, name)."""
    parts = [table] if isinstance(table, str) else list(table)
    if not 1 <= len(parts) <= 2:
        raise _Invalid("lease: pg: table must be a name or (schema, name)")
    return ".".join(ident("table", p) for p in parts), ".".join(parts)


def _stale(resource: str, token: int, highest: int, mode: str) -> StaleTokenError:
    return StaleTokenError(
        f"lease: pg: stale token {token} for {quote(resource)}: the highest accepted is {highest} (mode {mode})",
        resource=resource, token=token, highest=highest, mode=mode,
    )


def _regclass(name: str) -> str:
    """name as a regclass constant, an escape string (E'...') so that it
    reads the same whatever standard_conforming_strings says, as pgfence
    writes it."""
    return "E'" + name.replace("\\", "\\\\").replace("'", "''") + "'::regclass"


def _pct(sql: str) -> str:
    """sql (quoted names) as text of a psycopg statement with arguments,
    where "%" starts a placeholder: every "%" doubled. PostgreSQL and pgfence
    take "%" in a name; unescaped, a table "t%s" sent a placeholder too many."""
    return sql.replace("%", "%%")


def _numbered(sql: str) -> str:
    """The psycopg statement sql as pgx writes it: $1, $2, ... for %s, and % for %%."""
    out, n, i = [], 0, 0
    while True:
        j = sql.find("%", i)
        if j < 0:
            out.append(sql[i:])
            return "".join(out)
        out.append(sql[i:j])
        if sql.startswith("%s", j):
            n += 1
            out.append(f"${n}")
        else:
            out.append("%")  # "%%", the only other "%" the module writes
        i = j + 2


def _in_transaction(conn: Executor) -> None:
    """Raises InvalidError if conn would run a statement in a transaction of
    its own: an autocommit connection, or a cursor of one, outside
    ``with conn.transaction():``, or inside one whose transaction a COMMIT,
    ROLLBACK or END sent through it has ended (the server's status says so,
    as pgfence asks pgx's). (One not in autocommit opens a transaction with
    its first statement and keeps it until commit or rollback.)"""
    c: Any = getattr(conn, "connection", conn)  # a cursor's connection
    if c.autocommit and c.info.transaction_status.name == "IDLE":
        raise _Invalid(
            "lease: pg: check needs the writer's open transaction: the connection is in autocommit "
            "outside a transaction block (or a COMMIT or ROLLBACK sent through it ended the block's), "
            "so the check would commit alone and fence nothing"
        )


class PgGuard:
    """Admits writes by fencing token inside PostgreSQL transactions, recording
    the highest token per resource in pgfence's table (created, with its
    schema, if missing, under the advisory lock pgfence.New takes; an existing
    one must be a logged table with a bigint token, or InvalidError). It holds
    no connection and is safe to share; it remembers its table's OID, and
    refuses a table made anew under it (see check)."""

    def __init__(
        self,
        conn: Connection[Any],
        *,
        mode: str = AT_LEAST,
        schema: str = DEFAULT_SCHEMA,
        table: str = DEFAULT_TABLE,
    ) -> None:
        self.mode: str = check_mode(mode)
        self.table = ident("schema", schema) + "." + ident("table", table)
        cmp = "<" if self.mode == STRICT else "<="
        # pgfence's statement (sqlguard.Marks with ReturnID): a stored token
        # below 1 (or NULL) admits nothing, so that check can refuse it as a
        # mark no guard wrote; it returns the OID of the table it wrote to,
        # a regclass constant (tableoid would name a partition), which is
        # resolved again when a dropped table makes PostgreSQL analyse a
        # prepared statement anew.
        self._upsert = (
            f"INSERT INTO {_pct(self.table)} AS f (resource, token) VALUES (%s, %s)\n"
            "ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token\n"
            f"WHERE f.token >= 1 AND f.token {cmp} EXCLUDED.token\n"
            f"RETURNING {_pct(_regclass(self.table))}::oid::bigint"
        )
        self._select = f"SELECT coalesce(token, 0) FROM {_pct(self.table)} WHERE resource = %s"
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", ("pgfence " + self.table,))
            row = conn.execute(
                "SELECT to_regclass(%s) IS NOT NULL, EXISTS (SELECT FROM pg_namespace WHERE nspname = %s)",
                (self.table, schema),
            ).fetchone()
            assert row is not None
            if row[0]:
                self._verify(conn)
            else:
                if not row[1]:
                    conn.execute(f"CREATE SCHEMA IF NOT EXISTS {ident('schema', schema)}".encode())
                conn.execute(
                    f"""CREATE TABLE IF NOT EXISTS {self.table} (
			resource text COLLATE "C" PRIMARY KEY,
			token    bigint NOT NULL CHECK (token BETWEEN 1 AND 9007199254740992)
		)""".encode()
                )
            # The table's OID: one dropped and made again has another, and
            # check refuses to judge tokens against its empty marks.
            oid = conn.execute("SELECT to_regclass(%s)::oid::bigint", (self.table,)).fetchone()
            assert oid is not None
            self._oid: int = int(oid[0])

    def _verify(self, conn: Connection[Any]) -> None:
        """Raises InvalidError unless the existing table is one the guard can
        trust, as pgfence.New checks it: a logged table (an UNLOGGED one is
        emptied by crash recovery, every mark with it) with a bigint token
        (as text, "10" < "9")."""
        row = conn.execute(
            """SELECT c.relkind::text, c.relpersistence::text,
		coalesce((SELECT format_type(a.atttypid, NULL) FROM pg_attribute a
			WHERE a.attrelid = c.oid AND a.attname = 'token' AND a.attnum > 0 AND NOT a.attisdropped), '')
		FROM pg_class c WHERE c.oid = to_regclass(%s)""",
            (self.table,),
        ).fetchone()
        assert row is not None
        kind, persistence, token = row
        if kind not in ("r", "p"):
            why = f"it is not a table (relkind {kind!r})"
        elif persistence != "p":
            why = f"it is unlogged or temporary (relpersistence {persistence!r}): a crash would empty it"
        elif token != "bigint":
            why = f"column token is {token!r}, want bigint"
        else:
            return
        raise _Invalid(f"lease: pg: table {self.table} exists but cannot hold the guard's marks: {why}")

    @property
    def upsert_sql(self) -> str:
        """check's statement, with pgx's $n placeholders (the same as pgfence's)."""
        return _numbered(self._upsert)

    def check(self, conn: Executor, resource: str, token: int) -> None:
        """Admits token for resource within conn's open transaction (a psycopg
        Connection not in autocommit, inside ``with conn.transaction():``, or
        a cursor of one) and records it as the highest accepted, to commit or
        roll back with it; the resource stays locked against other checks
        until the transaction ends. A refused token raises StaleTokenError
        and records nothing; roll the transaction back. An autocommit
        connection outside a transaction block (or a cursor of one) raises
        InvalidError: the check would commit alone and fence nothing.

        UnavailableError, with the transaction to roll back, says no token
        can be judged: the resource's row holds a token no guard writes
        (NULL, below 1 or above MAX_TOKEN, put there by hand in a table
        without the guard's CHECK), or the guard's table is not the one it
        was made with (dropped and made again, by another process's guard
        say, or a database restored from a dump: the marks are gone)."""
        check_name("resource", resource)
        check_token(token)
        _in_transaction(conn)
        row = conn.execute(self._upsert.encode(), (resource, token)).fetchone()
        if row is None:
            raise _stale(resource, token, self.highest(conn, resource), self.mode)
        if int(row[0]) != self._oid:
            raise UnavailableError(
                f"lease: pg: table {self.table} is not the one this guard was made with (OID {self._oid}, now "
                f"{int(row[0])}): it was dropped and made again, and every resource's mark with it, so no token "
                "can be judged: restore the marks (each above every token issued for its resource) and make a new guard"
            )

    def highest(self, conn: Executor, resource: str) -> int:
        """The highest token accepted for resource, as conn sees it; 0 if
        none. A row holding a token no guard writes (NULL, below 1 or above
        MAX_TOKEN) raises UnavailableError."""
        check_name("resource", resource)
        row = conn.execute(self._select.encode(), (resource,)).fetchone()
        if row is None:
            return 0
        highest = int(row[0])
        if not 1 <= highest <= MAX_TOKEN:
            raise UnavailableError(
                f"lease: pg: the stored token of {quote(resource)} in {self.table} is {highest} (NULL reads as 0), "
                f"not a fencing token (1 to {MAX_TOKEN}): no write is admitted until the row is repaired or deleted"
            )
        return highest


def update_row_sql(
    table: str | Sequence[str],
    id: object,
    values: Mapping[str, object],
    token: int,
    *,
    id_column: str = "id",
    token_column: str = "fencing_token",
    mode: str = AT_LEAST,
) -> tuple[str, list[object]]:
    """update_row's statement, with psycopg's %s placeholders (and a "%" in
    a name doubled, as psycopg reads it), and its arguments: the statement of
    Go's pgfence.Update.SQL (columns set in name order), except that the
    token is passed twice where pgx names $n twice."""
    t = _pct(_table(table)[0])
    idc, tok = _pct(ident("id column", id_column)), _pct(ident("token column", token_column))
    if id_column == token_column:
        raise _Invalid(f"lease: pg: id column and token column are both {id_column!r}")
    check_mode(mode)
    if id is None:
        raise _Invalid("lease: pg: row id is missing")
    check_token(token)
    if not isinstance(values, abc.Mapping) or not all(isinstance(c, str) for c in values):
        raise _Invalid("lease: pg: values must map column names (str) to values")
    sets, args = [], []
    for c in sorted(values):
        if c in (id_column, token_column):
            raise _Invalid(f"lease: pg: set column {c!r} is the id or token column")
        sets.append(f"{_pct(ident('set column', c))} = %s")
        args.append(values[c])
    sets.append(f"{tok} = %s")
    cmp = "<" if mode == STRICT else "<="
    sql = f"UPDATE {t} SET {', '.join(sets)} WHERE {idc} = %s AND coalesce({tok}, 0) {cmp} %s::bigint"
    return sql, [*args, token, id, token]


def go_sql(sql: str) -> str:
    """sql with pgx's numbering: the token's second %s is the $n of its first, as pgfence writes it."""
    n = sql.replace("%%", "").count("%s")
    text = _numbered(sql)
    # The last placeholder is the token again: pgx reuses the token's number (n - 2).
    return text[: text.rfind(f"${n}")] + f"${n - 2}" + text[text.rfind(f"${n}") + len(f"${n}") :]


def update_row(
    conn: Executor,
    table: str | Sequence[str],
    id: object,
    values: Mapping[str, object],
    token: int,
    *,
    id_column: str = "id",
    token_column: str = "fencing_token",
    mode: str = AT_LEAST,
) -> None:
    """Writes values to the row of table whose id_column is id, with fencing
    token token, in one statement (atomic without a transaction of the
    caller's; conn may also be in one). It returns if the row was written; a
    token older than the row's (per mode) raises StaleTokenError naming the
    row's token and writes nothing; a missing row raises NotFoundError. Only a
    refused update costs a second statement, a read of the row's token.
    Interoperates with Go's pgfence.UpdateRow on the same table."""
    sql, args = update_row_sql(table, id, values, token, id_column=id_column, token_column=token_column, mode=mode)
    t, name = _table(table)
    read = _pct(f"SELECT coalesce({ident('token column', token_column)}, 0) FROM {t} WHERE {ident('id column', id_column)} = ") + "%s"
    where = f"{name}/{id}"
    # Outside a transaction the row can change between the update and the
    # read; a read that would have admitted the token means exactly that
    # (tokens only rise): try again a few times.
    for _ in range(3):
        n = conn.execute(sql.encode(), args).rowcount
        if n == 1:
            return
        if n > 1:
            raise _Invalid(f"lease: pg: updating {where} changed {n} rows: {id_column!r} is not unique")
        row = conn.execute(read.encode(), (id,)).fetchone()
        if row is None:
            raise NotFoundError(f"lease: pg: no row {where}")
        highest = int(row[0])
        if not admits(mode, token, highest):
            raise _stale(where, token, highest, mode)
    raise UnavailableError(f"lease: pg: {where} kept changing under the update")
