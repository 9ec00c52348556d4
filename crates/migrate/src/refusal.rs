//! Why a store was refused: the refusals classification returns and the runner reports, with
//! the one line each prints.

use cairn_core::escape_control;

use crate::identity::CAIRN_SET;

/// Why a store was refused.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Refusal {
    /// The store is at a revision this build does not know and the lineage does not show it
    /// descends from this build's head (a diverged branch, no lineage, or an inconsistent one).
    UnknownStamp {
        /// The store's stamp.
        stamp: String,
        /// This build's head.
        head: String,
        /// What the lineage showed.
        lineage: LineageVerdict,
    },
    /// The bookkeeping contradicts itself; `cairn migrate repair` restores it.
    Inconsistent {
        /// The migration set (the repair command names it).
        set: String,
        /// What is wrong.
        problem: Inconsistency,
    },
    /// A revision id this build knows was recorded with different content.
    ChecksumMismatch {
        /// The revision id.
        revision: String,
        /// The store's stamp.
        stamp: String,
        /// This build's head.
        head: String,
    },
}

/// How a store's bookkeeping contradicts itself (it was edited by hand). Neither state can be
/// left by a runner, and neither may be read as something a runner left: a lineage without a
/// stamp is not a new store (replaying every revision would overwrite the newer lineage and
/// stamp an older head).
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub enum Inconsistency {
    /// The set's stamp row is missing while its lineage is recorded.
    StampMissing {
        /// The lineage's last revision: the stamp the build that recorded it wrote.
        lineage_last: String,
    },
    /// The stamp table is present and the lineage table is missing.
    LineageTableMissing,
}

/// What the lineage showed for a refused unknown stamp.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum LineageVerdict {
    /// No lineage is recorded.
    Missing,
    /// The lineage does not hold the stamp.
    LacksStamp,
    /// The lineage does not hold this build's head.
    LacksHead,
    /// The lineage holds both, but its history up to this head is not this build's.
    Inconsistent,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The stamp and the lineage's revisions come from the store: escaped, so that they
        // cannot forge output lines.
        match self {
            Refusal::UnknownStamp { stamp, head, lineage } => {
                let stamp = escape_control(stamp);
                let why = match lineage {
                    LineageVerdict::Missing => "no lineage is recorded",
                    LineageVerdict::LacksStamp => "the recorded lineage does not hold that revision",
                    LineageVerdict::LacksHead => "the recorded lineage does not hold this build's head",
                    LineageVerdict::Inconsistent => "the recorded lineage disagrees with this build's history",
                };
                write!(
                    f,
                    "store is at revision {stamp}, unknown to this build (head {head}), and {why}: a diverged or unrelated history; use a build whose history contains the store's revision"
                )
            }
            Refusal::ChecksumMismatch { revision, stamp, head } => write!(
                f,
                "revision {revision} was applied with different content than this build's (store at {}, this build's head {head}); use a build whose history contains the store's revision",
                escape_control(stamp)
            ),
            Refusal::Inconsistent { set, problem } => {
                let command = repair_command(set);
                match problem {
                    Inconsistency::StampMissing { lineage_last } => write!(
                        f,
                        "the bookkeeping is inconsistent: the stamp row is missing while a lineage (last revision {}) is recorded; run `{command}` to restore the stamp from the lineage",
                        escape_control(lineage_last)
                    ),
                    Inconsistency::LineageTableMissing => write!(
                        f,
                        "the bookkeeping is inconsistent: the stamp table is present but the lineage table is missing; run `{command}` to recreate it"
                    ),
                }
            }
        }
    }
}

/// The operator command that repairs a set's bookkeeping.
fn repair_command(set: &str) -> String {
    if set == CAIRN_SET {
        "cairn migrate repair".to_owned()
    } else {
        format!("cairn migrate --set {set} --source DIR repair")
    }
}
