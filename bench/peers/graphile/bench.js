// The graphile-worker peer of `cargo xtask bench spool`: drives graphile-worker (the version
// package-lock.json locks) against a PostgreSQL server and prints ONE JSON document on stdout
// in the shape the Rust peers print; every log line goes to stderr.
//
// Usage:
//   node bench.js [--url postgres://postgres@127.0.0.1:5432/postgres] [--runs 1] [--rows 6]
//                 [--jobs 10000] [--batch 1000]                      (row 6)
//                 [--claims 5000] [--workers 10]                     (row 3)
//                 [--drain 20000] [--drain-concurrency 10,24]        (row 8)
//                 [--latency-rate 200] [--latency-samples 1000]      (row 9)
// `--rows` is a comma list of the rows below; the default (6) is the only row older callers
// know, so they get the document they always got. Each row of each of the `--runs` runs works
// on a fresh schema (`cairn_graphile_<pid>_<ms>_<n>`, migrated by graphile) that is dropped
// afterwards, also when the row fails or the process is interrupted (SIGINT/SIGTERM).
//
// Durability: the server's `synchronous_commit` (on by default) is left as it is, like cairn's;
// every measurement reads it back and the settings string states the value seen.
//
// Rows (what each measures, and why the settings are graphile's fastest documented ones):
//
//   6  bulk enqueue -> run.bulk_enqueue (jobs/s). `WorkerUtils.addJobs` of `--jobs` jobs with
//      distinct job keys in batches of `--batch`, each batch one call (one add_jobs
//      statement, one commit). addJobs is graphile's bulk API (its docs' "jobs queued per
//      second from single add_jobs batch call").
//
//   3  claim + complete -> run.claim_complete (jobs/s). `--claims` jobs (task "bench",
//      payload {}, distinct job keys) are added with addJobs, 1000 per call, before the clock.
//      The clock starts just before `run()` (so it includes the worker's start-up: pool,
//      migration check, LISTEN) and stops when every job has succeeded (`job:success` events,
//      counted in-process so that no polling competes with the worker for this process's event
//      loop) AND `<schema>._private_jobs` is empty (graphile deletes a completed job; the last
//      completion batch commits after the last `job:success`, so the table is polled every
//      2 ms from then on). Worker: a no-op task, `concurrency: --workers`,
//      `maxPoolSize: workers + 1` (one connection per worker plus the LISTEN connection),
//      `preset.worker.localQueue.size: workers + 1` (the starting point graphile's docs
//      recommend, "concurrentJobs + 1": the next job is already local when a task finishes),
//      `completeJobBatchDelay: 0` and `failJobBatchDelay: 0` (the completions that arrive
//      before the next timer tick go into one statement, without a wait of their own),
//      pollInterval left at its default (2000 ms; new jobs arrive by LISTEN/NOTIFY and the
//      local queue fetches again as soon as it hands out its last job, so the interval only
//      matters for future-dated jobs), noHandleSignals (this script handles the signals).
//
//   8  drain with batching -> run.drain = [{ concurrency, jobs, rate, secs, busy_cpu_s,
//      wal_bytes }] (wal_bytes: the server's WAL written over the drain, pg_current_wal_lsn).
//      For each C of `--drain-concurrency`: `--drain` jobs added as in row 3 before the clock,
//      then graphile's documented performance preset (worker.graphile.org/docs/performance:
//      concurrentJobs 24, maxPoolSize 25, localQueue { size: 500 }, completeJobBatchDelay 0,
//      failJobBatchDelay 0, the configuration of its published throughput figures) scaled to
//      C: concurrency C, maxPoolSize C + 1, localQueue size 500, both batch delays 0. The clock
//      as in row 3. `busy_cpu_s` is the WHOLE machine's busy CPU over exactly that window (the
//      worker, Postgres, everything): the first line of /proc/stat before and after,
//      user+nice+system+irq+softirq+steal (iowait and idle excluded), in 1/100 s ticks.
//
//   9  end-to-end latency -> run.latency = { rate, samples, p50_ms, p99_ms, max_ms, mean_ms }.
//      The worker runs in a CHILD Node process (latency-worker.js) with graphile's low-latency
//      defaults: concurrency 10, maxPoolSize 11, no local queue (a fetch per job instead of a
//      batch), completion batching off (-1), pollInterval 2000 (default), idle workers woken by
//      the `jobs:insert` NOTIFY that add_job sends. Once the child says it is ready (its LISTEN
//      is up), this process adds `--latency-samples` + 20 jobs one at a time (one job per
//      `WorkerUtils.addJob` call, distinct job keys) on a fixed schedule of `--latency-rate` per
//      second: job i at t0 + i/rate, a send the timer wakes late goes at once and the schedule
//      does not shift. The schedule is an open loop: a send does not wait for the previous
//      addJob to return, since with synchronous_commit=on each addJob waits for its WAL flush
//      (about 4 ms on this kind of disk, close to the 5 ms gap at 200/s), and waiting would
//      quietly lower the rate. Each payload carries the wall-clock send time in µs
//      (`performance.timeOrigin + performance.now()`) taken just before addJob is called, so a
//      latency includes the enqueue's own commit. The child reports its wall-clock time at
//      handler start minus that; the first 20 samples are discarded as warm-up; p50/p99 are the
//      values at rank ceil(n*q) of the sorted list. The child is stopped (stdin closed, then
//      SIGKILL after 10 s) on every path, errors included.
//
// Option names: in 0.17.3, `localQueue`, `completeJobBatchDelay` and `failJobBatchDelay` exist
// only as preset options (`preset.worker.*`: node_modules/graphile-worker/dist/index.d.ts, and
// the 0.17 entry of graphile/worker's RELEASE_NOTES.md);
// `run()`'s legacy top-level options do not include them (given there, graphile prints "Do not
// know how to convert config option" and ignores them), so rows 3 and 8 pass them in `preset`,
// and check through the `localQueue:init` event that the local queue really exists with the
// size asked for. `concurrency` is the legacy name of `preset.worker.concurrentJobs`.
//
// A row that fails (or passes its 600 s deadline) is reported in `errors` as "row N: message";
// the run object keeps the rows that succeeded. Installed by the bench with `npm ci` from
// package-lock.json (graphile-worker pinned exactly).

