//! `cairn migrate …`: the operator's view of the lineage-aware runner.

use std::io::Write;

use cairn::migrate::{
    cairn_set, Classification, Dialect, FleetEntry, MigrateError, MigrationSet, Opened, CAIRN_SET,
};
use cairn::{Clock, DatabaseUrl, Scheme, SystemClock};

use super::args::{MigrateAction, SetArgs};
use crate::error::CliError;
use crate::open::{migrations, refuse_empty_location, IfMissing};

/// The set a command acts on: cairn's own, or the application's set loaded from `--source`.
fn load_set(args: SetArgs) -> Result<MigrationSet, CliError> {
    match (args.set, args.source) {
        (Some(name), Some(dir)) if name != CAIRN_SET => {
            MigrationSet::from_dir(name, &dir).map_err(CliError::from)
        }
        (Some(_), Some(_)) => Err(CliError::Config(format!(
            "`{CAIRN_SET}` is cairn's own set, which ships with this build; drop --set and --source to act on it"
        ))),
        // clap makes `--set` and `--source` require each other.
        _ => Ok(cairn_set()),
    }
}

/// Runs one `cairn migrate` action against `target`.
pub(crate) async fn run(
    target: &DatabaseUrl,
    set: SetArgs,
    action: MigrateAction,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let set = &load_set(set)?;
    let head = &set.head().id;
    // The dialect whose checksums the store's lineage holds (per-dialect checksums).
    let dialect = match target.scheme() {
        Scheme::Postgres => Dialect::Postgres,
        _ => Dialect::Sqlite,
    };
    // A single-engine set (no files for the store's engine) refuses the store in one line
    // naming the missing dialect; `check` picks its engines itself, `fleet` and `down` do not
    // use the set's SQL.
    if !matches!(
        action,
        MigrateAction::Check { .. } | MigrateAction::Fleet { .. } | MigrateAction::Down { .. }
    ) {
        set.require(dialect).map_err(CliError::from)?;
    }
    match action {
        MigrateAction::History => {
            let state = match migrations(target, IfMissing::Refuse) {
                Ok(m) => Some(m.state(set.name()).await.map_err(CliError::from)?),
                Err(CliError::NoStore(_)) => None,
                Err(e) => return Err(e),
            };
            let applied = state
                .as_ref()
                .and_then(|s| s.stamp.as_deref())
                .and_then(|stamp| set.position(stamp));
            for (i, rev) in set.revisions().iter().enumerate() {
                let mark = if applied.is_some_and(|a| i <= a) {
                    "applied"
                } else {
                    "pending"
                };
                writeln!(
                    out,
                    "{} {} {} {mark} {}",
                    rev.id,
                    rev.parent.as_deref().unwrap_or("-"),
                    set.checksum(i, dialect).to_hex(),
                    rev.description
                )?;
            }
        }
        MigrateAction::Status => {
            let m = migrations(target, IfMissing::Refuse)?;
            let state = m.state(set.name()).await.map_err(CliError::from)?;
            // A missing Postgres schema reads as an empty store: it gets the verdict a missing
            // SQLite file gets (issue 25).
            if state.stamp.is_none() && state.lineage.is_none() {
                refuse_empty_location(target).await?;
            }
            let class = m.classify(set, &state);
            if let Classification::Refused(refusal) = class {
                return Err(CliError::from(MigrateError::Refused {
                    set: set.name().into(),
                    refusal,
                }));
            }
            // The verdict `migrate up` gives: a store ahead that carries a contract revision
            // this build lacks is refused, not "ahead".
            if let Classification::Ahead { .. } = class {
                m.check_contracts_known(set).await.map_err(CliError::from)?;
            }
            writeln!(out, "set: {}", set.name())?;
            writeln!(
                out,
                "stamp: {}",
                esc(state.stamp.as_deref().unwrap_or("(none)"))
            )?;
            match &state.lineage {
                None => writeln!(out, "lineage: (none)")?,
                Some(l) => {
                    let entries: Vec<String> = l
                        .iter()
                        .map(|e| format!("{}@{}", esc(&e.revision), &e.checksum.to_hex()[..12]))
                        .collect();
                    writeln!(out, "lineage: {}", entries.join(" "))?;
                }
            }
            writeln!(out, "head: {head}")?;
            let (label, pending) = match &class {
                Classification::AtHead {
                    repair_lineage: false,
                } => ("at head", Vec::new()),
                Classification::AtHead {
                    repair_lineage: true,
                } => (
                    "at head (lineage repair due: cairn migrate repair)",
                    Vec::new(),
                ),
                Classification::Upgrade { pending, .. } => ("upgrade", pending.clone()),
                Classification::Ahead { .. } => ("ahead", Vec::new()),
                Classification::Refused(_) => unreachable!("handled above"),
            };
            writeln!(out, "state: {label}")?;
            writeln!(
                out,
                "pending: {}",
                if pending.is_empty() {
                    "-".to_string()
                } else {
                    pending.join(" ")
                }
            )?;
            // What an interrupted concurrent index build of a no-transaction revision left
            // (Postgres; none on SQLite), with the repair.
            let invalid = cairn::migrate::diagnostics(target)
                .map_err(CliError::from)?
                .invalid_indexes()
                .await
                .map_err(CliError::from)?;
            for index in invalid {
                writeln!(
                    out,
                    "invalid index: {} on {}: {}",
                    esc(&index.name),
                    esc(&index.table),
                    esc(&index.repair())
                )?;
            }
        }
        MigrateAction::Up { dry_run: true, .. } => {
            // Nothing is created or written: a missing store is refused as `status` refuses it.
            let m = migrations(target, IfMissing::Refuse)?;
            super::migrate_online::dry_run(target, &m, set, out).await?;
        }
        MigrateAction::Baseline { at, postgres_url } => {
            let m = migrations(target, IfMissing::Refuse)?;
            super::migrate_online::baseline(target, &m, set, &at, postgres_url, out).await?;
        }
        MigrateAction::Up {
            force,
            lock_timeout_ms,
            tries,
            ..
        } => {
            let m = migrations(target, IfMissing::Create)?;
            let opts = cairn::migrate::UpgradeOptions::default()
                .force_contract(force)
                .revision_lock_timeout(std::time::Duration::from_millis(lock_timeout_ms))
                .revision_tries(tries);
            let report = m.upgrade_with(set, &opts).await.map_err(CliError::from)?;
            if report.tries > 1 {
                writeln!(
                    out,
                    "tries: {} (a statement gave up waiting for a table lock {} time(s); {} ms spent waiting and backing off)",
                    report.tries,
                    report.tries - 1,
                    report.lock_waits.as_millis()
                )?;
            }
            for c in &report.contracts {
                if c.forced {
                    let past: Vec<String> = c.blockers.iter().map(ToString::to_string).collect();
                    // Logged on stderr too, so a forced contract shows in the operator's logs;
                    // the store records it in cairn_contract.
                    eprintln!(
                        "cairn migrate up: forced contract revision {} past live builds that lack it: {}",
                        c.revision,
                        past.join("; ")
                    );
                    writeln!(
                        out,
                        "forced contract revision {} past: {}",
                        c.revision,
                        past.join("; ")
                    )?;
                } else {
                    writeln!(
                        out,
                        "contract revision {}: no live build lacks it",
                        c.revision
                    )?;
                }
            }
            match report.opened {
                Opened::AtHead => writeln!(out, "at head {head}; nothing to do")?,
                Opened::LineageRepaired => writeln!(out, "at head {head}; lineage recorded")?,
                Opened::Ahead { stamp } => writeln!(
                    out,
                    "store is ahead at {} (its lineage holds {head}); nothing to do",
                    esc(&stamp)
                )?,
                Opened::Upgraded { from, applied } => writeln!(
                    out,
                    "upgraded {} -> {head}: applied {}",
                    esc(from.as_deref().unwrap_or("(empty)")),
                    applied.join(" ")
                )?,
            }
        }
        MigrateAction::Repair => {
            let m = migrations(target, IfMissing::Refuse)?;
            let repaired = m.repair(set).await.map_err(CliError::from)?;
            if let Some(stamp) = &repaired.stamp_restored {
                writeln!(out, "stamp restored at {} from the lineage", esc(stamp))?;
            }
            if repaired.lineage_table_restored {
                writeln!(out, "lineage table recreated")?;
            }
            if repaired.lineage_recorded {
                writeln!(out, "lineage recorded at {head}")?;
            }
            match repaired.now {
                Classification::Upgrade { .. } if repaired.changed() => writeln!(out, "the store is behind this build; run `cairn migrate up` next")?,
                Classification::Upgrade { .. } => {
                    return Err(CliError::Config("the store is behind this build; run `cairn migrate up` (it records the lineage)".into()))
                }
                Classification::Ahead { stamp } if !repaired.changed() => writeln!(out, "store is ahead at {}; its lineage is the newer build's, left as is", esc(&stamp))?,
                _ if !repaired.changed() => writeln!(out, "lineage is already this build's; nothing to repair")?,
                _ => {}
            }
        }
        MigrateAction::Fleet { json, expiry_secs } => {
            let m = migrations(target, IfMissing::Refuse)?;
            let now = SystemClock.now();
            let live = m
                .fleet(now, std::time::Duration::from_secs(expiry_secs))
                .await?;
            print_fleet(&live, now, json, out)?;
        }
        MigrateAction::Down { to } => {
            let m = migrations(target, IfMissing::Refuse)?;
            let done = m.down(set, &to).await.map_err(|e| match e {
                // Its store error would say "the upgrade was rolled back".
                e @ MigrateError::DownFailed { .. } => CliError::Down(e),
                e => CliError::from(e),
            })?;
            if done.reverted.is_empty() {
                writeln!(out, "already at {to}; nothing to do")?;
            } else {
                writeln!(
                    out,
                    "rolled back {} -> {to}: undid {}",
                    esc(&done.from),
                    esc(&done.reverted.join(" "))
                )?;
            }
        }
        MigrateAction::Check {
            backend,
            postgres_url,
            with_revision,
            json,
        } => {
            super::migrate_check::check(
                target,
                set,
                backend,
                postgres_url,
                with_revision.as_deref(),
                json,
                out,
            )
            .await?;
        }
    }
    Ok(())
}

