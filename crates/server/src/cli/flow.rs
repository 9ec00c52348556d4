//! `cairn queue …` (pause, resume and limits of a queue) and `cairn schedule …` (the cron
//! schedules stored in the store): the flow-control commands, each a thin call of the spool's
//! method of the same name, printing one plain line per queue or schedule.

use std::io::Write;
use std::time::Duration;

use cairn::spool::{
    check_limits, CatchUp, PartitionKey, QueueFlow, QueueLimits, RateLimit, Schedule, ScheduleInfo,
    ScheduleName, MIN_RATE_INTERVAL,
};
use cairn::{EnqueueOptions, Error, QueueName, SupersedeGroup};
use clap::{Args, Subcommand};

use crate::error::CliError;
use crate::open::{open, IfMissing};
use crate::shown::{format_duration, word};
use cairn::DatabaseUrl;

/// `cairn queue …`.
#[derive(Subcommand)]
pub(crate) enum QueueAction {
    /// Print every queue that is paused or has a limit (a queue set back to running and
    /// unlimited is not listed), one line each:
    /// `<queue> running|paused max_claimed=N|- per_partition=N|- rate=N/DURATION|-`.
    List,
    /// Print one queue's flow line (a queue nobody set anything for is running, unlimited).
    Show {
        /// The queue.
        queue: String,
    },
    /// Pause the queue in every process: claims hand out nothing until `cairn queue resume`
    /// (claimed runs finish as usual; enqueues still land). Prints the queue's line.
    Pause {
        /// The queue.
        queue: String,
    },
    /// Resume a paused queue and wake its consumers. Prints the queue's line.
    Resume {
        /// The queue.
        queue: String,
    },
    /// Replace the queue's limits with exactly those given (none given: no limits), enforced
    /// by every later claim in every process. Prints the queue's line.
    Limits(LimitArgs),
}

/// `cairn queue limits`.
#[derive(Args)]
pub(crate) struct LimitArgs {
    /// The queue.
    queue: String,
    /// At most N runs of the queue claimed at once, across all consumers and processes.
    #[arg(long, value_name = "N")]
    max_claimed: Option<u32>,
    /// At most N runs sharing one partition key claimed at once.
    #[arg(long, value_name = "N")]
    per_partition: Option<u32>,
    /// At most N runs handed out in any window of DURATION, as `N/DURATION` (`10/1s`, `600/1m`,
    /// `5/250ms`): N from 1 to 1000000; DURATION a whole number with the unit `ms`, `s`, `m`
    /// or `h`, from 1ms to 24h (no smaller unit: a window is at least a millisecond).
    #[arg(long, value_name = "N/DURATION")]
    rate: Option<String>,
}

/// `cairn schedule …`.
#[derive(Subcommand)]
pub(crate) enum ScheduleAction {
    /// Print every schedule, one line each:
    /// `<name> <queue> "<cron>" <zone> catch_up=… high_water=<time> revision=N`.
    List,
    /// Print one schedule's line.
    Show {
        /// The schedule's name.
        name: String,
    },
    /// Create or replace a schedule: every tick of the cron expression enqueues one run on the
    /// queue, exactly once across every process running a scheduler (`cairn serve` does).
    /// Replacing keeps its progress: no past tick is enqueued again. Prints its line.
    Put(PutArgs),
    /// Remove a schedule (the runs it enqueued stay). Prints `removed <name>`, or fails when
    /// there is none.
    Remove {
        /// The schedule's name.
        name: String,
    },
}

