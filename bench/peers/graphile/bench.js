// The graphile-worker peer of `cargo xtask bench spool` (row 6, bulk enqueue): `addJobs` of
// `--jobs` jobs with distinct job keys in batches of `--batch`, each batch one call (one
// statement, one commit), on a fresh schema per run, then one JSON document on stdout in the
// shape the Rust peers print.
//
// Usage: node bench.js --url postgres://… [--jobs 10000] [--batch 1000] [--runs 1]
//
// Durability: the server's `synchronous_commit` (on by default) is left as it is, like cairn's.
// Installed by the bench with `npm ci` from package-lock.json (graphile-worker pinned exactly).

"use strict";

const fs = require("fs");
const path = require("path");
const { makeWorkerUtils, Logger } = require("graphile-worker");

function parseArgs(argv) {
  const a = { url: "postgres://postgres@127.0.0.1:5432/postgres", jobs: 10000, batch: 1000, runs: 1 };
  for (let i = 0; i < argv.length; i += 2) {
    const flag = argv[i];
    const value = argv[i + 1];
    if (value === undefined) throw new Error(`${flag} needs a value`);
    switch (flag) {
      case "--url":
        a.url = value;
        break;
      case "--jobs":
        a.jobs = Number.parseInt(value, 10);
        break;
      case "--batch":
        a.batch = Math.max(1, Number.parseInt(value, 10));
        break;
      case "--runs":
        a.runs = Number.parseInt(value, 10);
        break;
      default:
        throw new Error(`unknown flag ${flag}`);
    }
  }
  return a;
}

const key = (i) => `bench-key-${String(i).padStart(8, "0")}`;

// graphile-worker logs migrations with console.log by default: stdout is for the JSON only.
const logger = new Logger(() => (level, message) => {
  if (level === "error" || level === "warning") process.stderr.write(`graphile-worker: ${message}\n`);
});

let fresh = 0;

async function run(a) {
  fresh += 1;
  const schema = `cairn_graphile_${process.pid}_${Date.now()}_${fresh}`;
  const utils = await makeWorkerUtils({ connectionString: a.url, schema, logger });
  try {
    await utils.migrate();
    const started = process.hrtime.bigint();
    for (let start = 0; start < a.jobs; start += a.batch) {
      const end = Math.min(start + a.batch, a.jobs);
      const specs = [];
      for (let i = start; i < end; i++) {
        specs.push({ identifier: "bench", payload: {}, jobKey: key(i) });
      }
      const jobs = await utils.addJobs(specs);
      if (jobs.length !== specs.length) {
        throw new Error(`addJobs returned ${jobs.length} jobs for ${specs.length} specs`);
      }
    }
    const secs = Number(process.hrtime.bigint() - started) / 1e9;
    const stored = await utils.withPgClient((c) =>
      c.query(`select count(*)::int as n from "${schema}"._private_jobs`),
    );
    if (stored.rows[0].n !== a.jobs) {
      throw new Error(`addJobs stored ${stored.rows[0].n} of ${a.jobs} jobs`);
    }
    return { bulk_enqueue: a.jobs / Math.max(secs, 1e-9) };
  } finally {
    await utils.withPgClient((c) => c.query(`drop schema if exists "${schema}" cascade`)).catch(() => {});
    await utils.release();
  }
}

async function main() {
  const a = parseArgs(process.argv.slice(2));
  const version = JSON.parse(
    fs.readFileSync(path.join(__dirname, "node_modules", "graphile-worker", "package.json"), "utf8"),
  ).version;
  const runs = [];
  const errors = [];
  for (let r = 0; r < a.runs; r++) {
    try {
      runs.push(await run(a));
    } catch (e) {
      errors.push(String(e && e.stack ? e.message : e));
    }
  }
  const doc = {
    backend: "postgres",
    bulk: a.jobs,
    bulk_batch: a.batch,
    systems: [
      {
        name: "graphile-worker",
        version,
        settings:
          `graphile-worker ${version} (Node ${process.versions.node}, synchronous_commit=on); ` +
          `bulk: WorkerUtils.addJobs of ${a.batch} jobs per call, each with a distinct jobKey ` +
          `(one add_jobs statement, one commit)`,
        runs,
        errors,
      },
    ],
  };
  process.stdout.write(JSON.stringify(doc) + "\n");
}

main().catch((e) => {
  process.stderr.write(`graphile peer: ${e && e.stack ? e.stack : e}\n`);
  process.exit(1);
});
