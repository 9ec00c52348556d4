//! How the CLI and the dashboard both print values: durations (`250ms`, `1m`). A leaf module,
//! so both sides use it.

use std::time::Duration;

/// The shortest exact form the CLI's `--rate` reads back (`1h`, `90s`, `250ms`); a duration
/// that is not a whole number of milliseconds (stored through the HTTP API or the library,
/// which take microseconds) prints in `us`, which `--rate` does not take.
pub(crate) fn format_duration(d: Duration) -> String {
    let us = d.as_micros();
    for (unit, size) in [
        ("h", 3_600_000_000),
        ("m", 60_000_000),
        ("s", 1_000_000),
        ("ms", 1_000),
    ] {
        if us >= size && us % size == 0 {
            return format!("{}{unit}", us / size);
        }
    }
    format!("{us}us")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_print_in_their_largest_exact_unit() {
        for (d, shown) in [
            (Duration::from_millis(250), "250ms"),
            (Duration::from_secs(90), "90s"),
            (Duration::from_secs(120), "2m"),
            (Duration::from_secs(7200), "2h"),
            (Duration::from_micros(1500), "1500us"),
        ] {
            assert_eq!(format_duration(d), shown);
        }
    }
}