/// `cairn schedule put`.
#[derive(Args)]
pub(crate) struct PutArgs {
    /// The schedule's name.
    name: String,
    /// The cron expression: 5 fields (`*/5 * * * *`) or 6 with seconds first.
    #[arg(long)]
    cron: String,
    /// The IANA time zone the expression is read in.
    #[arg(long, default_value = "UTC")]
    tz: String,
    /// The queue each tick's run goes to.
    #[arg(long)]
    queue: String,
    /// Each run's payload, stored as the argument's UTF-8 bytes.
    #[arg(long, default_value = "")]
    payload: String,
    /// Each run's priority.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    priority: i32,
    /// Each run's attempt limit (default: the spool's).
    #[arg(long)]
    max_attempts: Option<u32>,
    /// Each run's supersede group: a tick's run supersedes the previous tick's still queued.
    #[arg(long, value_name = "GROUP")]
    supersede: Option<String>,
    /// Each run's partition key.
    #[arg(long, value_name = "KEY")]
    partition: Option<String>,
    /// Ticks missed while no scheduler ran: `none`, `latest`, or `all:N` (the latest N).
    #[arg(long, default_value = "none", value_name = "POLICY")]
    catch_up: String,
}

/// Runs `cairn queue …`.
pub(crate) async fn queue(
    target: &DatabaseUrl,
    action: QueueAction,
    out: &mut impl Write,
) -> Result<(), CliError> {
    match action {
        QueueAction::List => {
            let store = open(target, IfMissing::Refuse).await?;
            for (queue, flow) in store.spool().queue_flows().await? {
                writeln!(out, "{}", flow_line(&queue, &flow))?;
            }
        }
        QueueAction::Show { queue } => {
            let queue = QueueName::new(queue)?;
            let store = open(target, IfMissing::Refuse).await?;
            let flow = store.spool().queue_flow(&queue).await?;
            writeln!(out, "{}", flow_line(&queue, &flow))?;
        }
        QueueAction::Pause { queue } => {
            let queue = QueueName::new(queue)?;
            let store = open(target, IfMissing::Refuse).await?;
            let flow = store.spool().set_queue_paused(&queue, true).await?;
            writeln!(out, "{}", flow_line(&queue, &flow))?;
        }
        QueueAction::Resume { queue } => {
            let queue = QueueName::new(queue)?;
            let store = open(target, IfMissing::Refuse).await?;
            let flow = store.spool().set_queue_paused(&queue, false).await?;
            writeln!(out, "{}", flow_line(&queue, &flow))?;
        }
        QueueAction::Limits(args) => {
            let queue = QueueName::new(args.queue)?;
            let limits = QueueLimits {
                max_claimed: args.max_claimed,
                per_partition: args.per_partition,
                rate: args.rate.as_deref().map(parse_rate).transpose()?,
            };
            check_limits(&limits)?;
            let store = open(target, IfMissing::Refuse).await?;
            let flow = store.spool().set_queue_limits(&queue, &limits).await?;
            writeln!(out, "{}", flow_line(&queue, &flow))?;
        }
    }
    Ok(())
}

/// Runs `cairn schedule …`.
pub(crate) async fn schedule(
    target: &DatabaseUrl,
    action: ScheduleAction,
    out: &mut impl Write,
) -> Result<(), CliError> {
    match action {
        ScheduleAction::List => {
            let store = open(target, IfMissing::Refuse).await?;
            for info in store.spool().schedules().await? {
                writeln!(out, "{}", schedule_line(&info))?;
            }
        }
        ScheduleAction::Show { name } => {
            // Any name a store may hold, an earlier build's too (`put` checks more).
            let name = ScheduleName::from_stored(name)?;
            let store = open(target, IfMissing::Refuse).await?;
            let info = store
                .spool()
                .schedule(&name)
                .await?
                .ok_or_else(|| Error::NotFound {
                    what: format!("schedule {name}"),
                })?;
            writeln!(out, "{}", schedule_line(&info))?;
        }
        ScheduleAction::Put(args) => {
            let schedule = Schedule {
                name: ScheduleName::new(args.name)?,
                cron: args.cron,
                time_zone: args.tz,
                queue: QueueName::new(args.queue)?,
                payload: args.payload.into_bytes(),
                options: EnqueueOptions {
                    supersede_group: args
                        .supersede
                        .map(|g| SupersedeGroup::from_parts([g]))
                        .transpose()?,
                    max_attempts: args.max_attempts,
                    priority: args.priority,
                    partition_key: args.partition.map(PartitionKey::new).transpose()?,
                    not_before: None,
                    traceparent: None,
                },
                catch_up: parse_catch_up(&args.catch_up)?,
            };
            let store = open(target, IfMissing::Create).await?;
            let info = store.spool().put_schedule(&schedule).await?;
            writeln!(out, "{}", schedule_line(&info))?;
        }
        ScheduleAction::Remove { name } => {
            // Any name a store may hold, so an earlier build's can still be removed.
            let name = ScheduleName::from_stored(name)?;
            let store = open(target, IfMissing::Refuse).await?;
            if !store.spool().remove_schedule(&name).await? {
                return Err(Error::NotFound {
                    what: format!("schedule {name}"),
                }
                .into());
            }
            writeln!(out, "removed {}", word(name.as_str()))?;
        }
    }
    Ok(())
}

