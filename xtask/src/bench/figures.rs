//! Measured figures as the reports give them: medians and ratios of durations, durations,
//! ratios and counts as printed, a target met or not, and the command line as printed.

use std::time::Duration;

/// The command line as typed, with the database URL replaced: it may hold a password.
pub(super) fn printable_command(args: impl Iterator<Item = String>) -> String {
    let mut words = vec!["cargo xtask".to_owned()];
    let mut hide_next = false;
    for arg in args {
        if hide_next {
            words.push("URL".into());
            hide_next = false;
        } else if arg == "--database" {
            hide_next = true;
            words.push(arg);
        } else if arg.starts_with("--database=") {
            words.push("--database=URL".into());
        } else {
            words.push(arg);
        }
    }
    words.join(" ")
}

pub(super) fn median(times: &[Duration]) -> Duration {
    let mut sorted = times.to_vec();
    sorted.sort();
    let mid = sorted.len() / 2;
    if sorted.len() % 2 == 1 {
        sorted[mid]
    } else {
        (sorted[mid - 1] + sorted[mid]) / 2
    }
}

pub(super) fn ratio(slow: Duration, fast: Duration) -> f64 {
    slow.as_secs_f64() / fast.as_secs_f64().max(1e-9)
}

pub(super) fn met(ok: bool) -> String {
    if ok { "met" } else { "not met" }.to_owned()
}

pub(super) fn fmt_duration(d: Duration) -> String {
    let secs = d.as_secs_f64();
    if secs >= 0.1 {
        format!("{} ms", thousands((secs * 1e3).round() as u64))
    } else if secs >= 0.01 {
        format!("{:.1} ms", secs * 1e3)
    } else if secs >= 0.001 {
        format!("{:.2} ms", secs * 1e3)
    } else {
        format!("{:.1} µs", secs * 1e6)
    }
}

pub(super) fn fmt_ratio(r: f64) -> String {
    if r >= 100.0 {
        format!("{}×", thousands(r.round() as u64))
    } else {
        format!("{r:.1}×")
    }
}

pub(super) fn thousands(n: u64) -> String {
    let digits: Vec<char> = n.to_string().chars().collect();
    let groups: Vec<String> = digits
        .rchunks(3)
        .rev()
        .map(|g| g.iter().collect())
        .collect();
    groups.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_formatting() {
        let ms = Duration::from_millis;
        assert_eq!(median(&[ms(3), ms(1), ms(2)]), ms(2));
        assert_eq!(
            median(&[ms(4), ms(1), ms(2), ms(3)]),
            Duration::from_micros(2500)
        );
        assert_eq!(thousands(1_000_000), "1,000,000");
        assert_eq!(thousands(999), "999");
        assert_eq!(fmt_ratio(123_456.4), "123,456×");
        assert_eq!(fmt_ratio(1.04), "1.0×");
        assert_eq!(fmt_duration(Duration::from_micros(650)), "650.0 µs");
        assert_eq!(fmt_duration(Duration::from_millis(1824)), "1,824 ms");
        assert_eq!(fmt_duration(Duration::from_micros(12_345)), "12.3 ms");
    }

    #[test]
    fn the_printed_command_hides_the_database_url() {
        let args = [
            "bench",
            "heads",
            "--database",
            "postgres://u:pw@h/db",
            "--database=x",
        ];
        assert_eq!(
            printable_command(args.iter().map(|s| s.to_string())),
            "cargo xtask bench heads --database URL --database=URL"
        );
    }
}
