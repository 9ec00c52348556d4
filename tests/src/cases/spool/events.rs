//! Run data cases: events (S7), retention (S11), facts (S15).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use cairn_core::spool::{
    EventAppended, FactOutcome, RetentionBudget, RetentionPolicy, RetentionReport, RunState,
};
use cairn_core::{Clock, Error, FactName, RunEventId, RunId};

use super::support::{assert_err, consumer, enqueue_new, info, open_spool, LEASE};
use crate::{random_queue, SpoolHarness};

fn eid(s: &str) -> RunEventId {
    RunEventId::new(s).expect("valid event id")
}

/// S7: a run's events get seqs 1, 2, 3, …; re-appending a held id is a no-op returning its seq
/// (the first payload stays); reads come in seq order and page with `after`; acknowledged events
/// are gone, their seqs are never reused, and an acknowledged id may be appended anew.
pub async fn s7_run_events_sequence_dedup_and_order<H: SpoolHarness>(h: &H) {
    let s = open_spool(h).await;
    let s = s.as_ref();
    let q = random_queue("s7");
    let run = enqueue_new(s, &q, "s7").await;
    for i in 1..=5u64 {
        let a = s
            .append_event(run, &eid(&format!("e{i}")), format!("p{i}").into_bytes())
            .await
            .unwrap();
        assert_eq!(
            a,
            EventAppended {
                seq: i,
                created: true
            },
            "S7: seq +1"
        );
    }
    let dup = s
        .append_event(run, &eid("e3"), b"other".to_vec())
        .await
        .unwrap();
    assert_eq!(
        dup,
        EventAppended {
            seq: 3,
            created: false
        },
        "S7: a duplicate id is a no-op returning its seq"
    );
    let page = s.events(run, 0, 2).await.unwrap();
    assert_eq!(page.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![1, 2]);
    let page = s.events(run, 2, 2).await.unwrap();
    assert_eq!(page.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![3, 4]);
    assert_eq!(page[0].payload, b"p3", "S7: the first payload stays");
    assert_eq!(page[0].event_id, eid("e3"));
    assert_eq!(page[0].created_at, h.clock().now());
    assert!(s.events(run, 5, 10).await.unwrap().is_empty());

    let removed = s
        .acknowledge_events(run, &[eid("e1"), eid("e2"), eid("never")])
        .await
        .unwrap();
    assert_eq!(removed, 2, "S7: acknowledge removes the held ids only");
    assert_eq!(
        s.acknowledge_events(run, &[eid("e1")]).await.unwrap(),
        0,
        "S7: acknowledging again is harmless"
    );
    let left = s.events(run, 0, 10).await.unwrap();
    assert_eq!(
        left.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![3, 4, 5]
    );
    assert_eq!(info(s, run).await.events, 3);
    let a = s.append_event(run, &eid("e6"), Vec::new()).await.unwrap();
    assert_eq!(a.seq, 6, "S7: seqs are never reused");
    let a = s.append_event(run, &eid("e1"), Vec::new()).await.unwrap();
    assert_eq!(
        a,
        EventAppended {
            seq: 7,
            created: true
        },
        "S7: an acknowledged id is appended anew"
    );

    let other = enqueue_new(s, &q, "s7-other").await;
    let a = s.append_event(other, &eid("e1"), Vec::new()).await.unwrap();
    assert_eq!(a.seq, 1, "S7: each run has its own sequence and ids");
}

