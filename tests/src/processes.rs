//! Schedulers in separate OS processes (Q5 and Q6 with real processes and the system clock),
//! for every engine whose store several processes share: an engine's test re-runs its own
//! binary as the children, each of which opens a spool over the test's store and runs
//! [`scheduler_child`]; the parent runs [`q5_two_processes_fire_each_second_once_for_a_minute`]
//! and [`q6_killed_scheduler_restarted_after_five_missed_ticks`] with a function that spawns
//! one such child.
//!
//! The child's protocol: it prints [`READY`], runs one scheduler round and prints one
//! `first NAME missed=M runs=K` line per schedule that round fired and then `first-done`, runs
//! the scheduler loop until its stdin closes, and prints `stats rounds=R created=C` last. Every
//! line starts with [`LINE`]. No fixed sleeps: the parent waits on the store's state and on
//! the children's lines, each with a deadline.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, ChildStdin};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_core::spool::{
    schedule_tick_of, CatchUp, Clock, RunFilter, Schedule, ScheduleName, Scheduler, SystemClock,
    MAX_BATCH,
};
use cairn_core::{EnqueueOptions, QueueName, Spool, Timestamp};

/// Every line a scheduler child prints for its parent starts with this.
pub const LINE: &str = "cairn-scheduler-child ";
/// A child prints this once its spool is open.
pub const READY: &str = "ready";
/// How long the children's scheduler loop sleeps at most between rounds.
const CHILD_POLL: Duration = Duration::from_millis(250);
const SECOND: Duration = Duration::from_secs(1);
/// The bound on every wait of the parent (the minute-long window excepted).
const DEADLINE: Duration = Duration::from_secs(30);

fn say(line: impl std::fmt::Display) {
    println!("\n{LINE}{line}");
}

/// The child's side: a [`Scheduler`] over `spool` (on the system clock) with the protocol in
/// the module docs.
pub async fn scheduler_child(spool: Arc<dyn Spool>) {
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        // Until the parent closes stdin (or dies).
        for line in std::io::stdin().lines() {
            if line.is_err() {
                break;
            }
        }
        let _ = stop_tx.send(());
    });
    say(READY);
    let mut scheduler = Scheduler::new(spool).poll_interval(CHILD_POLL);
    let first = scheduler.round().await.expect("child: the first round");
    assert!(first.errors.is_empty(), "child: {:?}", first.errors);
    for f in &first.fired {
        say(format!(
            "first {} missed={} runs={}",
            f.name.as_str(),
            f.missed,
            f.runs.len()
        ));
    }
    say("first-done");
    let stats = scheduler
        .run_until(async move {
            let _ = stop_rx.await;
        })
        .await;
    assert_eq!(stats.errors, 0, "child: {stats:?}");
    say(format!(
        "stats rounds={} created={}",
        stats.rounds, stats.runs_created
    ));
}

/// A running child as the parent sees it: its lines (read on a thread of their own) and its
/// stdin.
struct Driven {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
}

impl Driven {
    fn start(mut child: Child) -> Self {
        let out = BufReader::new(child.stdout.take().expect("a piped stdout"));
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in out.lines().map_while(std::result::Result::ok) {
                // libtest may print its own text on the same line as a report.
                if let Some(at) = line.find(LINE) {
                    let _ = tx.send(line[at + LINE.len()..].trim().to_owned());
                }
            }
        });
        Self {
            stdin: child.stdin.take(),
            child,
            lines,
        }
    }

    /// The child's lines up to and including the first one starting with `marker`.
    fn until(&mut self, marker: &str) -> Vec<String> {
        let deadline = Instant::now() + DEADLINE;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::task::block_in_place(|| self.lines.recv_timeout(left)) {
                Ok(line) => {
                    let done = line.starts_with(marker);
                    seen.push(line);
                    if done {
                        return seen;
                    }
                }
                Err(e) => {
                    let _ = self.child.kill();
                    let mut err = String::new();
                    if let Some(stderr) = self.child.stderr.as_mut() {
                        let _ = stderr.read_to_string(&mut err);
                    }
                    panic!("no {marker:?} from the child ({e}); its lines {seen:?}\n{err}");
                }
            }
        }
    }

    /// Closes stdin (the child stops its loop) and returns its lines up to its stats.
    fn stop(mut self) -> Vec<String> {
        self.stdin.take();
        let lines = self.until("stats ");
        let status = tokio::task::block_in_place(|| self.child.wait()).expect("the child's exit");
        assert!(status.success(), "the child failed: {status}");
        lines
    }

    /// SIGKILL on Unix: the child dies wherever it is, mid-round or mid-transaction.
    fn kill(mut self) {
        self.child.kill().expect("kill the child");
        tokio::task::block_in_place(|| self.child.wait()).expect("the killed child's exit");
    }
}

