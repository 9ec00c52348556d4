//! Transaction cases (T1–T5): cairn's writes inside a transaction that also holds an
//! application row ([`TxHarness`]), on every backend with transactions.

use std::sync::Arc;
use std::time::Duration;

use cairn_core::spool::{EnqueueItem, RunEventId, Wakeup};
use cairn_core::{
    DedupKey, EnqueueOptions, Enqueued, Error, Event, QueueName, SpaceId, Spool, Transaction,
};
use cairn_migrate::Backend;

use super::spool::runs_of;
use super::spool::support::within;
use crate::TxHarness;

/// How long a case waits to see that a wake-up does *not* come: a bounded wait for an event
/// that must not happen (the harness's spools poll once an hour, so only a notification
/// returns from `wait`).
const QUIET: Duration = Duration::from_millis(400);

fn k(parts: &[&str]) -> DedupKey {
    DedupKey::from_parts(parts).expect("valid dedup key")
}

async fn open_tx<H: TxHarness>(h: &H) -> Arc<dyn Backend> {
    h.open_tx()
        .await
        .unwrap_or_else(|e| panic!("{}: cannot open a transactional store: {e}", h.backend()))
}

async fn begin<H: TxHarness>(h: &H, b: &Arc<dyn Backend>) -> Box<dyn Transaction> {
    b.begin()
        .await
        .unwrap_or_else(|e| panic!("{}: begin: {e}", h.backend()))
}

async fn insert<H: TxHarness>(h: &H, tx: &mut Box<dyn Transaction>, id: &str) {
    h.insert_order(tx.as_mut(), id)
        .await
        .unwrap_or_else(|e| panic!("{}: insert the application row {id}: {e}", h.backend()));
}

async fn order<H: TxHarness>(h: &H, id: &str) -> bool {
    h.order_exists(id)
        .await
        .unwrap_or_else(|e| panic!("{}: read the application row {id}: {e}", h.backend()))
}

async fn enqueue(tx: &mut Box<dyn Transaction>, q: &QueueName, key: &str) -> Enqueued {
    tx.enqueue(
        q,
        &k(&[key]),
        key.as_bytes().to_vec(),
        EnqueueOptions::default(),
    )
    .await
    .unwrap_or_else(|e| panic!("enqueue {key} inside the transaction: {e}"))
}

/// Whether the run exists, read through another store instance.
async fn exists(spool: &dyn Spool, run: cairn_core::RunId) -> bool {
    spool
        .run(run)
        .await
        .unwrap_or_else(|e| panic!("run({run}): {e}"))
        .is_some()
}

/// The run holding `(queue, key)` seen from outside, if any: an enqueue from another instance
/// inside a rolled-back probe would write; so look through the queue's runs instead.
async fn runs_in(spool: &dyn Spool, q: &QueueName) -> usize {
    runs_of(spool, q).await.len()
}

/// T1: an application row and an enqueue made in one transaction are both visible after its
/// commit, and not before.
pub async fn t1_app_row_and_enqueue_commit_together<H: TxHarness>(h: &H) {
    let b = open_tx(h).await;
    let outside = h.open_spool().await.unwrap();
    let q = QueueName::new("t1-commit").unwrap();
    let mut tx = begin(h, &b).await;
    insert(h, &mut tx, "order-1").await;
    let run = enqueue(&mut tx, &q, "receipt-1").await;
    assert!(run.created);
    let again = enqueue(&mut tx, &q, "receipt-1").await;
    assert_eq!(
        again.run_id, run.run_id,
        "T1: a key enqueued twice in one transaction"
    );
    assert!(!again.created);
    assert!(
        !order(h, "order-1").await,
        "T1: the row is not visible before the commit"
    );
    assert!(
        !exists(outside.as_ref(), run.run_id).await,
        "T1: the run is not visible before the commit"
    );
    within("T1: commit", tx.commit())
        .await
        .unwrap_or_else(|e| panic!("{}: T1: commit: {e}", h.backend()));
    assert!(order(h, "order-1").await, "T1: the row committed");
    assert!(
        exists(outside.as_ref(), run.run_id).await,
        "T1: the run committed with it"
    );
    let after = outside
        .enqueue(
            &q,
            &k(&["receipt-1"]),
            b"x".to_vec(),
            EnqueueOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        after.run_id, run.run_id,
        "T1: the id answered inside is the durable one"
    );
}