"use strict";

const fs = require("fs");
const path = require("path");
const readline = require("readline");
const { spawn } = require("child_process");
const { EventEmitter } = require("events");
const { makeWorkerUtils, run: runWorker, Logger } = require("graphile-worker");

const ROWS = [3, 6, 8, 9];
const SEED_BATCH = 1000; // rows 3 and 8: addJobs call size when seeding
const ROW_DEADLINE_MS = 600_000; // per measurement
const POLL_MS = 2; // rows 3 and 8: the table count poll after the last job:success
const LATENCY_WARMUP = 20;
const LATENCY_CONCURRENCY = 10;
const CHILD_EXIT_GRACE_MS = 10_000; // after closing its stdin, before SIGKILL

function parseArgs(argv) {
  const a = {
    url: "postgres://postgres@127.0.0.1:5432/postgres",
    jobs: 10000,
    batch: 1000,
    runs: 1,
    rows: [6],
    claims: 5000,
    workers: 10,
    drain: 20000,
    drainConcurrency: [10, 24],
    latencyRate: 200,
    latencySamples: 1000,
  };
  const positive = (flag, value) => {
    const n = Number(value);
    if (!Number.isInteger(n) || n < 1) throw new Error(`${flag} needs a positive integer, not ${value}`);
    return n;
  };
  const list = (flag, value) => value.split(",").map((v) => positive(flag, v.trim()));
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
      case "--rows": {
        const rows = list(flag, value);
        for (const r of rows) {
          if (!ROWS.includes(r)) throw new Error(`--rows: no row ${r} here (rows: ${ROWS.join(",")})`);
        }
        a.rows = ROWS.filter((r) => rows.includes(r));
        break;
      }
      case "--claims":
        a.claims = positive(flag, value);
        break;
      case "--workers":
        a.workers = positive(flag, value);
        break;
      case "--drain":
        a.drain = positive(flag, value);
        break;
      case "--drain-concurrency":
        a.drainConcurrency = list(flag, value);
        break;
      case "--latency-rate":
        a.latencyRate = Number(value);
        if (!(a.latencyRate > 0 && Number.isFinite(a.latencyRate))) {
          throw new Error(`--latency-rate needs a positive number, not ${value}`);
        }
        break;
      case "--latency-samples":
        a.latencySamples = positive(flag, value);
        break;
      default:
        throw new Error(`unknown flag ${flag}`);
    }
  }
  return a;
}

