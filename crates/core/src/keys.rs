//! Derived names and keys shared by every backend: 64-bit lock keys and unique scratch names.

use std::sync::atomic::{AtomicU64, Ordering};

/// A 64-bit key (for Postgres advisory locks) derived from `context` and `parts`: the first 8
/// bytes of keyed BLAKE3 (`derive_key(context)`), little-endian. Every part but the last is
/// length-prefixed; the last runs to the end, so no two part lists of one length collide.
///
/// Changing the encoding changes every lock key, so nodes of two builds would stop excluding
/// each other: the golden test pins it.
pub fn key64(context: &'static str, parts: &[&[u8]]) -> i64 {
    let mut h = blake3::Hasher::new_derive_key(context);
    if let Some((last, prefixed)) = parts.split_last() {
        for p in prefixed {
            h.update(&(p.len() as u64).to_le_bytes());
            h.update(p);
        }
        h.update(last);
    }
    let mut out = [0u8; 8];
    out.copy_from_slice(&h.finalize().as_bytes()[..8]);
    i64::from_le_bytes(out)
}

/// A name unique to this process, call and moment: `{prefix}_{16 lowercase hex digits}`. With a
/// prefix of `[a-z_][a-z0-9_]*` it is a plain Postgres identifier and a safe file name.
pub fn scratch_name(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let tag = blake3::hash(format!("{nanos}/{n}/{}", std::process::id()).as_bytes());
    format!("{prefix}_{}", &tag.to_hex()[..16])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key64_is_pinned() {
        // The space-lock key of space `s` in schema `public`, and the migration-lock key of
        // schema `public`, as every build since the first Postgres backend computes them
        // (computed independently with Python's blake3).
        assert_eq!(
            key64("cairn 2026-11 postgres space lock v1", &[b"public", b"s"]),
            7_856_939_167_008_013_709
        );
        assert_eq!(
            key64("cairn 2026-11 postgres migration lock v1", &[b"public"]),
            -5_844_876_268_162_346_966
        );
    }

    #[test]
    fn key64_parts_do_not_collide_by_concatenation() {
        let c = "cairn test";
        assert_ne!(key64(c, &[b"ab", b"c"]), key64(c, &[b"a", b"bc"]));
    }

    #[test]
    fn scratch_names_are_unique_identifiers() {
        let a = scratch_name("cairn_t");
        let b = scratch_name("cairn_t");
        assert_ne!(a, b);
        assert!(a.starts_with("cairn_t_") && a.len() == "cairn_t_".len() + 16);
        assert!(a
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_'));
    }
}
