//! The `[delivery]` settings, checked before anything is opened, and the spool configuration
//! the worker's retries follow.

use std::time::Duration;

use cairn::spool::{BackoffPolicy, QueueName, SpoolConfig, MAX_ACK_IDS};

use super::credentials::Credentials;

/// The spool config the store is opened with: the delivery retry backoff of `[delivery]`.
pub(crate) fn spool_config(d: &crate::config::Delivery) -> SpoolConfig {
    SpoolConfig {
        backoff: BackoffPolicy {
            base: Duration::from_millis(d.retry_base_ms),
            cap: Duration::from_millis(d.retry_cap_ms),
        },
    }
}

/// Checks `[delivery]` and builds the worker's settings, or `None` when delivery is off (no
/// `url`). One line per problem, naming the key; never the URL or the token.
pub(crate) fn settings(d: &crate::config::Delivery) -> Result<Option<Settings>, Vec<String>> {
    let Some(url) = &d.url else {
        return Ok(None);
    };
    let mut problems = Vec::new();
    let parsed = reqwest::Url::parse(url).ok().filter(|u| {
        // No credential of either kind: a user alone, or a password alone (`http://:pw@…`).
        matches!(u.scheme(), "http" | "https")
            && u.host().is_some()
            && u.username().is_empty()
            && u.password().is_none()
    });
    if parsed.is_none() {
        // The URL itself is not repeated: it may hold a secret.
        problems.push(
            "delivery.url: not an http:// or https:// URL with a host and without credentials \
             (put the token in delivery.token, CAIRN_DELIVERY__TOKEN or delivery.token_file)"
                .to_owned(),
        );
    }
    let queue = QueueName::new(d.queue.clone());
    if let Err(e) = &queue {
        problems.push(format!("delivery.queue: {e}"));
    }
    if !(1..=MAX_ACK_IDS.min(cairn::spool::MAX_BATCH)).contains(&d.batch) {
        problems.push("delivery.batch: must be between 1 and 1000".into());
    }
    for (name, v) in [
        ("delivery.connect_timeout_ms", d.connect_timeout_ms),
        ("delivery.timeout_ms", d.timeout_ms),
        ("delivery.retry_base_ms", d.retry_base_ms),
        ("delivery.poll_ms", d.poll_ms),
        ("delivery.max_response_bytes", d.max_response_bytes as u64),
        ("delivery.max_batch_bytes", d.max_batch_bytes as u64),
    ] {
        if v == 0 {
            problems.push(format!("{name}: must be at least 1"));
        }
    }
    if d.retry_cap_ms < d.retry_base_ms {
        problems.push("delivery.retry_cap_ms: must be at least delivery.retry_base_ms".into());
    }
    let credentials = match Credentials::load(d.token_file.clone(), d.token.clone()) {
        Ok(c) => Some(c),
        Err(e) => {
            problems.push(e);
            None
        }
    };
    match (parsed, queue, credentials) {
        (Some(url), Ok(queue), Some(credentials)) if problems.is_empty() => Ok(Some(Settings {
            url,
            queue,
            credentials,
            batch: d.batch,
            max_batch_bytes: d.max_batch_bytes,
            connect_timeout: Duration::from_millis(d.connect_timeout_ms),
            timeout: Duration::from_millis(d.timeout_ms),
            max_response_bytes: d.max_response_bytes,
            poll: Duration::from_millis(d.poll_ms),
            backoff: spool_config(d).backoff,
        })),
        _ => Err(problems),
    }
}

/// Checked delivery settings.
pub(crate) struct Settings {
    pub(super) url: reqwest::Url,
    pub(super) queue: QueueName,
    pub(super) credentials: Credentials,
    pub(super) batch: usize,
    /// Most bytes of JSON of a batch's events, its first event aside.
    pub(super) max_batch_bytes: usize,
    pub(super) connect_timeout: Duration,
    pub(super) timeout: Duration,
    pub(super) max_response_bytes: usize,
    pub(super) poll: Duration,
    /// The pause after a refused token (`delivery.retry_base_ms` doubling to `retry_cap_ms`).
    pub(super) backoff: BackoffPolicy,
}