/// A queue's flow as one line (a name that is not plain quoted, see [`word`]).
pub(crate) fn flow_line(queue: &QueueName, flow: &QueueFlow) -> String {
    let n = |v: Option<u32>| v.map_or_else(|| "-".to_owned(), |v| v.to_string());
    let rate = flow.limits.rate.map_or_else(
        || "-".to_owned(),
        |r| format!("{}/{}", r.claims, format_duration(r.per)),
    );
    format!(
        "{} {} max_claimed={} per_partition={} rate={rate}",
        word(queue.as_str()),
        if flow.paused { "paused" } else { "running" },
        n(flow.limits.max_claimed),
        n(flow.limits.per_partition),
    )
}

/// A schedule as one line (names that are not plain quoted, see [`word`]).
pub(crate) fn schedule_line(info: &ScheduleInfo) -> String {
    let s = &info.schedule;
    format!(
        "{} {} {:?} {} catch_up={} high_water={} revision={}",
        word(s.name.as_str()),
        word(s.queue.as_str()),
        s.cron,
        word(&s.time_zone),
        catch_up_text(s.catch_up),
        info.high_water,
        info.revision
    )
}

/// `none`, `latest` or `all:N`.
pub(crate) fn catch_up_text(c: CatchUp) -> String {
    match c {
        CatchUp::None => "none".to_owned(),
        CatchUp::Latest => "latest".to_owned(),
        CatchUp::All { cap } => format!("all:{cap}"),
    }
}

/// Reads `none`, `latest` or `all:N`.
pub(crate) fn parse_catch_up(text: &str) -> Result<CatchUp, Error> {
    match text {
        "none" => Ok(CatchUp::None),
        "latest" => Ok(CatchUp::Latest),
        _ => match text.strip_prefix("all:").map(str::parse::<u32>) {
            Some(Ok(cap)) => Ok(CatchUp::All { cap }),
            _ => Err(Error::invalid(
                "catch-up policy",
                format!("{text:?} is not one of none, latest, all:N"),
            )),
        },
    }
}

/// Reads `N/DURATION` (`10/1s`, `600/1m`, `5/250ms`); the range of each part is
/// [`check_limits`]'s, checked by the caller.
pub(crate) fn parse_rate(text: &str) -> Result<RateLimit, Error> {
    let bad = || {
        Error::invalid(
            "rate limit",
            format!("{text:?} is not N/DURATION (e.g. 10/1s, 600/1m, 5/250ms; units ms, s, m, h)"),
        )
    };
    let (n, per) = text.split_once('/').ok_or_else(bad)?;
    let claims: u32 = n.trim().parse().map_err(|_| bad())?;
    let per = per.trim();
    if per.ends_with("us") || per.ends_with("µs") || per.ends_with("ns") {
        return Err(Error::invalid(
            "rate interval",
            format!(
                "{per:?}: the unit must be ms, s, m or h (a rate window is at least \
                 {MIN_RATE_INTERVAL:?})"
            ),
        ));
    }
    let per = parse_duration(per).ok_or_else(bad)?;
    Ok(RateLimit { claims, per })
}

