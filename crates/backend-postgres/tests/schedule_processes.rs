//! Schedulers in separate processes on one Postgres schema (Q5 and Q6 with real processes and
//! the system clock: `cairn_conformance::processes`), and the schedule methods on a store whose
//! upgrade stopped before revision `0009_spool_flow`.
//!
//! Each process test re-runs this binary as its children (selected by an environment
//! variable); a child opens the spool over the test's schema and runs a scheduler until its
//! stdin closes or it is killed.

use std::process::{Child, Command, Stdio};
use std::str::FromStr;
use std::sync::Arc;

use cairn_conformance::processes::{
    q5_two_processes_fire_each_second_once_for_a_minute,
    q6_killed_scheduler_restarted_after_five_missed_ticks, scheduler_child,
};
use cairn_core::spool::{
    CatchUp, Schedule, ScheduleName, Spool, SpoolConfig, SystemClock, Timestamp,
};
use cairn_core::{EnqueueOptions, Error, QueueName};
use cairn_migrate::{cairn_set, Runner};
use cairn_postgres::testkit::{harness, test_server_url, PgHarness, TEST_URL_ENV};
use cairn_postgres::{PgOptions, PgSpool, PgStore};
use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection};

/// Set in a child: the schema it schedules on.
const CHILD_SCHEMA: &str = "CAIRN_SCHEDULER_CHILD_SCHEMA";

async fn url() -> String {
    test_server_url()
        .await
        .unwrap_or_else(|msg| panic!("{msg}"))
}

/// A spool on the system clock over `opts`' schema.
async fn spool_on(opts: PgOptions) -> PgSpool {
    let store = PgStore::open_with(opts).await.expect("open the store");
    PgSpool::from_store(&store, Arc::new(SystemClock), SpoolConfig::default())
        .expect("the store's spool")
}

/// Runs the child's side when this process is a child; returns whether it was.
async fn child_if_asked() -> bool {
    let Ok(schema) = std::env::var(CHILD_SCHEMA) else {
        return false;
    };
    let opts = PgOptions::new(url().await)
        .schema(schema)
        .max_connections(4);
    scheduler_child(Arc::new(spool_on(opts).await)).await;
    true
}

fn spawn(test: &str, url: &str, h: &PgHarness) -> Child {
    Command::new(std::env::current_exe().expect("the test binary"))
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(CHILD_SCHEMA, h.schema())
        .env(TEST_URL_ENV, url)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the child")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn q5_two_scheduler_processes_enqueue_each_tick_once_for_a_minute() {
    if child_if_asked().await {
        return;
    }
    let h = harness().await;
    let url = url().await;
    let spool: Arc<dyn Spool> = Arc::new(spool_on(h.options()).await);
    let test = "q5_two_scheduler_processes_enqueue_each_tick_once_for_a_minute";
    q5_two_processes_fire_each_second_once_for_a_minute(spool, &|| spawn(test, &url, &h)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn q6_killed_scheduler_process_restarted_follows_catch_up() {
    if child_if_asked().await {
        return;
    }
    let h = harness().await;
    let url = url().await;
    let spool: Arc<dyn Spool> = Arc::new(spool_on(h.options()).await);
    let test = "q6_killed_scheduler_process_restarted_follows_catch_up";
    q6_killed_scheduler_restarted_after_five_missed_ticks(spool, &|| spawn(test, &url, &h)).await;
}

/// A store whose upgrade stopped before `0009_spool_flow` (here: at `0008`, as when that
/// revision waits behind a deferred contract) opens its spool, and every schedule method
/// refuses with `Incompatible` naming the revision, writing nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_on_a_store_before_0009_are_refused_by_name() {
    let h = harness().await;
    // A schema of its own: the harness's store is at this build's head already.
    let opts = h.options().schema(format!("{}_at8", h.schema()));
    let runner = Runner::new(cairn_set().up_to("0008_spool_ready_contract").unwrap());
    let (store, _) = PgStore::open_migrated(opts.clone(), &runner).await.unwrap();
    let spool = PgSpool::from_store(&store, Arc::new(SystemClock), SpoolConfig::default())
        .expect("the spool of a store at 0008 opens");
    let name = ScheduleName::new("nightly").unwrap();
    let schedule = Schedule {
        name: name.clone(),
        cron: "0 3 * * *".into(),
        time_zone: "UTC".into(),
        queue: QueueName::new("jobs").unwrap(),
        payload: Vec::new(),
        options: EnqueueOptions::default(),
        catch_up: CatchUp::None,
    };
    let tick = [Timestamp::from_utc(2027, 1, 15, 3, 0, 0, 0).unwrap()];
    let refusals = [
        spool.put_schedule(&schedule).await.map(|_| ()),
        spool.schedule(&name).await.map(|_| ()),
        spool.schedules().await.map(|_| ()),
        spool.remove_schedule(&name).await.map(|_| ()),
        spool.fire_schedule(&name, 1, &tick).await.map(|_| ()),
    ];
    for r in refusals {
        let e = r.expect_err("refused");
        assert!(matches!(e, Error::Incompatible { .. }), "{e:?}");
        assert!(e.to_string().contains("0009_spool_flow"), "{e}");
    }
    // The rest of the spool works, and nothing of a schedule was written.
    assert!(spool.stats().await.unwrap().runs.is_empty());
    spool.close().await;
    store.close().await;

    let conn_opts = PgConnectOptions::from_str(&url().await).expect("test server URL");
    let mut conn = PgConnection::connect_with(&conn_opts)
        .await
        .expect("connect to the test server");
    sqlx::query(&format!(
        "DROP SCHEMA IF EXISTS \"{}\" CASCADE",
        opts.schema_name()
    ))
    .execute(&mut conn)
    .await
    .expect("drop the test schema");
    let _ = conn.close().await;
}
