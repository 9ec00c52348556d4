//! Comparing two lists of rows as multisets: what the up-then-down checks of both engines
//! report when a table's rows differ.

use std::collections::BTreeMap;

/// How many items of `before` are missing from `after`, and how many of `after` were not in
/// `before`, both counted as multisets: order does not matter and duplicates count (two equal
/// rows before and one after is one missing).
pub fn difference<T: Ord>(before: &[T], after: &[T]) -> (usize, usize) {
    let mut counts: BTreeMap<&T, isize> = BTreeMap::new();
    for item in before {
        *counts.entry(item).or_default() += 1;
    }
    for item in after {
        *counts.entry(item).or_default() -= 1;
    }
    counts
        .values()
        .fold((0, 0), |(missing, extra), &n| match n {
            n if n > 0 => (missing + n.unsigned_abs(), extra),
            n => (missing, extra + n.unsigned_abs()),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_difference_counts_lost_and_new_items_with_duplicates() {
        assert_eq!(difference(&[1, 2, 2], &[1, 2, 2]), (0, 0));
        assert_eq!(difference(&[1, 2, 2], &[2]), (2, 0));
        assert_eq!(difference(&[1], &[1, 3]), (0, 1));
        assert_eq!(difference(&[1, 2], &[1, 5]), (1, 1));
        assert_eq!(difference::<u8>(&[], &[]), (0, 0));
        assert_eq!(difference(&[2, 2, 2], &[2, 2, 2, 2]), (0, 1));
    }

    #[test]
    fn order_does_not_matter() {
        let before = ["b", "a", "c", "a"];
        let after = ["a", "c", "a", "b"];
        assert_eq!(difference(&before, &after), (0, 0));
        assert_eq!(difference(&["z", "a"], &["a", "y"]), (1, 1));
    }
}