/// A duration written as a whole number and a unit: `ms`, `s`, `m`, `h`.
fn parse_duration(text: &str) -> Option<Duration> {
    let digits = text.find(|c: char| !c.is_ascii_digit())?;
    let (n, unit) = text.split_at(digits);
    let n: u64 = n.parse().ok()?;
    let micros = match unit {
        "ms" => n.checked_mul(1_000),
        "s" => n.checked_mul(1_000_000),
        "m" => n.checked_mul(60_000_000),
        "h" => n.checked_mul(3_600_000_000),
        _ => None,
    }?;
    Some(Duration::from_micros(micros))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_read_and_print_back() {
        for (text, claims, per, shown) in [
            ("10/1s", 10, Duration::from_secs(1), "10/1s"),
            ("600/1m", 600, Duration::from_secs(60), "600/1m"),
            ("5/250ms", 5, Duration::from_millis(250), "5/250ms"),
            ("3/1500ms", 3, Duration::from_millis(1500), "3/1500ms"),
            ("1/2h", 1, Duration::from_secs(7200), "1/2h"),
            ("7/90s", 7, Duration::from_secs(90), "7/90s"),
        ] {
            let rate = parse_rate(text).unwrap();
            assert_eq!((rate.claims, rate.per), (claims, per), "{text}");
            assert_eq!(
                format!("{}/{}", rate.claims, format_duration(rate.per)),
                shown
            );
        }
        for bad in [
            "10", "10/", "/1s", "x/1s", "10/1", "10/1d", "10/-1s", "10/1.5s",
        ] {
            assert!(parse_rate(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn units_below_a_millisecond_are_refused() {
        for bad in [
            "10/500us",
            "10/1000us",
            "10/1500us",
            "10/900µs",
            "10/1000000ns",
        ] {
            let e = parse_rate(bad).unwrap_err().to_string();
            assert!(
                e.contains("rate interval") && e.contains("ms, s, m or h"),
                "{bad}: {e}"
            );
        }
        assert_eq!(
            parse_rate("10/1ms").unwrap().per,
            cairn::spool::MIN_RATE_INTERVAL
        );
        // The range is the core's: the CLI checks it with `check_limits` before the store.
        let day = parse_rate("1/24h").unwrap();
        assert!(check_limits(&QueueLimits {
            rate: Some(day),
            ..QueueLimits::default()
        })
        .is_ok());
        let over = parse_rate("1/1441m").unwrap();
        assert!(check_limits(&QueueLimits {
            rate: Some(over),
            ..QueueLimits::default()
        })
        .is_err());
    }

    #[test]
    fn catch_up_policies_read_and_print_back() {
        for text in ["none", "latest", "all:5"] {
            assert_eq!(catch_up_text(parse_catch_up(text).unwrap()), text);
        }
        for bad in ["", "all", "all:", "all:x", "some"] {
            assert!(parse_catch_up(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_flow_line_names_every_limit() {
        let q = QueueName::new("gate").unwrap();
        assert_eq!(
            flow_line(&q, &QueueFlow::default()),
            "gate running max_claimed=- per_partition=- rate=-"
        );
        let flow = QueueFlow {
            paused: true,
            limits: QueueLimits {
                max_claimed: Some(3),
                per_partition: Some(1),
                rate: Some(RateLimit {
                    claims: 10,
                    per: Duration::from_secs(1),
                }),
            },
            updated_at: None,
        };
        assert_eq!(
            flow_line(&q, &flow),
            "gate paused max_claimed=3 per_partition=1 rate=10/1s"
        );
    }
}
