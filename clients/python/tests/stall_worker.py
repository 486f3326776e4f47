"""Worker A of test_loss.py, a process of its own so that the test can
SIGSTOP it: it acquires KEY for TTL seconds, prints its token, then for each
line on stdin ("fenced VALUE" or "unfenced VALUE") writes VALUE to row 1 of
TABLE and prints what its hold and the write said, as JSON."""

from __future__ import annotations

import json
import sys

import psycopg

from leasehq_lease import LeaseClient, LeaseError, StaleTokenError
from leasehq_lease.pg import update_row


def main(server: str, key: str, ttl: float, pg_url: str, table: str) -> None:
    client = LeaseClient(server, owner="worker-a")
    hold = client.acquire(key, ttl)
    print(json.dumps({"token": hold.token}), flush=True)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for line in sys.stdin:
            how, _, value = line.strip().partition(" ")
            out: dict[str, object] = {"lost": hold.lost.is_set()}
            try:
                hold.check()
                out["check"] = None
            except LeaseError as e:
                out["check"] = type(e).__name__
            try:
                if how == "fenced":
                    update_row(conn, table, 1, {"value": value}, hold.token)
                else:  # what a worker without a guard does: the negative control
                    conn.execute(f"UPDATE {table} SET value = %s WHERE id = 1".encode(), (value,))
                out["written"] = True
            except StaleTokenError as e:
                out["written"], out["highest"] = False, e.highest
            print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4], sys.argv[5])
