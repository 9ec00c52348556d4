//! The migration state of cairn's set and of an application's set.

use cairn::migrate::{Classification, MigrationSet, Migrations};
use cairn::DatabaseUrl;

use super::check::{one, Check};
use crate::open::IfMissing;

/// The set's stamp, lineage and classification, read without the lock. Returns the check and
/// whether this build serves the store as it is (at head or ahead: opening writes nothing).
/// `served`: a running server's store's own migration state (its pool's connections), used
/// instead of connecting to `target` again.
pub(super) async fn migrations(
    target: &DatabaseUrl,
    served: Option<&Migrations>,
    set: MigrationSet,
) -> (Check, bool) {
    let set = &set;
    let name = format!("migrations:{}", set.name());
    let m = match served {
        Some(m) => m.clone(),
        None => match crate::open::migrations(target, IfMissing::Refuse) {
            Ok(m) => m,
            Err(e) => return (Check::problem(name, one(&e.to_string()), None), false),
        },
    };
    let state = match m.state(set.name()).await {
        Ok(s) => s,
        Err(e) => {
            return (
                Check::problem(name, one(&e.report().to_string()), None),
                false,
            )
        }
    };
    // From the store: escaped, so that it cannot forge report lines.
    let stamp =
        cairn::migrate::escape_control(state.stamp.as_deref().unwrap_or("(none)")).into_owned();
    let lineage = state.lineage.as_ref().map_or(0, Vec::len);
    let cmd = |c: &str| match set.name() {
        cairn::migrate::CAIRN_SET => format!("cairn migrate {c}"),
        other => format!("cairn migrate {c} --set {other} --source DIR"),
    };
    let base = format!("stamp {stamp}, lineage of {lineage} revision(s)");
    match m.classify(set, &state) {
        Classification::AtHead {
            repair_lineage: false,
        } => (Check::ok(name, format!("{base}: at head")), true),
        Classification::AtHead {
            repair_lineage: true,
        } => (
            Check::problem(
                name,
                format!("{base}: at head, lineage missing or another history's"),
                Some(&cmd("repair")),
            ),
            true,
        ),
        // The verdict `cairn migrate up` (and every open) gives: a store ahead that carries a
        // contract revision this build lacks is refused, not served.
        Classification::Ahead { .. } => match m.check_contracts_known(set).await {
            Ok(()) => (
                Check::ok(
                    name,
                    format!("{base}: ahead (a newer build's store; served as is)"),
                ),
                true,
            ),
            Err(e) if e.is_refusal() => (
                Check::problem(
                    name,
                    format!("{base}: refused ({})", one(&e.report().to_string())),
                    None,
                ),
                false,
            ),
            Err(e) => (
                Check::problem(name, one(&e.report().to_string()), None),
                false,
            ),
        },
        // Behind by contract revisions only: the state a rolling deploy leaves while older
        // builds are live (a service's open defers them, and applies them once none is; a
        // one-shot command serves the store as it is meanwhile). Not a problem; the doctor
        // still does not open the store (a service's open could apply them).
        Classification::Upgrade { pending, .. }
            if !pending.is_empty() && pending.iter().all(|r| set.is_contract(r)) =>
        {
            (
                Check::warning(
                    name,
                    format!(
                        "{base}: contract revision(s) pending: {} (a service's next open or \
                         `cairn migrate up` applies them once no live build in the fleet \
                         registry lacks them)",
                        pending.join(" ")
                    ),
                    &cmd("fleet"),
                ),
                false,
            )
        }
        Classification::Upgrade { pending, .. } => (
            Check::problem(
                name,
                format!("{base}: behind, pending {}", pending.join(" ")),
                Some(&cmd("up")),
            ),
            false,
        ),
        Classification::Refused(refusal) => (
            Check::problem(
                name,
                format!(
                    "{base}: refused ({}); open it with a build whose history holds the \
                     store's revision",
                    one(&refusal.to_string())
                ),
                None,
            ),
            false,
        ),
    }
}
