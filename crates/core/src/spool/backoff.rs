//! Capped exponential backoff with jitter: how long a run waits before its next attempt after a
//! retryable nack or an expired lease.
//!
//! The jitter is "equal jitter": attempt `n` waits between half and all of
//! `min(cap, base · 2^(n-1))`, so retries of many runs that failed together spread out while
//! each still waits a meaningful minimum. The jitter is not drawn from a random generator but
//! derived from the run's `(queue, dedup key, attempt)` ([`jitter_seed`]): different runs still
//! get independent-looking delays, and every backend (and the in-memory model) computes the
//! same delay for the same run, which keeps the conformance suite's model comparison exact.

use std::time::Duration;

use super::dedup::DedupKey;
use super::ids::QueueName;

/// Base and cap of the retry backoff.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackoffPolicy {
    /// The delay before the second attempt (before jitter).
    pub base: Duration,
    /// No delay exceeds this.
    pub cap: Duration,
}

impl Default for BackoffPolicy {
    /// 1 s doubling to at most 60 s.
    fn default() -> Self {
        Self {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(60),
        }
    }
}

impl BackoffPolicy {
    /// The delay after attempt `attempt` (see [`backoff`]).
    pub fn delay(&self, attempt: u32, jitter: u64) -> Duration {
        backoff(attempt, self.base, self.cap, jitter)
    }

    /// The delay after attempt `attempt` of the run with key `(queue, key)`, jittered as the
    /// spool jitters that run's retries: the same run waits the same time on every backend
    /// and in every process.
    pub fn delay_for(&self, queue: &QueueName, key: &DedupKey, attempt: u32) -> Duration {
        self.delay(attempt, jitter_seed(queue, key, attempt))
    }
}

/// The delay before jitter after attempt `attempt` (1-based; 0 counts as 1):
/// `min(cap, base · 2^(attempt-1))`, saturating. Non-decreasing in `attempt`; it is also the
/// largest delay [`backoff`] can return for that attempt.
pub fn backoff_ceiling(attempt: u32, base: Duration, cap: Duration) -> Duration {
    let doublings = attempt.max(1) - 1;
    let factor = 1u128.checked_shl(doublings).unwrap_or(u128::MAX);
    let nanos = base.as_nanos().saturating_mul(factor);
    let capped = nanos.min(cap.as_nanos());
    nanos_to_duration(capped)
}

/// The delay after attempt `attempt` with equal jitter: `ceiling/2 + (ceiling - ceiling/2) ·
/// jitter / u64::MAX`, where `ceiling` is [`backoff_ceiling`]. Never above `cap`; for a fixed
/// `jitter`, non-decreasing in `attempt`; at least half the ceiling.
pub fn backoff(attempt: u32, base: Duration, cap: Duration, jitter: u64) -> Duration {
    let ceiling = backoff_ceiling(attempt, base, cap).as_nanos();
    let half = ceiling / 2;
    let span = ceiling - half;
    // span < 2^97 (Duration's nanos fit in 96 bits), so span · jitter < 2^161 would overflow
    // u128; scale by the top 32 bits of the jitter instead, which is plenty of spread.
    let fraction = u128::from(jitter >> 32);
    let extra = span / u128::from(u32::MAX) * fraction
        + (span % u128::from(u32::MAX)) * fraction / u128::from(u32::MAX);
    nanos_to_duration(half + extra.min(span))
}

/// The jitter for a run's attempt: the first 8 bytes of BLAKE3 over `(queue, dedup key,
/// attempt)`, length-prefixed. Backends call this rather than a random generator, so the same
/// run waits the same time on every backend.
pub fn jitter_seed(queue: &QueueName, key: &DedupKey, attempt: u32) -> u64 {
    let mut h = blake3::Hasher::new();
    h.update(b"cairn.spool.jitter.v1");
    for part in [queue.as_str().as_bytes(), key.as_bytes()] {
        h.update(&(part.len() as u64).to_be_bytes());
        h.update(part);
    }
    h.update(&attempt.to_be_bytes());
    let bytes = h.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&bytes.as_bytes()[..8]);
    u64::from_be_bytes(first)
}

