//! Schedules (Q5–Q7): each tick is enqueued exactly once however many schedulers fire it, also
//! after retention removed its run and never by a scheduler holding an old revision (Q5); the
//! catch-up policies after a gap (Q6); edits and removals take effect at the next tick, and bad
//! input is refused with nothing written (Q7). Time is the harness's [`ManualClock`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use cairn_core::spool::{
    schedule_tick_of, CatchUp, Clock, PartitionKey, RetentionBudget, RetentionPolicy, RunFilter,
    Schedule, ScheduleFired, ScheduleInfo, ScheduleName, Scheduler, SchedulerRound, SupersedeGroup,
    MAX_BATCH, MAX_CATCH_UP, MAX_CRON_LEN, MAX_FIRE_TICKS, MAX_RUN_PAYLOAD,
};
use cairn_core::{EnqueueOptions, ManualClock, QueueName, RunInfo, Spool, Timestamp};

use super::support::{assert_err, open_spool, within};
use crate::SpoolHarness;

const MINUTE: Duration = Duration::from_secs(60);

fn name(s: &str) -> ScheduleName {
    ScheduleName::new(s).expect("valid schedule name")
}

fn queue(s: &str) -> QueueName {
    QueueName::new(s).expect("valid queue name")
}

fn schedule(n: &str, cron: &str, q: &str, catch_up: CatchUp) -> Schedule {
    Schedule {
        name: name(n),
        cron: cron.into(),
        time_zone: "UTC".into(),
        queue: queue(q),
        payload: format!("payload of {n}").into_bytes(),
        options: EnqueueOptions::default(),
        catch_up,
    }
}

async fn put(spool: &dyn Spool, s: &Schedule) -> ScheduleInfo {
    spool
        .put_schedule(s)
        .await
        .unwrap_or_else(|e| panic!("put_schedule {}: {e}", s.name.as_str()))
}

/// Every run of `q`, in id order.
async fn runs_of(spool: &dyn Spool, q: &QueueName) -> Vec<RunInfo> {
    let mut filter = RunFilter {
        queue: Some(q.clone()),
        ..RunFilter::default()
    };
    let mut all = Vec::new();
    loop {
        let page = spool.runs(&filter, MAX_BATCH).await.expect("runs");
        let full = page.len() == MAX_BATCH;
        filter.after = page.last().map(|r| r.run_id);
        all.extend(page);
        if !full {
            return all;
        }
    }
}

/// The ticks of `q`'s runs (each run's key must be a tick key of schedule `n`), ascending, with
/// how many runs each tick has.
async fn ticks_on(spool: &dyn Spool, q: &QueueName, n: &str) -> BTreeMap<Timestamp, usize> {
    let mut ticks = BTreeMap::new();
    for r in runs_of(spool, q).await {
        let (of, tick) = schedule_tick_of(&r.dedup_key)
            .unwrap_or_else(|| panic!("run {} of {q} is not a tick's run", r.run_id));
        assert_eq!(of.as_str(), n, "run {} is another schedule's", r.run_id);
        *ticks.entry(tick).or_insert(0) += 1;
    }
    ticks
}

/// `count` ticks of an every-minute schedule from `first`.
fn minutes(first: Timestamp, count: u64) -> Vec<Timestamp> {
    (0..count)
        .map(|i| first.saturating_add(MINUTE * u32::try_from(i).expect("small")))
        .collect()
}

fn once_each(ticks: &[Timestamp]) -> BTreeMap<Timestamp, usize> {
    ticks.iter().map(|t| (*t, 1)).collect()
}

/// The ticks a round enqueued for `n` (created runs only).
fn created_in(round: &SchedulerRound, n: &str) -> Vec<Timestamp> {
    round
        .fired
        .iter()
        .filter(|f| f.name.as_str() == n)
        .flat_map(|f| f.runs.iter().filter(|(_, e)| e.created).map(|(t, _)| *t))
        .collect()
}