const key = (i) => `bench-key-${String(i).padStart(8, "0")}`;
const log = (line) => process.stderr.write(`graphile peer: ${line}\n`);
const message = (e) => String(e && e.message ? e.message : e);

// graphile-worker logs migrations with console.log by default: stdout is for the JSON only.
const logger = new Logger(() => (level, msg) => {
  if (level === "error" || level === "warning") process.stderr.write(`graphile-worker: ${msg}\n`);
});

function deferred() {
  let resolve;
  let reject;
  const promise = new Promise((res, rej) => {
    resolve = res;
    reject = rej;
  });
  promise.catch(() => {}); // a rejection nobody awaits (any more) is not an unhandled one
  return { promise, resolve, reject };
}

// SIGINT/SIGTERM: the current measurement fails with "interrupted" (so its worker, child and
// schema are cleaned up by the finally blocks), no further one starts, the JSON is printed.
// A second signal exits at once (the latency child is still killed, the schema may be left).
const interrupt = deferred();
let interrupted = null;
for (const signal of ["SIGINT", "SIGTERM"]) {
  process.on(signal, () => {
    if (interrupted) process.exit(signal === "SIGINT" ? 130 : 143);
    interrupted = signal;
    log(`${signal}: stopping the current measurement and cleaning up`);
    interrupt.reject(new Error(`interrupted by ${signal}`));
  });
}

/** `promise`, unless `deadline` (ms since the epoch) passes first or the process is interrupted. */
async function within(promise, deadline, what) {
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`deadline of ${ROW_DEADLINE_MS / 1000} s passed: ${what()}`)),
      Math.max(0, deadline - Date.now()),
    );
  });
  try {
    return await Promise.race([promise, late, interrupt.promise]);
  } finally {
    clearTimeout(timer);
  }
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Polls `probe` every POLL_MS ms until it answers true, up to `deadline`. */
async function until(probe, deadline, what) {
  for (;;) {
    if (await within(probe(), deadline, what)) return;
    if (Date.now() > deadline) throw new Error(`deadline of ${ROW_DEADLINE_MS / 1000} s passed: ${what()}`);
    await within(sleep(POLL_MS), deadline, what);
  }
}

// The synchronous_commit values the measurements saw (stated in the settings string).
const syncCommitSeen = new Set();
let fresh = 0;

/** Runs `body(utils, schema)` on a fresh, migrated schema, dropped afterwards. */
async function withFreshSchema(a, body) {
  if (interrupted) throw new Error(`interrupted by ${interrupted}`);
  fresh += 1;
  const schema = `cairn_graphile_${process.pid}_${Date.now()}_${fresh}`;
  const utils = await makeWorkerUtils({ connectionString: a.url, schema, logger });
  try {
    const sc = await utils.withPgClient((c) => c.query("show synchronous_commit"));
    syncCommitSeen.add(sc.rows[0].synchronous_commit);
    await utils.migrate();
    return await body(utils, schema);
  } finally {
    await utils
      .withPgClient((c) => c.query(`drop schema if exists "${schema}" cascade`))
      .catch((e) => log(`could not drop schema ${schema}: ${message(e)}`));
    await utils.release();
  }
}

async function countJobs(utils, schema) {
  const r = await utils.withPgClient((c) => c.query(`select count(*)::int as n from "${schema}"._private_jobs`));
  return r.rows[0].n;
}

/** Rows 3 and 8, before the clock: `n` jobs in addJobs calls of SEED_BATCH. */
async function seed(utils, schema, n) {
  for (let start = 0; start < n; start += SEED_BATCH) {
    if (interrupted) throw new Error(`interrupted by ${interrupted}`);
    const specs = [];
    for (let i = start; i < Math.min(start + SEED_BATCH, n); i++) {
      specs.push({ identifier: "bench", payload: {}, jobKey: key(i) });
    }
    const jobs = await utils.addJobs(specs);
    if (jobs.length !== specs.length) throw new Error(`addJobs returned ${jobs.length} jobs for ${specs.length} specs`);
  }
  const stored = await countJobs(utils, schema);
  if (stored !== n) throw new Error(`seeding stored ${stored} of ${n} jobs`);
}

