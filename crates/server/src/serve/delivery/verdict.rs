//! What a collector's answer means for a run: a pure decision, tested on its own.

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
    fn reasons_name_the_status_and_the_body_excerpt() {
        assert_eq!(
            classify(404, "no such tenant"),
            Verdict::Park("the collector answered 404: no such tenant".into())
        );
        assert_eq!(excerpt(b"a\nb\x00c\xff", 100), "a b c\u{fffd}");
        assert_eq!(excerpt(b"abcdef", 3), "abc");
    }
}