/// Advances `clock` to the next whole multiple of `period` since the Unix epoch (UTC), so the
/// case's ticks fall where it expects whatever time the harness's clock started at.
fn align(clock: &ManualClock, period: Duration) -> Timestamp {
    let p = i64::try_from(period.as_micros()).expect("a short period");
    let rest = clock.now().as_unix_micros().rem_euclid(p);
    if rest != 0 {
        clock.advance(Duration::from_micros(
            u64::try_from(p - rest).expect("positive"),
        ));
    }
    clock.now()
}

async fn round(s: &mut Scheduler) -> SchedulerRound {
    let r = s.round().await.expect("scheduler round");
    assert!(r.errors.is_empty(), "round errors: {:?}", r.errors);
    r
}

/// Q5: two schedulers over two spool instances of one location fire the same schedule at the
/// same moments, in lock step and as running loops: every tick gets exactly one run. A tick
/// whose run retention removed is not enqueued again, and a fire with an old revision (after
/// an edit or a removal) is `Stale` and writes nothing.
pub async fn q5_each_tick_is_enqueued_once_across_schedulers<H: SpoolHarness>(h: &H) {
    let clock = h.clock();
    align(clock, MINUTE);
    let (a, b) = (open_spool(h).await, open_spool(h).await);
    let q = queue("q5");
    let created = put(
        &*a,
        &schedule("q5-minutely", "* * * * *", "q5", CatchUp::None),
    )
    .await;
    let start = created.high_water;
    assert_eq!(start, clock.now(), "a new schedule's mark is now");
    let (mut sa, mut sb) = (Scheduler::new(a.clone()), Scheduler::new(b.clone()));

    // In lock step: both rounds at each moment, concurrently; one step passes two ticks.
    let mut fired_by_a_or_b = Vec::new();
    for step in [
        MINUTE,
        MINUTE,
        MINUTE * 2 + Duration::from_secs(30),
        MINUTE / 2,
    ] {
        clock.advance(step);
        let (ra, rb) = tokio::join!(round(&mut sa), round(&mut sb));
        fired_by_a_or_b.extend(created_in(&ra, "q5-minutely"));
        fired_by_a_or_b.extend(created_in(&rb, "q5-minutely"));
    }
    let expected = minutes(start.saturating_add(MINUTE), 5);
    fired_by_a_or_b.sort();
    assert_eq!(
        fired_by_a_or_b, expected,
        "each tick created by one scheduler"
    );
    assert_eq!(ticks_on(&*a, &q, "q5-minutely").await, once_each(&expected));

    // The same ticks fired again, concurrently, by both spools: nothing new.
    let info = a.schedule(&name("q5-minutely")).await.unwrap().unwrap();
    assert_eq!(info.high_water, expected[4]);
    let (fa, fb) = tokio::join!(
        a.fire_schedule(&info.schedule.name, info.revision, &expected),
        b.fire_schedule(&info.schedule.name, info.revision, &expected)
    );
    for f in [fa.unwrap(), fb.unwrap()] {
        assert_eq!(
            f,
            ScheduleFired::Fired {
                runs: Vec::new(),
                high_water: expected[4]
            }
        );
    }

    // Two running loops over the next ticks, polling the manual clock.
    let la = Scheduler::new(a.clone())
        .poll_interval(Duration::from_millis(5))
        .spawn();
    let lb = Scheduler::new(b.clone())
        .poll_interval(Duration::from_millis(5))
        .spawn();
    let mut expected = expected;
    for _ in 0..4 {
        let tick = clock.advance(MINUTE);
        expected.push(tick);
        within("the loops fire the tick", async {
            while !ticks_on(&*a, &q, "q5-minutely").await.contains_key(&tick) {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
        .await;
    }
    let (stats_a, stats_b) = (la.shutdown().await, lb.shutdown().await);
    assert_eq!(
        stats_a.runs_created + stats_b.runs_created,
        4,
        "{stats_a:?} {stats_b:?}"
    );
    assert_eq!(ticks_on(&*b, &q, "q5-minutely").await, once_each(&expected));

    // Retention removes the finished runs; firing their ticks again enqueues nothing.
    for r in runs_of(&*a, &q).await {
        a.cancel(r.run_id).await.expect("cancel");
    }
    clock.advance(MINUTE / 2);
    let policy = RetentionPolicy {
        max_age: Duration::from_secs(10),
        ..RetentionPolicy::default()
    };
    a.retention_pass(&policy, &RetentionBudget::default())
        .await
        .expect("retention");
    assert!(runs_of(&*a, &q).await.is_empty(), "retention removed them");
    let info = b.schedule(&name("q5-minutely")).await.unwrap().unwrap();
    let last = *expected.last().unwrap();
    assert_eq!(info.high_water, last);
    let again = b
        .fire_schedule(&info.schedule.name, info.revision, &expected)
        .await
        .unwrap();
    assert_eq!(
        again,
        ScheduleFired::Fired {
            runs: Vec::new(),
            high_water: last
        }
    );
    assert!(round(&mut sa).await.fired.is_empty());
    assert!(runs_of(&*a, &q).await.is_empty(), "no tick enqueued twice");

    // An edit bumps the revision: a fire with the old one is Stale and writes nothing.
    let edited = put(
        &*b,
        &schedule("q5-minutely", "*/2 * * * *", "q5", CatchUp::None),
    )
    .await;
    assert_eq!(edited.revision, info.revision + 1);
    let next = clock.advance(MINUTE * 2);
    let stale = a
        .fire_schedule(&info.schedule.name, info.revision, &[next])
        .await
        .unwrap();
    assert_eq!(stale, ScheduleFired::Stale);
    assert!(runs_of(&*a, &q).await.is_empty());
    let unchanged = a.schedule(&name("q5-minutely")).await.unwrap().unwrap();
    assert_eq!(unchanged, edited, "a stale fire moved nothing");
    // … and once removed, every revision is Stale.
    assert!(a.remove_schedule(&name("q5-minutely")).await.unwrap());
    let gone = b
        .fire_schedule(&info.schedule.name, edited.revision, &[next])
        .await
        .unwrap();
    assert_eq!(gone, ScheduleFired::Stale);
    assert!(runs_of(&*a, &q).await.is_empty());
}

/// Q6: a scheduler that starts after five missed ticks of every-minute schedules enqueues none
/// of them (None), the fifth (Latest), the latest three (All with cap 3), or all five (All with
/// a larger cap), and then every tick as it comes; skipped ticks are never enqueued later.
pub async fn q6_catch_up_policies_after_a_gap<H: SpoolHarness>(h: &H) {
    let clock = h.clock();
    align(clock, MINUTE);
    let spool = open_spool(h).await;
    let policies = [
        ("q6-none", CatchUp::None),
        ("q6-latest", CatchUp::Latest),
        ("q6-all-3", CatchUp::All { cap: 3 }),
        ("q6-all-100", CatchUp::All { cap: 100 }),
    ];
    let mut start = None;
    for (n, c) in policies {
        start = Some(
            put(&*spool, &schedule(n, "* * * * *", n, c))
                .await
                .high_water,
        );
    }
    let start = start.unwrap();
    // A scheduler ran at the start, then stopped for five and a half minutes.
    let mut before = Scheduler::new(spool.clone());
    assert!(round(&mut before).await.fired.is_empty());
    drop(before);
    clock.advance(MINUTE * 5 + MINUTE / 2);
    let missed = minutes(start.saturating_add(MINUTE), 5);

    let mut after = Scheduler::new(open_spool(h).await);
    let r = round(&mut after).await;
    let want: [(&str, &[Timestamp]); 4] = [
        ("q6-none", &[]),
        ("q6-latest", &missed[4..]),
        ("q6-all-3", &missed[2..]),
        ("q6-all-100", &missed),
    ];
    for (n, ticks) in want {
        assert_eq!(created_in(&r, n), ticks, "{n}: the round's runs");
        assert_eq!(
            ticks_on(&*spool, &queue(n), n).await,
            once_each(ticks),
            "{n}: the queue"
        );
        let firing = r.fired.iter().find(|f| f.name.as_str() == n);
        assert_eq!(firing.map_or(0, |f| f.missed), ticks.len(), "{n}: missed");
        let info = spool.schedule(&name(n)).await.unwrap().unwrap();
        let mark = ticks.last().copied().unwrap_or(start);
        assert_eq!(
            info.high_water, mark,
            "{n}: the mark is the latest tick enqueued"
        );
    }
    assert_eq!(r.next_tick, Some(start.saturating_add(MINUTE * 6)));

    // From now on every tick, under every policy; the skipped ones never come back.
    let sixth = clock.advance(MINUTE / 2);
    let r = round(&mut after).await;
    for (n, ticks) in want {
        assert_eq!(created_in(&r, n), [sixth], "{n}: the next tick");
        let mut all = ticks.to_vec();
        all.push(sixth);
        assert_eq!(
            ticks_on(&*spool, &queue(n), n).await,
            once_each(&all),
            "{n}"
        );
    }
    let seventh = clock.advance(MINUTE);
    let r = round(&mut after).await;
    for (n, _) in want {
        assert_eq!(created_in(&r, n), [seventh], "{n}");
    }
    let none = ticks_on(&*spool, &queue("q6-none"), "q6-none").await;
    assert_eq!(none, once_each(&[sixth, seventh]));
}

/// Q7: an edit replaces every field at the next tick (new expression, queue, payload and
/// options), keeps the mark and the creation time and bumps the revision; a removed schedule
/// fires nothing; bad input is refused with nothing written.
pub async fn q7_edits_and_removals_take_effect_at_the_next_tick<H: SpoolHarness>(h: &H) {
    let clock = h.clock();
    align(clock, MINUTE * 10);
    let spool = open_spool(h).await;
    let n = name("q7-report");
    let (qa, qb) = (queue("q7-a"), queue("q7-b"));
    let first = put(
        &*spool,
        &schedule("q7-report", "*/10 * * * *", "q7-a", CatchUp::None),
    )
    .await;
    assert_eq!(first.revision, 1);
    assert_eq!(first.created_at, clock.now());
    assert_eq!(first.updated_at, clock.now());
    assert_eq!(spool.schedule(&n).await.unwrap(), Some(first.clone()));
    let mut scheduler = Scheduler::new(spool.clone());
    assert!(round(&mut scheduler).await.fired.is_empty());

    // The first tick, as first stored.
    let t1 = clock.advance(MINUTE * 10);
    let r = round(&mut scheduler).await;
    assert_eq!(created_in(&r, "q7-report"), [t1]);
    let run = r.fired[0].runs[0].1.run_id;
    assert_eq!(
        spool.payload(run).await.unwrap().as_deref(),
        Some(&b"payload of q7-report"[..])
    );

    // An edit: every field replaced; creation time kept, revision bumped; a new expression
    // moves the mark up to the edit.
    clock.advance(MINUTE);
    let mut edit = schedule("q7-report", "*/5 * * * *", "q7-b", CatchUp::Latest);
    edit.payload = b"edited payload".to_vec();
    edit.time_zone = "Europe/Berlin".into();
    edit.options = EnqueueOptions {
        priority: 7,
        max_attempts: Some(2),
        supersede_group: Some(SupersedeGroup::from_parts(["q7"]).unwrap()),
        partition_key: Some(PartitionKey::new("tenant-1").unwrap()),
        not_before: None,
        traceparent: None,
    };
    let second = put(&*spool, &edit).await;
    assert_eq!(second.schedule, edit);
    assert_eq!(second.revision, 2);
    assert_eq!(
        second.high_water,
        clock.now(),
        "an edit of the expression starts it from the edit"
    );
    assert_eq!(second.created_at, first.created_at);
    assert_eq!(second.updated_at, clock.now());
    assert_eq!(spool.schedule(&n).await.unwrap(), Some(second.clone()));
    assert_eq!(spool.schedules().await.unwrap(), vec![second.clone()]);

    // The next tick is the new expression's, with the new queue, payload and options.
    let t2 = clock.advance(MINUTE * 4);
    let r = round(&mut scheduler).await;
    assert_eq!(
        created_in(&r, "q7-report"),
        [t2],
        "the */5 tick after the edit"
    );
    assert_eq!(r.fired[0].queue, qb);
    let run = spool
        .run(r.fired[0].runs[0].1.run_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((run.priority, run.max_attempts), (7, 2));
    assert_eq!(run.supersede_group, edit.options.supersede_group);
    assert_eq!(
        spool.payload(run.run_id).await.unwrap().as_deref(),
        Some(&b"edited payload"[..])
    );
    assert_eq!(ticks_on(&*spool, &qa, "q7-report").await, once_each(&[t1]));
    assert_eq!(ticks_on(&*spool, &qb, "q7-report").await, once_each(&[t2]));
    let second = spool.schedule(&n).await.unwrap().unwrap();
    assert_eq!((second.revision, second.high_water), (2, t2));

    // Bad input: refused, nothing written (the stored schedule and the queues unchanged).
    let mut bad: Vec<(&str, Schedule)> = Vec::new();
    let with = |f: &dyn Fn(&mut Schedule)| {
        let mut s = schedule("q7-report", "*/5 * * * *", "q7-b", CatchUp::None);
        f(&mut s);
        s
    };
    bad.push(("four fields", with(&|s| s.cron = "* * * *".into())));
    bad.push((
        "seven fields",
        with(&|s| s.cron = "0 0 0 * * * 2030".into()),
    ));
    bad.push(("a bad field", with(&|s| s.cron = "61 * * * *".into())));
    bad.push(("never fires", with(&|s| s.cron = "0 0 30 2 *".into())));
    bad.push((
        "long expression",
        with(&|s| s.cron = format!("{}* * * *", "0,".repeat(MAX_CRON_LEN / 2))),
    ));
    bad.push(("unknown zone", with(&|s| s.time_zone = "Mars/Base".into())));
    bad.push((
        "long zone",
        with(&|s| s.time_zone = "Z".repeat(MAX_CRON_LEN + 1)),
    ));
    bad.push(("cap 0", with(&|s| s.catch_up = CatchUp::All { cap: 0 })));
    bad.push((
        "cap too large",
        with(&|s| {
            s.catch_up = CatchUp::All {
                cap: MAX_CATCH_UP + 1,
            }
        }),
    ));
    bad.push((
        "not_before",
        with(&|s| s.options.not_before = Some(Timestamp::EARLIEST)),
    ));
    bad.push((
        "max attempts 0",
        with(&|s| s.options.max_attempts = Some(0)),
    ));
    bad.push((
        "payload too large",
        with(&|s| s.payload = vec![0; MAX_RUN_PAYLOAD + 1]),
    ));
    for (what, s) in &bad {
        assert_err(spool.put_schedule(s).await, "InvalidInput", what);
        let mut new_name = s.clone();
        new_name.name = name("q7-refused");
        assert_err(spool.put_schedule(&new_name).await, "InvalidInput", what);
    }
    assert_eq!(spool.schedules().await.unwrap(), vec![second.clone()]);
    let t3 = t2.saturating_add(MINUTE * 5);
    assert_err(
        spool.fire_schedule(&n, 2, &[t3, t2]).await,
        "InvalidInput",
        "ticks not ascending",
    );
    let too_many: Vec<Timestamp> = (0..=u64::from(MAX_FIRE_TICKS))
        .map(|i| t3.saturating_add(Duration::from_secs(i)))
        .collect();
    assert_err(
        spool.fire_schedule(&n, 2, &too_many).await,
        "InvalidInput",
        "too many ticks",
    );
    assert_eq!(spool.schedule(&n).await.unwrap(), Some(second.clone()));
    assert_eq!(ticks_on(&*spool, &qb, "q7-report").await, once_each(&[t2]));

    // Removed: the next tick fires nothing, and the runs it enqueued stay.
    assert!(spool.remove_schedule(&n).await.unwrap());
    assert!(!spool.remove_schedule(&n).await.unwrap());
    assert_eq!(spool.schedule(&n).await.unwrap(), None);
    assert!(spool.schedules().await.unwrap().is_empty());
    clock.advance(MINUTE * 5);
    let r = round(&mut scheduler).await;
    assert!(r.fired.is_empty() && r.next_tick.is_none(), "{r:?}");
    assert_eq!(ticks_on(&*spool, &qa, "q7-report").await, once_each(&[t1]));
    assert_eq!(ticks_on(&*spool, &qb, "q7-report").await, once_each(&[t2]));
    assert_eq!(
        spool.fire_schedule(&n, 2, &[t3]).await.unwrap(),
        ScheduleFired::Stale
    );

    // Stored again under the same name: a new schedule, from now on.
    let again = put(
        &*spool,
        &schedule("q7-report", "*/10 * * * *", "q7-a", CatchUp::None),
    )
    .await;
    assert_eq!(
        (again.revision, again.high_water, again.created_at),
        (1, clock.now(), clock.now())
    );
    let other: Arc<dyn Spool> = open_spool(h).await;
    assert_eq!(other.schedules().await.unwrap(), vec![again]);
}

/// Q7: an edit of the expression starts the new expression from the edit — none of its earlier
/// ticks is caught up, whatever the policy (catch-up is for ticks missed while no scheduler ran),
/// while an edit that keeps the expression keeps the mark.
pub async fn q7_an_edited_expression_catches_up_nothing_from_before_the_edit<H: SpoolHarness>(
    h: &H,
) {
    let clock = h.clock();
    align(clock, MINUTE * 10);
    let spool = open_spool(h).await;
    let q = queue("q7-burst");
    let rare = schedule(
        "q7-burst",
        "0 0 1 1 *",
        "q7-burst",
        CatchUp::All { cap: 50 },
    );
    let first = put(&*spool, &rare).await;
    let mut scheduler = Scheduler::new(spool.clone());
    assert!(round(&mut scheduler).await.fired.is_empty());
    clock.advance(MINUTE * 7);
    assert!(
        round(&mut scheduler).await.fired.is_empty(),
        "a yearly tick"
    );
    // Seven minutes after creation, every minute instead: the seven minutes before the edit
    // are not the new expression's to catch up.
    let frequent = schedule(
        "q7-burst",
        "* * * * *",
        "q7-burst",
        CatchUp::All { cap: 50 },
    );
    let edited = put(&*spool, &frequent).await;
    assert_eq!(edited.high_water, clock.now());
    assert!(edited.high_water > first.high_water);
    assert!(
        round(&mut scheduler).await.fired.is_empty(),
        "no burst of past ticks"
    );
    let next = clock.advance(MINUTE);
    assert_eq!(created_in(&round(&mut scheduler).await, "q7-burst"), [next]);
    // A payload-only edit keeps the mark.
    let mut payload_only = frequent.clone();
    payload_only.payload = b"other".to_vec();
    clock.advance(Duration::from_secs(20));
    let kept = put(&*spool, &payload_only).await;
    assert_eq!(kept.high_water, next);
    assert_eq!(ticks_on(&*spool, &q, "q7-burst").await, once_each(&[next]));
}