/** The whole machine's busy CPU ticks so far (first line of /proc/stat), or null off Linux. */
function busyTicks() {
  let line;
  try {
    line = fs.readFileSync("/proc/stat", "utf8").split("\n", 1)[0];
  } catch {
    return null;
  }
  const f = line.trim().split(/\s+/).slice(1).map(Number);
  // user nice system idle iowait irq softirq steal: busy = user+nice+system+irq+softirq+steal
  return f[0] + f[1] + f[2] + f[5] + f[6] + f[7];
}

/**
 * Rows 3 and 8: starts a worker on `schema`, already seeded with `n` jobs, and waits until they
 * are all done (every job:success seen and the jobs table empty). Returns the wall seconds and
 * the machine's busy ticks over that window.
 */
async function drainSeeded(a, utils, schema, n, { concurrency, localQueueSize }) {
  const deadline = Date.now() + ROW_DEADLINE_MS;
  const events = new EventEmitter();
  const allSucceeded = deferred();
  const failure = deferred();
  let succeeded = 0;
  let localQueueSeen = null;
  events.on("job:success", () => {
    succeeded += 1;
    if (succeeded === n) allSucceeded.resolve();
  });
  const fail = (what) => (e) => failure.reject(new Error(`${what}: ${message(e && e.error ? e.error : e)}`));
  events.on("job:error", fail("a job failed"));
  events.on("worker:fatalError", fail("a worker died"));
  events.on("pool:fatalError", fail("the worker pool died"));
  events.on("localQueue:init", ({ localQueue }) => {
    localQueueSeen = localQueue;
  });
  let firstStart = null; // for the log: how much of the window the worker's start-up took
  events.once("job:start", () => {
    firstStart = process.hrtime.bigint();
  });

  let handled = 0; // the task's own count, checked against graphile's job:success count
  let runner = null;
  const cpu0 = busyTicks();
  const t0 = process.hrtime.bigint();
  try {
    runner = await runWorker({
      connectionString: a.url,
      schema,
      logger,
      events,
      concurrency,
      maxPoolSize: concurrency + 1,
      noHandleSignals: true,
      parsedCronItems: [],
      taskList: {
        bench: async () => {
          handled += 1;
        },
      },
      preset: {
        worker: { localQueue: { size: localQueueSize }, completeJobBatchDelay: 0, failJobBatchDelay: 0 },
      },
    });
    runner.promise.then(
      () => failure.reject(new Error("the worker stopped before the jobs were done")),
      (e) => failure.reject(new Error(`the worker failed: ${message(e)}`)),
    );
    if (!localQueueSeen) throw new Error("graphile created no local queue (is localQueue an option of this version?)");
    const size = localQueueSeen.getJobBatchSize;
    if (size !== undefined && size !== localQueueSize) {
      throw new Error(`the local queue has size ${size}, not ${localQueueSize}`);
    }
    await within(
      Promise.race([allSucceeded.promise, failure.promise]),
      deadline,
      () => `${succeeded} of ${n} jobs succeeded`,
    );
    let left = n;
    await until(
      async () => {
        left = await Promise.race([countJobs(utils, schema), failure.promise]);
        return left === 0;
      },
      deadline,
      () => `every job succeeded but ${left} rows are still in ${schema}._private_jobs`,
    );
    const secs = Number(process.hrtime.bigint() - t0) / 1e9;
    const cpu1 = busyTicks();
    if (handled !== n || succeeded !== n) {
      throw new Error(`the task ran ${handled} times and ${succeeded} jobs succeeded, for ${n} jobs`);
    }
    const startup = firstStart === null ? NaN : Number(firstStart - t0) / 1e9;
    return { secs, startup, ticks: cpu0 === null || cpu1 === null ? null : cpu1 - cpu0 };
  } finally {
    if (runner) {
      await runner.stop().catch((e) => log(`stopping the worker: ${message(e)}`));
    }
  }
}

// ---- row 6: bulk enqueue ----------------------------------------------------------------------

async function bulkRow(a) {
  return withFreshSchema(a, async (utils, schema) => {
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
    const stored = await countJobs(utils, schema);
    if (stored !== a.jobs) {
      throw new Error(`addJobs stored ${stored} of ${a.jobs} jobs`);
    }
    log(`row 6: ${a.jobs} jobs in ${secs.toFixed(3)} s (${Math.round(a.jobs / secs)}/s)`);
    return { bulk_enqueue: a.jobs / Math.max(secs, 1e-9) };
  });
}

// ---- row 3: claim + complete ------------------------------------------------------------------

