// The worker half of row 9 (end-to-end latency) of the graphile-worker peer: bench.js spawns
// this script as a child Node process so that enqueue (in bench.js) and handler start (here)
// happen in two OS processes, as they would in a deployment.
//
// Usage (by bench.js, not by hand): node latency-worker.js --url postgres://… --schema S
//                                        [--concurrency 10]
//
// It starts graphile-worker's `run()` on the already migrated schema S with graphile's
// low-latency defaults (no local queue, no completion batching, LISTEN/NOTIFY wake-up; see the
// settings below), and prints:
//   - `ready` once the worker pool's LISTEN connection is up (`pool:listen:success`), i.e. once
//     a new job's NOTIFY can wake a worker;
//   - then one line `<i> <latency µs>` per job, where `i` is the payload's sequence number and
//     the latency is this process's wall clock at the first statement of the task handler minus
//     the payload's `sent_us` (the parent's wall clock just before it called addJob). Both
//     clocks are `performance.timeOrigin + performance.now()` on the same machine.
// stdout carries nothing else (graphile's logs go to stderr, warnings and errors only). The
// child stops the worker and exits when its stdin closes: bench.js closes it when it has every
// sample, and the pipe closes by itself if bench.js dies, so the child never outlives it.

"use strict";

const { EventEmitter } = require("events");
const { run, Logger } = require("graphile-worker");

function parseArgs(argv) {
  const a = { url: null, schema: null, concurrency: 10 };
  for (let i = 0; i < argv.length; i += 2) {
    const flag = argv[i];
    const value = argv[i + 1];
    if (value === undefined) throw new Error(`${flag} needs a value`);
    switch (flag) {
      case "--url":
        a.url = value;
        break;
      case "--schema":
        a.schema = value;
        break;
      case "--concurrency":
        a.concurrency = Number.parseInt(value, 10);
        if (!(a.concurrency >= 1)) throw new Error(`--concurrency must be a positive integer, not ${value}`);
        break;
      default:
        throw new Error(`unknown flag ${flag}`);
    }
  }
  if (!a.url || !a.schema) throw new Error("--url and --schema are required");
  return a;
}

const logger = new Logger(() => (level, message) => {
  if (level === "error" || level === "warning") process.stderr.write(`graphile-worker (latency child): ${message}\n`);
});

async function main() {
  const a = parseArgs(process.argv.slice(2));
  const events = new EventEmitter();
  let listening = false;
  let started = false;
  let readySent = false;
  const maybeReady = () => {
    if (listening && started && !readySent) {
      readySent = true;
      process.stdout.write("ready\n");
    }
  };
  events.on("pool:listen:success", () => {
    listening = true;
    maybeReady();
  });
  events.on("localQueue:init", () => {
    // Row 9 is meant to run without a local queue: fail loudly if one appeared.
    process.stderr.write("latency child: a local queue was created although none was configured\n");
    process.exit(2);
  });

  const runner = await run({
    connectionString: a.url,
    schema: a.schema,
    logger,
    events,
    concurrency: a.concurrency,
    maxPoolSize: a.concurrency + 1, // every worker plus the LISTEN connection
    noHandleSignals: true,
    parsedCronItems: [],
    // pollInterval, localQueue, completeJobBatchDelay, failJobBatchDelay: graphile's defaults
    // (2000 ms, off, -1 = off, -1 = off): each idle worker is nudged by the `jobs:insert`
    // NOTIFY and fetches the job itself, the lowest-latency path graphile has.
    taskList: {
      bench: async (payload) => {
        const nowUs = (performance.timeOrigin + performance.now()) * 1000;
        process.stdout.write(`${payload.i} ${(nowUs - payload.sent_us).toFixed(1)}\n`);
      },
    },
  });
  started = true;
  maybeReady();

  let stopping = false;
  const stop = async (code) => {
    if (stopping) return;
    stopping = true;
    try {
      await runner.stop();
    } catch (e) {
      process.stderr.write(`latency child: stopping the worker failed: ${e && e.message ? e.message : e}\n`);
      code = code || 1;
    }
    process.exit(code);
  };
  runner.promise.then(
    () => stop(stopping ? 0 : 1),
    (e) => {
      process.stderr.write(`latency child: the worker failed: ${e && e.stack ? e.stack : e}\n`);
      stop(1);
    },
  );
  process.stdin.on("end", () => stop(0));
  process.stdin.on("close", () => stop(0));
  process.stdin.resume();
}

main().catch((e) => {
  process.stderr.write(`latency child: ${e && e.stack ? e.stack : e}\n`);
  process.exit(1);
});
