//! `cairn migrate …`: the operator's view of the lineage-aware runner.

use std::io::Write;

use cairn_migrate::{cairn_set, classify, Classification, MigrateError, Opened, Runner};

use crate::cli::MigrateAction;
use crate::error::CliError;
use crate::open::{IfMissing, Target};

/// Runs one `cairn migrate` action against `target`.
pub(crate) async fn run(
    target: Target,
    action: MigrateAction,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let runner = Runner::new(cairn_set());
    let set = runner.set();
    let head = &set.head().id;
    match action {
        MigrateAction::History => {
            let state = match target.migrator(IfMissing::Refuse) {
                Ok(m) => Some(m.read_state(set.name()).await.map_err(store)?),
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
                    rev.checksum().to_hex(),
                    rev.description
                )?;
            }
        }
        MigrateAction::Status => {
            let m = target.migrator(IfMissing::Refuse)?;
            let state = m.read_state(set.name()).await.map_err(store)?;
            let class = classify(set, &state);
            if let Classification::Refused(refusal) = class {
                return Err(store(MigrateError::Refused {
                    set: set.name().into(),
                    refusal,
                }));
            }
            writeln!(out, "set: {}", set.name())?;
            writeln!(out, "stamp: {}", state.stamp.as_deref().unwrap_or("(none)"))?;
            match &state.lineage {
                None => writeln!(out, "lineage: (none)")?,
                Some(l) => {
                    let entries: Vec<String> = l
                        .iter()
                        .map(|e| format!("{}@{}", e.revision, &e.checksum.to_hex()[..12]))
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
        }
        MigrateAction::Up => {
            let m = target.migrator(IfMissing::Create)?;
            match runner.open(m.as_ref()).await.map_err(store)? {
                Opened::AtHead => writeln!(out, "at head {head}; nothing to do")?,
                Opened::LineageRepaired => writeln!(out, "at head {head}; lineage recorded")?,
                Opened::Ahead { stamp } => writeln!(
                    out,
                    "store is ahead at {stamp} (its lineage holds {head}); nothing to do"
                )?,
                Opened::Upgraded { from, applied } => writeln!(
                    out,
                    "upgraded {} -> {head}: applied {}",
                    from.as_deref().unwrap_or("(empty)"),
                    applied.join(" ")
                )?,
            }
        }
        MigrateAction::Repair => {
            let m = target.migrator(IfMissing::Refuse)?;
            let state = m.read_state(set.name()).await.map_err(store)?;
            match classify(set, &state) {
                Classification::AtHead { repair_lineage: true } => {
                    let opened = runner.open(m.as_ref()).await.map_err(store)?;
                    match opened {
                        Opened::LineageRepaired => writeln!(out, "lineage recorded at {head}")?,
                        other => writeln!(out, "nothing to repair ({other:?})")?,
                    }
                }
                Classification::AtHead { repair_lineage: false } => writeln!(out, "lineage is already this build's; nothing to repair")?,
                Classification::Ahead { stamp } => writeln!(out, "store is ahead at {stamp}; its lineage is the newer build's, left as is")?,
                Classification::Upgrade { .. } => {
                    return Err(CliError::Config("the store is behind this build; run `cairn migrate up` (it records the lineage)".into()))
                }
                Classification::Refused(refusal) => {
                    return Err(store(MigrateError::Refused { set: set.name().into(), refusal }))
                }
            }
        }
    }
    Ok(())
}

fn store(e: MigrateError) -> CliError {
    CliError::Store(e.into())
}
