//! The space locks: writers of one space are serialized across nodes by a transaction-scoped
//! advisory lock whose key is derived from (schema, space), taken in one global key order.

use cairn_core::{key64, Result, SpaceId};

use crate::config::SchemaName;
use crate::db::Db;
use crate::error::map;
use crate::sql;

/// The key-derivation context of the space locks (part of the lock protocol every node shares:
/// changing it lets two builds write one space at once).
const SPACE_LOCK_CONTEXT: &str = "cairn 2026-11 postgres space lock v1";

/// The advisory-lock key of `space` in the store namespace `schema`.
pub(crate) fn space_lock_key(schema: &SchemaName, space: &SpaceId) -> i64 {
    key64(
        SPACE_LOCK_CONTEXT,
        &[schema.as_str().as_bytes(), space.as_bytes()],
    )
}

/// The keys to lock for `spaces`, in the one global order every writer uses (ascending,
/// without duplicates), so two writers locking overlapping sets cannot deadlock.
pub(crate) fn space_lock_keys<'a>(
    schema: &SchemaName,
    spaces: impl IntoIterator<Item = &'a SpaceId>,
) -> Vec<i64> {
    let mut keys: Vec<i64> = spaces
        .into_iter()
        .map(|s| space_lock_key(schema, s))
        .collect();
    keys.sort_unstable();
    keys.dedup();
    keys
}

/// Takes the write locks of `spaces` in the global key order (see [`space_lock_keys`]).
pub(crate) async fn lock_spaces(
    db: &mut Db<'_>,
    schema: &SchemaName,
    spaces: &[&SpaceId],
) -> Result<()> {
    for key in space_lock_keys(schema, spaces.iter().copied()) {
        sqlx::query(sql::LOCK)
            .bind(key)
            .execute(db.conn())
            .await
            .map_err(map)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn space(s: &str) -> SpaceId {
        SpaceId::new(s.as_bytes().to_vec()).unwrap()
    }

    #[test]
    fn lock_keys_are_sorted_and_deduplicated() {
        let schema = SchemaName::parse("public").unwrap();
        let (a, b, c) = (space("a"), space("b"), space("c"));
        let keys = space_lock_keys(&schema, [&c, &a, &b, &a, &c]);
        assert_eq!(keys.len(), 3);
        assert!(keys.windows(2).all(|w| w[0] < w[1]), "{keys:?}");
        let mut expected: Vec<i64> = [&a, &b, &c]
            .iter()
            .map(|s| space_lock_key(&schema, s))
            .collect();
        expected.sort_unstable();
        assert_eq!(keys, expected);
        // Same set, any order: same lock sequence.
        assert_eq!(space_lock_keys(&schema, [&b, &c, &a]), keys);
    }

    #[test]
    fn lock_keys_depend_on_schema_and_space() {
        let s1 = SchemaName::parse("one").unwrap();
        let s2 = SchemaName::parse("two").unwrap();
        let a = space("a");
        assert_ne!(space_lock_key(&s1, &a), space_lock_key(&s2, &a));
        assert_ne!(space_lock_key(&s1, &a), space_lock_key(&s1, &space("b")));
        assert_eq!(space_lock_key(&s1, &a), space_lock_key(&s1, &a));
        // Length prefix: ("ab", "c") and ("a", "bc") must differ.
        let ab = SchemaName::parse("ab").unwrap();
        let a_ = SchemaName::parse("a").unwrap();
        assert_ne!(
            space_lock_key(&ab, &space("c")),
            space_lock_key(&a_, &space("bc"))
        );
    }

    #[test]
    fn the_space_lock_key_is_the_one_every_earlier_build_takes() {
        // Nodes of different builds serialize on this key: it must not move.
        let public = SchemaName::parse("public").unwrap();
        assert_eq!(
            space_lock_key(&public, &space("s")),
            7_856_939_167_008_013_709
        );
    }
}