/// T1: an explicit rollback, a dropped transaction and one whose operation failed leave
/// neither the row nor the run.
pub async fn t1_rolled_back_dropped_or_failed_leave_nothing<H: TxHarness>(h: &H) {
    let b = open_tx(h).await;
    let outside = h.open_spool().await.unwrap();
    let q = QueueName::new("t1-rollback").unwrap();

    let mut tx = begin(h, &b).await;
    insert(h, &mut tx, "rolled-back").await;
    let rolled = enqueue(&mut tx, &q, "rolled-back").await;
    tx.rollback()
        .await
        .unwrap_or_else(|e| panic!("{}: T1: rollback: {e}", h.backend()));

    let mut tx = begin(h, &b).await;
    insert(h, &mut tx, "dropped").await;
    let dropped = enqueue(&mut tx, &q, "dropped").await;
    drop(tx);

    let mut tx = begin(h, &b).await;
    insert(h, &mut tx, "failed").await;
    let failed = enqueue(&mut tx, &q, "failed").await;
    let unknown = cairn_core::RunId::generate(outside.clock().now());
    let event = RunEventId::new("e").unwrap();
    let refused = tx.append_event(unknown, &event, b"x".to_vec()).await;
    assert!(
        matches!(refused, Err(Error::UnknownRun { .. })),
        "T1: an event of an unknown run is refused: {refused:?}"
    );
    match tx.commit().await {
        Err(Error::Conflict { .. }) => {}
        other => panic!(
            "{}: T1: commit after a failed operation: {other:?}",
            h.backend()
        ),
    }

    for (name, run) in [
        ("rolled-back", rolled),
        ("dropped", dropped),
        ("failed", failed),
    ] {
        assert!(!order(h, name).await, "T1: {name}: no application row");
        assert!(
            !exists(outside.as_ref(), run.run_id).await,
            "T1: {name}: no run"
        );
    }
    assert_eq!(
        runs_in(outside.as_ref(), &q).await,
        0,
        "T1: the queue is empty"
    );
    // The store is usable: the writer (SQLite) and the connections (Postgres) came back.
    let mut tx = within("T1: begin after a drop", b.begin()).await.unwrap();
    let fresh = enqueue(&mut tx, &q, "dropped").await;
    assert!(fresh.created, "T1: a rolled-back key is free");
    tx.commit().await.unwrap();
}

/// T1: an epoch append and a run event made in a transaction commit or roll back with it.
pub async fn t1_epoch_append_and_run_events_commit_with_the_transaction<H: TxHarness>(h: &H) {
    let b = open_tx(h).await;
    let outside = h.open_spool().await.unwrap();
    let q = QueueName::new("t1-events").unwrap();
    let run = outside
        .enqueue(
            &q,
            &k(&["with-events"]),
            b"r".to_vec(),
            EnqueueOptions::default(),
        )
        .await
        .unwrap()
        .run_id;
    let space = SpaceId::new("t1-space").unwrap();
    let epochs = b.epochs();

    let mut tx = begin(h, &b).await;
    let appended = tx
        .append(&space, vec![Event::new("t1", "rolled back")])
        .await
        .unwrap_or_else(|e| panic!("{}: T1: append inside: {e}", h.backend()));
    let event = RunEventId::new("t1-event").unwrap();
    tx.append_event(run, &event, b"gone".to_vec())
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert!(
        matches!(epochs.heads(&space).await, Err(Error::NotFound { .. })),
        "T1: no epoch (and so no space) after the rollback"
    );
    assert!(
        outside.events(run, 0, 10).await.unwrap().is_empty(),
        "T1: no run event"
    );

    let mut tx = begin(h, &b).await;
    insert(h, &mut tx, "with-events").await;
    let kept = tx
        .append(&space, vec![Event::new("t1", "kept")])
        .await
        .unwrap();
    assert_eq!(kept.seq, appended.seq, "T1: the rolled-back seq is reused");
    let appended_event = tx
        .append_event(run, &event, b"kept".to_vec())
        .await
        .unwrap();
    assert!(appended_event.created);
    tx.commit().await.unwrap();
    let heads = epochs.heads(&space).await.unwrap();
    assert_eq!(heads.len(), 1);
    assert_eq!(heads[0].id, kept.id, "T1: the committed epoch is the head");
    let events = outside.events(run, 0, 10).await.unwrap();
    assert_eq!(events.len(), 1, "T1: the committed run event");
    assert_eq!(events[0].payload, b"kept".to_vec());
    assert!(order(h, "with-events").await);
}

