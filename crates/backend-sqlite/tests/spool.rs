//! The spool on SQLite: the conformance spool suite (every S case and the model property test)
//! plus the cases that need real OS processes or SQLite fault injection.

cairn_conformance::spool_suite!(cairn_sqlite::spool_testkit::spool_harness());

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, Write};
use std::sync::Arc;
use std::time::Duration;

use cairn_core::spool::{FactOutcome, Spool};
use cairn_core::{ConsumerId, DedupKey, EnqueueOptions, Error, FactName, QueueName, SystemClock};
use cairn_sqlite::{SqliteOptions, SqliteSpool};

#[path = "spool/processes.rs"]
mod processes;

use processes::{
    await_ready, child_env, child_spool, ready_and_wait, report, run_together, spawn_child, REPORT,
};

fn queue(name: &str) -> QueueName {
    QueueName::new(name).unwrap()
}

fn key(k: &str) -> DedupKey {
    DedupKey::from_parts(["gate", "refs/heads/main", k]).unwrap()
}

const S1_KEYS: usize = 40;
const S1_ROUNDS: usize = 3;

/// S1 across OS processes: two processes enqueue the same keys at once, each key several
/// times and in another order; every key gets exactly one run id, exactly one enqueue in all
/// says `created`, and the store holds exactly one run per key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s1_two_processes_enqueue_duplicates_one_run_per_key() {
    const TEST: &str = "s1_two_processes_enqueue_duplicates_one_run_per_key";
    if let Some((db, name, _)) = child_env() {
        let spool = child_spool(&db).await;
        let q = queue("s1-processes");
        ready_and_wait();
        for round in 0..S1_ROUNDS {
            for i in 0..S1_KEYS {
                // Child b walks the keys backwards, so every key is raced.
                let k = if name == "a" { i } else { S1_KEYS - 1 - i };
                let e = spool
                    .enqueue(
                        &q,
                        &key(&format!("k{k}")),
                        format!("{name}-{round}").into_bytes(),
                        EnqueueOptions::default(),
                    )
                    .await
                    .unwrap_or_else(|e| panic!("child {name}: enqueue k{k}: {e}"));
                report(format!("k{k} {} {}", e.run_id, e.created));
            }
        }
        return;
    }

    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s1.db");
    let parent = SqliteSpool::open(&db, SqliteOptions::default(), Arc::new(SystemClock))
        .await
        .unwrap();
    let children = vec![
        spawn_child(TEST, &db, "a", ""),
        spawn_child(TEST, &db, "b", ""),
    ];
    let reports = tokio::task::spawn_blocking(move || run_together(children))
        .await
        .unwrap();

    let mut ids: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut created: BTreeMap<String, usize> = BTreeMap::new();
    for r in reports.iter().flatten() {
        let parts: Vec<&str> = r.split(' ').collect();
        assert_eq!(parts.len(), 3, "report {r:?}");
        ids.entry(parts[0].to_owned())
            .or_default()
            .insert(parts[1].to_owned());
        *created.entry(parts[0].to_owned()).or_default() += usize::from(parts[2] == "true");
    }
    assert_eq!(
        reports.iter().map(Vec::len).sum::<usize>(),
        2 * S1_ROUNDS * S1_KEYS
    );
    assert_eq!(ids.len(), S1_KEYS);
    for (k, set) in &ids {
        assert_eq!(set.len(), 1, "S1: key {k} got several run ids: {set:?}");
        assert_eq!(created[k], 1, "S1: exactly one enqueue of {k} created it");
    }
    let stored = parent
        .runs(
            &cairn_core::spool::RunFilter {
                queue: Some(queue("s1-processes")),
                ..Default::default()
            },
            1000,
        )
        .await
        .unwrap();
    assert_eq!(stored.len(), S1_KEYS, "S1: one stored run per key");
    for run in stored {
        let k = run.dedup_key.parts().unwrap()[2].clone();
        let k = String::from_utf8(k).unwrap();
        assert_eq!(
            ids[&k].iter().next().unwrap(),
            &run.run_id.to_string(),
            "S1: the stored run is the one both processes were given"
        );
    }
}

