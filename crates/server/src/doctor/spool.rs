//! The spool's counts (parked runs), retention usage against the cap and a head-cache sample.

use cairn::backfill::probe;
use cairn::RunState;

use super::check::{one, Check, Limits};

/// The commands that show parked runs and why each was parked, and that retry or discard them.
pub(super) const PARKED_REPAIR: &str =
    "cairn runs --state parked; cairn run show ID; then cairn run retry ID \
     (or every parked run of a queue: cairn runs retry --queue Q --state parked \
     [--reason-like TEXT]) or cairn run discard ID";

/// How many spaces the head-cache check samples (in id order).
pub(super) const HEAD_SAMPLE: usize = 1000;

/// Spool counts, retention usage and a head-cache sample, from an open store.
pub(super) async fn store_checks(
    spool: &dyn cairn::Spool,
    diag: &dyn cairn::EpochDiagnostics,
    limits: Limits,
) -> Vec<Check> {
    let cap = limits.retention_cap;
    let mut checks = Vec::new();
    match spool.stats().await {
        Ok(stats) => {
            let n = |s: RunState| stats.runs.get(&s).copied().unwrap_or(0);
            let age = stats.oldest_queued.map_or("-".to_owned(), |t| {
                let now =
                    cairn::Timestamp::from_system_time(std::time::SystemTime::now()).unwrap_or(t);
                format!("{}s", now.duration_since(t).as_secs())
            });
            // As `/metrics` counts them: `pending` the queued runs a claim can take now,
            // `scheduled` those not due yet (a not-before or a retry's backoff ahead).
            let scheduled: u64 = stats.queues.values().map(|q| q.scheduled).sum();
            let counts = format!(
                "pending={} scheduled={scheduled} claimed={} parked={} oldest_queued_age={age}",
                n(RunState::Queued).saturating_sub(scheduled),
                n(RunState::Claimed),
                n(RunState::Parked)
            );
            checks.push(parked_check(
                counts,
                n(RunState::Parked),
                limits.parked_threshold,
            ));
            let percent = if cap == 0 {
                100.0
            } else {
                stats.event_bytes as f64 * 100.0 / cap as f64
            };
            let detail = format!(
                "event bytes {} of the configured {cap}-byte cap ({percent:.1}%, {} events)",
                stats.event_bytes, stats.events
            );
            checks.push(if stats.event_bytes > cap {
                Check::problem(
                    "retention",
                    format!(
                        "{detail}: over the cap; the oldest events go at the next retention \
                         pass, or raise spool.retention_max_bytes"
                    ),
                    None,
                )
            } else {
                Check::ok("retention", detail)
            });
        }
        Err(e) => checks.push(Check::problem("spool", one(&e.report().to_string()), None)),
    }
    let mut stale = 0usize;
    let mut sampled = 0usize;
    let mut failed = None;
    match diag.list_spaces(None, HEAD_SAMPLE).await {
        Ok(spaces) => {
            // A reserved space (the backfill's marker) is cairn's own record, not a space:
            // counted as `cairn backfill` counts them.
            for space in spaces.iter().filter(|s| !s.is_reserved()) {
                match probe(diag, space).await {
                    Ok(p) if p.cache_is_current() => {}
                    Ok(_) => stale += 1,
                    Err(e) => {
                        failed = Some(cairn::backfill::error_code(&e));
                        break;
                    }
                }
                sampled += 1;
            }
        }
        Err(e) => failed = Some(cairn::backfill::error_code(&e)),
    }
    checks.push(match (failed, stale) {
        (Some(code), _) => Check::problem(
            "head_caches",
            format!("the sample stopped at an error (code {code})"),
            None,
        ),
        (None, 0) => Check::ok(
            "head_caches",
            format!("{sampled} space(s) sampled, every cache current"),
        ),
        (None, n) => Check::problem(
            "head_caches",
            format!(
                "{n} of {sampled} sampled space(s) have a stale cache (harmless: appends \
                 recompute; repairing saves that work)"
            ),
            Some("cairn backfill"),
        ),
    });
    checks
}

/// The spool check's verdict on `parked` runs: none is ok; up to `threshold` (any number
/// without one) is a warning — parked runs wait for an operator, the store is healthy; more is
/// a problem. Either way the repair names the commands that show, retry and discard them.
pub(super) fn parked_check(counts: String, parked: u64, threshold: Option<u64>) -> Check {
    if parked == 0 {
        return Check::ok("spool", counts);
    }
    let look = format!(
        "{counts}: {parked} parked run(s) wait for an operator (each holds the reason it was \
         parked; once that is fixed, retry it, or discard it)"
    );
    match threshold {
        Some(max) if parked > max => Check::problem(
            "spool",
            format!("{look}; more than doctor.parked_threshold ({max})"),
            Some(PARKED_REPAIR),
        ),
        _ => Check::warning("spool", look, PARKED_REPAIR),
    }
}
