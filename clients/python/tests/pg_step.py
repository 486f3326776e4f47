"""One step of the Go test TestPgGuardInterop, as a Python writer: prints JSON.

    pg_step.py sql TOKEN VALUE MODE      the UPDATE update_row sends, as pgx numbers it
    pg_step.py row TOKEN VALUE MODE      update_row on jobs/1
    pg_step.py check TABLE TOKEN MODE    PgGuard(table=TABLE).check of job/42 in a transaction
    pg_step.py upsert TABLE MODE         PgGuard(table=TABLE).upsert_sql, check's statement
"""

from __future__ import annotations

import json
import os
import sys

import psycopg

from leasehq_lease import StaleTokenError
from leasehq_lease.pg import PgGuard, go_sql, update_row, update_row_sql


def main(argv: list[str]) -> dict[str, object]:
    what = argv[0]
    if what == "sql":
        text, _ = update_row_sql("jobs", 1, {"value": argv[2]}, int(argv[1]), mode=argv[3])
        return {"text": go_sql(text)}
    with psycopg.connect(os.environ["LEASE_TEST_POSTGRES_URL"], autocommit=True) as conn:
        try:
            if what == "row":
                update_row(conn, "jobs", 1, {"value": argv[2]}, int(argv[1]), mode=argv[3])
            elif what == "upsert":
                return {"text": PgGuard(conn, table=argv[1], mode=argv[2]).upsert_sql}
            elif what == "check":
                guard = PgGuard(conn, table=argv[1], mode=argv[3])
                with conn.transaction():
                    guard.check(conn, "job/42", int(argv[2]))
            else:
                raise SystemExit(f"pg_step.py: unknown step {what!r}")
        except StaleTokenError as e:
            return {"written": False, "highest": e.highest}
    return {"written": True}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])))
