//! Row 6 of `bench spool`: bulk enqueue. `--bulk` distinct keys (10,000) in batches of
//! `--bulk-batch` (1,000), each batch one call of the system's bulk API, awaited before the
//! next, on a fresh store: cairn's `Spool::enqueue_many` (one transaction, one durable commit
//! per call); riverqueue's `Client::insert_many` and apalis' `TaskSink::push_all` (in
//! `bench/peers`); graphile-worker's `WorkerUtils.addJobs` (Postgres only, a Node script in
//! `bench/peers/graphile/`). Every system deduplicates by key as in row 1.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use cairn::spool::EnqueueItem;

use super::super::chart::Bar;
use super::super::cpu::{CpuMeter, CpuUse};
use super::super::setup::{store_err, workspace_root, Backend};
use super::args::SpoolArgs;
use super::fresh::{key, queue, Fresh};
use super::peers::{drain_flags, parse_systems};
use super::rates::{fmt_rate, median, rate};
use super::runs::{Runs, System};

/// The target: cairn's bulk rate at least this many times the best peer's, on each engine.
const TARGET: f64 = 1.5;

/// One run of cairn's row 6 on a fresh store, added to `runs`.
pub(super) async fn measure_cairn(
    backend: Backend,
    pg_url: Option<&str>,
    args: &SpoolArgs,
    runs: &mut Runs,
) -> Result<(), String> {
    let q = queue();
    let fresh = Fresh::open(backend, pg_url).await?;
    let batch = usize::try_from(args.bulk_batch).map_err(|e| e.to_string())?;
    // The items are built before the clock starts, as the peers build theirs.
    let all: Vec<EnqueueItem> = (0..args.bulk)
        .map(|i| EnqueueItem::new(key(i), b"{}".to_vec()))
        .collect();
    let batches: Vec<Vec<EnqueueItem>> = all.chunks(batch).map(<[_]>::to_vec).collect();
    let t = Instant::now();
    let cpu = CpuMeter::start();
    let mut created = 0;
    for items in batches {
        let done = fresh
            .spool
            .enqueue_many(&q, items)
            .await
            .map_err(store_err)?;
        created += done.iter().filter(|e| e.created).count();
    }
    runs.bulk.push(rate(args.bulk, t.elapsed()));
    runs.cpu[4].push(cpu.stop(args.bulk));
    fresh.close().await?;
    if created as u64 != args.bulk {
        return Err(format!(
            "enqueue_many created {created} of {} runs",
            args.bulk
        ));
    }
    Ok(())
}

/// The graphile-worker peer's folder.
fn graphile_dir() -> PathBuf {
    workspace_root()
        .join("bench")
        .join("peers")
        .join("graphile")
}

/// Makes the graphile-worker peer runnable: `node` on the PATH, then `npm ci` in its folder
/// unless its `node_modules` already holds the locked install. `Err` is the printed reason the
/// peer is not measured.
pub(super) fn prepare_graphile() -> Result<PathBuf, String> {
    let dir = graphile_dir();
    match Command::new("node")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
    {
        Ok(s) if s.success() => {}
        Ok(s) => return Err(format!("skipped: `node --version` exited with {s}")),
        Err(e) => return Err(format!("skipped: node is not on the PATH ({e})")),
    }
    if !installed(&dir) {
        eprintln!("installing the graphile-worker peer (npm ci in bench/peers/graphile)…");
        let out = Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .map_err(|e| format!("cannot run npm: {e}"))?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let tail: Vec<&str> = err.lines().rev().take(8).collect();
            return Err(format!(
                "npm ci failed in {}: {}",
                dir.display(),
                tail.into_iter().rev().collect::<Vec<_>>().join(" / ")
            ));
        }
    }
    Ok(dir)
}

/// Whether `dir/node_modules` holds what `package-lock.json` locks: npm writes its own copy of
/// the lock there (`node_modules/.package-lock.json`) after an install.
fn installed(dir: &Path) -> bool {
    let modified = |p: PathBuf| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    match (
        modified(dir.join("package-lock.json")),
        modified(dir.join("node_modules").join(".package-lock.json")),
    ) {
        (Some(lock), Some(hidden)) => {
            hidden >= lock
                && dir
                    .join("node_modules")
                    .join("graphile-worker")
                    .join("package.json")
                    .exists()
        }
        _ => false,
    }
}

