//! The seq rule, the head-cache check and the heads after an import, as pure functions.

use crate::ids::EpochId;
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
/// `cached` are the space's cache rows; `max_seq` is the largest seq in the space and `max_id`
/// the id of the epoch there (both `None` for an empty space).
///
/// The cache is current iff `max(cached seq) + 1 == next` *and* the epoch at the largest seq is
/// a cached head. Every writer — including one that never touches the cache — assigns
/// `seq = MAX(seq) + 1` under the same per-space lock, so an epoch the cache does not know
/// raises `next` past the cached maximum and the seq check fails. The seq check alone is fooled
/// when the newest cached head was deleted by hand and such a writer then reused its seq: the
/// seqs line up again while the cached id names nothing. The id check refuses that cache.
/// An empty cache counts as a maximum of 0: it is current for an empty space only.
pub fn cache_is_current(cached: &[Head], max_seq: Option<Seq>, max_id: Option<EpochId>) -> bool {
    let seqs_line_up = seq_check(cached.iter().map(|h| h.seq).max(), next_seq(max_seq));
    let newest_is_cached = match max_id {
        Some(id) => cached.iter().any(|h| h.id == id),
        None => max_seq.is_none(),
    };
    seqs_line_up && newest_is_cached
}

/// The seq half of [`cache_is_current`]: `max(cached seq) + 1 == next`.
fn seq_check(max_cached: Option<Seq>, next: Seq) -> bool {
    let max = max_cached.map_or(0, |s| s.0);
    max.checked_add(1) == Some(next.0)
}

/// What an append reads before it chooses parents: the space's largest seq, the id of the
/// epoch at that seq, and its cached head rows (sorted by id bytes). Every backend reads exactly
/// this, in one statement, under the space's write lock.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct HeadProbe {
    /// The largest seq in the space; `None` for an empty space.
    pub max_seq: Option<Seq>,
    /// The id of the epoch at [`HeadProbe::max_seq`]; `None` for an empty space.
    pub max_id: Option<EpochId>,
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
        cache_is_current(&self.cached, self.max_seq, self.max_id)
    }
}

