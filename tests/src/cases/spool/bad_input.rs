//! Bad input gets a typed error and changes nothing.

use std::time::Duration;

use cairn_core::spool::{
    EnqueueItem, RetentionBudget, RetentionPolicy, RunFilter, RunState, Timestamp, MAX_ACK_IDS,
    MAX_BATCH, MAX_FACT_VALUE, MAX_LEASE, MAX_RUN_EVENT_PAYLOAD, MAX_RUN_PAYLOAD,
};
use cairn_core::{Clock, EnqueueOptions, Error, FactName, LeaseToken, NackKind, RunEventId, RunId};

use super::support::{assert_err, consumer, enqueue_new, info, key, open_spool, LEASE};
use crate::{random_queue, SpoolHarness};

/// Bad input gets a typed error and changes nothing.
pub async fn spool_bad_input_is_refused_without_writes<H: SpoolHarness>(h: &H) {
    let s = open_spool(h).await;
    let s = s.as_ref();
    let clock = h.clock();
    let q = random_queue("bad");
    let me = consumer("bad");
    let k = key(&["bad"]);
    let before = s.stats().await.unwrap();
    assert_err(
        s.enqueue(
            &q,
            &k,
            vec![0; MAX_RUN_PAYLOAD + 1],
            EnqueueOptions::default(),
        )
        .await,
        "InvalidInput",
        "oversized run payload",
    );
    for n in [0, 1001] {
        assert_err(
            s.enqueue(
                &q,
                &k,
                Vec::new(),
                EnqueueOptions::default().max_attempts(n),
            )
            .await,
            "InvalidInput",
            "max attempts out of range",
        );
    }
    // Times are bounded to 1970-01-01 … 9999-12-31 UTC (issue 44 item 4.6), alone and in a
    // bulk enqueue.
    for micros in [
        -1,
        i64::MIN,
        Timestamp::LATEST.as_unix_micros() + 1,
        i64::MAX,
    ] {
        let options = EnqueueOptions::default().not_before(Timestamp::from_unix_micros(micros));
        assert_err(
            s.enqueue(&q, &k, Vec::new(), options.clone()).await,
            "InvalidInput",
            "not-before time out of range",
        );
        let item = EnqueueItem::new(k.clone(), Vec::new()).with_options(options);
        let err = s.enqueue_many(&q, vec![item]).await.unwrap_err();
        assert!(
            matches!(&err, Error::InvalidBatchItem { index: 0, error }
                if matches!(**error, Error::InvalidInput { .. })),
            "not-before time out of range in a batch: {err}"
        );
    }
    assert_eq!(
        s.stats().await.unwrap(),
        before,
        "refused enqueues write nothing"
    );
    let id = enqueue_new(s, &q, "bad").await;

    for (limit, lease) in [
        (0, LEASE),
        (MAX_BATCH + 1, LEASE),
        (1, Duration::ZERO),
        (1, MAX_LEASE + Duration::from_secs(1)),
    ] {
        assert_err(
            s.claim(&q, &me, lease, limit).await,
            "InvalidInput",
            "claim limit or lease out of range",
        );
    }
    let i = info(s, id).await;
    assert_eq!((i.state, i.attempts), (RunState::Queued, 0));
    assert_err(
        s.ack(id, LeaseToken::generate()).await,
        "LeaseLost",
        "ack of a run never claimed",
    );

    let unknown = RunId::generate(clock.now());
    let t = LeaseToken::generate();
    let ev = RunEventId::new("e").unwrap();
    let fact = FactName::new("f").unwrap();
    assert!(s.run(unknown).await.unwrap().is_none());
    assert_err(s.ack(unknown, t).await, "UnknownRun", "ack");
    assert_err(
        s.nack(unknown, t, NackKind::Permanent, "").await,
        "UnknownRun",
        "nack",
    );
    assert_err(
        s.heartbeat(unknown, t, LEASE).await,
        "UnknownRun",
        "heartbeat",
    );
    assert_err(s.cancel(unknown).await, "UnknownRun", "cancel");
    assert_err(
        s.append_event(unknown, &ev, Vec::new()).await,
        "UnknownRun",
        "append_event",
    );
    assert_err(s.events(unknown, 0, 10).await, "UnknownRun", "events");
    assert_err(
        s.acknowledge_events(unknown, std::slice::from_ref(&ev))
            .await,
        "UnknownRun",
        "acknowledge_events",
    );
    assert_err(
        s.set_fact(unknown, &fact, Vec::new()).await,
        "UnknownRun",
        "set_fact",
    );
    assert_err(s.facts(unknown).await, "UnknownRun", "facts");

    let c = s.claim(&q, &me, LEASE, 1).await.unwrap();
    assert_eq!(c.len(), 1);
    assert_err(s.ack(id, t).await, "LeaseLost", "ack with a wrong token");
    assert_err(
        s.heartbeat(id, t, LEASE).await,
        "LeaseLost",
        "heartbeat with a wrong token",
    );
    assert_err(
        s.heartbeat(id, c[0].token, Duration::ZERO).await,
        "InvalidInput",
        "heartbeat with a zero lease",
    );
    let i = info(s, id).await;
    assert_eq!((i.state, i.attempts), (RunState::Claimed, 1));
    assert_eq!(i.lease.map(|l| l.expires_at), Some(c[0].expires_at));

    assert_err(
        s.append_event(id, &ev, vec![0; MAX_RUN_EVENT_PAYLOAD + 1])
            .await,
        "InvalidInput",
        "oversized event payload",
    );
    assert_eq!(
        s.append_event(id, &ev, Vec::new()).await.unwrap().seq,
        1,
        "a refused append uses no sequence number"
    );
    let too_many: Vec<RunEventId> = (0..=MAX_ACK_IDS)
        .map(|i| RunEventId::new(i.to_string()).unwrap())
        .collect();
    assert_err(
        s.acknowledge_events(id, &too_many).await,
        "InvalidInput",
        "too many event ids",
    );
    assert_eq!(
        s.acknowledge_events(id, &too_many[..MAX_ACK_IDS])
            .await
            .unwrap(),
        0,
        "exactly the limit of event ids is taken (none of them is stored)"
    );
    assert_eq!(s.events(id, 0, 10).await.unwrap().len(), 1);
    assert_err(
        s.set_fact(id, &fact, vec![0; MAX_FACT_VALUE + 1]).await,
        "InvalidInput",
        "oversized fact",
    );
    assert!(s.facts(id).await.unwrap().is_empty());
    assert_err(s.events(id, 0, 0).await, "InvalidInput", "events limit 0");
    assert_err(
        s.runs(&RunFilter::default(), 0).await,
        "InvalidInput",
        "runs limit 0",
    );
    assert_err(
        s.retention_pass(
            &RetentionPolicy::default(),
            &RetentionBudget {
                batch_size: 0,
                ..RetentionBudget::default()
            },
        )
        .await,
        "InvalidInput",
        "retention batch size 0",
    );
    assert_err(
        RunId::parse("not-a-run-id"),
        "InvalidInput",
        "malformed run id",
    );
}
