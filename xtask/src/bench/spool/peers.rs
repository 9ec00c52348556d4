//! The peers (riverqueue, apalis, graphile-worker's Rust-side rows): the `bench/peers`
//! project built and run, and the JSON it prints read into systems.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use super::super::setup::{workspace_root, Backend};
use super::args::SpoolArgs;
use super::drain;
use super::runs::{Runs, System};

/// Builds the peers project in release (its own target directory) and returns its binary.
pub(super) fn build_peers() -> Result<PathBuf, String> {
    let dir = workspace_root().join("bench").join("peers");
    let target = dir.join("target");
    eprintln!("building the peers (bench/peers, release)…");
    let out = crate::cargo::plain_cargo()
        .args(["build", "--release", "--locked", "--manifest-path"])
        .arg(dir.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", &target)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("cannot run cargo for the peers: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(15).collect();
        return Err(format!(
            "the peers project did not build: {}",
            tail.into_iter().rev().collect::<Vec<_>>().join(" / ")
        ));
    }
    Ok(target.join("release").join("cairn-bench-peers"))
}

/// Runs the peers on `backend`; a peer that cannot run is reported with its reason.
pub(super) fn run_peers(
    bin: &Result<PathBuf, String>,
    backend: Backend,
    pg_url: Option<&str>,
    args: &SpoolArgs,
) -> Vec<System> {
    let failed = |why: String| {
        PEERS
            .iter()
            .filter(|n| drain::peers_of(backend).contains(n))
            .map(|n| System {
                name: (*n).into(),
                settings: String::new(),
                runs: Runs::default(),
                failed: Some(why.clone()),
            })
            .collect()
    };
    let bin = match bin {
        Ok(bin) => bin,
        Err(e) => return failed(e.clone()),
    };
    let mut cmd = Command::new(bin);
    cmd.args(["--backend", backend.name()])
        .args(["--runs", "1"])
        .args(["--enqueue", &args.enqueue.to_string()])
        .args(["--duplicates", &args.duplicates.to_string()])
        .args(["--claims", &args.claims.to_string()])
        .args(["--workers", &args.workers.to_string()])
        .args(["--producers", &args.producers.to_string()])
        .args(["--bulk", &args.bulk.to_string()])
        .args(["--bulk-batch", &args.bulk_batch.to_string()])
        .args(drain_flags(args));
    let rows: Vec<String> = [1, 2, 3, 4, 6, 8, 9]
        .into_iter()
        .filter(|&n| args.row(n) || (n == 8 && args.drains()))
        .map(|n: u32| n.to_string())
        .collect();
    cmd.args(["--rows", &rows.join(",")]);
    if let Some(url) = pg_url {
        cmd.args(["--url", url]);
    }
    let out = match cmd.stderr(Stdio::inherit()).output() {
        Ok(out) => out,
        Err(e) => return failed(format!("cannot run the peers: {e}")),
    };
    if !out.status.success() {
        return failed(format!("the peers exited with {}", out.status));
    }
    let doc: serde_json::Value = match serde_json::from_slice(&out.stdout) {
        Ok(doc) => doc,
        Err(e) => return failed(format!("the peers printed no JSON: {e}")),
    };
    parse_systems(&doc)
}

/// The flags of rows 8 and 9, the same for every peer.
pub(super) fn drain_flags(args: &SpoolArgs) -> Vec<String> {
    let concurrency: Vec<String> = args.drain_concurrency.iter().map(u64::to_string).collect();
    vec![
        "--drain".into(),
        args.drain.to_string(),
        "--drain-concurrency".into(),
        concurrency.join(","),
        "--latency-rate".into(),
        args.latency_rate.to_string(),
        "--latency-samples".into(),
        args.latency_samples.to_string(),
    ]
}

/// The Rust peers of `bench/peers`, in the order of the tables.
pub(super) const PEERS: [&str; 3] = ["riverqueue", "apalis", "graphile_worker"];

/// The systems of one JSON document the peers printed (`bench/peers` or the graphile script).
pub(super) fn parse_systems(doc: &serde_json::Value) -> Vec<System> {
    let systems = doc["systems"].as_array().cloned().unwrap_or_default();
    systems
        .iter()
        .map(|s| {
            let nums = |field: &str| -> Vec<f64> {
                s["runs"]
                    .as_array()
                    .map(|rs| rs.iter().filter_map(|r| r[field].as_f64()).collect())
                    .unwrap_or_default()
            };
            let errors: Vec<String> = s["errors"]
                .as_array()
                .map(|es| {
                    es.iter()
                        .filter_map(|e| e.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            let runs = Runs {
                enqueue: nums("enqueue"),
                duplicate: nums("duplicate"),
                duplicate_returns: s["runs"][0]["duplicate_returns"]
                    .as_str()
                    .unwrap_or("")
                    .to_owned(),
                claim_complete: nums("claim_complete"),
                producers_1: nums("producers_1"),
                producers_n: nums("producers_n"),
                bulk: nums("bulk_enqueue"),
                drain: s["runs"]
                    .as_array()
                    .map(|rs| rs.iter().flat_map(drain::parse_drains).collect())
                    .unwrap_or_default(),
                latency: s["runs"]
                    .as_array()
                    .map(|rs| rs.iter().filter_map(drain::parse_latency).collect())
                    .unwrap_or_default(),
                cpu: Default::default(),
            };
            let failed = if runs.is_empty() {
                Some(
                    errors
                        .first()
                        .cloned()
                        .unwrap_or_else(|| "no run finished".into()),
                )
            } else {
                None
            };
            let mut settings = s["settings"].as_str().unwrap_or("").to_owned();
            if !errors.is_empty() && failed.is_none() {
                settings.push_str(&format!(" ({} run(s) failed: {})", errors.len(), errors[0]));
            }
            System {
                name: s["name"].as_str().unwrap_or("?").to_owned(),
                settings,
                runs,
                failed,
            }
        })
        .collect()
}
