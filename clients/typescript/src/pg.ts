// The PostgreSQL guard, for node-postgres (pg): @leasehq/lease/pg. It
// imports nothing from pg at run time; any client with pg's query method
// (pg.Client, pg.Pool, a pool's client) will do.

import { type FenceMode, InvalidError, isToken, MAX_TOKEN, NotFoundError, StaleTokenError, UnavailableError } from "./errors.js";

/** What updateRow sends its statements through: pg.Client, pg.Pool and pg.PoolClient all qualify. */
export interface PgQueryable {
  query(text: string, values?: unknown[]): Promise<{ rowCount: number | null; rows: unknown[] }>;
}

/** A table: one name, or [schema, table]. A string is one identifier, dots included. */
export type PgTable = string | readonly [schema: string, table: string];

/** Which columns updateRow uses, and its rule. */
export interface UpdateRowOptions {
  /** The column that identifies the row, unique; default "id". */
  readonly idColumn?: string;
  /** The row's bigint fencing token column; default "fencing_token". A NULL counts as 0. */
  readonly tokenColumn?: string;
  /** "at-least" (default) admits token >= the row's; "strict" only token > the row's. */
  readonly mode?: FenceMode;
}

/** A statement and its parameters, for node-postgres' query(text, values). */
export interface PgStatement {
  readonly text: string;
  readonly values: unknown[];
}

const MAX_IDENT_BYTES = 63; // PostgreSQL's NAMEDATALEN − 1
const encoder = new TextEncoder();
const loneSurrogate = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

function ident(what: string, name: unknown): string {
  if (typeof name !== "string" || name === "") throw new InvalidError(`lease: pg: ${what} is empty`);
  const n = encoder.encode(name).length;
  if (n > MAX_IDENT_BYTES) {
    throw new InvalidError(`lease: pg: ${what} ${JSON.stringify(name)} is ${n} bytes, more than PostgreSQL's ${MAX_IDENT_BYTES}`);
  }
  if (loneSurrogate.test(name)) throw new InvalidError(`lease: pg: ${what} is not valid Unicode`);
  if (name.includes("\u0000")) throw new InvalidError(`lease: pg: ${what} contains a NUL character`);
  return `"${name.replaceAll('"', '""')}"`;
}

function tableSQL(table: PgTable): string {
  if (typeof table === "string") return ident("table", table);
  if (!Array.isArray(table) || table.length !== 2) {
    throw new InvalidError("lease: pg: table must be a name or [schema, table]");
  }
  return `${ident("schema", table[0])}.${ident("table", table[1])}`;
}

function describe(table: PgTable, id: unknown): string {
  return `${typeof table === "string" ? table : table.join(".")}/${String(id)}`;
}

/**
 * updateRowSQL returns the fenced single-row UPDATE that updateRow sends —
 * the same statement as Go's pgfence.Update.SQL, so both guard one table
 * alike:
 *
 *	UPDATE t SET a = $1, …, fencing_token = $n WHERE id = $m AND coalesce(fencing_token, 0) <= $n::bigint
 *
 * (< in "strict" mode). Columns are set in name order, so equal updates give
 * equal SQL. It affects one row if the token is admitted, none if it is
 * stale or the row is missing.
 */