async function claimRow(a) {
  return withFreshSchema(a, async (utils, schema) => {
    await seed(utils, schema, a.claims);
    const { secs, startup } = await drainSeeded(a, utils, schema, a.claims, {
      concurrency: a.workers,
      localQueueSize: a.workers + 1,
    });
    log(
      `row 3: ${a.claims} jobs in ${secs.toFixed(3)} s (${Math.round(a.claims / secs)}/s; ` +
        `the first job started ${(startup * 1000).toFixed(0)} ms after run() was called)`,
    );
    return { claim_complete: a.claims / Math.max(secs, 1e-9) };
  });
}

// ---- row 8: drain with batching ---------------------------------------------------------------

async function drainRow(a) {
  const drain = [];
  for (const c of a.drainConcurrency) {
    const one = await withFreshSchema(a, async (utils, schema) => {
      await seed(utils, schema, a.drain);
      // The server's WAL position around the drain: the bytes of WAL it wrote per job (the
      // whole server's, so on an otherwise idle server this drain's).
      const lsn = async () =>
        (await utils.withPgClient((cl) => cl.query("select pg_current_wal_lsn()::text as l"))).rows[0].l;
      const lsn0 = await lsn();
      const { secs, startup, ticks } = await drainSeeded(a, utils, schema, a.drain, {
        concurrency: c,
        localQueueSize: 500,
      });
      const wal = Number(
        (
          await utils.withPgClient((cl) =>
            cl.query("select pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::float8 as d", [lsn0]),
          )
        ).rows[0].d,
      );
      const busy = ticks === null ? null : ticks / 100;
      log(
        `row 8, concurrency ${c}: ${a.drain} jobs in ${secs.toFixed(3)} s (${Math.round(a.drain / secs)}/s; ` +
          `first job ${(startup * 1000).toFixed(0)} ms after run()), ` +
          `machine busy CPU ${busy === null ? "n/a (no /proc/stat)" : `${busy.toFixed(2)} s`}`,
      );
      return {
        concurrency: c,
        jobs: a.drain,
        rate: a.drain / Math.max(secs, 1e-9),
        secs,
        busy_cpu_s: busy,
        wal_bytes: wal,
      };
    });
    drain.push(one);
  }
  return { drain };
}

// ---- row 9: end-to-end latency ----------------------------------------------------------------

// Children alive right now: killed if this process exits without having reaped them.
const children = new Set();
process.on("exit", () => {
  for (const child of children) child.kill("SIGKILL");
});

function rank(sorted, q) {
  return sorted[Math.min(sorted.length, Math.max(1, Math.ceil(sorted.length * q))) - 1];
}