/// One run of the graphile-worker peer (Postgres).
pub(super) fn run_graphile(
    dir: &Result<PathBuf, String>,
    pg_url: Option<&str>,
    args: &SpoolArgs,
) -> System {
    let failed = |why: String| System {
        name: "graphile-worker".into(),
        settings: String::new(),
        runs: Runs::default(),
        failed: Some(why),
    };
    let dir = match dir {
        Ok(dir) => dir,
        Err(e) => return failed(e.clone()),
    };
    let Some(url) = pg_url else {
        return failed("no Postgres server".into());
    };
    let rows: Vec<String> = [3, 6, 8, 9]
        .into_iter()
        .filter(|&n| args.row(n) || (n == 8 && args.drains()))
        .map(|n: u32| n.to_string())
        .collect();
    let out = Command::new("node")
        .arg(dir.join("bench.js"))
        .args(["--url", url])
        .args(["--jobs", &args.bulk.to_string()])
        .args(["--batch", &args.bulk_batch.to_string()])
        .args(["--claims", &args.claims.to_string()])
        .args(["--workers", &args.workers.to_string()])
        .args(drain_flags(args))
        .args(["--rows", &rows.join(",")])
        .args(["--runs", "1"])
        .current_dir(dir)
        .stderr(Stdio::inherit())
        .output();
    let out = match out {
        Ok(out) => out,
        Err(e) => return failed(format!("cannot run node: {e}")),
    };
    if !out.status.success() {
        return failed(format!("the graphile peer exited with {}", out.status));
    }
    match serde_json::from_slice::<serde_json::Value>(&out.stdout) {
        Ok(doc) => parse_systems(&doc)
            .into_iter()
            .next()
            .unwrap_or_else(|| failed("the graphile peer printed no system".into())),
        Err(e) => failed(format!("the graphile peer printed no JSON: {e}")),
    }
}

/// The peers of row 6 on `backend`, in the table's order.
fn peers_of(backend: Backend) -> &'static [&'static str] {
    match backend {
        Backend::Sqlite => &["riverqueue", "apalis"],
        Backend::Postgres => &["riverqueue", "apalis", "graphile_worker", "graphile-worker"],
    }
}

pub(super) fn print_table(backend: Backend, args: &SpoolArgs, systems: &[System]) {
    let cairn = &systems[0];
    let peers: Vec<&System> = peers_of(backend)
        .iter()
        .filter_map(|n| systems.iter().find(|s| s.name == *n))
        .collect();
    println!(
        "\n### {} — 6. bulk enqueue, {} distinct keys in batches of {} (jobs/s, median of {} runs)\n",
        backend.name(),
        super::super::figures::thousands(args.bulk),
        super::super::figures::thousands(args.bulk_batch),
        args.runs
    );
    let mut header = "| row | cairn |".to_owned();
    let mut rule = "|---|---:|".to_owned();
    for p in &peers {
        header.push_str(&format!(" {} |", p.name));
        rule.push_str("---:|");
    }
    header.push_str(&format!(" cairn ÷ best peer | target ≥{TARGET}× |"));
    rule.push_str("---:|---|");
    println!("{header}\n{rule}");
    let c = median(&cairn.runs.bulk);
    let mut line = format!("| 6. bulk enqueue | {} |", fmt_rate(c));
    let mut best: Option<(f64, &str)> = None;
    for p in &peers {
        let m = median(&p.runs.bulk);
        line.push_str(&format!(" {} |", fmt_rate(m)));
        if let Some(m) = m {
            if best.is_none_or(|(b, _)| m > b) {
                best = Some((m, &p.name));
            }
        }
    }
    let (ratio, verdict) = match (c, best) {
        (Some(c), Some((b, name))) => (
            format!("{:.2}× ({name})", c / b),
            if c / b >= TARGET { "met" } else { "not met" }.to_owned(),
        ),
        _ => ("n/a".into(), "n/a".into()),
    };
    println!("{line} {ratio} | {verdict} |");
    if let Some(cpu) = CpuUse::median(&cairn.runs.cpu[4]) {
        let writes = match backend {
            Backend::Sqlite => format!(" · {}", cpu.describe_writes()),
            Backend::Postgres => String::new(),
        };
        println!(
            "\nCPU while cairn's row 6 ran (medians, per job): {}{writes}",
            cpu.describe("cairn")
        );
    }
    println!("\nRow 6 settings:");
    println!(
        "- cairn: Spool::enqueue_many of {} items per call (one transaction, one durable commit; \
         keys deduplicated)",
        args.bulk_batch
    );
    for p in peers {
        match &p.failed {
            None => println!("- {}: {}", p.name, p.settings),
            Some(why) => println!("- {}: NOT MEASURED — {why}", p.name),
        }
    }
}

pub(super) fn chart_rows(backend: Backend, systems: &[System]) -> Vec<(String, Vec<Bar>)> {
    let bars = systems
        .iter()
        .filter(|s| s.name == "cairn" || peers_of(backend).contains(&s.name.as_str()))
        .filter_map(|s| {
            median(&s.runs.bulk).map(|v| Bar {
                label: s.name.clone(),
                value: v,
            })
        })
        .collect();
    vec![(format!("{}: 6. bulk enqueue", backend.name()), bars)]
}