/// S3 across OS processes: a consumer blocked in `subscribe` wakes when another process —
/// an offline hook writing straight to the store file — enqueues, without restarting; the
/// woken consumer claims exactly that run. The wait has a deadline; nothing sleeps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_subscriber_wakes_for_another_process_enqueue() {
    const TEST: &str = "s3_subscriber_wakes_for_another_process_enqueue";
    if let Some((db, _, arg)) = child_env() {
        let spool = child_spool(&db).await;
        ready_and_wait();
        let e = spool
            .enqueue(
                &queue("s3-processes"),
                &key(&arg),
                b"from the hook".to_vec(),
                EnqueueOptions::default(),
            )
            .await
            .unwrap();
        report(e.run_id);
        return;
    }

    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s3.db");
    let consumer_side = SqliteSpool::open(&db, SqliteOptions::default(), Arc::new(SystemClock))
        .await
        .unwrap();
    let q = queue("s3-processes");
    let me = ConsumerId::new("s3-consumer").unwrap();
    for round in 0..3 {
        let mut wake = consumer_side.subscribe(&q).await.unwrap();
        assert!(
            consumer_side
                .claim(&q, &me, Duration::from_secs(30), 10)
                .await
                .unwrap()
                .is_empty(),
            "S3: nothing is queued before the hook runs"
        );
        // The consumer loop: wait, claim, and wait again after a spurious wake.
        let (spool, q2, me2) = (consumer_side.clone(), q.clone(), me.clone());
        let consumer = tokio::spawn(async move {
            loop {
                wake.wait().await.expect("wait failed");
                let got = spool
                    .claim(&q2, &me2, Duration::from_secs(30), 10)
                    .await
                    .unwrap();
                if !got.is_empty() {
                    return got;
                }
            }
        });
        let child = spawn_child(TEST, &db, "hook", &format!("hook-{round}"));
        let reports = tokio::task::spawn_blocking(move || run_together(vec![child]));
        let claimed = tokio::time::timeout(Duration::from_secs(10), consumer)
            .await
            .expect("S3: the subscriber wakes and claims within the deadline")
            .expect("consumer panicked");
        let reports = reports.await.unwrap();
        assert_eq!(claimed.len(), 1, "S3: the woken consumer finds the run");
        assert_eq!(claimed[0].run_id.to_string(), reports[0][0]);
        assert_eq!(claimed[0].dedup_key, key(&format!("hook-{round}")));
        consumer_side
            .ack(claimed[0].run_id, claimed[0].token)
            .await
            .unwrap();
    }
}

const S15_NAMES: usize = 20;

/// S15 across OS processes: two processes race to set the same facts on one run, with
/// different values (`race-*`) and with equal values (`same-*`). For every fact exactly one
/// process wins; the loser of a different value gets `FactConflict` carrying the winner's
/// value, the loser of an equal value gets `AlreadySet`, and the store keeps the winner's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s15_two_processes_set_facts_first_writer_wins() {
    const TEST: &str = "s15_two_processes_set_facts_first_writer_wins";
    if let Some((db, name, arg)) = child_env() {
        let spool = child_spool(&db).await;
        let run = cairn_core::RunId::parse(&arg).unwrap();
        ready_and_wait();
        for i in 0..S15_NAMES {
            let i = if name == "a" { i } else { S15_NAMES - 1 - i };
            for (fact, value) in [
                (format!("race-{i}"), format!("from-{name}")),
                (format!("same-{i}"), "agreed".to_owned()),
            ] {
                let outcome = match spool
                    .set_fact(
                        run,
                        &FactName::new(fact.clone()).unwrap(),
                        value.into_bytes(),
                    )
                    .await
                {
                    Ok(FactOutcome::Set) => "set".to_owned(),
                    Ok(FactOutcome::AlreadySet) => "already".to_owned(),
                    Err(Error::FactConflict { existing, .. }) => {
                        format!("conflict:{}", String::from_utf8(existing).unwrap())
                    }
                    Err(e) => panic!("child {name}: set_fact {fact}: {e}"),
                };
                report(format!("{fact} {name} {outcome}"));
            }
        }
        return;
    }

    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s15.db");
    let parent = SqliteSpool::open(&db, SqliteOptions::default(), Arc::new(SystemClock))
        .await
        .unwrap();
    let run = parent
        .enqueue(
            &queue("s15-processes"),
            &key("facts"),
            Vec::new(),
            EnqueueOptions::default(),
        )
        .await
        .unwrap()
        .run_id;
    let arg = run.to_string();
    let children = vec![
        spawn_child(TEST, &db, "a", &arg),
        spawn_child(TEST, &db, "b", &arg),
    ];
    let reports = tokio::task::spawn_blocking(move || run_together(children))
        .await
        .unwrap();

    let mut outcomes: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for r in reports.iter().flatten() {
        let parts: Vec<&str> = r.split(' ').collect();
        outcomes
            .entry(parts[0].to_owned())
            .or_default()
            .push((parts[1].to_owned(), parts[2].to_owned()));
    }
    assert_eq!(outcomes.len(), 2 * S15_NAMES);
    let stored = parent.facts(run).await.unwrap();
    assert_eq!(stored.len(), 2 * S15_NAMES);
    for (fact, got) in &outcomes {
        assert_eq!(got.len(), 2, "{fact}: both processes report");
        let winners: Vec<&(String, String)> = got.iter().filter(|(_, o)| o == "set").collect();
        assert_eq!(
            winners.len(),
            1,
            "S15: exactly one writer of {fact} wins: {got:?}"
        );
        let winner = &winners[0].0;
        let loser = got.iter().find(|(n, _)| n != winner).unwrap();
        let value =
            String::from_utf8(stored[&FactName::new(fact.clone()).unwrap()].clone()).unwrap();
        if fact.starts_with("race-") {
            assert_eq!(
                value,
                format!("from-{winner}"),
                "S15: the first writer's value stays"
            );
            assert_eq!(
                loser.1,
                format!("conflict:from-{winner}"),
                "S15: the loser is refused with the stored value"
            );
        } else {
            assert_eq!(value, "agreed");
            assert_eq!(loser.1, "already", "S15: an equal value is AlreadySet");
        }
    }
}