async fn subscribe(b: &Arc<dyn Backend>, q: &QueueName) -> Box<dyn Wakeup> {
    b.spool()
        .subscribe(q)
        .await
        .unwrap_or_else(|e| panic!("subscribe({q}): {e}"))
}

/// Whether `wake` returns within `bound`.
async fn woken(wake: &mut Box<dyn Wakeup>, bound: Duration) -> bool {
    match tokio::time::timeout(bound, wake.wait()).await {
        Ok(r) => {
            r.unwrap_or_else(|e| panic!("wait: {e}"));
            true
        }
        Err(_) => false,
    }
}

/// T2: a subscriber is not woken by an uncommitted or rolled-back enqueue, and is woken by
/// the commit.
pub async fn t2_subscriber_is_woken_by_the_commit_only<H: TxHarness>(h: &H) {
    let b = open_tx(h).await;
    let q = QueueName::new("t2-wake").unwrap();
    let mut wake = subscribe(&b, &q).await;
    // A subscription may return once at first (the contract allows spurious returns): settle.
    let _ = woken(&mut wake, Duration::from_millis(50)).await;

    let mut tx = begin(h, &b).await;
    enqueue(&mut tx, &q, "t2-rolled-back").await;
    assert!(
        !woken(&mut wake, QUIET).await,
        "T2: {}: an uncommitted enqueue woke a subscriber",
        h.backend()
    );
    tx.rollback().await.unwrap();
    assert!(
        !woken(&mut wake, QUIET).await,
        "T2: {}: a rolled-back enqueue woke a subscriber",
        h.backend()
    );

    let mut tx = begin(h, &b).await;
    enqueue(&mut tx, &q, "t2-committed").await;
    assert!(
        !woken(&mut wake, QUIET).await,
        "T2: woken before the commit"
    );
    tx.commit().await.unwrap();
    assert!(
        woken(&mut wake, Duration::from_secs(10)).await,
        "T2: {}: the commit did not wake the subscriber within 10 s",
        h.backend()
    );
}

/// T3: one key enqueued inside an open transaction and, at the same time, from another
/// instance ends as one run: the outside enqueue waits for the commit (or answers the
/// committed id), never a second run or a unique-violation error.
pub async fn t3_a_key_inside_and_outside_an_open_transaction_is_one_run<H: TxHarness>(h: &H) {
    let b = open_tx(h).await;
    let outside = h.open_spool().await.unwrap();
    let q = QueueName::new("t3-race").unwrap();
    for round in 0..3 {
        let key = format!("t3-{round}");
        let mut tx = begin(h, &b).await;
        let inside = enqueue(&mut tx, &q, &key).await;
        let (o, q2, key2) = (outside.clone(), q.clone(), key.clone());
        let race = tokio::spawn(async move {
            o.enqueue(
                &q2,
                &k(&[&key2]),
                b"outside".to_vec(),
                EnqueueOptions::default(),
            )
            .await
        });
        if round == 1 {
            tokio::task::yield_now().await;
        }
        within("T3: commit", tx.commit()).await.unwrap();
        let answer = within("T3: the outside enqueue", race)
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("{}: T3: the outside enqueue failed: {e}", h.backend()));
        assert_eq!(
            answer.run_id, inside.run_id,
            "T3: round {round}: one run id"
        );
        assert!(
            !answer.created,
            "T3: round {round}: the outside did not create a run"
        );
    }
    // The other order: committed outside first, then enqueued inside.
    let first = outside
        .enqueue(
            &q,
            &k(&["t3-first"]),
            b"o".to_vec(),
            EnqueueOptions::default(),
        )
        .await
        .unwrap();
    let mut tx = begin(h, &b).await;
    let inside = enqueue(&mut tx, &q, "t3-first").await;
    tx.commit().await.unwrap();
    assert_eq!(inside.run_id, first.run_id);
    assert!(!inside.created);
    assert_eq!(
        runs_in(outside.as_ref(), &q).await,
        4,
        "T3: one run per key"
    );
}

