//! What a collector's answer means for a run: a pure decision, tested on its own.

use std::time::{Duration, SystemTime};

/// What to do with a run after one POST to the collector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// 2xx: the batch is delivered; acknowledge its events.
    Delivered,
    /// 401 or 403: the collector refused this server's credentials; 431: it refused the
    /// request's headers, and the token is the only one of them whose size the server does
    /// not fix. That is not the run's fault: re-read them, wait with backoff and try again,
    /// spending no attempt.
    Refused(u16),
    /// 408, 429, 5xx, timeouts, connection errors: try again after backoff.
    Retry(String),
    /// 429 or 503 with a `Retry-After` the worker honours ([`retry_after`]): try again after
    /// that wait instead of the backoff (`Outcome::RetryAfter`), spending the attempt.
    RetryAfter(String, Duration),
    /// The other 4xx, redirects: retrying cannot help; park the run with the reason.
    Park(String),
}

/// The verdict for an HTTP status. `detail` is a short, already cleaned excerpt of the body.
pub(crate) fn classify(status: u16, detail: &str) -> Verdict {
    let said = if detail.is_empty() {
        format!("the collector answered {status}")
    } else {
        format!("the collector answered {status}: {detail}")
    };
    match status {
        200..=299 => Verdict::Delivered,
        401 | 403 | 431 => Verdict::Refused(status),
        408 | 429 | 500..=599 => Verdict::Retry(said),
        300..=399 => Verdict::Park(format!(
            "{said}; redirects are not followed: point the delivery URL at the final address"
        )),
        400..=499 => Verdict::Park(said),
        // 1xx and codes outside the registry: nothing says retrying is useless.
        _ => Verdict::Retry(said),
    }
}

/// The longest `Retry-After` the worker honours; a collector asking for more is retried after
/// this, so a hostile or broken answer cannot hold a run back for days.
pub(crate) const MAX_RETRY_AFTER: Duration = Duration::from_secs(60 * 60);

/// The shortest: a collector answering `Retry-After: 0` again and again is not hammered in a
/// tight loop.
pub(crate) const MIN_RETRY_AFTER: Duration = Duration::from_secs(1);

/// The wait a 429 or 503 answer's `Retry-After` header asks for (RFC 9110 §10.2.3: a number
/// of seconds or an HTTP date, read against `now`), clamped to [`MIN_RETRY_AFTER`] ..=
/// [`MAX_RETRY_AFTER`]; `None` for other statuses, a missing header, or one that does not
/// parse (the backoff applies).
pub(crate) fn retry_after(status: u16, header: Option<&str>, now: SystemTime) -> Option<Duration> {
    if !matches!(status, 429 | 503) {
        return None;
    }
    let value = header?.trim();
    let wait = if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // Seconds; more digits than a u64 holds is simply "very long".
        Duration::from_secs(value.parse().unwrap_or(u64::MAX))
    } else {
        let at = httpdate::parse_http_date(value).ok()?;
        at.duration_since(now).unwrap_or(Duration::ZERO)
    };
    Some(wait.clamp(MIN_RETRY_AFTER, MAX_RETRY_AFTER))
}

/// The verdict for a whole answer: [`classify`], then a retry with the wait the collector
/// asked for when it gave one ([`retry_after`]).
pub(crate) fn verdict(status: u16, detail: &str, header: Option<&str>, now: SystemTime) -> Verdict {
    match (classify(status, detail), retry_after(status, header, now)) {
        (Verdict::Retry(why), Some(wait)) => {
            let why = format!("{why}; it asked to retry after {} s", wait.as_secs());
            Verdict::RetryAfter(why, wait)
        }
        (v, _) => v,
    }
}

/// The first bytes of a body as one line of printable text, for a run's reason.
pub(crate) fn excerpt(body: &[u8], max_chars: usize) -> String {
    String::from_utf8_lossy(body)
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(max_chars)
        .collect::<String>()
        .trim()
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_to_the_design_table() {
        for ok in [200, 201, 202, 204, 299] {
            assert_eq!(classify(ok, ""), Verdict::Delivered, "{ok}");
        }
        assert_eq!(classify(401, ""), Verdict::Refused(401));
        assert_eq!(classify(403, "no such tenant"), Verdict::Refused(403));
        assert_eq!(classify(431, ""), Verdict::Refused(431));
        for retry in [408, 429, 500, 502, 503, 504, 599, 100, 600] {
            assert!(matches!(classify(retry, ""), Verdict::Retry(_)), "{retry}");
        }
        for park in [301, 302, 307, 308, 400, 404, 409, 410, 413, 422, 499] {
            assert!(matches!(classify(park, ""), Verdict::Park(_)), "{park}");
        }
    }

    #[test]
    fn retry_after_is_honoured_on_429_and_503_within_bounds() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let secs = |s| Some(Duration::from_secs(s));
        assert_eq!(retry_after(429, Some("120"), now), secs(120));
        assert_eq!(retry_after(503, Some(" 7 "), now), secs(7));
        assert_eq!(retry_after(429, Some("0"), now), Some(MIN_RETRY_AFTER));
        assert_eq!(retry_after(429, Some("86400"), now), Some(MAX_RETRY_AFTER));
        assert_eq!(
            retry_after(429, Some("99999999999999999999999"), now),
            Some(MAX_RETRY_AFTER),
            "more digits than a u64 is long, not an error"
        );
        let date = httpdate::fmt_http_date(now + Duration::from_secs(90));
        assert_eq!(retry_after(503, Some(&date), now), secs(90));
        let past = httpdate::fmt_http_date(now - Duration::from_secs(90));
        assert_eq!(retry_after(503, Some(&past), now), Some(MIN_RETRY_AFTER));
        for junk in ["", "-5", "1.5", "soon", "12abc", "0x10"] {
            assert_eq!(retry_after(429, Some(junk), now), None, "{junk:?}");
        }
        assert_eq!(retry_after(429, None, now), None);
        for other in [408, 500, 502, 504, 202, 404] {
            assert_eq!(retry_after(other, Some("120"), now), None, "{other}");
        }
        assert_eq!(
            verdict(429, "slow down", Some("120"), now),
            Verdict::RetryAfter(
                "the collector answered 429: slow down; it asked to retry after 120 s".into(),
                Duration::from_secs(120)
            )
        );
        assert_eq!(
            verdict(500, "", Some("120"), now),
            Verdict::Retry("the collector answered 500".into())
        );
        assert_eq!(verdict(202, "", Some("120"), now), Verdict::Delivered);
    }

    #[test]
    fn reasons_name_the_status_and_the_body_excerpt() {
        assert_eq!(
            classify(404, "no such tenant"),
            Verdict::Park("the collector answered 404: no such tenant".into())
        );
        assert_eq!(excerpt(b"a\nb\x00c\xff", 100), "a b c\u{fffd}");
        assert_eq!(excerpt(b"abcdef", 3), "abc");
    }
}