/// S7: tasks on two instances append overlapping event ids to one run at once; every id gets
/// one seq, exactly one append of it says `created`, and the seqs are exactly 1..=n.
pub async fn s7_concurrent_appends_get_gap_free_seqs<H: SpoolHarness>(h: &H) {
    let spools = [open_spool(h).await, open_spool(h).await];
    let q = random_queue("s7-race");
    let run = enqueue_new(spools[0].as_ref(), &q, "s7-race").await;
    let mut joins = Vec::new();
    for t in 0..6 {
        let spool = spools[t % 2].clone();
        joins.push(tokio::spawn(async move {
            let mut ids: Vec<String> = (0..20)
                .map(|i| format!("shared-{}", (i + t * 3) % 20))
                .collect();
            ids.extend((0..5).map(|i| format!("own-{t}-{i}")));
            let mut out = Vec::new();
            for id in ids {
                let a = spool
                    .append_event(run, &eid(&id), id.clone().into_bytes())
                    .await
                    .unwrap();
                out.push((id, a));
            }
            out
        }));
    }
    let mut by_id: BTreeMap<String, Vec<EventAppended>> = BTreeMap::new();
    for j in joins {
        for (id, a) in j.await.expect("append task panicked") {
            by_id.entry(id).or_default().push(a);
        }
    }
    let mut seqs = BTreeSet::new();
    for (id, results) in &by_id {
        let distinct: BTreeSet<u64> = results.iter().map(|a| a.seq).collect();
        assert_eq!(distinct.len(), 1, "S7: event {id} has one seq");
        assert_eq!(results.iter().filter(|a| a.created).count(), 1);
        assert!(seqs.insert(results[0].seq), "S7: two ids share a seq");
    }
    let n = by_id.len() as u64;
    assert_eq!(seqs, (1..=n).collect(), "S7: seqs are exactly 1..={n}");
    let stored = spools[1].events(run, 0, 1000).await.unwrap();
    assert_eq!(stored.len() as u64, n);
    assert!(stored.windows(2).all(|w| w[0].seq + 1 == w[1].seq));
    for e in &stored {
        assert_eq!(
            e.payload,
            e.event_id.as_bytes(),
            "S7: payload belongs to its id"
        );
    }
}

/// S11: ten simulated days of runs, each hour producing 6 KB of events against a 64 KiB cap
/// and a one-day age limit, with a retention pass every hour: after every pass the events fit
/// the cap (and no more than one event's worth under it was removed), none is older than a
/// day, finished runs without events go after a day, queued runs stay; finally everything
/// expires.
pub async fn s11_retention_keeps_store_under_cap_in_long_run<H: SpoolHarness>(h: &H) {
    let s = open_spool(h).await;
    let s = s.as_ref();
    let clock = h.clock();
    let q = random_queue("s11");
    let me = consumer("s11");
    let day = Duration::from_secs(24 * 3600);
    let policy = RetentionPolicy {
        max_age: day,
        max_bytes: 64 * 1024,
    };
    let budget = RetentionBudget {
        batch_size: 16,
        max_batches: 100_000,
        max_duration: Duration::from_secs(3600),
    };
    let event_size = 1000usize;

    let finished_early = enqueue_new(s, &q, "finished-early").await;
    let c = s.claim(&q, &me, LEASE, 1).await.unwrap();
    assert_eq!(c[0].run_id, finished_early);
    s.ack(finished_early, c[0].token).await.unwrap();
    // Queued for the whole simulation: never due, never removed.
    let far = clock.now().saturating_add(day * 1000);
    let queued_forever = super::support::enqueue_with(
        s,
        &q,
        "queued-forever",
        cairn_core::EnqueueOptions::default().not_before(far),
    )
    .await;

    let mut total = RetentionReport::default();
    for hour in 0..240u32 {
        let run = enqueue_new(s, &q, &format!("hour-{hour}")).await;
        for i in 0..6 {
            s.append_event(run, &eid(&format!("{hour}-{i}")), vec![b'x'; event_size])
                .await
                .unwrap();
        }
        let c = s.claim(&q, &me, LEASE, 1).await.unwrap();
        assert_eq!(c[0].run_id, run, "S11: the hour's run is claimed");
        s.ack(run, c[0].token).await.unwrap();
        clock.advance(Duration::from_secs(3600));

        let r = s.retention_pass(&policy, &budget).await.unwrap();
        assert!(
            r.complete,
            "S11: hour {hour}: the pass finished within budget"
        );
        total.events_expired += r.events_expired;
        total.events_over_cap += r.events_over_cap;
        total.runs_removed += r.runs_removed;
        let stats = s.stats().await.unwrap();
        assert!(
            stats.event_bytes <= policy.max_bytes,
            "S11: hour {hour}: {} bytes stored over the {} cap",
            stats.event_bytes,
            policy.max_bytes
        );
        if r.events_over_cap > 0 {
            assert!(
                stats.event_bytes + event_size as u64 > policy.max_bytes,
                "S11: hour {hour}: the cap removes only the oldest events it needs to"
            );
        }
        if let Some(oldest) = stats.oldest_event {
            assert!(
                oldest >= clock.now().saturating_sub(day),
                "S11: hour {hour}"
            );
        }
    }
    assert!(total.events_over_cap > 0, "S11: the cap did the trimming");
    assert!(
        s.run(finished_early).await.unwrap().is_none(),
        "S11: a finished run without events is removed after max_age"
    );
    assert_eq!(
        info(s, queued_forever).await.state,
        RunState::Queued,
        "S11: live runs are never removed"
    );
    let again = s
        .enqueue(
            &q,
            &super::support::key(&["finished-early"]),
            Vec::new(),
            Default::default(),
        )
        .await
        .unwrap();
    assert!(
        again.created,
        "S11: a removed run's key no longer deduplicates"
    );

    clock.advance(day * 2);
    let before = s.stats().await.unwrap();
    let r = s.retention_pass(&policy, &budget).await.unwrap();
    assert!(r.complete);
    assert_eq!(
        r.events_expired, before.events,
        "S11: everything old expires"
    );
    let after = s.stats().await.unwrap();
    assert_eq!((after.events, after.event_bytes), (0, 0));
    assert_eq!(
        after.runs.get(&RunState::Succeeded),
        None,
        "S11: every finished run, now empty and old, is removed"
    );
    assert_eq!(after.runs.get(&RunState::Queued), Some(&2));
}

