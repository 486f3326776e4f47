// One step of the Go test that runs pgfence and this package's updateRow on
// one table (node_test.go, TestPgGuardInterop):
//
//	node pg-step.js sql   TABLE ID TOKEN VALUE MODE   print updateRowSQL's statement as JSON
//	node pg-step.js write TABLE ID TOKEN VALUE MODE   run updateRow, print the outcome as JSON
//
// The database is $LEASE_TEST_POSTGRES_URL.

import pg from "pg";

import { StaleTokenError, type FenceMode } from "../src/index.js";
import { updateRow, updateRowSQL } from "../src/pg.js";

const [step, table, id, token, value, mode] = process.argv.slice(2);
if (table === undefined || id === undefined || token === undefined || value === undefined || (mode !== "at-least" && mode !== "strict")) {
  console.error("usage: pg-step.js sql|write TABLE ID TOKEN VALUE at-least|strict");
  process.exit(2);
}
const opts = { mode: mode as FenceMode };
if (step === "sql") {
  console.log(JSON.stringify(updateRowSQL(table, Number(id), { value }, Number(token), opts)));
} else if (step === "write") {
  const client = new pg.Client({ connectionString: process.env["LEASE_TEST_POSTGRES_URL"] });
  await client.connect();
  try {
    await updateRow(client, table, Number(id), { value }, Number(token), opts);
    console.log(JSON.stringify({ written: true }));
  } catch (err) {
    if (!(err instanceof StaleTokenError)) throw err;
    console.log(JSON.stringify({ written: false, code: err.code, highest: err.highest }));
  } finally {
    await client.end();
  }
} else {
  console.error(`pg-step.js: unknown step ${JSON.stringify(step)}`);
  process.exit(2);
}
