//! This build's spool on a Postgres store whose upgrade stopped before revision
//! `0009_spool_flow` (at `0007_spool_ready`, as when the contract revision 0008 is deferred
//! while older builds are live, and at `0008_spool_ready_contract`): enqueues, claims, acks and
//! reads keep working (flow ignored: none can be stored; claims and reads carry no trace
//! context); the four flow methods and an enqueue with a partition key or a traceparent are
//! refused with `Error::Incompatible` naming the revision, writing nothing; once another open
//! applies the revision, the running spool picks flow and trace contexts up by itself.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_conformance::{random_queue, MigrationHarness};
use cairn_core::spool::{
    EnqueueItem, PartitionKey, QueueLimits, RunFilter, SpoolConfig, TraceParent, FLOW_REVISION,
};
use cairn_core::{ConsumerId, DedupKey, EnqueueOptions, Error, ManualClock, Result, Spool};
use cairn_migrate::{cairn_set, Runner};
use cairn_postgres::testkit::harness;
use cairn_postgres::{PgSpool, PgStore};

const LEASE: Duration = Duration::from_secs(30);

fn key(name: &str) -> DedupKey {
    DedupKey::from_parts([name]).unwrap()
}

/// Asserts `r` is the refusal that names the flow revision.
#[track_caller]
fn assert_refused<T: std::fmt::Debug>(r: Result<T>, what: &str) {
    match r {
        Err(Error::Incompatible { detail, blockers }) => {
            assert!(detail.contains(FLOW_REVISION), "{what}: {detail}");
            assert!(blockers.is_empty(), "{what}");
        }
        other => panic!("{what}: expected Incompatible naming {FLOW_REVISION}, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_before_the_flow_revision_claims_as_before_and_refuses_flow() {
    for head in ["0007_spool_ready", "0008_spool_ready_contract"] {
        let base = harness().await;
        let h = MigrationHarness::fresh(&base).await;
        let runner = Runner::new(cairn_set().up_to(head).expect("a revision of cairn's set"));
        let (store, _) = PgStore::open_migrated(h.options(), &runner)
            .await
            .expect("the store at the older head");
        let clock = ManualClock::default();
        let spool = PgSpool::from_store(&store, Arc::new(clock.clone()), SpoolConfig::default())
            .expect("this build's spool");
        let q = random_queue("flow-rev");
        let me = ConsumerId::new("flow-rev").unwrap();

        // Enqueue, bulk enqueue, claim, ack and read: as before.
        spool
            .enqueue(&q, &key("a"), b"a".to_vec(), EnqueueOptions::default())
            .await
            .unwrap();
        let items = ["b", "c"]
            .map(|k| EnqueueItem {
                key: key(k),
                payload: Vec::new(),
                options: EnqueueOptions::default(),
            })
            .to_vec();
        spool.enqueue_many(&q, items).await.unwrap();
        let got = spool.claim(&q, &me, LEASE, 2).await.unwrap();
        assert_eq!(got.len(), 2, "{head}: claims work");
        assert!(got.iter().all(|c| c.traceparent.is_none()), "{head}");
        spool.ack(got[0].run_id, got[0].token).await.unwrap();
        let info = spool.run(got[1].run_id).await.unwrap().unwrap();
        assert_eq!(info.partition_key, None, "{head}");
        assert_eq!(info.traceparent, None, "{head}");
        assert_eq!(spool.claim(&q, &me, LEASE, 5).await.unwrap().len(), 1);

        // Flow and partition keys need the revision: refused, nothing written.
        assert_refused(spool.set_queue_paused(&q, true).await, "pause");
        assert_refused(
            spool
                .set_queue_limits(
                    &q,
                    &QueueLimits {
                        max_claimed: Some(1),
                        ..QueueLimits::default()
                    },
                )
                .await,
            "limits",
        );
        assert_refused(spool.queue_flow(&q).await, "queue_flow");
        assert_refused(spool.queue_flows().await, "queue_flows");
        let partitioned = EnqueueOptions {
            partition_key: Some(PartitionKey::new("p").unwrap()),
            ..EnqueueOptions::default()
        };
        assert_refused(
            spool
                .enqueue(&q, &key("p"), Vec::new(), partitioned.clone())
                .await,
            "partitioned enqueue",
        );
        assert_refused(
            spool
                .enqueue_many(
                    &q,
                    vec![EnqueueItem {
                        key: key("p"),
                        payload: Vec::new(),
                        options: partitioned.clone(),
                    }],
                )
                .await,
            "partitioned bulk enqueue",
        );
        let traced = EnqueueOptions::default().traceparent(
            TraceParent::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap(),
        );
        assert_refused(
            spool
                .enqueue(&q, &key("t"), Vec::new(), traced.clone())
                .await,
            "traced enqueue",
        );
        assert_refused(
            spool
                .enqueue_many(
                    &q,
                    vec![
                        EnqueueItem::new(key("u"), Vec::new()),
                        EnqueueItem::new(key("t"), Vec::new()).with_options(traced.clone()),
                    ],
                )
                .await,
            "traced bulk enqueue",
        );
        let filter = RunFilter {
            queue: Some(q.clone()),
            state: None,
            after: None,
        };
        assert_eq!(
            spool.runs(&filter, 100).await.unwrap().len(),
            3,
            "{head}: a refused enqueue wrote nothing"
        );

        // Another open applies the revision; this spool sees it within its recheck.
        PgStore::open_with(h.options())
            .await
            .expect("this build's open applies the rest");
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            match spool.queue_flow(&q).await {
                Ok(flow) => {
                    assert!(!flow.paused);
                    break;
                }
                Err(e) => assert!(
                    Instant::now() < deadline,
                    "{head}: the spool never saw the revision: {e}"
                ),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        spool.set_queue_paused(&q, true).await.unwrap();
        assert!(spool.claim(&q, &me, LEASE, 5).await.unwrap().is_empty());
        spool
            .enqueue(&q, &key("p"), Vec::new(), partitioned)
            .await
            .unwrap();
        let t = spool
            .enqueue(&q, &key("t"), Vec::new(), traced.clone())
            .await
            .unwrap();
        assert_eq!(
            spool.run(t.run_id).await.unwrap().unwrap().traceparent,
            traced.traceparent,
            "{head}: stored once the revision is applied"
        );
        spool.close().await;
    }
}