/// S11: the order and batching of one pass, exactly: expired events first, then the oldest over
/// the cap, then old finished runs without events; a budget of one batch stops early and says
/// so; sequence counters survive.
pub async fn s11_retention_order_and_batches<H: SpoolHarness>(h: &H) {
    let s = open_spool(h).await;
    let s = s.as_ref();
    let clock = h.clock();
    let q = random_queue("s11-order");
    let hour = Duration::from_secs(3600);
    let policy = RetentionPolicy {
        max_age: hour,
        max_bytes: 250,
    };
    let one_batch = RetentionBudget {
        batch_size: 1,
        max_batches: 1,
        max_duration: hour,
    };
    let live = enqueue_new(s, &q, "live").await;
    s.append_event(live, &eid("e1"), vec![1; 100])
        .await
        .unwrap();
    clock.advance(hour * 2);
    s.append_event(live, &eid("e2"), vec![2; 100])
        .await
        .unwrap();
    let done = enqueue_new(s, &q, "done").await;
    s.append_event(done, &eid("e3"), vec![3; 100])
        .await
        .unwrap();
    s.append_event(done, &eid("e4"), vec![4; 100])
        .await
        .unwrap();
    let c = s.claim(&q, &consumer("c"), LEASE, 2).await.unwrap();
    for c in &c {
        s.ack(c.run_id, c.token).await.unwrap();
    }
    assert_eq!(info(s, live).await.state, RunState::Succeeded);
    let empty = enqueue_new(s, &q, "empty").await;
    s.cancel(empty).await.unwrap();

    let r = s.retention_pass(&policy, &one_batch).await.unwrap();
    assert_eq!(
        r,
        RetentionReport {
            batches: 1,
            events_expired: 1,
            bytes_freed: 100,
            complete: false,
            ..RetentionReport::default()
        },
        "S11: the expired event goes first, in a batch of one"
    );
    let r = s.retention_pass(&policy, &one_batch).await.unwrap();
    assert_eq!(
        (r.events_over_cap, r.events_expired, r.complete),
        (1, 0, false),
        "S11: then the oldest event over the cap"
    );
    assert_eq!(
        s.events(live, 0, 10).await.unwrap().len(),
        0,
        "S11: e1 (expired) and e2 (oldest over the cap) are gone"
    );
    let r = s
        .retention_pass(&policy, &RetentionBudget::default())
        .await
        .unwrap();
    assert_eq!(
        r,
        RetentionReport {
            batches: 2,
            complete: true,
            ..RetentionReport::default()
        },
        "S11: under the cap, nothing expired, no run old enough: two empty batches"
    );

    clock.advance(hour * 2);
    let r = s
        .retention_pass(&policy, &RetentionBudget::default())
        .await
        .unwrap();
    assert_eq!(
        (r.events_expired, r.runs_removed, r.complete),
        (2, 3, true),
        "S11: e3 and e4 expire, then the three finished runs, now empty and old, go"
    );
    for run in [live, done, empty] {
        assert!(s.run(run).await.unwrap().is_none());
    }
}