/// T3: when the transaction holding the key rolls back, the outside enqueue that waited for
/// it creates the run itself.
pub async fn t3_an_outside_enqueue_after_a_rollback_creates_the_run<H: TxHarness>(h: &H) {
    let b = open_tx(h).await;
    let outside = h.open_spool().await.unwrap();
    let q = QueueName::new("t3-rollback").unwrap();
    let mut tx = begin(h, &b).await;
    let inside = enqueue(&mut tx, &q, "t3-rb").await;
    let (o, q2) = (outside.clone(), q.clone());
    let race = tokio::spawn(async move {
        o.enqueue(
            &q2,
            &k(&["t3-rb"]),
            b"outside".to_vec(),
            EnqueueOptions::default(),
        )
        .await
    });
    tokio::task::yield_now().await;
    tx.rollback().await.unwrap();
    let answer = within("T3: the outside enqueue", race)
        .await
        .unwrap()
        .unwrap();
    assert!(answer.created, "T3: the outside enqueue created the run");
    assert_ne!(answer.run_id, inside.run_id, "T3: not the rolled-back id");
    assert_eq!(runs_in(outside.as_ref(), &q).await, 1);
}

/// T4: a bulk enqueue that fails in the middle of its writes (a database error on one item's
/// insert) changes nothing.
pub async fn t4_bulk_failure_in_the_middle_changes_nothing<H: TxHarness>(h: &H) {
    let spool = h.open_spool().await.unwrap();
    let q = QueueName::new("t4-middle").unwrap();
    let poison = k(&["t4-poison"]);
    h.fail_inserts_of_key(&poison)
        .await
        .unwrap_or_else(|e| panic!("{}: install the failing trigger: {e}", h.backend()));
    let mut items: Vec<EnqueueItem> = (0..2000)
        .map(|i| EnqueueItem::new(k(&["t4-mid", &i.to_string()]), "x"))
        .collect();
    items[1000] = EnqueueItem::new(poison.clone(), "boom");
    let r = spool.enqueue_many(&q, items).await;
    assert!(
        r.is_err(),
        "T4: {}: a failing insert fails the batch: {r:?}",
        h.backend()
    );
    assert_eq!(
        runs_in(spool.as_ref(), &q).await,
        0,
        "T4: nothing of the batch remains"
    );
    // Inside a transaction with an application row: the failure fails the transaction.
    let b = open_tx(h).await;
    let mut tx = begin(h, &b).await;
    insert(h, &mut tx, "t4-middle").await;
    let r = tx
        .enqueue_many(
            &q,
            vec![
                EnqueueItem::new(k(&["t4-ok"]), "ok"),
                EnqueueItem::new(poison, "x"),
            ],
        )
        .await;
    assert!(
        r.is_err(),
        "T4: the failing batch inside a transaction: {r:?}"
    );
    assert!(
        tx.commit().await.is_err(),
        "T4: the transaction cannot commit after it"
    );
    assert!(!order(h, "t4-middle").await);
    assert_eq!(runs_in(spool.as_ref(), &q).await, 0);
}

