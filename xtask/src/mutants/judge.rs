//! A scope's verdict: its tally and score, its survivors matched with the listed equivalents,
//! judged against the floor, and rendered as a table row.

use std::fmt::Write as _;

use super::outcomes::{Fate, Outcomes};
use super::scopes::{split_name, Equivalent, Scope};

/// The counts of one scope.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Tally {
    pub(super) mutants: usize,
    pub(super) caught: usize,
    pub(super) missed: usize,
    pub(super) timeout: usize,
    pub(super) unviable: usize,
}

impl Tally {
    pub(super) fn of(outcomes: &Outcomes) -> Self {
        let mut t = Tally {
            mutants: outcomes.mutants.len(),
            ..Tally::default()
        };
        for (_, fate) in &outcomes.mutants {
            match fate {
                Fate::Caught => t.caught += 1,
                Fate::Missed => t.missed += 1,
                Fate::Timeout => t.timeout += 1,
                Fate::Unviable => t.unviable += 1,
            }
        }
        t
    }

    pub(super) fn viable(&self) -> usize {
        self.mutants - self.unviable
    }

    /// Percent of viable mutants detected (caught or timed out); 100 with none viable.
    pub(super) fn score(&self) -> f64 {
        match self.viable() {
            0 => 100.0,
            v => 100.0 * (self.caught + self.timeout) as f64 / v as f64,
        }
    }
}

/// A scope's judgement.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Verdict {
    /// At or above the floor.
    Pass,
    /// Under the floor, but every survivor is a listed equivalent.
    PassEquivalent,
    /// Under the floor with survivors nobody explained.
    Fail { unexplained: usize },
    /// The unmutated tree failed its tests: the run means nothing.
    BaselineFailed,
    /// cargo-mutants did not finish (interrupted, or still running under `--report-only`).
    Incomplete,
}

/// A survivor and, when it is listed, why it cannot be killed.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Survivor<'a> {
    pub(super) name: &'a str,
    pub(super) equivalent: Option<&'a str>,
}

/// The survivors of `outcomes`, each with its equivalence reason when listed.
///
/// An entry names its survivor exactly (file, line, column and description). When the line
/// moved, an entry still matches on file and description, but only if neither the survivors
/// nor the entries hold that description twice in the file: one entry never explains two
/// mutants.
pub(super) fn survivors<'a>(
    outcomes: &'a Outcomes,
    equivalents: &'a [Equivalent],
) -> Vec<Survivor<'a>> {
    let missed: Vec<&'a str> = outcomes
        .mutants
        .iter()
        .filter(|(_, fate)| *fate == Fate::Missed)
        .map(|(name, _)| name.as_str())
        .collect();
    missed
        .iter()
        .map(|&name| {
            let key = split_name(name);
            let same_key = |n: &str| key.is_some() && split_name(n) == key;
            let exact = equivalents.iter().find(|e| e.mutant == name);
            let moved = || {
                let mut entries = equivalents.iter().filter(|e| same_key(&e.mutant));
                let entry = entries.next()?;
                let alone =
                    entries.next().is_none() && missed.iter().filter(|n| same_key(n)).count() == 1;
                alone.then_some(entry)
            };
            Survivor {
                name,
                equivalent: exact.or_else(moved).map(|e| e.reason.as_str()),
            }
        })
        .collect()
}

pub(super) fn verdict(floor: f64, outcomes: &Outcomes, survivors: &[Survivor<'_>]) -> Verdict {
    if outcomes.baseline_ok == Some(false) {
        return Verdict::BaselineFailed;
    }
    if !outcomes.complete {
        return Verdict::Incomplete;
    }
    if Tally::of(outcomes).score() >= floor {
        return Verdict::Pass;
    }
    match survivors.iter().filter(|s| s.equivalent.is_none()).count() {
        0 => Verdict::PassEquivalent,
        unexplained => Verdict::Fail { unexplained },
    }
}

/// One scope's table row and survivors, as printed.
pub(super) fn render(
    scope: &Scope,
    outcomes: &Outcomes,
    equivalents: &[Equivalent],
) -> (String, Verdict) {
    let t = Tally::of(outcomes);
    let surv = survivors(outcomes, equivalents);
    let v = verdict(scope.floor, outcomes, &surv);
    let word = match &v {
        Verdict::Pass => "pass".to_owned(),
        Verdict::PassEquivalent => "pass (every survivor equivalent)".to_owned(),
        Verdict::Fail { unexplained } => format!("FAIL ({unexplained} unexplained)"),
        Verdict::BaselineFailed => "FAIL (baseline tests failed)".to_owned(),
        Verdict::Incomplete => "FAIL (cargo-mutants did not finish)".to_owned(),
    };
    let mut s = format!(
        "| {} | {} | {} | {} | {} | {} | {:.1} % | {} % | {} |\n",
        scope.name,
        t.mutants,
        t.caught,
        t.missed,
        t.timeout,
        t.unviable,
        t.score(),
        scope.floor,
        word
    );
    for sv in &surv {
        match sv.equivalent {
            Some(reason) => {
                let _ = writeln!(s, "    survivor (equivalent): {} — {reason}", sv.name);
            }
            None => {
                let _ = writeln!(s, "    survivor: {}", sv.name);
            }
        }
    }
    (s, v)
}

pub(super) const TABLE_HEAD: &str = "| scope | mutants | caught | missed | timeout | unviable | score | floor | verdict |\n|---|---|---|---|---|---|---|---|---|\n";
