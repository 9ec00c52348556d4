//! The cron reading (field counts, zones, whole-second ticks), the daylight-saving rule in
//! Europe/Berlin, the checks, and the catch-up rule of [`due_ticks`].

use std::time::{Duration, Instant};

use super::*;
use crate::error::Error;
use crate::spool::{EnqueueOptions, QueueName, ScheduleName, Timestamp, MAX_RUN_PAYLOAD};

fn utc(y: i64, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> Timestamp {
    Timestamp::from_utc(y, mo, d, h, mi, s, 0).expect("a valid UTC time")
}

fn schedule(cron: &str, zone: &str, catch_up: CatchUp) -> Schedule {
    Schedule {
        name: ScheduleName::new("nightly").unwrap(),
        cron: cron.into(),
        time_zone: zone.into(),
        queue: QueueName::new("jobs").unwrap(),
        payload: b"{}".to_vec(),
        options: EnqueueOptions::default(),
        catch_up,
    }
}

fn info(cron: &str, catch_up: CatchUp, high_water: Timestamp) -> ScheduleInfo {
    ScheduleInfo {
        schedule: schedule(cron, "UTC", catch_up),
        high_water,
        revision: 1,
        created_at: high_water,
        updated_at: high_water,
    }
}

/// Every tick in `(from, to]`, found going forward.
fn forward(t: &CronTicks, from: Timestamp, to: Timestamp) -> Vec<Timestamp> {
    let mut out = Vec::new();
    let mut at = from;
    while let Some(next) = t.next_after(at) {
        if next > to {
            break;
        }
        out.push(next);
        at = next;
    }
    out
}

/// Every tick in `(from, to]`, found going back from `to`.
fn backward(t: &CronTicks, from: Timestamp, to: Timestamp) -> Vec<Timestamp> {
    let mut out = Vec::new();
    let mut at = t.latest_at_or_before(to);
    while let Some(tick) = at {
        if tick <= from {
            break;
        }
        out.push(tick);
        at = t.latest_before(tick);
    }
    out.reverse();
    out
}

fn invalid_reason(e: Error) -> String {
    match e {
        Error::InvalidInput { .. } => e.to_string(),
        other => panic!("expected InvalidInput, got {other:?}"),
    }
}

#[test]
fn five_and_six_fields_parse_and_other_counts_are_refused() {
    let minutely = CronTicks::parse("*/15 * * * *", "UTC").unwrap();
    let t = utc(2027, 1, 15, 8, 7, 30);
    assert_eq!(minutely.next_after(t), Some(utc(2027, 1, 15, 8, 15, 0)));
    let secondly = CronTicks::parse("*/10 * * * * *", "UTC").unwrap();
    assert_eq!(secondly.next_after(t), Some(utc(2027, 1, 15, 8, 7, 40)));
    for bad in [
        "* * * *",
        "0 0 * * * * 2027",
        "@hourly",
        "",
        "61 * * * *",
        "* * * * FOO",
    ] {
        let reason = invalid_reason(CronTicks::parse(bad, "UTC").unwrap_err());
        assert!(reason.contains("cron expression"), "{bad}: {reason}");
    }
    let long = "0 ".repeat(MAX_CRON_LEN);
    assert!(invalid_reason(CronTicks::parse(&long, "UTC").unwrap_err()).contains("limit"));
}

#[test]
fn zones_are_iana_names() {
    assert!(CronTicks::parse("0 * * * *", "Europe/Berlin").is_ok());
    assert!(CronTicks::parse("0 * * * *", "America/New_York").is_ok());
    for bad in ["Mars/Olympus_Mons", "", "europe/berlin", "CEST"] {
        let reason = invalid_reason(CronTicks::parse("0 * * * *", bad).unwrap_err());
        assert!(reason.contains("IANA time zone"), "{bad}: {reason}");
    }
}

/// Ticks are whole seconds; a time within a second is after that second's tick.
#[test]
fn ticks_are_whole_seconds_around_fractional_times() {
    let t = CronTicks::parse("* * * * * *", "UTC").unwrap();
    let at = utc(2027, 1, 15, 8, 0, 0);
    let mid = Timestamp::from_unix_micros(at.as_unix_micros() + 500_000);
    assert_eq!(t.next_after(at), Some(utc(2027, 1, 15, 8, 0, 1)));
    assert_eq!(t.next_after(mid), Some(utc(2027, 1, 15, 8, 0, 1)));
    assert_eq!(t.latest_at_or_before(mid), Some(at));
    assert_eq!(t.latest_at_or_before(at), Some(at));
    assert_eq!(t.latest_before(at), Some(utc(2027, 1, 15, 7, 59, 59)));
    assert_eq!(t.latest_before(mid), Some(at));
}

/// Europe/Berlin, 2027-03-28: 02:00 CET jumps to 03:00 CEST (01:00 UTC). A fixed-time 02:30
/// fires once right after the gap (03:00 CEST); an interval schedule skips 02:00 and 02:30.
#[test]
fn berlin_spring_gap_fixed_time_moves_past_the_gap_interval_skips_it() {
    let fixed = CronTicks::parse("30 2 * * *", "Europe/Berlin").unwrap();
    let day_before = utc(2027, 3, 27, 12, 0, 0);
    let ticks = forward(&fixed, day_before, utc(2027, 3, 29, 12, 0, 0));
    assert_eq!(
        ticks,
        [utc(2027, 3, 28, 1, 0, 0), utc(2027, 3, 29, 0, 30, 0)],
        "03:00 CEST on the day of the gap, then 02:30 CEST"
    );
    assert_eq!(
        backward(&fixed, day_before, utc(2027, 3, 29, 12, 0, 0)),
        ticks
    );

    let interval = CronTicks::parse("*/30 * * * *", "Europe/Berlin").unwrap();
    let from = utc(2027, 3, 27, 23, 59, 0); // 00:59 CET
    let to = utc(2027, 3, 28, 1, 30, 0); // 03:30 CEST
    let ticks = forward(&interval, from, to);
    assert_eq!(
        ticks,
        [
            utc(2027, 3, 28, 0, 0, 0),  // 01:00 CET
            utc(2027, 3, 28, 0, 30, 0), // 01:30 CET
            utc(2027, 3, 28, 1, 0, 0),  // 03:00 CEST
            utc(2027, 3, 28, 1, 30, 0), // 03:30 CEST
        ]
    );
    assert_eq!(backward(&interval, from, to), ticks);
}

/// Europe/Berlin, 2027-10-31: 03:00 CEST falls back to 02:00 CET (01:00 UTC), so 02:00–02:59
/// happens twice. A fixed-time 02:30 fires once, at the first (CEST) pass; an interval schedule
/// fires in both passes.
#[test]
fn berlin_autumn_repeat_fixed_time_once_interval_twice() {
    let fixed = CronTicks::parse("30 2 * * *", "Europe/Berlin").unwrap();
    let from = utc(2027, 10, 30, 12, 0, 0);
    let to = utc(2027, 11, 1, 12, 0, 0);
    let ticks = forward(&fixed, from, to);
    assert_eq!(
        ticks,
        [utc(2027, 10, 31, 0, 30, 0), utc(2027, 11, 1, 1, 30, 0)],
        "02:30 CEST only on the day of the repeat, then 02:30 CET"
    );
    assert_eq!(backward(&fixed, from, to), ticks);

    let interval = CronTicks::parse("*/30 * * * *", "Europe/Berlin").unwrap();
    let from = utc(2027, 10, 30, 23, 45, 0); // 01:45 CEST
    let to = utc(2027, 10, 31, 2, 0, 0); // 03:00 CET
    let ticks = forward(&interval, from, to);
    assert_eq!(
        ticks,
        [
            utc(2027, 10, 31, 0, 0, 0),  // 02:00 CEST
            utc(2027, 10, 31, 0, 30, 0), // 02:30 CEST
            utc(2027, 10, 31, 1, 0, 0),  // 02:00 CET
            utc(2027, 10, 31, 1, 30, 0), // 02:30 CET
            utc(2027, 10, 31, 2, 0, 0),  // 03:00 CET
        ]
    );
    assert_eq!(backward(&interval, from, to), ticks);
}

#[test]
fn check_schedule_refuses_bad_input_with_the_reason() {
    let now = utc(2027, 1, 15, 8, 0, 0);
    assert!(check_schedule(&schedule("0 * * * *", "UTC", CatchUp::None), now).is_ok());
    let mut cases: Vec<(Schedule, &str)> = vec![
        (schedule("0 * * *", "UTC", CatchUp::None), "5 (minute"),
        (schedule("0 * * * *", "Nowhere/City", CatchUp::None), "IANA"),
        (
            schedule("0 0 30 2 *", "UTC", CatchUp::None),
            "would never fire",
        ),
        (
            schedule("0 * * * *", "UTC", CatchUp::All { cap: 0 }),
            "catch-up cap",
        ),
        (
            schedule(
                "0 * * * *",
                "UTC",
                CatchUp::All {
                    cap: MAX_CATCH_UP + 1,
                },
            ),
            "catch-up cap",
        ),
    ];
    let mut s = schedule("0 * * * *", "UTC", CatchUp::None);
    s.options.not_before = Some(now);
    cases.push((s, "not_before"));
    let mut s = schedule("0 * * * *", "UTC", CatchUp::None);
    s.options.traceparent = Some(
        crate::spool::TraceParent::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
            .unwrap(),
    );
    cases.push((s, "traceparent"));
    let mut s = schedule("0 * * * *", "UTC", CatchUp::None);
    s.options.max_attempts = Some(0);
    cases.push((s, "max attempts"));
    let mut s = schedule("0 * * * *", "UTC", CatchUp::None);
    s.payload = vec![0; MAX_RUN_PAYLOAD + 1];
    cases.push((s, "run payload"));
    for (s, says) in cases {
        let reason = invalid_reason(check_schedule(&s, now).unwrap_err());
        assert!(reason.contains(says), "{reason} should say {says}");
    }
}

#[test]
fn fire_ticks_must_be_ascending_bounded_and_in_range() {
    let t = utc(2027, 1, 15, 8, 0, 0);
    let later = utc(2027, 1, 15, 8, 1, 0);
    assert!(check_fire_ticks(&[]).is_ok());
    assert!(check_fire_ticks(&[t, later]).is_ok());
    assert!(invalid_reason(check_fire_ticks(&[later, t]).unwrap_err()).contains("ascending"));
    assert!(invalid_reason(check_fire_ticks(&[t, t]).unwrap_err()).contains("ascending"));
    let many: Vec<Timestamp> = (0..=i64::from(MAX_FIRE_TICKS))
        .map(|i| Timestamp::from_unix_micros(t.as_unix_micros() + i * 1_000_000))
        .collect();
    assert!(invalid_reason(check_fire_ticks(&many).unwrap_err()).contains("limit"));
    assert!(check_fire_ticks(&many[1..]).is_ok());
    let before_epoch = Timestamp::from_unix_micros(-1);
    assert!(
        invalid_reason(check_fire_ticks(&[before_epoch]).unwrap_err()).contains("schedule tick")
    );
}

/// A scheduler restarted 5 minutes and 30 s after the last tick it fired (an every-minute
/// schedule, so five missed ticks) with a one-second grace.
#[test]
fn catch_up_after_five_missed_ticks() {
    let last = utc(2027, 1, 15, 8, 0, 0);
    let now = utc(2027, 1, 15, 8, 5, 30);
    let watched = now.saturating_sub(Duration::from_secs(1));
    let missed: Vec<Timestamp> = (1..=5).map(|m| utc(2027, 1, 15, 8, m, 0)).collect();
    let due = |c| due_ticks(&info("* * * * *", c, last), now, watched).unwrap();
    assert_eq!(due(CatchUp::None), Vec::<Timestamp>::new());
    assert_eq!(due(CatchUp::Latest), missed[4..].to_vec());
    assert_eq!(due(CatchUp::All { cap: 3 }), missed[2..].to_vec());
    assert_eq!(due(CatchUp::All { cap: 5 }), missed);
    assert_eq!(due(CatchUp::All { cap: MAX_CATCH_UP }), missed);
}

/// Ticks that come due while the scheduler watches are fired under every policy: the tick at
/// `now`, a tick within the grace of a first round, and every tick since the previous round
/// of one that woke late.
#[test]
fn on_time_ticks_fire_under_every_policy() {
    let last = utc(2027, 1, 15, 8, 0, 0);
    let tick = utc(2027, 1, 15, 8, 1, 0);
    for c in [CatchUp::None, CatchUp::Latest, CatchUp::All { cap: 1 }] {
        let i = info("* * * * *", c, last);
        assert_eq!(
            due_ticks(&i, tick, tick).unwrap(),
            [tick],
            "{c:?} at the tick"
        );
        let slightly_late = tick.saturating_add(Duration::from_millis(300));
        let watched = slightly_late.saturating_sub(Duration::from_secs(1));
        assert_eq!(due_ticks(&i, slightly_late, watched).unwrap(), [tick]);
        // Asleep from 08:00:30 to 08:03:10: 08:01, 08:02 and 08:03 came due while it watched.
        let woke = utc(2027, 1, 15, 8, 3, 10);
        assert_eq!(
            due_ticks(&i, woke, utc(2027, 1, 15, 8, 0, 30)).unwrap(),
            [tick, utc(2027, 1, 15, 8, 2, 0), utc(2027, 1, 15, 8, 3, 0)],
            "{c:?}"
        );
        // Nothing at or before the mark, nothing after now.
        assert!(due_ticks(&i, last, last).unwrap().is_empty());
        assert!(due_ticks(&i, utc(2027, 1, 15, 8, 0, 59), last)
            .unwrap()
            .is_empty());
    }
}

/// Late ticks of a policy that keeps some are kept besides the on-time ones.
#[test]
fn missed_and_on_time_ticks_together() {
    let last = utc(2027, 1, 15, 8, 0, 0);
    let now = utc(2027, 1, 15, 8, 5, 0);
    let watched = utc(2027, 1, 15, 8, 4, 30);
    let i = |c| info("* * * * *", c, last);
    assert_eq!(due_ticks(&i(CatchUp::None), now, watched).unwrap(), [now]);
    assert_eq!(
        due_ticks(&i(CatchUp::Latest), now, watched).unwrap(),
        [utc(2027, 1, 15, 8, 4, 0), now]
    );
    assert_eq!(
        due_ticks(&i(CatchUp::All { cap: 2 }), now, watched).unwrap(),
        [utc(2027, 1, 15, 8, 3, 0), utc(2027, 1, 15, 8, 4, 0), now]
    );
}

/// An every-second schedule whose mark is ten years old: the search stops at the policy, and
/// never returns more than [`MAX_CATCH_UP`] missed ticks beside the due one (`all:1000` is
/// not `all:999`: an outside check found the due tick took a missed tick's place), nor more
/// than [`MAX_CATCH_UP`] on-time ticks.
#[test]
fn a_long_gap_costs_no_more_than_the_policy() {
    let last = utc(2017, 1, 15, 8, 0, 0);
    let now = utc(2027, 1, 15, 8, 0, 0);
    let started = Instant::now();
    let none = due_ticks(&info("* * * * * *", CatchUp::None, last), now, now).unwrap();
    assert_eq!(none, [now]);
    let all = due_ticks(
        &info("* * * * * *", CatchUp::All { cap: MAX_CATCH_UP }, last),
        now,
        now,
    )
    .unwrap();
    assert_eq!(
        all.len(),
        MAX_CATCH_UP as usize + 1,
        "1000 missed and the due one"
    );
    assert_eq!(all.last(), Some(&now));
    check_fire_ticks(&all).expect("what due_ticks returns is fired in one call");
    let both = due_ticks(
        &info("* * * * * *", CatchUp::All { cap: MAX_CATCH_UP }, last),
        now,
        utc(2027, 1, 14, 8, 0, 0),
    )
    .unwrap();
    assert_eq!(
        both.len(),
        MAX_CATCH_UP as usize,
        "a day of on-time ticks: the latest 1000, and the missed ones are older still"
    );
    assert_eq!(both.last(), Some(&now));
    assert!(all.windows(2).all(|w| w[0] < w[1]));
    // Everything on time (a scheduler that slept ten years) is still capped.
    let slept = due_ticks(&info("* * * * * *", CatchUp::None, last), now, last).unwrap();
    assert_eq!(slept.len(), MAX_CATCH_UP as usize);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn next_tick_is_after_the_mark_and_the_time() {
    let mark = utc(2027, 1, 15, 8, 30, 0);
    let i = info("0 * * * *", CatchUp::None, mark);
    assert_eq!(
        next_tick(&i, utc(2027, 1, 15, 8, 0, 0)),
        Some(utc(2027, 1, 15, 9, 0, 0))
    );
    assert_eq!(
        next_tick(&i, utc(2027, 1, 15, 9, 0, 0)),
        Some(utc(2027, 1, 15, 10, 0, 0))
    );
}

/// A tick's key is the same for the same name and tick, and differs otherwise.
#[test]
fn tick_keys_are_stable() {
    let name = ScheduleName::new("nightly").unwrap();
    let other = ScheduleName::new("hourly").unwrap();
    let t = utc(2027, 1, 15, 8, 0, 0);
    let k = schedule_tick_key(&name, t).unwrap();
    assert_eq!(k, schedule_tick_key(&name, t).unwrap());
    assert_ne!(k, schedule_tick_key(&other, t).unwrap());
    assert_ne!(
        k,
        schedule_tick_key(&name, utc(2027, 1, 15, 8, 0, 1)).unwrap()
    );
    // The key names its schedule and tick.
    let fine = Timestamp::from_unix_micros(t.as_unix_micros() + 123_456);
    for tick in [t, fine, Timestamp::EARLIEST, Timestamp::LATEST] {
        let key = schedule_tick_key(&name, tick).unwrap();
        assert_eq!(schedule_tick_of(&key), Some((name.clone(), tick)));
    }
    let other_key = crate::spool::DedupKey::from_parts(["cairn:schedule", "nightly", "soon"]);
    assert_eq!(schedule_tick_of(&other_key.unwrap()), None);
    let plain = crate::spool::DedupKey::from_parts(["gate", "main"]).unwrap();
    assert_eq!(schedule_tick_of(&plain), None);
}