async function latencyRow(a) {
  return withFreshSchema(a, async (utils, schema) => {
    const deadline = Date.now() + ROW_DEADLINE_MS;
    const total = a.latencySamples + LATENCY_WARMUP;
    const latencyUs = new Map(); // sequence number -> µs
    const ready = deferred();
    const allIn = deferred();
    const exited = deferred();
    const child = spawn(
      process.execPath,
      [
        path.join(__dirname, "latency-worker.js"),
        ...["--url", a.url, "--schema", schema, "--concurrency", String(LATENCY_CONCURRENCY)],
      ],
      { cwd: __dirname, stdio: ["pipe", "pipe", "inherit"] },
    );
    children.add(child);
    child.on("error", (e) => {
      const err = new Error(`cannot run the latency worker: ${message(e)}`);
      ready.reject(err);
      allIn.reject(err);
    });
    child.on("exit", (code, signal) => {
      children.delete(child);
      const err = new Error(
        `the latency worker exited (${signal || `code ${code}`}) with ${latencyUs.size} of ${total} samples`,
      );
      ready.reject(err);
      allIn.reject(err);
      exited.resolve();
    });
    child.stdin.on("error", () => {}); // EPIPE if the child is already gone: its exit reports it
    readline.createInterface({ input: child.stdout }).on("line", (line) => {
      if (line === "ready") {
        ready.resolve();
        return;
      }
      const [i, us] = line.split(" ").map(Number);
      if (!Number.isInteger(i) || !Number.isFinite(us)) {
        allIn.reject(new Error(`the latency worker printed ${JSON.stringify(line)}`));
        return;
      }
      if (latencyUs.has(i)) {
        allIn.reject(new Error(`job ${i} ran twice`));
        return;
      }
      latencyUs.set(i, us);
      if (latencyUs.size === total) allIn.resolve();
    });

    // Open loop: job i is sent at t0 + i/rate whether or not the earlier addJobs have returned
    // (each addJob waits for its commit's WAL flush, about as long as the gap between two jobs
    // at 200/s on this kind of disk, so awaiting each before the next would slow the rate
    // down); a send the timer wakes late goes at once, without shifting the later ones.
    let late = 0;
    let worstLateMs = 0;
    let inFlight = 0;
    let maxInFlight = 0;
    const sends = [];
    const sendFailed = deferred();
    try {
      await within(ready.promise, deadline, () => "the latency worker never said it was ready");
      const intervalMs = 1000 / a.latencyRate;
      const t0 = performance.now();
      let firstMs = 0;
      let lastMs = 0;
      for (let i = 0; i < total; i++) {
        if (interrupted) throw new Error(`interrupted by ${interrupted}`);
        if (Date.now() > deadline) throw new Error(`deadline of ${ROW_DEADLINE_MS / 1000} s passed: sent ${i} of ${total}`);
        const due = t0 + i * intervalMs;
        const wait = due - performance.now();
        if (wait > 0) await within(Promise.race([sleep(wait), allIn.promise, sendFailed.promise]), deadline, () => `sent ${i} of ${total}`);
        const now = performance.now();
        if (now - due > 1) {
          late += 1;
          worstLateMs = Math.max(worstLateMs, now - due);
        }
        if (i === 0) firstMs = now;
        lastMs = now;
        const sentUs = (performance.timeOrigin + performance.now()) * 1000;
        inFlight += 1;
        maxInFlight = Math.max(maxInFlight, inFlight);
        sends.push(
          utils.addJob("bench", { i, sent_us: sentUs }, { jobKey: key(i) }).then(
            () => {
              inFlight -= 1;
            },
            (e) => sendFailed.reject(new Error(`addJob of job ${i} failed: ${message(e)}`)),
          ),
        );
      }
      await within(
        Promise.race([Promise.all(sends), sendFailed.promise]),
        deadline,
        () => `${inFlight} addJob calls still running`,
      );
      const sentRate = total > 1 ? ((total - 1) * 1000) / (lastMs - firstMs) : a.latencyRate;
      log(
        `row 9: sent ${total} jobs at ${sentRate.toFixed(1)}/s (target ${a.latencyRate}/s), at most ${maxInFlight} ` +
          `addJob calls in flight, ${late} sends more than 1 ms behind schedule` +
          (late ? ` (worst ${worstLateMs.toFixed(1)} ms)` : ""),
      );
      await within(allIn.promise, deadline, () => `${latencyUs.size} of ${total} jobs reached the worker`);
    } finally {
      if (child.exitCode === null && child.signalCode === null) {
        child.stdin.end(); // the child stops its worker and exits
        let timer;
        const grace = new Promise((resolve) => {
          timer = setTimeout(resolve, CHILD_EXIT_GRACE_MS);
        });
        await Promise.race([exited.promise, grace]);
        clearTimeout(timer);
        if (child.exitCode === null && child.signalCode === null) {
          log(`the latency worker did not exit ${CHILD_EXIT_GRACE_MS / 1000} s after its stdin closed: SIGKILL`);
          child.kill("SIGKILL");
          await exited.promise;
        }
      }
    }

    const ms = [];
    for (const [i, us] of latencyUs) if (i >= LATENCY_WARMUP) ms.push(us / 1000);
    ms.sort((x, y) => x - y);
    const n = ms.length;
    const latency = {
      rate: a.latencyRate,
      samples: n,
      p50_ms: rank(ms, 0.5),
      p99_ms: rank(ms, 0.99),
      max_ms: ms[n - 1],
      mean_ms: ms.reduce((s, x) => s + x, 0) / n,
    };
    log(
      `row 9: ${n} samples at ${a.latencyRate}/s: p50 ${latency.p50_ms.toFixed(2)} ms, ` +
        `p99 ${latency.p99_ms.toFixed(2)} ms, max ${latency.max_ms.toFixed(2)} ms, mean ${latency.mean_ms.toFixed(2)} ms`,
    );
    return { latency };
  });
}

// ---- the document -------------------------------------------------------------------------------

const ROW_FNS = { 3: claimRow, 6: bulkRow, 8: drainRow, 9: latencyRow };