/// T4: a bulk enqueue inside a transaction commits (and wakes) with it.
pub async fn t4_bulk_inside_a_transaction_commits_with_it<H: TxHarness>(h: &H) {
    let b = open_tx(h).await;
    let outside = h.open_spool().await.unwrap();
    let q = QueueName::new("t4-tx").unwrap();
    let items = |tag: &str| -> Vec<EnqueueItem> {
        (0..1000)
            .map(|i| EnqueueItem::new(k(&[tag, &(i % 400).to_string()]), "x"))
            .collect()
    };
    let mut tx = begin(h, &b).await;
    insert(h, &mut tx, "t4-bulk-rb").await;
    tx.enqueue_many(&q, items("rb")).await.unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(
        runs_in(outside.as_ref(), &q).await,
        0,
        "T4: rolled back with the transaction"
    );

    let mut wake = subscribe(&b, &q).await;
    let _ = woken(&mut wake, Duration::from_millis(50)).await;
    let mut tx = begin(h, &b).await;
    insert(h, &mut tx, "t4-bulk").await;
    let done = tx.enqueue_many(&q, items("ok")).await.unwrap();
    assert_eq!(done.iter().filter(|e| e.created).count(), 400);
    assert!(
        !woken(&mut wake, QUIET).await,
        "T4: no wake-up before the commit"
    );
    tx.commit().await.unwrap();
    assert!(
        woken(&mut wake, Duration::from_secs(10)).await,
        "T4: the commit wakes"
    );
    assert_eq!(runs_in(outside.as_ref(), &q).await, 400);
    assert!(order(h, "t4-bulk").await);
}

/// T5: a transaction left open does not block claims of other runs where the engine locks
/// rows (Postgres), and bounds every other writer by its busy timeout where it holds the
/// only writer (SQLite), with [`Error::Retryable`]; an enqueue of the key it holds waits
/// within the lock timeout on both, then answers the committed id.
pub async fn t5_an_open_transaction_is_bounded_for_other_writers<H: TxHarness>(h: &H) {
    let b = open_tx(h).await;
    let impatient = h
        .open_impatient_spool()
        .await
        .unwrap_or_else(|e| panic!("{}: an impatient spool: {e}", h.backend()));
    let q = QueueName::new("t5-open").unwrap();
    let other = impatient
        .enqueue(
            &q,
            &k(&["t5-other"]),
            b"o".to_vec(),
            EnqueueOptions::default(),
        )
        .await
        .unwrap();
    let mut tx = begin(h, &b).await;
    insert(h, &mut tx, "t5").await;
    let held = enqueue(&mut tx, &q, "t5-held").await;

    let me = cairn_core::ConsumerId::new("t5").unwrap();
    let claim = within(
        "T5: a claim beside an open transaction",
        impatient.claim(&q, &me, Duration::from_secs(30), 10),
    )
    .await;
    if h.exclusive_writer() {
        match claim {
            Err(e) if e.is_retryable() => {}
            other => panic!(
                "{}: T5: a claim while the writer is held: {other:?}",
                h.backend()
            ),
        }
    } else {
        let claimed = claim.unwrap_or_else(|e| panic!("{}: T5: claim: {e}", h.backend()));
        assert_eq!(claimed.len(), 1, "T5: the other run is claimed");
        assert_eq!(
            claimed[0].run_id, other.run_id,
            "T5: only the committed run"
        );
    }
    let same_key = within(
        "T5: an enqueue of the held key",
        impatient.enqueue(
            &q,
            &k(&["t5-held"]),
            b"x".to_vec(),
            EnqueueOptions::default(),
        ),
    )
    .await;
    match same_key {
        Err(e) if e.is_retryable() => {}
        other => panic!("{}: T5: an enqueue of the held key: {other:?}", h.backend()),
    }
    tx.commit().await.unwrap();
    let after = impatient
        .enqueue(
            &q,
            &k(&["t5-held"]),
            b"x".to_vec(),
            EnqueueOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        after.run_id, held.run_id,
        "T5: after the commit, the committed id"
    );
    assert!(!after.created);
}