fn nanos_to_duration(nanos: u128) -> Duration {
    let secs = u64::try_from(nanos / 1_000_000_000).unwrap_or(u64::MAX);
    // The remainder is below 10^9, so it fits a u32.
    let sub = (nanos % 1_000_000_000) as u32;
    Duration::new(secs, sub)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn a_runs_delay_is_jittered_by_its_own_seed() {
        let policy = BackoffPolicy::default();
        let queue = QueueName::new("q").unwrap();
        let (a, b) = (
            DedupKey::from_parts(["a"]).unwrap(),
            DedupKey::from_parts(["b"]).unwrap(),
        );
        for attempt in 1..=4 {
            let delay = policy.delay_for(&queue, &a, attempt);
            assert_eq!(
                delay,
                policy.delay(attempt, jitter_seed(&queue, &a, attempt))
            );
            let ceiling = backoff_ceiling(attempt, policy.base, policy.cap);
            assert!(
                delay >= ceiling / 2 && delay <= ceiling,
                "{delay:?} of {ceiling:?}"
            );
        }
        // Another key's retries are spread differently.
        assert!((1..=8).any(|n| policy.delay_for(&queue, &a, n) != policy.delay_for(&queue, &b, n)));
    }

    #[test]
    fn default_policy_doubles_to_sixty_seconds() {
        let ceilings: Vec<Duration> = (1..=8).map(|a| backoff_ceiling(a, S(1), S(60))).collect();
        assert_eq!(
            ceilings,
            vec![S(1), S(2), S(4), S(8), S(16), S(32), S(60), S(60)]
        );
        assert_eq!(backoff_ceiling(0, S(1), S(60)), S(1));
        assert_eq!(backoff_ceiling(u32::MAX, S(1), S(60)), S(60));
    }

    #[test]
    fn jitter_spans_half_to_full() {
        assert_eq!(backoff(3, S(1), S(60), 0), S(2));
        assert_eq!(backoff(3, S(1), S(60), u64::MAX), S(4));
        let mid = backoff(3, S(1), S(60), u64::MAX / 2);
        assert!(mid > S(2) && mid < S(4), "{mid:?}");
    }

    #[test]
    fn degenerate_policies() {
        assert_eq!(backoff(5, Duration::ZERO, S(60), 123), Duration::ZERO);
        assert_eq!(backoff(1, S(100), S(10), u64::MAX), S(10));
        assert_eq!(
            backoff(64, Duration::MAX, Duration::MAX, u64::MAX),
            Duration::MAX
        );
    }

    #[test]
    fn jitter_seed_depends_on_every_input() {
        let q = QueueName::new("gate").unwrap();
        let q2 = QueueName::new("gate2").unwrap();
        let k = DedupKey::from_parts(["a"]).unwrap();
        let k2 = DedupKey::from_parts(["b"]).unwrap();
        let base = jitter_seed(&q, &k, 1);
        assert_eq!(base, jitter_seed(&q, &k, 1));
        assert_ne!(base, jitter_seed(&q, &k, 2));
        assert_ne!(base, jitter_seed(&q2, &k, 1));
        assert_ne!(base, jitter_seed(&q, &k2, 1));
    }

    fn durations() -> impl Strategy<Value = Duration> {
        (0u64..=3_600_000_000_000).prop_map(Duration::from_nanos)
    }

    proptest! {
        #[test]
        fn never_above_cap_and_at_least_half(
            attempt in 0u32..200, base in durations(), cap in durations(), jitter in any::<u64>()
        ) {
            let d = backoff(attempt, base, cap, jitter);
            let ceiling = backoff_ceiling(attempt, base, cap);
            prop_assert!(d <= cap);
            prop_assert!(d <= ceiling);
            prop_assert!(d >= ceiling / 2);
        }

        #[test]
        fn monotone_in_attempt_for_fixed_jitter(
            attempt in 0u32..200, base in durations(), cap in durations(), jitter in any::<u64>()
        ) {
            prop_assert!(backoff_ceiling(attempt, base, cap) <= backoff_ceiling(attempt + 1, base, cap));
            prop_assert!(backoff(attempt, base, cap, jitter) <= backoff(attempt + 1, base, cap, jitter));
        }

        #[test]
        fn monotone_in_jitter(
            attempt in 0u32..70, base in durations(), cap in durations(), a in any::<u64>(), b in any::<u64>()
        ) {
            let (lo, hi) = (a.min(b), a.max(b));
            prop_assert!(backoff(attempt, base, cap, lo) <= backoff(attempt, base, cap, hi));
        }
    }
}
