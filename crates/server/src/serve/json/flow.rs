//! The bodies of the flow-control routes (`/v1/queues/{queue}/pause`, `…/resume`,
//! `…/limits`, `/v1/queues`) and of the schedule routes (`/v1/schedules…`).

use std::time::Duration;

use cairn::spool::{
    self, CatchUp, PartitionKey, QueueFlow, QueueLimits, RateLimit, Schedule, ScheduleInfo,
    ScheduleName,
};
use cairn::{EnqueueOptions, QueueName, SupersedeGroup};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::bytes::{bytes_in, bytes_out, utf8_parts};

/// A queue's stored flow.
#[derive(Serialize, ToSchema)]
pub(crate) struct QueueFlowOut {
    /// The queue.
    pub(crate) queue: String,
    /// Whether claims of the queue hand out nothing until it is resumed.
    pub(crate) paused: bool,
    /// At most this many runs claimed at once, across every consumer (absent: no limit).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) max_claimed: Option<u32>,
    /// At most this many runs sharing one partition key claimed at once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) per_partition: Option<u32>,
    /// At most `claims` runs handed out in any window of `per_us` microseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) rate: Option<RateOut>,
    /// When the stored flow last changed (absent: none is stored — never set, or set back to
    /// running and unlimited).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) updated_at_us: Option<i64>,
}

/// A rate limit.
#[derive(Serialize, ToSchema)]
pub(crate) struct RateOut {
    /// Runs handed out per window.
    pub(crate) claims: u32,
    /// The window, in microseconds.
    pub(crate) per_us: u64,
}

impl QueueFlowOut {
    /// The body of a queue's flow.
    pub(crate) fn new(queue: &QueueName, flow: &QueueFlow) -> Self {
        Self {
            queue: queue.to_string(),
            paused: flow.paused,
            max_claimed: flow.limits.max_claimed,
            per_partition: flow.limits.per_partition,
            rate: flow.limits.rate.map(|r| RateOut {
                claims: r.claims,
                per_us: u64::try_from(r.per.as_micros()).unwrap_or(u64::MAX),
            }),
            updated_at_us: flow.updated_at.map(|t| t.as_unix_micros()),
        }
    }
}

/// `GET /v1/queues`.
#[derive(Serialize, ToSchema)]
pub(crate) struct QueueFlowsResponse {
    /// Every queue with a stored flow (paused, or with a limit), by name.
    pub(crate) queues: Vec<QueueFlowOut>,
}

/// `PUT /v1/queues/{queue}/limits`: the queue's limits, replaced as a whole (an absent field
/// removes that limit).
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct QueueLimitsIn {
    /// At most this many runs claimed at once, across every consumer and process.
    #[schema(minimum = 1, maximum = 1_000_000)]
    #[serde(default, deserialize_with = "crate::serve::integer::opt")]
    pub(crate) max_claimed: Option<u32>,
    /// At most this many runs sharing one partition key claimed at once.
    #[schema(minimum = 1, maximum = 1_000_000)]
    #[serde(default, deserialize_with = "crate::serve::integer::opt")]
    pub(crate) per_partition: Option<u32>,
    /// At most `claims` runs handed out in any window of `per_us` microseconds.
    #[serde(default)]
    pub(crate) rate: Option<RateIn>,
}

/// A rate limit in a request.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RateIn {
    /// Runs handed out per window.
    #[schema(minimum = 1, maximum = 1_000_000)]
    #[serde(deserialize_with = "crate::serve::integer::one")]
    pub(crate) claims: u32,
    /// The window in microseconds: 1 ms to one day.
    #[schema(minimum = 1000, maximum = 86_400_000_000_u64)]
    #[serde(deserialize_with = "crate::serve::integer::one")]
    pub(crate) per_us: u64,
}

impl QueueLimitsIn {
    /// The limits, checked as the spool checks them.
    pub(crate) fn into_limits(self) -> cairn::Result<QueueLimits> {
        let limits = QueueLimits {
            max_claimed: self.max_claimed,
            per_partition: self.per_partition,
            rate: self.rate.map(|r| RateLimit {
                claims: r.claims,
                per: Duration::from_micros(r.per_us),
            }),
        };
        spool::check_limits(&limits)?;
        Ok(limits)
    }
}