/// T6: `close_run` and `set_fact` inside a transaction take effect with its commit only: a
/// rollback leaves the run open and without the fact; after the commit the fact is stored and
/// the stream closed (a later append is refused, a second close writes nothing).
pub async fn t6_close_run_and_set_fact_commit_with_the_transaction<H: TxHarness>(h: &H) {
    use cairn_core::spool::{CloseOutcome, EventStream, FactName, FactOutcome};
    let b = open_tx(h).await;
    let outside = h.open_spool().await.unwrap();
    let q = QueueName::new("t6-close").unwrap();
    let run = outside
        .enqueue(&q, &k(&["t6"]), b"r".to_vec(), EnqueueOptions::default())
        .await
        .unwrap()
        .run_id;
    let fact = FactName::new("t6.result").unwrap();

    let mut tx = begin(h, &b).await;
    assert_eq!(
        tx.set_fact(run, &fact, b"42".to_vec()).await.unwrap(),
        FactOutcome::Set
    );
    assert_eq!(tx.close_run(run).await.unwrap(), CloseOutcome::Closed);
    assert_eq!(
        tx.close_run(run).await.unwrap(),
        CloseOutcome::AlreadyClosed,
        "T6: the transaction sees its own close"
    );
    tx.rollback().await.unwrap();
    let info = outside.run(run).await.unwrap().expect("the run");
    assert!(info.facts.is_empty(), "T6: no fact after the rollback");
    assert!(
        !matches!(info.stream, EventStream::Closed),
        "T6: the stream is not closed after the rollback: {:?}",
        info.stream
    );

    let mut tx = begin(h, &b).await;
    insert(h, &mut tx, "t6").await;
    tx.set_fact(run, &fact, b"42".to_vec()).await.unwrap();
    assert_eq!(tx.close_run(run).await.unwrap(), CloseOutcome::Closed);
    tx.commit().await.unwrap();
    let facts = outside.facts(run).await.unwrap();
    assert_eq!(facts.get(&fact), Some(&b"42".to_vec()), "T6: the fact");
    let late = outside
        .append_event(run, &RunEventId::new("t6-late").unwrap(), b"x".to_vec())
        .await;
    assert!(
        matches!(late, Err(Error::RunClosed { .. })),
        "T6: the committed close refuses a later append: {late:?}"
    );
    assert!(order(h, "t6").await);

    // A fact conflict inside fails the transaction, as any refused operation does.
    let mut tx = begin(h, &b).await;
    let clash = tx.set_fact(run, &fact, b"43".to_vec()).await;
    assert!(
        matches!(clash, Err(Error::FactConflict { .. })),
        "T6: {clash:?}"
    );
    assert!(matches!(tx.commit().await, Err(Error::Conflict { .. })));
}

/// Enqueues a run under `key`, appends three events to it, sets `fact` and closes it.
async fn fill(
    tx: &mut Box<dyn Transaction>,
    q: &QueueName,
    fact: &cairn_core::spool::FactName,
    key: &str,
) -> cairn_core::RunId {
    let run = tx
        .enqueue(q, &k(&[key]), b"job".to_vec(), EnqueueOptions::default())
        .await
        .unwrap()
        .run_id;
    for i in 0..3u8 {
        let id = RunEventId::new(format!("e{i}")).unwrap();
        tx.append_event(run, &id, vec![b'0' + i]).await.unwrap();
    }
    tx.set_fact(run, fact, b"3".to_vec()).await.unwrap();
    tx.close_run(run).await.unwrap();
    run
}

/// T6: a run enqueued, given events, a fact and a close in one transaction commits whole; the
/// same with a failing later operation leaves nothing: no run, no event, no fact.
pub async fn t6_a_run_enqueued_filled_and_closed_in_one_transaction_is_all_or_nothing<
    H: TxHarness,
>(
    h: &H,
) {
    use cairn_core::spool::{EventStream, FactName};
    let b = open_tx(h).await;
    let outside = h.open_spool().await.unwrap();
    let q = QueueName::new("t6-whole").unwrap();
    let fact = FactName::new("t6.total").unwrap();
    let mut tx = begin(h, &b).await;
    let gone = fill(&mut tx, &q, &fact, "t6-failed").await;
    let unknown = cairn_core::RunId::parse("0190a5c0-0000-7000-8000-0000000000ff").unwrap();
    let r = tx
        .append_event(unknown, &RunEventId::new("x").unwrap(), b"x".to_vec())
        .await;
    assert!(matches!(r, Err(Error::UnknownRun { .. })), "{r:?}");
    assert!(matches!(tx.commit().await, Err(Error::Conflict { .. })));
    assert!(
        !exists(outside.as_ref(), gone).await,
        "T6: the failed transaction's run is gone"
    );
    assert_eq!(runs_in(outside.as_ref(), &q).await, 0, "T6: no run at all");

    let mut tx = begin(h, &b).await;
    let run = fill(&mut tx, &q, &fact, "t6-kept").await;
    tx.commit().await.unwrap();
    let info = outside.run(run).await.unwrap().expect("the committed run");
    assert!(matches!(info.stream, EventStream::Closed), "T6: closed");
    assert_eq!(info.facts.get(&fact), Some(&b"3".to_vec()));
    let events = outside.events(run, 0, 10).await.unwrap();
    let payloads: Vec<Vec<u8>> = events.into_iter().map(|e| e.payload).collect();
    assert_eq!(payloads, vec![b"0".to_vec(), b"1".to_vec(), b"2".to_vec()]);
}

