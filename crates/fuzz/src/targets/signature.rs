//! Signatures of what a target saw: results and error messages boiled down to a number the
//! driver compares, so inputs that reach a new behaviour are kept.

use std::fmt::Display;

use crate::hash::fnv;

/// A signature of a result: `Ok` apart from its errors, and errors by their message with
/// quoted text and every word holding a digit dropped, so "line 3" and "line 7", or two hex
/// ids, are one behaviour.
pub(crate) fn sig<T, E: Display>(tag: u64, result: &Result<T, E>) -> u64 {
    match result {
        Ok(_) => mix(tag, 1),
        Err(e) => mix(tag, fnv(shape(&e.to_string()).as_bytes())),
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