const S5_KEYS: usize = 60;

/// S5 across OS processes: two processes enqueue the same keys while claiming and acking as
/// they go, then drain the queue. Every run is created once, handed out once (one attempt, to
/// one process) and acked once; none is lost, none is duplicated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s5_two_processes_enqueue_claim_and_ack_lose_and_duplicate_nothing() {
    const TEST: &str = "s5_two_processes_enqueue_claim_and_ack_lose_and_duplicate_nothing";
    let q = queue("s5-processes");
    if let Some((db, name, _)) = child_env() {
        let spool = child_spool(&db).await;
        let me = ConsumerId::new(format!("s5-{name}")).unwrap();
        ready_and_wait();
        let work = |claimed: Vec<cairn_core::Claimed>| {
            let spool = spool.clone();
            async move {
                for c in claimed {
                    report(format!("claim {} {}", c.run_id, c.attempt));
                    spool.ack(c.run_id, c.token).await.unwrap();
                    report(format!("ack {}", c.run_id));
                }
            }
        };
        for i in 0..S5_KEYS {
            let k = if name == "a" { i } else { S5_KEYS - 1 - i };
            let e = spool
                .enqueue(
                    &q,
                    &key(&format!("k{k}")),
                    Vec::new(),
                    EnqueueOptions::default(),
                )
                .await
                .unwrap();
            report(format!("enqueue k{k} {} {}", e.run_id, e.created));
            if i % 3 == 0 {
                let got = spool
                    .claim(&q, &me, Duration::from_secs(300), 2)
                    .await
                    .unwrap();
                work(got).await;
            }
        }
        loop {
            let got = spool
                .claim(&q, &me, Duration::from_secs(300), 5)
                .await
                .unwrap();
            if got.is_empty() {
                break;
            }
            work(got).await;
        }
        return;
    }

    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s5.db");
    let parent = SqliteSpool::open(&db, SqliteOptions::default(), Arc::new(SystemClock))
        .await
        .unwrap();
    let children = vec![
        spawn_child(TEST, &db, "a", ""),
        spawn_child(TEST, &db, "b", ""),
    ];
    let reports = tokio::task::spawn_blocking(move || run_together(children))
        .await
        .unwrap();

    let mut ids: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut created = 0;
    let mut claims: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut acks: BTreeMap<String, usize> = BTreeMap::new();
    for r in reports.iter().flatten() {
        let parts: Vec<&str> = r.split(' ').collect();
        match parts[0] {
            "enqueue" => {
                ids.entry(parts[1].to_owned())
                    .or_default()
                    .insert(parts[2].to_owned());
                created += usize::from(parts[3] == "true");
            }
            "claim" => claims
                .entry(parts[1].to_owned())
                .or_default()
                .push(parts[2].to_owned()),
            "ack" => *acks.entry(parts[1].to_owned()).or_default() += 1,
            other => panic!("unexpected report {other}"),
        }
    }
    assert_eq!(ids.len(), S5_KEYS);
    assert!(ids.values().all(|s| s.len() == 1), "S5: one id per key");
    assert_eq!(created, S5_KEYS, "S5: each run created once");
    let runs: BTreeSet<String> = ids.values().flatten().cloned().collect();
    for run in &runs {
        assert_eq!(
            claims.get(run).map(Vec::as_slice),
            Some(&["1".to_owned()][..]),
            "S5: run {run} is handed out exactly once"
        );
        assert_eq!(
            acks.get(run),
            Some(&1),
            "S5: run {run} is acked exactly once"
        );
    }
    let stats = parent.stats().await.unwrap();
    assert_eq!(
        stats.runs.get(&cairn_core::RunState::Succeeded),
        Some(&(S5_KEYS as u64)),
        "S5: every run ends succeeded: {stats:?}"
    );
    assert_eq!(stats.runs.values().sum::<u64>(), S5_KEYS as u64);
}