/// The seqs of `run`'s stored events, in order.
async fn stored_seqs(s: &dyn cairn_core::spool::Spool, run: RunId) -> Vec<u64> {
    let events = s.events(run, 0, 100).await.unwrap();
    events.iter().map(|e| e.seq).collect()
}

/// S11: the limits are exact. An event or a finished run exactly `max_age` old is kept and one
/// microsecond older goes; events whose total is exactly `max_bytes` are all kept and one byte
/// over removes the oldest.
pub async fn s11_retention_limits_are_exact<H: SpoolHarness>(h: &H) {
    let s = open_spool(h).await;
    let s = s.as_ref();
    let clock = h.clock();
    let q = random_queue("s11-exact");
    let hour = Duration::from_secs(3600);
    let micro = Duration::from_micros(1);
    let policy = RetentionPolicy {
        max_age: hour,
        max_bytes: 200,
    };
    let budget = RetentionBudget::default();
    let live = enqueue_new(s, &q, "live").await;
    s.append_event(live, &eid("a1"), vec![1; 100])
        .await
        .unwrap();
    let gone = enqueue_new(s, &q, "gone").await;
    s.cancel(gone).await.unwrap();
    clock.advance(micro);
    s.append_event(live, &eid("a2"), vec![2; 100])
        .await
        .unwrap();
    // a1 and `gone`'s finish are now exactly max_age old, and the events total exactly the cap.
    clock.advance(hour - micro);

    let r = s.retention_pass(&policy, &budget).await.unwrap();
    assert_eq!(
        (
            r.events_expired,
            r.events_over_cap,
            r.runs_removed,
            r.complete
        ),
        (0, 0, 0, true),
        "S11: exactly max_age old and exactly at the cap, nothing is due"
    );
    assert_eq!(s.events(live, 0, 10).await.unwrap().len(), 2);
    assert!(s.run(gone).await.unwrap().is_some(), "S11: `gone` is kept");

    clock.advance(micro);
    let r = s.retention_pass(&policy, &budget).await.unwrap();
    assert_eq!(
        (
            r.events_expired,
            r.events_over_cap,
            r.bytes_freed,
            r.runs_removed
        ),
        (1, 0, 100, 1),
        "S11: a microsecond later a1 expires and the finished run goes"
    );
    assert!(s.run(gone).await.unwrap().is_none());
    assert_eq!(
        stored_seqs(s, live).await,
        vec![2],
        "S11: a2, younger than max_age, is kept"
    );

    s.append_event(live, &eid("a3"), vec![3; 101])
        .await
        .unwrap();
    let r = s.retention_pass(&policy, &budget).await.unwrap();
    assert_eq!(
        (r.events_expired, r.events_over_cap, r.bytes_freed),
        (0, 1, 100),
        "S11: one byte over the cap removes the oldest event"
    );
    assert_eq!(stored_seqs(s, live).await, vec![3]);
}