fn every_second(name: &str, catch_up: CatchUp) -> Schedule {
    Schedule {
        name: ScheduleName::new(name).expect("a schedule name"),
        cron: "* * * * * *".into(),
        time_zone: "UTC".into(),
        queue: QueueName::new(name).expect("a queue name"),
        payload: b"{}".to_vec(),
        options: EnqueueOptions::default(),
        catch_up,
    }
}

/// The ticks of the runs on the queue of schedule `name` (named after it), with how many runs
/// each has; every run there must be one of the schedule's ticks.
async fn ticks(spool: &dyn Spool, name: &str) -> BTreeMap<Timestamp, usize> {
    let mut filter = RunFilter {
        queue: Some(QueueName::new(name).expect("a queue name")),
        ..RunFilter::default()
    };
    let mut out = BTreeMap::new();
    loop {
        let page = spool.runs(&filter, MAX_BATCH).await.expect("list runs");
        for r in &page {
            let (of, tick) = schedule_tick_of(&r.dedup_key)
                .unwrap_or_else(|| panic!("run {} is not a tick's run", r.run_id));
            assert_eq!(of.as_str(), name);
            *out.entry(tick).or_insert(0) += 1;
        }
        filter.after = page.last().map(|r| r.run_id);
        if page.len() < MAX_BATCH {
            return out;
        }
    }
}

async fn high_water(spool: &dyn Spool, name: &str) -> Timestamp {
    let n = ScheduleName::new(name).expect("a schedule name");
    spool
        .schedule(&n)
        .await
        .expect("read the schedule")
        .expect("the schedule is stored")
        .high_water
}

