//! Names an earlier build stored, before schedule names and partition keys refused
//! bidirectional controls and (schedule names) leading or trailing whitespace, still read
//! back: the spool reads stored values with the lenient `from_stored` constructors, and a
//! stored schedule can still be shown and removed by its name.

use std::time::Duration;

use cairn_core::spool::{CatchUp, PartitionKey, QueueLimits, RunFilter, Schedule, ScheduleName};
use cairn_core::{ConsumerId, DedupKey, EnqueueOptions, QueueName};
use cairn_migrate::{Backend, OpenOptions};
use cairn_sqlite::{SqliteBackend, SqliteOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_an_earlier_build_stored_still_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    let b = SqliteBackend::open(
        &path,
        SqliteOptions::default(),
        OpenOptions::default().register_in_fleet(false),
    )
    .await
    .unwrap();
    let spool = b.spool();
    let q = QueueName::new("old").unwrap();
    let options = EnqueueOptions {
        partition_key: Some(PartitionKey::new("p").unwrap()),
        ..EnqueueOptions::default()
    };
    spool
        .put_schedule(&Schedule {
            name: ScheduleName::new("nightly").unwrap(),
            cron: "0 3 * * *".into(),
            time_zone: "UTC".into(),
            queue: q.clone(),
            payload: Vec::new(),
            options: options.clone(),
            catch_up: CatchUp::None,
        })
        .await
        .unwrap();
    let key = DedupKey::from_parts(["k"]).unwrap();
    let run = spool
        .enqueue(&q, &key, Vec::new(), options)
        .await
        .unwrap()
        .run_id;

    // What an earlier build could store: the checks of the time were only "printable".
    let (name, partition) = (" night\u{202E}ly", "t\u{2066}1");
    assert!(ScheduleName::new(name).is_err() && PartitionKey::new(partition).is_err());
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute(
        "UPDATE spool_schedule SET name = ?1, partition_key = ?2",
        [name, partition],
    )
    .unwrap();
    conn.execute("UPDATE spool_run SET partition_key = ?1", [partition])
        .unwrap();
    drop(conn);

    let stored = ScheduleName::from_stored(name).unwrap();
    let all = spool.schedules().await.unwrap();
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].schedule.name, stored);
    let want = PartitionKey::from_stored(partition).unwrap();
    assert_eq!(all[0].schedule.options.partition_key.as_ref(), Some(&want));
    assert!(spool.schedule(&stored).await.unwrap().is_some());
    let info = spool.run(run).await.unwrap().unwrap();
    assert_eq!(info.partition_key.as_ref(), Some(&want));
    let listed = spool.runs(&RunFilter::default(), 10).await.unwrap();
    assert_eq!(listed[0].partition_key.as_ref(), Some(&want));
    // A per-partition claim reads the stored keys too.
    spool
        .set_queue_limits(
            &q,
            &QueueLimits {
                per_partition: Some(1),
                ..QueueLimits::default()
            },
        )
        .await
        .unwrap();
    let consumer = ConsumerId::new("c").unwrap();
    let claimed = spool
        .claim(&q, &consumer, Duration::from_secs(30), 5)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    assert!(spool.remove_schedule(&stored).await.unwrap());
}
