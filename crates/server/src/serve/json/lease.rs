//! The bodies of a lease's life: claim, heartbeat, ack and nack, the run state they leave,
//! and what their request bodies become.

use std::time::Duration;

use cairn::spool::{self, LeaseInfo};
use cairn::{ConsumerId, LeaseToken, NackKind};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::bytes::{bytes_out, utf8_parts};
use crate::serve::error::ApiError;

/// A run's lease.
#[derive(Serialize, ToSchema)]
pub(crate) struct LeaseOut {
    /// Who holds it.
    pub(crate) consumer: String,
    /// When it expires.
    pub(crate) expires_at_us: i64,
}

impl From<&LeaseInfo> for LeaseOut {
    fn from(l: &LeaseInfo) -> Self {
        Self {
            consumer: l.consumer.to_string(),
            expires_at_us: l.expires_at.as_unix_micros(),
        }
    }
}

/// `POST /v1/queues/{queue}/claim`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ClaimRequest {
    /// Who claims (recorded on the run), e.g. `host/pid/worker`: 1 to 256 bytes of UTF-8
    /// without control characters.
    #[schema(min_length = 1, pattern = r"^[^\u0000-\u001F\u007F-\u009F]*$")]
    pub(crate) consumer: String,
    /// Lease length in milliseconds (1 s to 24 h, default 30 s).
    #[schema(minimum = 1000, maximum = 86_400_000)]
    #[serde(default, deserialize_with = "crate::serve::integer::opt")]
    pub(crate) lease_ms: Option<u64>,
    /// Most runs to claim (1 to 1000, default 1).
    #[schema(minimum = 1, maximum = 1000)]
    #[serde(default, deserialize_with = "crate::serve::integer::opt")]
    pub(crate) limit: Option<usize>,
}

/// One claimed run.
#[derive(Serialize, ToSchema)]
pub(crate) struct ClaimedOut {
    /// The run.
    pub(crate) run_id: String,
    /// Its dedup key's parts, when they are UTF-8 parts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) key_parts: Option<Vec<String>>,
    /// The payload as text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) payload: Option<String>,
    /// The payload, base64 (when not UTF-8).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) payload_b64: Option<String>,
    /// Which claim this is (1 for the first).
    pub(crate) attempt: u32,
    /// The lease token for heartbeat, ack and nack.
    pub(crate) token: String,
    /// When the lease expires unless extended.
    pub(crate) expires_at_us: i64,
}

impl From<&cairn::Claimed> for ClaimedOut {
    fn from(c: &cairn::Claimed) -> Self {
        let (payload, payload_b64) = bytes_out(&c.payload);
        Self {
            run_id: c.run_id.to_string(),
            key_parts: utf8_parts(c.dedup_key.parts()),
            payload,
            payload_b64,
            attempt: c.attempt,
            token: c.token.to_string(),
            expires_at_us: c.expires_at.as_unix_micros(),
        }
    }
}

/// What a claim handed out.
#[derive(Serialize, ToSchema)]
pub(crate) struct ClaimResponse {
    /// The claimed runs; empty when nothing is due.
    pub(crate) runs: Vec<ClaimedOut>,
}

/// `POST /v1/runs/{id}/heartbeat`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct HeartbeatRequest {
    /// The lease token the claim returned.
    #[schema(
        pattern = r"^(?:[0-9a-fA-F]{32}|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})$"
    )]
    pub(crate) token: String,
    /// New lease length in milliseconds (1 s to 24 h, default 30 s).
    #[schema(minimum = 1000, maximum = 86_400_000)]
    #[serde(default, deserialize_with = "crate::serve::integer::opt")]
    pub(crate) lease_ms: Option<u64>,
}

/// What a heartbeat did.
#[derive(Serialize, ToSchema)]
pub(crate) struct HeartbeatResponse {
    /// The lease's new expiry.
    pub(crate) expires_at_us: i64,
    /// Whether a cancel was requested: stop and nack.
    pub(crate) cancel_requested: bool,
}

/// `POST /v1/runs/{id}/ack`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct AckRequest {
    /// The lease token the claim returned.
    #[schema(
        pattern = r"^(?:[0-9a-fA-F]{32}|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})$"
    )]
    pub(crate) token: String,
}