/// The heads of a space after `imported` was added to it: `before` (the space's heads when the
/// import read them, under the space's write lock) without the imported epoch's `parents`,
/// plus `imported`, sorted (by id bytes, as the head cache is read).
///
/// An append always leaves one head; an import may fork the space (its parents need not be
/// heads, so every head it does not name stays one). Every backend writes its head cache to
/// exactly this set after an import.
pub fn heads_after_import(before: &[Head], parents: &[EpochId], imported: Head) -> Vec<Head> {
    let mut heads: Vec<Head> = before
        .iter()
        .filter(|h| !parents.contains(&h.id))
        .copied()
        .collect();
    heads.push(imported);
    heads.sort();
    heads
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn head(b: u8, s: u64) -> Head {
        Head {
            id: EpochId([b; 32]),
            seq: Seq(s),
        }
    }

    /// A probe of a space whose newest epoch is `newest` (or an empty space).
    fn probe(newest: Option<Head>, cached: Vec<Head>) -> HeadProbe {
        HeadProbe {
            max_seq: newest.map(|h| h.seq),
            max_id: newest.map(|h| h.id),
            cached,
        }
    }

    #[test]
    fn empty_space_starts_at_one() {
        assert_eq!(next_seq(None), Seq(1));
        assert_eq!(next_seq(Some(Seq(41))), Seq(42));
    }

    #[test]
    fn empty_cache_is_current_only_for_an_empty_space() {
        assert!(probe(None, vec![]).cache_is_current());
        assert!(!probe(Some(head(1, 1)), vec![]).cache_is_current());
    }

    #[test]
    fn cache_holding_the_newest_epoch_is_current() {
        assert!(probe(Some(head(7, 7)), vec![head(7, 7)]).cache_is_current());
    }

    #[test]
    fn a_writer_that_skipped_the_cache_makes_it_stale() {
        // The cache knew seq 7; a legacy writer appended seq 8 without touching it.
        assert!(!probe(Some(head(8, 8)), vec![head(7, 7)]).cache_is_current());
    }

    #[test]
    fn a_cache_ahead_of_the_log_is_not_current() {
        assert!(!probe(Some(head(8, 8)), vec![head(9, 9)]).cache_is_current());
        assert!(!seq_check(Some(Seq(u64::MAX)), Seq(0)));
    }

    #[test]
    fn a_cached_head_whose_seq_was_reused_by_another_epoch_is_not_current() {
        // Epoch 2 (cached) deleted by hand; a legacy writer reused seq 2 for epoch 3.
        assert!(!probe(Some(head(3, 2)), vec![head(2, 2)]).cache_is_current());
        // The seqs alone line up.
        assert!(seq_check(Some(Seq(2)), Seq(3)));
    }

    #[test]
    fn a_log_that_names_no_newest_epoch_is_never_trusted() {
        let odd = HeadProbe {
            max_seq: Some(Seq(2)),
            max_id: None,
            cached: vec![head(2, 2)],
        };
        assert!(!odd.cache_is_current());
    }

    #[test]
    fn probe_uses_the_newest_cached_row() {
        assert!(HeadProbe::default().cache_is_current());
        let fork = probe(Some(head(1, 5)), vec![head(1, 5), head(2, 4)]);
        assert!(fork.cache_is_current());
        assert_eq!(fork.next(), Seq(6));
        let stale = probe(Some(head(3, 6)), vec![head(1, 5)]);
        assert!(!stale.cache_is_current());
    }

    #[test]
    fn an_import_on_the_only_head_replaces_it() {
        assert_eq!(
            heads_after_import(&[head(1, 1)], &[EpochId([1; 32])], head(2, 2)),
            vec![head(2, 2)]
        );
    }

    #[test]
    fn an_import_of_an_older_parent_forks_the_space() {
        // Heads 3@3; the imported epoch names 1 (no longer a head): both stay heads.
        assert_eq!(
            heads_after_import(&[head(3, 3)], &[EpochId([1; 32])], head(2, 4)),
            vec![head(2, 4), head(3, 3)]
        );
    }

    #[test]
    fn an_import_merging_heads_leaves_one_and_keeps_the_rest_sorted() {
        let before = [head(1, 2), head(5, 3), head(9, 4)];
        let parents = [EpochId([9; 32]), EpochId([1; 32])];
        assert_eq!(
            heads_after_import(&before, &parents, head(4, 5)),
            vec![head(4, 5), head(5, 3)]
        );
    }

    #[test]
    fn the_first_epoch_of_a_space_is_its_only_head() {
        assert_eq!(heads_after_import(&[], &[], head(7, 1)), vec![head(7, 1)]);
    }

    proptest! {
        #[test]
        fn seq_check_is_current_iff_successor(max in proptest::option::of(0u64..1_000_000), next in 0u64..1_000_002) {
            let expected = max.unwrap_or(0) + 1 == next;
            prop_assert_eq!(seq_check(max.map(Seq), Seq(next)), expected);
        }

        /// Over any cache rows and any newest epoch: current iff the newest cached seq is the
        /// log's largest seq and the epoch there is one of the cached heads.
        #[test]
        fn current_iff_the_newest_epoch_is_the_newest_cached_head(
            cached in proptest::collection::btree_map(0u8..8, 1u64..8, 0..4),
            newest in proptest::option::of((0u8..8, 1u64..8)),
        ) {
            let cached: Vec<Head> = cached.into_iter().map(|(b, s)| head(b, s)).collect();
            let newest = newest.map(|(b, s)| head(b, s));
            let max_cached = cached.iter().map(|h| h.seq).max();
            let expected = match newest {
                None => cached.is_empty(),
                Some(n) => max_cached == Some(n.seq) && cached.iter().any(|h| h.id == n.id),
            };
            prop_assert_eq!(probe(newest, cached).cache_is_current(), expected);
        }

        /// Over any heads and any parents: the imported epoch is a head, a parent is not, every
        /// other head stays one, and the result is sorted without duplicates.
        #[test]
        fn heads_after_import_drops_exactly_the_parents(
            before in proptest::collection::btree_map(0u8..8, 1u64..8, 0..5),
            parents in proptest::collection::btree_set(0u8..10, 0..4),
            imported in 8u8..12,
        ) {
            let before: Vec<Head> = before.into_iter().map(|(b, s)| head(b, s)).collect();
            let parents: Vec<EpochId> = parents.into_iter().map(|b| EpochId([b; 32])).collect();
            let new = head(imported, 9);
            let after = heads_after_import(&before, &parents, new);
            prop_assert!(after.contains(&new));
            prop_assert!(after.windows(2).all(|w| w[0] < w[1]));
            for h in &before {
                prop_assert_eq!(after.contains(h), !parents.contains(&h.id));
            }
            prop_assert_eq!(after.len(), before.iter().filter(|h| !parents.contains(&h.id)).count() + 1);
        }
    }
}