/// S6: a producer process killed (SIGKILL) while enqueues keep arriving, holding a claimed
/// run it never acks: after the crash every run whose id an enqueue returned is in the
/// store, and every one of them is claimable — the unacknowledged one once its lease expires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_crash_while_enqueues_arrive_loses_no_returned_run() {
    const TEST: &str = "s6_crash_while_enqueues_arrive_loses_no_returned_run";
    const SEEN_BEFORE_KILL: usize = 40;
    let q = queue("s6-processes");
    if let Some((db, _, _)) = child_env() {
        let spool = child_spool(&db).await;
        ready_and_wait();
        let first = spool
            .enqueue(&q, &key("held"), Vec::new(), EnqueueOptions::default())
            .await
            .unwrap();
        let held = spool
            .claim(
                &q,
                &ConsumerId::new("s6-doomed").unwrap(),
                Duration::from_secs(1),
                1,
            )
            .await
            .unwrap();
        assert_eq!(held[0].run_id, first.run_id);
        report(format!("{}", first.run_id));
        // Enqueue until killed.
        for i in 0.. {
            let e = spool
                .enqueue(
                    &q,
                    &key(&format!("k{i}")),
                    vec![0; 64],
                    EnqueueOptions::default(),
                )
                .await
                .unwrap();
            report(e.run_id);
        }
        return;
    }

    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s6.db");
    drop(
        SqliteSpool::open(&db, SqliteOptions::default(), Arc::new(SystemClock))
            .await
            .unwrap(),
    );
    let mut child = spawn_child(TEST, &db, "doomed", "");
    let returned = tokio::task::spawn_blocking(move || {
        let mut out = await_ready(&mut child);
        child.stdin.take().unwrap().write_all(b"go\n").unwrap();
        let mut ids = Vec::new();
        let mut line = String::new();
        while ids.len() < SEEN_BEFORE_KILL {
            line.clear();
            assert!(
                out.read_line(&mut line).unwrap() > 0,
                "the child stopped early"
            );
            if let Some(at) = line.find(REPORT) {
                ids.push(line[at + REPORT.len()..].trim().to_owned());
            }
        }
        child.kill().unwrap();
        child.wait().unwrap();
        ids
    })
    .await
    .unwrap();

    let spool = SqliteSpool::open(&db, SqliteOptions::default(), Arc::new(SystemClock))
        .await
        .unwrap();
    let me = ConsumerId::new("s6-survivor").unwrap();
    let mut claimed = BTreeSet::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    // Claim until every returned run has been handed out; the held run comes back after its
    // one-second lease and backoff, the others at once.
    while !returned.iter().all(|id| claimed.contains(id)) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "S6: runs never became claimable: {:?}",
            returned
                .iter()
                .filter(|id| !claimed.contains(*id))
                .collect::<Vec<_>>()
        );
        let mut wake = spool.subscribe(&q).await.unwrap();
        let got = spool
            .claim(&q, &me, Duration::from_secs(30), 100)
            .await
            .unwrap();
        if got.is_empty() {
            // Nothing due yet: wait for a wake-up or the next lease expiry, whichever first.
            let _ = tokio::time::timeout(Duration::from_millis(200), wake.wait()).await;
        }
        for c in got {
            claimed.insert(c.run_id.to_string());
            spool.ack(c.run_id, c.token).await.unwrap();
        }
    }
    let held = cairn_core::RunId::parse(&returned[0]).unwrap();
    let info = spool.run(held).await.unwrap().unwrap();
    assert_eq!(
        info.attempts, 2,
        "S6: the crashed holder's run was handed out again"
    );
}

/// `set_wake_poll` takes effect at once, for a subscription already waiting out a long poll
/// too, and through any clone of the spool: a commit by another instance of the store (which
/// notifies nobody in this one) leaves the subscriber waiting while the poll is an hour, and
/// wakes it once the poll is shortened, not an hour later. Kills `set_wake_poll` -> ().
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shortened_wake_poll_applies_to_a_waiting_subscription() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    let open = || SqliteSpool::open(&path, SqliteOptions::default(), Arc::new(SystemClock));
    let spool = open().await.unwrap();
    spool.set_wake_poll(Duration::from_secs(3600));
    let q = queue("wake-poll");
    let mut wake = spool.subscribe(&q).await.unwrap();
    let other = open().await.unwrap();
    other
        .enqueue(&q, &key("poll"), b"x".to_vec(), EnqueueOptions::default())
        .await
        .unwrap();
    // The hour-long poll holds: the subscriber stays pending well past the default poll
    // (`DEFAULT_WAKE_POLL`, 5 ms), so the setting was applied.
    assert!(
        tokio::time::timeout(Duration::from_millis(300), wake.wait())
            .await
            .is_err(),
        "the subscriber woke for another instance's commit before the hour-long poll"
    );
    spool.clone().set_wake_poll(Duration::from_millis(1));
    tokio::time::timeout(Duration::from_secs(30), wake.wait())
        .await
        .expect("the subscriber wakes within the deadline, not after the hour-long poll")
        .unwrap();
}
