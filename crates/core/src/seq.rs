//! The seq rule and the head-cache check, as pure functions.

use crate::types::{Head, Seq};

/// The seq the next epoch of a space gets, given the largest seq already in the space.
///
/// An empty space starts at [`Seq::FIRST`] (1).
pub fn next_seq(max_seq: Option<Seq>) -> Seq {
    match max_seq {
        None => Seq::FIRST,
        Some(s) => Seq(s.0 + 1),
    }
}

/// Whether a space's head cache can be trusted.
///
/// `max_cached` is the largest seq among the cached head rows (`None` when the cache has no
/// row for the space); `next` is the seq the space's next epoch would get.
///
/// The cache is current iff `max(cached seq) + 1 == next`. Every writer — including one that
/// never touches the cache — assigns `seq = MAX(seq) + 1` under the same per-space lock, so an
/// epoch the cache does not know raises `next` past the cached maximum and the check fails.
/// An empty cache counts as a maximum of 0: it is current for an empty space only.
pub fn cache_is_current(max_cached: Option<Seq>, next: Seq) -> bool {
    let max = max_cached.map_or(0, |s| s.0);
    max.checked_add(1) == Some(next.0)
}

/// What an append reads before it chooses parents: the space's largest seq and its cached head
/// rows (sorted by id bytes). Every backend reads exactly this, under the space's write lock.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct HeadProbe {
    /// The largest seq in the space; `None` for an empty space.
    pub max_seq: Option<Seq>,
    /// The cache rows of the space.
    pub cached: Vec<Head>,
}

impl HeadProbe {
    /// The seq the next epoch gets.
    pub fn next(&self) -> Seq {
        next_seq(self.max_seq)
    }

    /// Whether the cached rows can be trusted as the space's heads ([`cache_is_current`]).
    pub fn cache_is_current(&self) -> bool {
        cache_is_current(self.cached.iter().map(|h| h.seq).max(), self.next())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn empty_space_starts_at_one() {
        assert_eq!(next_seq(None), Seq(1));
        assert_eq!(next_seq(Some(Seq(41))), Seq(42));
    }

    #[test]
    fn empty_cache_is_current_only_for_an_empty_space() {
        assert!(cache_is_current(None, Seq(1)));
        assert!(!cache_is_current(None, Seq(2)));
    }

    #[test]
    fn cache_holding_the_newest_seq_is_current() {
        assert!(cache_is_current(Some(Seq(7)), Seq(8)));
    }

    #[test]
    fn a_writer_that_skipped_the_cache_makes_it_stale() {
        // The cache knew seq 7; a legacy writer appended seq 8 without touching it.
        assert!(!cache_is_current(Some(Seq(7)), Seq(9)));
    }

    #[test]
    fn a_cache_ahead_of_the_log_is_not_current() {
        assert!(!cache_is_current(Some(Seq(9)), Seq(8)));
        assert!(!cache_is_current(Some(Seq(u64::MAX)), Seq(0)));
    }

    #[test]
    fn probe_uses_the_newest_cached_row() {
        let head = |b: u8, s: u64| Head {
            id: crate::EpochId([b; 32]),
            seq: Seq(s),
        };
        assert!(HeadProbe::default().cache_is_current());
        let fork = HeadProbe {
            max_seq: Some(Seq(5)),
            cached: vec![head(1, 5), head(2, 4)],
        };
        assert!(fork.cache_is_current());
        assert_eq!(fork.next(), Seq(6));
        let stale = HeadProbe {
            max_seq: Some(Seq(6)),
            cached: vec![head(1, 5)],
        };
        assert!(!stale.cache_is_current());
    }

    proptest! {
        #[test]
        fn current_iff_successor(max in proptest::option::of(0u64..1_000_000), next in 0u64..1_000_002) {
            let expected = max.unwrap_or(0) + 1 == next;
            prop_assert_eq!(cache_is_current(max.map(Seq), Seq(next)), expected);
        }
    }
}