/// S15 (in-process part): tasks on two instances race to set one fact to different values:
/// exactly one wins, every loser gets `FactConflict` carrying the winner's value, the same
/// value again is `AlreadySet`, and facts are visible everywhere, in every state.
pub async fn s15_facts_first_writer_wins<H: SpoolHarness>(h: &H) {
    let spools = [open_spool(h).await, open_spool(h).await];
    let q = random_queue("s15");
    let run = enqueue_new(spools[0].as_ref(), &q, "s15").await;
    let review = FactName::new("review").unwrap();
    let mut joins = Vec::new();
    for t in 0..10 {
        let spool = spools[t % 2].clone();
        let review = review.clone();
        joins.push(tokio::spawn(async move {
            let value = format!("decision-{t}").into_bytes();
            (value.clone(), spool.set_fact(run, &review, value).await)
        }));
    }
    let mut winners = Vec::new();
    let mut conflicts = Vec::new();
    for j in joins {
        match j.await.expect("fact task panicked") {
            (v, Ok(FactOutcome::Set)) => winners.push(v),
            (_, Err(Error::FactConflict { name, existing })) => {
                assert_eq!(name, review);
                conflicts.push(existing);
            }
            (_, other) => panic!("S15: unexpected outcome {other:?}"),
        }
    }
    assert_eq!(winners.len(), 1, "S15: exactly one writer wins");
    let winner = winners.pop().unwrap();
    assert_eq!(conflicts.len(), 9);
    assert!(
        conflicts.iter().all(|e| *e == winner),
        "S15: every loser learns the winning value"
    );
    for s in &spools {
        let facts = s.facts(run).await.unwrap();
        assert_eq!(facts.get(&review), Some(&winner));
        assert_eq!(info(s.as_ref(), run).await.facts, facts);
    }
    assert_eq!(
        spools[1]
            .set_fact(run, &review, winner.clone())
            .await
            .unwrap(),
        FactOutcome::AlreadySet,
        "S15: the same value again is accepted"
    );

    let s = spools[0].as_ref();
    let c = s.claim(&q, &consumer("s15"), LEASE, 1).await.unwrap();
    s.ack(run, c[0].token).await.unwrap();
    let merged = FactName::new("merged").unwrap();
    assert_eq!(
        s.set_fact(run, &merged, b"sha".to_vec()).await.unwrap(),
        FactOutcome::Set,
        "S15: facts can be set on a finished run"
    );
    assert_err(
        s.set_fact(run, &merged, b"other".to_vec()).await,
        "FactConflict",
        "S15: a different value is refused",
    );
    assert_eq!(s.facts(run).await.unwrap().len(), 2);
    assert_err(
        s.set_fact(RunId::generate(h.clock().now()), &merged, Vec::new())
            .await,
        "UnknownRun",
        "S15: facts of an unknown run",
    );
}

/// S7b: events bounded in bytes ([`Spool::events_within`](cairn_core::spool::Spool::events_within))
/// are the longest run of the unbounded read within `limit` and `max_bytes` of payload, and at
/// least the first event.
pub async fn s7_run_events_within_bytes<H: SpoolHarness>(h: &H) {
    let s = open_spool(h).await;
    let s = s.as_ref();
    let q = random_queue("s7b");
    let run = enqueue_new(s, &q, "s7b").await;
    let sizes = [300usize, 5, 0, 60, 100, 250, 1, 2, 120, 7];
    for (i, n) in sizes.iter().enumerate() {
        s.append_event(run, &eid(&format!("e{i}")), vec![b'x'; *n])
            .await
            .unwrap();
    }
    let full = s.events(run, 0, 1000).await.unwrap();
    assert_eq!(full.len(), sizes.len());
    for after in [0u64, 1, 3, 9, 10] {
        for limit in [1usize, 2, 3, 5, 1000] {
            for max_bytes in [0usize, 1, 6, 100, 160, 305, 1000, usize::MAX] {
                let got = s.events_within(run, after, limit, max_bytes).await.unwrap();
                let mut bytes = 0;
                let want: Vec<_> = full
                    .iter()
                    .filter(|e| e.seq > after)
                    .take(limit)
                    .enumerate()
                    .take_while(|(i, e)| {
                        bytes += e.payload.len();
                        *i == 0 || bytes <= max_bytes
                    })
                    .map(|(_, e)| e.clone())
                    .collect();
                assert_eq!(
                    got, want,
                    "S7b: after {after}, limit {limit}, max_bytes {max_bytes}"
                );
            }
        }
    }
    assert_err(
        s.events_within(run, 0, 0, 100).await,
        "InvalidInput",
        "S7b: limit 0",
    );
    let unknown = RunId::parse("00000000-0000-7000-8000-000000000000").unwrap();
    assert_err(
        s.events_within(unknown, 0, 10, 100).await,
        "UnknownRun",
        "S7b: an unknown run",
    );
}