/// Polls `done` every 50 ms until it holds, failing after `bound`.
async fn wait_until<F, Fut>(what: &str, bound: Duration, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + bound;
    while !done().await {
        assert!(Instant::now() < deadline, "{what}: not within {bound:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Asserts `ticks` are whole seconds, one apart, each with one run.
fn assert_consecutive(what: &str, ticks: &BTreeMap<Timestamp, usize>) {
    for (t, n) in ticks {
        assert_eq!(*n, 1, "{what}: tick {t} has {n} runs");
        assert_eq!(t.as_unix_micros() % 1_000_000, 0, "{what}: tick {t}");
    }
    let keys: Vec<&Timestamp> = ticks.keys().collect();
    for w in keys.windows(2) {
        assert_eq!(
            w[1].duration_since(*w[0]),
            SECOND,
            "{what}: a gap or a step between {} and {}",
            w[0],
            w[1]
        );
    }
}

/// Q5 across processes: two schedulers in two processes fire one every-second schedule over a
/// minute of wall-clock time; the queue then holds exactly one run per tick of the window (from
/// the first second after the schedule was stored to its final high-water mark), none missing,
/// none twice. `spool` is the parent's spool over the store (system clock); `spawn` starts one
/// child running [`scheduler_child`] over the same store. `CatchUp::All` also enqueues the ticks
/// that passed while the children started.
pub async fn q5_two_processes_fire_each_second_once_for_a_minute(
    spool: Arc<dyn Spool>,
    spawn: &dyn Fn() -> Child,
) {
    let name = "every-second";
    let stored = spool
        .put_schedule(&every_second(name, CatchUp::All { cap: 1000 }))
        .await
        .expect("store the schedule");
    let mut children = [Driven::start(spawn()), Driven::start(spawn())];
    for c in &mut children {
        c.until(READY);
    }
    let window_end = stored.created_at.saturating_add(Duration::from_secs(60));
    wait_until("a minute of ticks", Duration::from_secs(90), || async {
        high_water(&*spool, name).await >= window_end
    })
    .await;
    let [a, b] = children;
    let (la, lb) = (a.stop(), b.stop());
    let stat = |lines: &[String], key: &str| -> u64 {
        let last = lines.last().expect("a stats line");
        last.split_whitespace()
            .find_map(|kv| kv.strip_prefix(key))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {key} in {last:?}"))
    };
    let ticks = ticks(&*spool, name).await;
    assert_consecutive(name, &ticks);
    let first_second = Timestamp::from_unix_micros(
        (stored.created_at.as_unix_micros().div_euclid(1_000_000) + 1) * 1_000_000,
    );
    let last = high_water(&*spool, name).await;
    assert_eq!(
        ticks.keys().next(),
        Some(&first_second),
        "none missing at the start"
    );
    assert_eq!(
        ticks.keys().last(),
        Some(&last),
        "the mark is the last tick enqueued"
    );
    assert!(last >= window_end, "a minute of ticks: up to {last}");
    assert!(stat(&la, "rounds=") > 0 && stat(&lb, "rounds=") > 0);
    assert_eq!(
        stat(&la, "created=") + stat(&lb, "created="),
        ticks.len() as u64,
        "the children created every run between them"
    );
}

/// Q6 across processes: a scheduler process is killed (SIGKILL) while it fires four
/// every-second schedules, and another starts after at least five ticks passed; each schedule's
/// runs after the last tick the killed one enqueued follow its catch-up policy: none of the
/// missed ticks (None), the latest (Latest), the latest three (All, cap 3), all of them (All,
/// cap 100), then every tick as it comes, each once.
pub async fn q6_killed_scheduler_restarted_after_five_missed_ticks(
    spool: Arc<dyn Spool>,
    spawn: &dyn Fn() -> Child,
) {
    let policies = [
        ("cu-none", CatchUp::None),
        ("cu-latest", CatchUp::Latest),
        ("cu-all-3", CatchUp::All { cap: 3 }),
        ("cu-all-100", CatchUp::All { cap: 100 }),
    ];
    let mut created = Timestamp::UNIX_EPOCH;
    for (n, c) in policies {
        created = spool
            .put_schedule(&every_second(n, c))
            .await
            .expect("store the schedule")
            .created_at;
    }
    let mut first = Driven::start(spawn());
    first.until("first-done");
    // It fires every schedule for a while, then dies.
    let running = created.saturating_add(Duration::from_secs(3));
    wait_until("the first scheduler fires", DEADLINE, || async {
        for (n, _) in policies {
            if high_water(&*spool, n).await < running {
                return false;
            }
        }
        true
    })
    .await;
    first.kill();
    let mut last_before = BTreeMap::new();
    for (n, _) in policies {
        last_before.insert(n, high_water(&*spool, n).await);
    }
    // At least five ticks pass with no scheduler: the next one starts when the clock is 6.5 s
    // past the latest tick enqueued, so even its first round's grace (1 s) leaves five missed.
    let latest = *last_before.values().max().expect("four schedules");
    let restart = latest.saturating_add(Duration::from_millis(6500));
    wait_until("five ticks pass", DEADLINE, || async {
        SystemClock.now() >= restart
    })
    .await;
    let mut second = Driven::start(spawn());
    let reports = second.until("first-done");
    let started = SystemClock.now();
    wait_until("the second scheduler fires on", DEADLINE, || async {
        for (n, _) in policies {
            if high_water(&*spool, n).await < started.saturating_add(Duration::from_secs(2)) {
                return false;
            }
        }
        true
    })
    .await;
    second.stop();

    for (n, policy) in policies {
        let missed: usize = reports
            .iter()
            .find_map(|l| {
                let rest = l.strip_prefix(&format!("first {n} "))?;
                rest.split_whitespace()
                    .find_map(|kv| kv.strip_prefix("missed="))?
                    .parse()
                    .ok()
            })
            .unwrap_or(0);
        let l = last_before[n];
        let all = ticks(&*spool, n).await;
        let after: BTreeMap<Timestamp, usize> = all
            .range(l.saturating_add(Duration::from_micros(1))..)
            .map(|(t, c)| (*t, *c))
            .collect();
        assert_consecutive(n, &after);
        let first_after = *after.keys().next().expect("runs after the restart");
        // Ticks skipped between the last one before the kill and the first one after it.
        let skipped = first_after.duration_since(l).as_secs() - 1;
        match policy {
            CatchUp::None => {
                assert_eq!(missed, 0, "{n}: no missed tick enqueued");
                assert!(skipped >= 5, "{n}: {skipped} skipped");
            }
            CatchUp::Latest => {
                assert_eq!(missed, 1, "{n}: the latest missed tick only");
                assert!(skipped >= 4, "{n}: {skipped} skipped");
            }
            CatchUp::All { cap: 3 } => {
                assert_eq!(missed, 3, "{n}: the latest three missed ticks");
                assert!(skipped >= 2, "{n}: {skipped} skipped");
            }
            CatchUp::All { .. } => {
                assert!(missed >= 5, "{n}: every missed tick ({missed})");
                assert_eq!(skipped, 0, "{n}: none skipped");
            }
        }
        for (t, c) in &all {
            assert_eq!(*c, 1, "{n}: tick {t} has {c} runs");
        }
    }
}