/// A small deterministic generator for the concurrency cases (xorshift64*).
struct Shuffle(u64);

impl Shuffle {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// `n` distinct picks of `0..of`, in random order.
    fn pick(&mut self, n: usize, of: usize) -> Vec<usize> {
        let mut all: Vec<usize> = (0..of).collect();
        for i in (1..all.len()).rev() {
            let j = (self.next() % (i as u64 + 1)) as usize;
            all.swap(i, j);
        }
        all.truncate(n);
        all
    }
}

/// T7: transactions that take their space locks up front ([`Transaction::lock_spaces`]) and
/// enqueue their keys in one bulk enqueue never deadlock, however their spaces and keys overlap
/// and whatever order they name them in: 16 concurrent writers over two store instances (two
/// nodes), each transaction appending to 3 of 4 spaces and enqueueing 6 of 12 keys in random
/// order, all commit at the first try, and every space's seqs are gap-free.
pub async fn t7_overlapping_transactions_that_lock_up_front_all_commit<H: TxHarness>(h: &H) {
    const WRITERS: u64 = 16;
    const ROUNDS: usize = 5;
    let nodes = [open_tx(h).await, open_tx(h).await];
    let spaces: Vec<SpaceId> = (0..4)
        .map(|i| SpaceId::new(format!("t7-space-{i}")).unwrap())
        .collect();
    let q = QueueName::new("t7-keys").unwrap();
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let b = Arc::clone(&nodes[(w % 2) as usize]);
        let (spaces, q) = (spaces.clone(), q.clone());
        writers.push(tokio::spawn(async move {
            let mut rng = Shuffle(0x9E37_79B9_7F4A_7C15 ^ (w + 1));
            let mut failures = Vec::new();
            for round in 0..ROUNDS {
                let mine: Vec<SpaceId> = rng
                    .pick(3, spaces.len())
                    .into_iter()
                    .map(|i| spaces[i].clone())
                    .collect();
                let keys: Vec<EnqueueItem> = rng
                    .pick(6, 12)
                    .into_iter()
                    .map(|i| EnqueueItem::new(k(&["t7", &i.to_string()]), "x"))
                    .collect();
                let r: cairn_core::Result<()> = async {
                    let mut tx = b.begin().await?;
                    tx.lock_spaces(&mine).await?;
                    for space in &mine {
                        let event = Event::new("t7", format!("{w}/{round}"));
                        tx.append(space, vec![event]).await?;
                    }
                    tx.enqueue_many(&q, keys).await?;
                    tx.commit().await
                }
                .await;
                if let Err(e) = r {
                    failures.push(e.to_string());
                }
            }
            failures
        }));
    }
    let mut failures = Vec::new();
    for w in writers {
        failures.extend(w.await.expect("a writer panicked"));
    }
    assert!(
        failures.is_empty(),
        "T7: {}: {} of {} transactions failed (none may deadlock or time out): {failures:?}",
        h.backend(),
        failures.len(),
        WRITERS as usize * ROUNDS
    );
    let epochs = nodes[0].epochs();
    let mut appended = 0;
    for space in &spaces {
        let heads = epochs.heads(space).await.unwrap();
        assert_eq!(heads.len(), 1, "T7: one head per space (appends chained)");
        appended += heads[0].seq.0;
    }
    assert_eq!(
        appended as usize,
        WRITERS as usize * ROUNDS * 3,
        "T7: every append stored, seqs gap-free from 1"
    );
    let outside = h.open_spool().await.unwrap();
    assert_eq!(
        runs_in(outside.as_ref(), &q).await,
        12,
        "T7: one run per key"
    );
}
