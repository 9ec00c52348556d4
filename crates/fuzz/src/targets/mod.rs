//! The fuzz targets: one per parser or decoder of outside input, each through public APIs only.

use std::fmt::Display;

mod core_types;
mod legacy;
mod migrate;
mod server;
mod url;

/// One fuzz target.
#[derive(Clone, Copy, Debug)]
pub struct Target {
    /// Its name (also its corpus directory's).
    pub name: &'static str,
    /// What it feeds and what it checks, in one line.
    pub about: &'static str,
    /// Feeds `data` to the API, panics when a property fails, and returns a signature of the
    /// behaviour it saw.
    pub run: fn(&[u8]) -> u64,
    /// Tokens the mutator splices in.
    pub dictionary: &'static [&'static [u8]],
    /// Largest input worth generating.
    pub max_len: usize,
}

/// Every target, in the order the driver runs them.
pub const TARGETS: &[Target] = &[
    core_types::FEED_CURSOR,
    core_types::DEDUP_KEY,
    core_types::FOREIGN_EPOCH,
    core_types::IDS,
    legacy::LEGACY_RAW,
    legacy::LEGACY_SEALED,
    migrate::SQL_SPLIT,
    migrate::MIGRATION_FILES,
    migrate::CHECKSUM_HEX,
    url::DATABASE_URL,
    server::HTTP_BODY,
    server::CONFIG,
];

/// The target called `name`.
pub fn by_name(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}

/// A signature of a result: `Ok` apart from its errors, and errors by their message with
/// quoted text and every word holding a digit dropped, so "line 3" and "line 7", or two hex
/// ids, are one behaviour.
pub(crate) fn sig<T, E: Display>(tag: u64, result: &Result<T, E>) -> u64 {
    match result {
        Ok(_) => mix(tag, 1),
        Err(e) => mix(tag, crate::engine::fnv(shape(&e.to_string()).as_bytes())),
    }
}

/// The shape of an error message (see [`sig`]), at most 64 bytes of it.
pub(crate) fn shape(text: &str) -> String {
    let mut kept = String::with_capacity(64);
    let mut quote: Option<char> = None;
    let mut escaped = false;
    let mut word = String::new();
    let flush = |word: &mut String, kept: &mut String| {
        if !word.chars().any(|c| c.is_ascii_digit()) {
            kept.push_str(word);
        }
        word.clear();
    };
    for c in text.chars() {
        if let Some(q) = quote {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == q {
                quote = None;
            }
            continue;
        }
        match c {
            '"' | '`' => {
                flush(&mut word, &mut kept);
                quote = Some(c);
            }
            c if c.is_alphanumeric() => word.push(c),
            c => {
                flush(&mut word, &mut kept);
                kept.push(c);
            }
        }
        if kept.len() >= 64 {
            break;
        }
    }
    flush(&mut word, &mut kept);
    kept
}

/// Combines two signature parts.
pub(crate) fn mix(a: u64, b: u64) -> u64 {
    (a.rotate_left(17) ^ b).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}