/// A stored schedule.
#[derive(Serialize, ToSchema)]
pub(crate) struct ScheduleOut {
    /// Its name.
    pub(crate) name: String,
    /// Its cron expression (5 fields, or 6 with seconds first).
    pub(crate) cron: String,
    /// The IANA time zone the expression is read in.
    pub(crate) time_zone: String,
    /// The queue each tick's run goes to.
    pub(crate) queue: String,
    /// Each run's payload, as text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) payload: Option<String>,
    /// Each run's payload, base64 (when not UTF-8).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) payload_b64: Option<String>,
    /// Each run's priority.
    pub(crate) priority: i32,
    /// Each run's attempt limit (absent: the spool's default).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) max_attempts: Option<u32>,
    /// Each run's partition key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) partition_key: Option<String>,
    /// Each run's supersede group, as its parts (when they are UTF-8 text, as the API writes
    /// them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) supersede_group: Option<Vec<String>>,
    /// `none`, `latest` or `all`: ticks missed while no scheduler ran.
    pub(crate) catch_up: &'static str,
    /// With `catch_up` `all`: most missed ticks enqueued.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) catch_up_cap: Option<u32>,
    /// The latest tick enqueued (or the creation time): no tick at or before it is enqueued
    /// again.
    pub(crate) high_water_us: i64,
    /// Bumped by every edit.
    pub(crate) revision: u64,
    /// When it was created.
    pub(crate) created_at_us: i64,
    /// When it was last stored.
    pub(crate) updated_at_us: i64,
}

impl From<&ScheduleInfo> for ScheduleOut {
    fn from(info: &ScheduleInfo) -> Self {
        let s = &info.schedule;
        let (payload, payload_b64) = bytes_out(&s.payload);
        let (catch_up, catch_up_cap) = match s.catch_up {
            CatchUp::None => ("none", None),
            CatchUp::Latest => ("latest", None),
            CatchUp::All { cap } => ("all", Some(cap)),
        };
        Self {
            name: s.name.to_string(),
            cron: s.cron.clone(),
            time_zone: s.time_zone.clone(),
            queue: s.queue.to_string(),
            payload,
            payload_b64,
            priority: s.options.priority,
            max_attempts: s.options.max_attempts,
            partition_key: s.options.partition_key.as_ref().map(ToString::to_string),
            supersede_group: s
                .options
                .supersede_group
                .as_ref()
                .and_then(|g| utf8_parts(g.parts())),
            catch_up,
            catch_up_cap,
            high_water_us: info.high_water.as_unix_micros(),
            revision: info.revision,
            created_at_us: info.created_at.as_unix_micros(),
            updated_at_us: info.updated_at.as_unix_micros(),
        }
    }
}

/// `GET /v1/schedules`.
#[derive(Serialize, ToSchema)]
pub(crate) struct SchedulesResponse {
    /// Every stored schedule, by name.
    pub(crate) schedules: Vec<ScheduleOut>,
}

