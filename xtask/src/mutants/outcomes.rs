//! A scope's outcomes: cargo-mutants' `outcomes.json` read, an `--iterate` run merged into the
//! run before it, and the merged outcomes written back in the same shape.

use std::path::Path;

use serde_json::Value;

/// The merged outcomes of `--iterate` runs, beside a scope's `mutants.out`, in the shape of
/// cargo-mutants' `outcomes.json`.
pub(super) const MERGED_FILE: &str = "xtask-outcomes.json";

/// How one mutant came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Fate {
    Caught,
    Missed,
    Timeout,
    Unviable,
}

/// A scope's outcomes, read from cargo-mutants' `outcomes.json`.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Outcomes {
    /// Whether the unmutated baseline passed (`None` when it was skipped).
    pub(super) baseline_ok: Option<bool>,
    /// Whether cargo-mutants finished (an interrupted run has no end time).
    pub(super) complete: bool,
    pub(super) mutants: Vec<(String, Fate)>,
}

/// Reads cargo-mutants' `outcomes.json`.
pub(super) fn parse_outcomes(json: &str) -> Result<Outcomes, String> {
    let v: Value = serde_json::from_str(json).map_err(|e| format!("outcomes.json: {e}"))?;
    let list = v
        .get("outcomes")
        .and_then(Value::as_array)
        .ok_or("outcomes.json: no `outcomes` array")?;
    let mut out = Outcomes {
        complete: v.get("end_time").is_some_and(|t| !t.is_null()),
        ..Outcomes::default()
    };
    for o in list {
        let summary = o
            .get("summary")
            .and_then(Value::as_str)
            .ok_or("outcomes.json: an outcome without `summary`")?;
        let scenario = o
            .get("scenario")
            .ok_or("outcomes.json: an outcome without `scenario`")?;
        if scenario.as_str() == Some("Baseline") {
            out.baseline_ok = Some(summary == "Success");
            continue;
        }
        let name = scenario
            .get("Mutant")
            .and_then(|m| m.get("name"))
            .and_then(Value::as_str)
            .ok_or("outcomes.json: a scenario that is neither the baseline nor a named mutant")?;
        let fate = match summary {
            "CaughtMutant" => Fate::Caught,
            "MissedMutant" => Fate::Missed,
            "Timeout" => Fate::Timeout,
            "Unviable" => Fate::Unviable,
            other => {
                return Err(format!(
                    "outcomes.json: {name}: unexpected summary {other:?}"
                ))
            }
        };
        out.mutants.push((name.to_owned(), fate));
    }
    Ok(out)
}

/// The outcomes of an `--iterate` run merged into the earlier ones: over the mutants the tree
/// has now (`current`, as `--list` names them), this run's fate where it tested the mutant,
/// else the earlier run's. A mutant neither run tested is an error (the earlier run was not
/// of this scope or this tree); a mutant the tree no longer has is dropped.
pub(super) fn merge(
    previous: &Outcomes,
    now: &Outcomes,
    current: &[String],
) -> Result<Outcomes, String> {
    let fate_in = |o: &Outcomes, name: &str| {
        o.mutants
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, f)| *f)
    };
    let mutants = current
        .iter()
        .map(|name| {
            fate_in(now, name)
                .or_else(|| fate_in(previous, name))
                .map(|f| (name.clone(), f))
                .ok_or_else(|| {
                    format!(
                        "{name}: tested by neither this run nor the one before; run the scope \
                         without --iterate"
                    )
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Outcomes {
        baseline_ok: now.baseline_ok.or(previous.baseline_ok),
        complete: previous.complete && now.complete,
        mutants,
    })
}

/// `outcomes` in the shape of cargo-mutants' `outcomes.json` (what [`parse_outcomes`] reads).
pub(super) fn outcomes_to_json(outcomes: &Outcomes) -> String {
    let mut list = Vec::new();
    if let Some(ok) = outcomes.baseline_ok {
        list.push(serde_json::json!({
            "scenario": "Baseline",
            "summary": if ok { "Success" } else { "Failure" },
        }));
    }
    for (name, fate) in &outcomes.mutants {
        let summary = match fate {
            Fate::Caught => "CaughtMutant",
            Fate::Missed => "MissedMutant",
            Fate::Timeout => "Timeout",
            Fate::Unviable => "Unviable",
        };
        list.push(serde_json::json!({
            "scenario": {"Mutant": {"name": name}},
            "summary": summary,
        }));
    }
    let end = if outcomes.complete {
        Value::String("merged by cargo xtask mutants --iterate".into())
    } else {
        Value::Null
    };
    serde_json::to_string_pretty(&serde_json::json!({"end_time": end, "outcomes": list}))
        .expect("JSON values serialize")
}

/// The outcomes a scope's last run left under `out_dir`: merged ones when the last run was
/// an `--iterate`, else cargo-mutants' own.
pub(super) fn read_outcomes(out_dir: &Path) -> Result<Outcomes, String> {
    let merged = out_dir.join(MERGED_FILE);
    let file = if merged.is_file() {
        merged
    } else {
        out_dir.join("mutants.out").join("outcomes.json")
    };
    let text = std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
    parse_outcomes(&text)
}