export function updateRowSQL(
  table: PgTable,
  id: unknown,
  values: Readonly<Record<string, unknown>>,
  token: number,
  options: UpdateRowOptions = {},
): PgStatement {
  const t = tableSQL(table);
  const idColumn = options.idColumn ?? "id";
  const tokenColumn = options.tokenColumn ?? "fencing_token";
  const idc = ident("id column", idColumn);
  const tok = ident("token column", tokenColumn);
  if (idColumn === tokenColumn) throw new InvalidError(`lease: pg: id column and token column are both ${JSON.stringify(idColumn)}`);
  const mode = options.mode ?? "at-least";
  if (mode !== "at-least" && mode !== "strict") throw new InvalidError(`lease: pg: unknown mode ${JSON.stringify(mode)}`);
  if (id === undefined || id === null) throw new InvalidError("lease: pg: row id is missing");
  if (!isToken(token)) throw new InvalidError(`lease: pg: fencing token ${String(token)} is outside [1, ${MAX_TOKEN}]`);
  if (typeof values !== "object" || values === null) throw new InvalidError("lease: pg: values must be an object of columns");
  const cols = Object.keys(values).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  const args: unknown[] = [];
  let text = `UPDATE ${t} SET `;
  for (const c of cols) {
    if (c === idColumn || c === tokenColumn) throw new InvalidError(`lease: pg: set column ${JSON.stringify(c)} is the id or token column`);
    args.push(values[c]);
    text += `${ident("set column", c)} = $${args.length}, `;
  }
  args.push(token);
  const tokArg = `$${args.length}`;
  args.push(id);
  const idArg = `$${args.length}`;
  text += `${tok} = ${tokArg} WHERE ${idc} = ${idArg} AND coalesce(${tok}, 0) ${mode === "strict" ? "<" : "<="} ${tokArg}::bigint`;
  return { text, values: args };
}

/**
 * updateRow writes values to the row of table whose id column is id, with
 * fencing token token, as one statement: the check and the write are
 * atomic without a transaction of the caller's (client may also be one in a
 * transaction). It resolves if the row was written; a token older than the
 * row's (per mode) throws a StaleTokenError naming the row's token, and
 * writes nothing; a missing row throws NotFoundError. Only a rejected update
 * costs a second statement, a read of the row's token to tell stale from
 * missing. Interoperates with Go's pgfence.UpdateRow on the same table.
 */
export async function updateRow(
  client: PgQueryable,
  table: PgTable,
  id: unknown,
  values: Readonly<Record<string, unknown>>,
  token: number,
  options: UpdateRowOptions = {},
): Promise<void> {
  if (typeof client !== "object" || client === null || typeof client.query !== "function") {
    throw new InvalidError("lease: pg: client has no query method");
  }
  const stmt = updateRowSQL(table, id, values, token, options);
  const tok = ident("token column", options.tokenColumn ?? "fencing_token");
  const read = `SELECT coalesce(${tok}, 0)::text AS token FROM ${tableSQL(table)} WHERE ${ident("id column", options.idColumn ?? "id")} = $1`;
  const mode = options.mode ?? "at-least";
  // Outside a transaction the row can change between the update and the
  // read; a read that would have admitted the token means exactly that, so
  // try again a few times.
  for (let i = 0; i < 3; i++) {
    const res = await client.query(stmt.text, stmt.values);
    if (res.rowCount === 1) return;
    if (res.rowCount !== null && res.rowCount > 1) {
      throw new InvalidError(`lease: pg: updating ${describe(table, id)} changed ${res.rowCount} rows: the id column is not unique`);
    }
    const row = await client.query(read, [id]);
    const first = row.rows[0] as { token?: unknown } | undefined;
    if (first === undefined) throw new NotFoundError(`lease: pg: no row ${describe(table, id)}`);
    // The row's token as written, compared exactly: another writer's may
    // be past 2^53, which a number would round to a token it is not.
    const text = String(first.token);
    if (!/^-?[0-9]+$/.test(text)) throw new UnavailableError(`lease: pg: ${describe(table, id)} has token ${JSON.stringify(text)}, not a bigint`);
    const highest = BigInt(text);
    const admitted = mode === "strict" ? BigInt(token) > highest : BigInt(token) >= highest;
    if (!admitted) {
      const exact = highest <= BigInt(MAX_TOKEN) ? { highest: Number(highest) } : {};
      throw new StaleTokenError(
        `lease: pg: stale token ${token} for ${JSON.stringify(describe(table, id))}: the row has ${text} (mode ${mode})`,
        { resource: describe(table, id), token, ...exact, mode },
      );
    }
  }
  throw new UnavailableError(`lease: pg: ${describe(table, id)} kept changing under the update`);
}