/// `PUT /v1/schedules/{name}`: the whole schedule (created, or replaced keeping its
/// progress). At most one of `payload` and `payload_b64` (neither: an empty payload).
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ScheduleIn {
    /// A cron expression: 5 fields (minute hour day-of-month month day-of-week) or 6 (seconds
    /// first). One that does not parse is answered 422 `invalid_schedule`.
    #[schema(min_length = 1)]
    pub(crate) cron: String,
    /// An IANA time zone name (default `UTC`). An unknown one is answered 422
    /// `invalid_schedule`.
    #[serde(default)]
    #[schema(min_length = 1)]
    pub(crate) time_zone: Option<String>,
    /// The queue each tick's run goes to: 1 to 128 bytes without control characters.
    #[schema(min_length = 1, pattern = r"^[^\u0000-\u001F\u007F-\u009F]*$")]
    pub(crate) queue: String,
    /// Each run's payload, as text.
    #[serde(default)]
    pub(crate) payload: Option<String>,
    /// Each run's payload, base64.
    #[serde(default)]
    #[schema(
        content_encoding = "base64",
        pattern = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/][AQgw]==|[A-Za-z0-9+/]{2}[AEIMQUYcgkosw048]=)?$"
    )]
    pub(crate) payload_b64: Option<String>,
    /// Each run's priority (default 0).
    #[serde(default, deserialize_with = "crate::serve::integer::opt")]
    pub(crate) priority: Option<i32>,
    /// Each run's attempt limit (1 to 1000; default the spool's).
    #[schema(minimum = 1, maximum = 1000)]
    #[serde(default, deserialize_with = "crate::serve::integer::opt")]
    pub(crate) max_attempts: Option<u32>,
    /// Each run's supersede group, as parts: at least one, at most 1024 bytes encoded as an
    /// enqueue's `supersede_group` is.
    #[serde(default)]
    #[schema(min_items = 1)]
    pub(crate) supersede_group: Option<Vec<String>>,
    /// Each run's partition key: 1 to 256 bytes without control characters or bidirectional
    /// controls.
    #[serde(default)]
    #[schema(
        min_length = 1,
        pattern = r"^[^\u0000-\u001F\u007F-\u009F\u061C\u200E\u200F\u202A-\u202E\u2066-\u2069]*$"
    )]
    pub(crate) partition_key: Option<String>,
    /// Ticks missed while no scheduler ran: `none` (default), `latest`, or `all` (the latest
    /// `catch_up_cap` of them).
    #[serde(default)]
    pub(crate) catch_up: Option<CatchUpIn>,
    /// With `catch_up` `all`: most missed ticks enqueued (default 100).
    #[schema(minimum = 1, maximum = 1000)]
    #[serde(default, deserialize_with = "crate::serve::integer::opt")]
    pub(crate) catch_up_cap: Option<u32>,
}

/// A catch-up policy.
#[derive(Deserialize, ToSchema, Clone, Copy)]
#[serde(rename_all = "lowercase")]
pub(crate) enum CatchUpIn {
    /// Skip missed ticks.
    None,
    /// Enqueue the latest missed tick.
    Latest,
    /// Enqueue the latest `catch_up_cap` missed ticks.
    All,
}

/// The cap of `catch_up: all` when the request names none.
const DEFAULT_CATCH_UP_CAP: u32 = 100;

impl ScheduleIn {
    /// The schedule to store under `name`, with every rule the document states checked.
    pub(crate) fn into_schedule(self, name: ScheduleName) -> cairn::Result<Schedule> {
        let payload = match (self.payload, self.payload_b64) {
            (None, None) => Vec::new(),
            (p, b) => bytes_in("schedule payload", p, b)?,
        };
        spool::check_payload("schedule payload", spool::MAX_RUN_PAYLOAD, &payload)?;
        let options = EnqueueOptions {
            supersede_group: self
                .supersede_group
                .map(SupersedeGroup::from_parts)
                .transpose()?,
            not_before: None,
            max_attempts: self.max_attempts,
            priority: self.priority.unwrap_or(0),
            partition_key: self.partition_key.map(PartitionKey::new).transpose()?,
            traceparent: None,
        };
        options.effective_max_attempts()?;
        let catch_up = match (self.catch_up, self.catch_up_cap) {
            (None | Some(CatchUpIn::None), _) => CatchUp::None,
            (Some(CatchUpIn::Latest), _) => CatchUp::Latest,
            (Some(CatchUpIn::All), cap) => CatchUp::All {
                cap: cap.unwrap_or(DEFAULT_CATCH_UP_CAP),
            },
        };
        if let CatchUp::All { cap } = catch_up {
            if cap == 0 || cap > spool::MAX_CATCH_UP {
                return Err(cairn::Error::invalid(
                    "catch-up cap",
                    format!("is {cap}; it must be 1 to {}", spool::MAX_CATCH_UP),
                ));
            }
        }
        Ok(Schedule {
            name,
            cron: self.cron,
            time_zone: self.time_zone.unwrap_or_else(|| "UTC".to_owned()),
            queue: QueueName::new(self.queue)?,
            payload,
            options,
            catch_up,
        })
    }
}