function settings(a, version) {
  const seen = [...syncCommitSeen];
  const sync = seen.length === 0 ? "synchronous_commit=on (server default, not read back)" : `synchronous_commit=${seen.join("/")}`;
  const parts = [`graphile-worker ${version} (Node ${process.versions.node}, ${sync})`];
  const seeded = (n) =>
    `${n} jobs (task "bench", payload {}, distinct jobKeys) added with addJobs, ${SEED_BATCH} per call, ` +
    `before the clock; clock from run() until every job:success fired and _private_jobs is empty`;
  for (const row of a.rows) {
    switch (row) {
      case 6:
        parts.push(
          `bulk: WorkerUtils.addJobs of ${a.batch} jobs per call, each with a distinct jobKey ` +
            `(one add_jobs statement, one commit)`,
        );
        break;
      case 3:
        parts.push(
          `claim+complete: ${seeded(a.claims)}; run() with a no-op task, concurrency ${a.workers}, ` +
            `maxPoolSize ${a.workers + 1}, preset.worker.localQueue.size ${a.workers + 1} (concurrency + 1), ` +
            `completeJobBatchDelay 0, failJobBatchDelay 0, pollInterval 2000 (default; LISTEN/NOTIFY and ` +
            `local-queue refetch), noHandleSignals`,
        );
        break;
      case 8:
        parts.push(
          `drain: for concurrency C in ${a.drainConcurrency.join(",")}: ${seeded(a.drain)}; graphile's ` +
            `documented performance preset scaled to C: run() with a no-op task, concurrency C, maxPoolSize C+1, ` +
            `preset.worker.localQueue.size 500, completeJobBatchDelay 0, failJobBatchDelay 0, pollInterval ` +
            `2000 (default), noHandleSignals; busy_cpu_s = whole-machine /proc/stat ` +
            `user+nice+system+irq+softirq+steal over the window / 100`,
        );
        break;
      case 9:
        parts.push(
          `latency: worker in a child Node process: run() concurrency ${LATENCY_CONCURRENCY}, maxPoolSize ` +
            `${LATENCY_CONCURRENCY + 1}, no localQueue, completeJobBatchDelay/failJobBatchDelay -1 (off, default), ` +
            `pollInterval 2000 (default), woken by LISTEN/NOTIFY; this process: WorkerUtils.addJob one job per call ` +
            `(distinct jobKey) at ${a.latencyRate}/s on a fixed open-loop schedule (not waiting for the previous ` +
            `addJob; late sends go at once), payload = send wall time µs taken before addJob; latency = child's ` +
            `wall time at handler start - send time; ${a.latencySamples} samples ` +
            `after ${LATENCY_WARMUP} warm-up; p = rank ceil(n*q)`,
        );
        break;
    }
  }
  return parts.join("; ");
}

async function main() {
  const a = parseArgs(process.argv.slice(2));
  const version = JSON.parse(
    fs.readFileSync(path.join(__dirname, "node_modules", "graphile-worker", "package.json"), "utf8"),
  ).version;
  const runs = [];
  const errors = [];
  for (let r = 0; r < a.runs && !interrupted; r++) {
    const one = {};
    for (const row of a.rows) {
      if (interrupted) break;
      try {
        Object.assign(one, await ROW_FNS[row](a));
      } catch (e) {
        log(`run ${r + 1}, row ${row} failed: ${e && e.stack ? e.stack : e}`);
        errors.push(`row ${row}: ${message(e)}`);
      }
    }
    if (Object.keys(one).length > 0) runs.push(one);
  }
  if (interrupted) errors.push(`interrupted by ${interrupted}`);
  const doc = { backend: "postgres", bulk: a.jobs, bulk_batch: a.batch };
  if (a.rows.includes(3)) Object.assign(doc, { claims: a.claims, workers: a.workers });
  if (a.rows.includes(8)) Object.assign(doc, { drain: a.drain, drain_concurrency: a.drainConcurrency });
  if (a.rows.includes(9)) Object.assign(doc, { latency_rate: a.latencyRate, latency_samples: a.latencySamples });
  doc.systems = [{ name: "graphile-worker", version, settings: settings(a, version), runs, errors }];
  process.stdout.write(JSON.stringify(doc) + "\n");
  if (interrupted) process.exit(interrupted === "SIGINT" ? 130 : 143);
}

main().catch((e) => {
  process.stderr.write(`graphile peer: ${e && e.stack ? e.stack : e}\n`);
  process.exit(1);
});