/// Prints the live builds: one line each (`BUILD host=… pid=… last_seen=…s ago SET@REV …`),
/// or a JSON document `{"builds": [{instance, build, host, pid, started_at_us, last_seen_us,
/// heads: {set: revision}}]}`.
fn print_fleet(
    live: &[FleetEntry],
    now: cairn::Timestamp,
    json: bool,
    out: &mut impl Write,
) -> Result<(), CliError> {
    if json {
        let builds: Vec<serde_json::Value> = live
            .iter()
            .map(|e| {
                serde_json::json!({
                    "instance": e.instance,
                    "build": e.build,
                    "host": e.host,
                    "pid": e.pid,
                    "started_at_us": e.started_at.as_unix_micros(),
                    "last_seen_us": e.last_seen.as_unix_micros(),
                    "heads": e.heads,
                })
            })
            .collect();
        writeln!(out, "{}", serde_json::json!({ "builds": builds }))?;
        return Ok(());
    }
    if live.is_empty() {
        writeln!(out, "no live builds")?;
    }
    for e in live {
        // Every field comes from the store, where any writer can put anything: escaped, so
        // that an escape sequence or a newline cannot forge lines.
        let heads: Vec<String> = e
            .heads
            .iter()
            .map(|(s, r)| format!("{}@{}", esc(s), esc(r)))
            .collect();
        writeln!(
            out,
            "{} host={} pid={} last_seen={}s ago {}",
            esc(&e.build),
            esc(&e.host),
            e.pid,
            now.duration_since(e.last_seen).as_secs(),
            heads.join(" ")
        )?;
    }
    Ok(())
}

/// Text read from the store, escaped for one line of output.
fn esc(text: &str) -> std::borrow::Cow<'_, str> {
    cairn::migrate::escape_control(text)
}