/// `POST /v1/runs/{id}/nack`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NackRequest {
    /// The lease token the claim returned.
    #[schema(
        pattern = r"^(?:[0-9a-fA-F]{32}|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})$"
    )]
    pub(crate) token: String,
    /// `retryable` (default), `permanent` or `failed`.
    pub(crate) kind: Option<String>,
    /// Why (recorded on the run with each NUL character replaced by U+FFFD, cut to 4096
    /// bytes; never refused).
    pub(crate) reason: Option<String>,
    /// When the run is retried (kind `retryable` with attempts left), it is due this many
    /// milliseconds from now (0 to 24 h) instead of after the queue's backoff. The attempt is
    /// spent as with any retry, so the last attempt still parks the run; the other kinds never
    /// retry, so it changes nothing for them.
    #[schema(minimum = 0, maximum = 86_400_000)]
    #[serde(default, deserialize_with = "crate::serve::integer::opt")]
    pub(crate) retry_after_ms: Option<u64>,
}

/// A run's state after ack, nack or cancel.
#[derive(Serialize, ToSchema)]
pub(crate) struct RunStateResponse {
    /// The run.
    pub(crate) run_id: String,
    /// Its state now (`claimed` after a cancel only requested it).
    pub(crate) state: String,
    /// For a retry, when the next claim may take the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) retry_at_us: Option<i64>,
    /// Whether a cancel is requested (cancel of a claimed run).
    pub(crate) cancel_requested: bool,
}

/// A lease length in milliseconds, or the default, checked as the spool checks it.
pub(crate) fn lease(ms: Option<u64>) -> Result<Duration, ApiError> {
    let lease = ms.map_or(DEFAULT_LEASE, Duration::from_millis);
    spool::check_lease(lease)?;
    Ok(lease)
}

/// The lease a claim or heartbeat gets without `lease_ms`.
pub(crate) const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// A lease token as the claim returned it.
pub(crate) fn lease_token(s: &str) -> Result<LeaseToken, ApiError> {
    Ok(LeaseToken::parse(s)?)
}

impl ClaimRequest {
    /// Who claims, the lease and the most runs to claim.
    pub(crate) fn into_claim(self) -> Result<(ConsumerId, Duration, usize), ApiError> {
        let consumer = ConsumerId::new(self.consumer)?;
        let lease = lease(self.lease_ms)?;
        let limit = self.limit.unwrap_or(1);
        spool::check_limit(limit)?;
        Ok((consumer, lease, limit))
    }
}

impl HeartbeatRequest {
    /// The token and the new lease.
    pub(crate) fn into_heartbeat(self) -> Result<(LeaseToken, Duration), ApiError> {
        Ok((lease_token(&self.token)?, lease(self.lease_ms)?))
    }
}

/// A nack body in core types.
#[derive(Debug)]
pub(crate) struct Nack {
    /// The lease token.
    pub(crate) token: LeaseToken,
    /// Where the run goes.
    pub(crate) kind: NackKind,
    /// The kind as the request named it (the metrics label).
    pub(crate) label: &'static str,
    /// Why (empty when not given).
    pub(crate) reason: String,
    /// A retry's own delay (`retry_after_ms`), checked as the spool checks it.
    pub(crate) retry_after: Option<Duration>,
}

impl NackRequest {
    /// The token, the kind and the reason.
    pub(crate) fn into_nack(self) -> Result<Nack, ApiError> {
        let token = lease_token(&self.token)?;
        let (kind, label) = match self.kind.as_deref().unwrap_or("retryable") {
            "retryable" => (NackKind::Retryable, "retryable"),
            "permanent" => (NackKind::Permanent, "permanent"),
            "failed" => (NackKind::Failed, "failed"),
            _ => {
                return Err(ApiError::invalid(
                    "nack kind",
                    "expected one of retryable, permanent, failed",
                ))
            }
        };
        let retry_after = match self.retry_after_ms.map(Duration::from_millis) {
            Some(delay) => {
                spool::check_retry_delay(delay)?;
                // Only a retryable nack is retried: the delay of another kind has no effect.
                (kind == NackKind::Retryable).then_some(delay)
            }
            None => None,
        };
        Ok(Nack {
            token,
            kind,
            label,
            reason: self.reason.unwrap_or_default(),
            retry_after,
        })
    }
}
