//! cairn behind PgBouncer 1.18 in transaction mode (issue 44 item 2): the shared conformance
//! suite — epoch log with the migration and multi-node cases, spool, transactions; every case
//! but the two listed below — on stores opened through a private PgBouncer
//! (`pool_mode = transaction`, `ignore_startup_parameters = extra_float_digits`,
//! [`PGBOUNCER_POOL_SIZE`] server connections for stores of 8), declared with
//! `?cairn_pooler=transaction`; plus what the pooler itself could break: named statements,
//! session settings, the migration lock, wake-ups, two nodes, closing.
//!
//! The tests fail (never skip) when `pgbouncer` is missing: `apt-get install pgbouncer`.

// The shared suite's cases, by name, that pass through the pooler. Left out, and why:
// - tx::t2_subscriber_is_woken_by_the_commit_only, tx::t4_bulk_inside_a_transaction_commits_with_it:
//   they expect the commit's `NOTIFY` to wake a subscriber sooner than its fallback poll;
//   behind the pooler wake-ups poll (docs/OPERATIONS.md, "Behind PgBouncer"), by design.
// Put back (they had been left out):
// - spool::s7_concurrent_appends_get_gap_free_seqs: an append that lost the race for a new
//   event id (unique violation) retried in the checkout transaction that violation had
//   aborted (25P02); it now starts the checkout's transaction over first.
// - spool::spool_model_random_ops_match_reference: it closes each case's spool before the next
//   case, and close waited forever for the pool's first connection, which the driver's
//   `connect_with` left in the pool in its open checkout transaction, counted out; that
//   connection is now given back like every checkout (`stores_and_spools_behind_the_pooler_close`).
// - epoch_log::e7_repair_fills_once_and_fork_collapses,
//   epoch_log::e7_repair_concurrent_with_appends_ends_exact,
//   spool::s6_shutdown_while_enqueues_arrive_strands_nothing: did not fail again, alone or in
//   the whole run, repeated; no cause of their own was found. (S6 later failed under load on
//   plain Postgres too, and that cause was the case's: a run its report called abandoned had
//   its ack commit after the deadline, which the report allows. Fixed 2026-12-07.)
mod epoch_log {
    cairn_conformance::__cases!(cairn_postgres::testkit::pgbouncer_harness();
        bad_input_is_refused_without_writes,
        d1_app_older_build_runs_down_and_is_at_head,
        d2_app_down_without_stored_sql_refused,
        d2_down_without_stored_sql_refused,
        d3_app_failed_down_changes_nothing,
        d4_app_racing_down_and_up_end_consistent,
        e10_feed_order_paging_and_cursor_refusals,
        e10_feed_pages_within_bytes,
        e11_append_statement_budget_is_fixed,
        e12_repair_and_import_wait_for_the_space_lock,
        e12_spaces_do_not_block_each_other,
        e13_recent_epochs_newest_first_with_parents_and_counts,
        e1_commit_ordered_seq,
        e1_two_nodes_concurrent_appends_keep_one_head,
        e2_ids_recompute,
        e3_parents_are_heads_in_id_byte_order,
        e4_one_head_and_one_cache_row_after_every_append,
        e5_cache_used_only_when_current,
        e5_cached_head_deleted_by_hand_and_its_seq_reused_is_not_trusted,
        e6_legacy_history_with_fork_detected,
        e6_upgrade_path_legacy_history_gets_cache_by_repair,
        e7_repair_concurrent_with_appends_ends_exact,
        e7_repair_fills_once_and_fork_collapses,
        e8_backfill_pacing_switch_first_error_stop_and_marker,
        e9_import_fork_merge_and_refusals,
        f1_app_contract_refused_while_older_build_heartbeats_applied_once_it_expires,
        f2_app_forced_contract_is_applied_and_recorded,
        f3_app_older_build_refuses_a_store_with_an_unknown_contract,
        f4_fleet_registry_records_refreshes_expires_and_removes,
        list_spaces_pages_in_id_order,
        m10_app_failed_upgrade_changes_nothing,
        m10_app_transaction_control_in_a_revision_changes_nothing,
        m10_failed_upgrade_changes_nothing,
        m10_transaction_control_in_a_revision_changes_nothing,
        m11_app_same_id_different_content_refused,
        m11_lineage_written_by_earlier_builds_still_opens,
        m11_same_id_different_content_refused,
        m2_app_real_stores_match_the_model,
        m2_real_stores_match_the_model,
        m3_app_one_line_of_history_never_refuses,
        m3_one_line_of_history_never_refuses,
        m4_app_older_build_uses_newer_store_without_the_lock,
        m4_older_build_uses_newer_store_without_the_lock,
        m6_app_live_older_connection_survives_a_migration,
        m6_live_older_connection_survives_a_migration,
        m7_app_divergence_refused_without_the_lock,
        m7_divergence_refused_without_the_lock,
        m8_app_second_look_under_the_lock_returns_ahead,
        m8_second_look_under_the_lock_returns_ahead,
        m9_app_foreign_lineage_at_head_repaired,
        m9_app_lineage_repair_and_base_exemption,
        m9_app_lost_stamp_or_lineage_table_refused_until_repaired,
        m9_foreign_lineage_at_head_repaired,
        m9_lineage_repair_and_base_exemption,
        m9_lost_stamp_or_lineage_table_refused_until_repaired,
        m_app_rollback_story_end_to_end,
        m_app_two_builds_share_one_store,
        m_rollback_story_end_to_end,
        model_random_ops_match_reference,
        reopen_keeps_history_and_cache,
    );
}

mod spool {
    cairn_conformance::__cases!(cairn_postgres::spool::testkit::pgbouncer_spool_harness();
        s10_claim_order_priority_then_due_time,
        s10_permanent_failed_and_expired_last_attempt,
        s10_retry_backoff_then_park,
        s10_success_after_failed_attempts_clears_the_reason,
        s11_retention_keeps_store_under_cap_in_long_run,
        s11_retention_limits_are_exact,
        s11_retention_order_and_batches,
        s13_legacy_corruption_refused_with_nothing_changed,
        s13_legacy_existing_keys_reported_not_duplicated,
        s13_legacy_import_once_keeps_ids_keys_events_and_facts,
        s13_legacy_stale_generation_never_replays,
        s13_legacy_torn_tail_imported_and_reported,
        s14_builds_one_additive_revision_apart_share_runs,
        s15_facts_first_writer_wins,
        s16_appends_racing_a_close_are_stored_or_refused,
        s16_closed_or_finished_run_refuses_appends,
        s16_release_returns_the_attempt,
        s16_unmarked_runs_take_events_until_closed,
        s17_bulk_retry_goes_on_past_a_run_it_cannot_retry,
        s17_bulk_retry_of_parked_runs_by_reason,
        s17_operator_retries_or_discards_a_parked_run,
        s17_producers_cannot_take_the_spools_event_ids,
        s17_racing_operators_apply_once,
        s18_stats_count_each_queues_runs,
        s19_payload_reads_back_the_enqueued_bytes,
        s1_same_key_same_run_across_instances,
        s2_run_id_survives_reopen,
        s3_subscriber_wakes_for_another_instances_enqueue,
        s4_concurrent_claimers_never_share_a_run,
        s4_expired_lease_reclaimed_and_stale_token_refused,
        s4_heartbeat_extends_and_unreclaimed_lease_is_still_held,
        s5_enqueue_claim_ack_races_lose_and_duplicate_nothing,
        s6_shutdown_while_enqueues_arrive_strands_nothing,
        s7_concurrent_appends_get_gap_free_seqs,
        s7_run_events_sequence_dedup_and_order,
        s7_run_events_within_bytes,
        s8_supersede_replaces_older_queued_runs_only,
        s9_cancel_queued_claimed_and_terminal,
        spool_bad_input_is_refused_without_writes,
        spool_model_random_ops_match_reference,
        q1_paused_queue_claims_nothing_until_resumed,
        q2_max_claimed_holds_under_concurrent_claims,
        q2_invalid_limits_are_refused_without_writes,
        q3_per_partition_limits_each_partition_only,
        q4_rate_limit_is_a_sliding_window,
        q8_a_run_carries_its_enqueuers_trace_context,
        t4_bulk_answers_stored_keys_and_supersedes_in_order,
        t4_bulk_bad_input_refuses_the_whole_batch,
        t4_bulk_dedups_repeated_keys_in_input_order,
    );
}

mod tx {
    cairn_conformance::__cases!(cairn_postgres::spool::testkit::pgbouncer_spool_harness();
        t1_app_row_and_enqueue_commit_together,
        t1_epoch_append_and_run_events_commit_with_the_transaction,
        t1_rolled_back_dropped_or_failed_leave_nothing,
        t3_a_key_inside_and_outside_an_open_transaction_is_one_run,
        t3_an_outside_enqueue_after_a_rollback_creates_the_run,
        t4_bulk_failure_in_the_middle_changes_nothing,
        t5_an_open_transaction_is_bounded_for_other_writers,
        t6_a_run_enqueued_filled_and_closed_in_one_transaction_is_all_or_nothing,
        t6_close_run_and_set_fact_commit_with_the_transaction,
        t7_overlapping_transactions_that_lock_up_front_all_commit,
    );
}

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_conformance::random_queue;
use cairn_core::spool::SpoolConfig;
use cairn_core::{
    ConsumerId, DedupKey, EnqueueOptions, EpochStore, Event, ManualClock, SpaceId, Spool,
};
use cairn_postgres::testkit::{
    pgbouncer_harness, pgbouncer_url, pgbouncer_url_apart, PGBOUNCER_POOL_SIZE,
};
use cairn_postgres::{PgOptions, PgSpool, PgStore};
use sqlx::{Connection, Executor, PgConnection, Row};

fn space(s: &str) -> SpaceId {
    SpaceId::new(s.as_bytes().to_vec()).unwrap()
}

fn event(i: usize) -> Event {
    Event {
        kind: "k".into(),
        key: None,
        payload: format!("p{i}").into_bytes(),
    }
}

/// Closing waits for every checkout out to be given back (committed). The pool's first
/// connection, made while the store opens, is given back like any other checkout: were it left
/// in the pool in its open checkout transaction (what the driver's `connect_with` does), it
/// would stay counted out and close would wait forever — the spool model test, which closes
/// the previous case's spool before each case, hung on it. A store and a spool opened through
/// the pooler, used or not, close well within the bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stores_and_spools_behind_the_pooler_close() {
    const BOUND: Duration = Duration::from_secs(30);
    let h = pgbouncer_harness().await;
    let idle = h.store().await.unwrap();
    tokio::time::timeout(BOUND, idle.close())
        .await
        .expect("an unused store closes");
    let used = h.store().await.unwrap();
    used.append(&space("close"), vec![event(1)]).await.unwrap();
    tokio::time::timeout(BOUND, used.close())
        .await
        .expect("a used store closes");
    let store = h.store().await.unwrap();
    let spool = PgSpool::from_store(
        &store,
        Arc::new(ManualClock::default()),
        SpoolConfig::default(),
    )
    .unwrap();
    let q = random_queue("close");
    let key = DedupKey::from_parts(["k"]).unwrap();
    spool
        .enqueue(&q, &key, b"p".to_vec(), EnqueueOptions::default())
        .await
        .unwrap();
    tokio::time::timeout(BOUND, spool.close())
        .await
        .expect("a used spool closes");
}

/// The diagnostics `cairn doctor` runs without an open store (`PgDiagnostics::new`: a
/// connection of their own per check) behind the pooler: each check is one checkout
/// transaction with no cached statement, so its Parse and Bind reach one server connection and
/// no setting of its lands on a pooled one. (With a session setup and cached statements the
/// scratch look failed — `cannot list the Postgres server's schemas` in `cairn doctor` — once
/// a statement's Bind reached another server connection than its Parse.) Every look, many
/// times over, answers, and the pool's server sessions carry no search_path of ours.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn diagnostics_without_an_open_store_work_behind_the_pooler() {
    use cairn_migrate::{Diagnostics, Integrity};
    let h = pgbouncer_harness().await;
    let store = h.store().await.unwrap();
    store.append(&space("diag"), vec![event(1)]).await.unwrap();
    store.close().await;
    let diagnostics = cairn_postgres::PgDiagnostics::new(h.options()).unwrap();
    for round in 0..8 {
        let integrity = diagnostics.integrity().await;
        assert!(
            matches!(integrity, Integrity::Intact { .. }),
            "round {round}: {integrity:?}"
        );
        diagnostics
            .scratch_leftovers()
            .await
            .unwrap_or_else(|e| panic!("round {round}: the scratch look answers: {e}"));
    }
    // No session setting was left on the pooler's server connections.
    let mut conn = PgConnection::connect(&pgbouncer_url().await.unwrap())
        .await
        .unwrap();
    for _ in 0..PGBOUNCER_POOL_SIZE {
        let path: String = conn
            .fetch_one(sqlx::raw_sql("SHOW search_path"))
            .await
            .unwrap()
            .get(0);
        assert!(!path.contains(h.schema()), "a search_path was left: {path}");
    }
    let _ = conn.close().await;
}

/// Eight appenders on two stores ("nodes") through one PgBouncer, on one space: every append
/// succeeds, the seqs are exactly 1..=N (commit order, no gaps, no duplicates), and the space
/// ends with one head, the cache agreeing with the anti-join.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_eight_appenders_on_one_space_end_with_one_head_and_unique_seqs() {
    let h = pgbouncer_harness().await;
    let a = h.store().await.unwrap();
    let b = h.store().await.unwrap();
    let s = space("shared");
    const EACH: usize = 15;
    let mut tasks = Vec::new();
    for writer in 0..8 {
        let store = if writer % 2 == 0 {
            a.clone()
        } else {
            b.clone()
        };
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            let mut seqs = Vec::new();
            for i in 0..EACH {
                let appended = store
                    .append(&s, vec![event(writer * 1000 + i)])
                    .await
                    .unwrap_or_else(|e| panic!("writer {writer} append {i}: {e}"));
                seqs.push(appended.seq.0);
            }
            seqs
        }));
    }
    let mut seqs = Vec::new();
    for t in tasks {
        seqs.extend(t.await.unwrap());
    }
    let unique: BTreeSet<u64> = seqs.iter().copied().collect();
    assert_eq!(unique.len(), seqs.len(), "a seq was handed out twice");
    let expected: BTreeSet<u64> = (1..=(8 * EACH) as u64).collect();
    assert_eq!(unique, expected, "seqs are not 1..=N");
    let heads = a.heads(&s).await.unwrap();
    assert_eq!(heads.len(), 1, "{heads:?}");
    assert_eq!(heads[0].seq.0, (8 * EACH) as u64);
    use cairn_core::EpochDiagnostics;
    assert_eq!(b.computed_heads(&s).await.unwrap(), heads);
    assert_eq!(b.cached_heads(&s).await.unwrap(), heads);
}

/// Through the pooler the stores' transactions really share server sessions: a pool of 8
/// clients on each of two stores is served by at most [`PGBOUNCER_POOL_SIZE`] server
/// connections, and the server sees more than one backend serve one store. And cairn leaves no
/// session setting behind: a plain client of the same PgBouncer, after a burst of cairn's
/// operations, sees the server's defaults for `search_path`, `lock_timeout` and
/// `enable_bitmapscan` on whatever server connection it gets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_move_between_server_connections_and_keep_no_setting() {
    let h = pgbouncer_harness().await;
    let a = h.store().await.unwrap();
    let b = h.store().await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..16 {
        let store = if i % 2 == 0 { a.clone() } else { b.clone() };
        tasks.push(tokio::spawn(async move {
            let s = space(&format!("s{i}"));
            for j in 0..5 {
                store.append(&s, vec![event(j)]).await.unwrap();
                store.heads(&s).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }

    let url = pgbouncer_url().await.unwrap();
    let mut plain = PgConnection::connect(&url).await.unwrap();
    let mut pids = BTreeSet::new();
    for _ in 0..(4 * PGBOUNCER_POOL_SIZE) {
        // Simple queries: one message, so PgBouncer runs each on one server connection.
        let rows = plain
            .fetch_all(sqlx::raw_sql(
                "SELECT pg_catalog.pg_backend_pid(), \
                 pg_catalog.current_setting('search_path'), \
                 pg_catalog.current_setting('lock_timeout'), \
                 pg_catalog.current_setting('enable_bitmapscan')",
            ))
            .await
            .unwrap();
        let row = &rows[0];
        pids.insert(row.get::<i32, _>(0));
        let settings: (String, String, String) = (row.get(1), row.get(2), row.get(3));
        assert_eq!(
            settings,
            ("\"$user\", public".into(), "0".into(), "on".into()),
            "a session setting of cairn's was left on a pooled server connection"
        );
    }
    plain.close().await.unwrap();
    assert!(
        pids.len() as u32 <= PGBOUNCER_POOL_SIZE,
        "more server connections than the pool holds: {pids:?}"
    );
}

/// Wake-ups through the pooler: a subscription on one node, an enqueue on another; with no
/// `LISTEN` possible, the subscriber returns within its poll bound and finds the run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_finds_another_nodes_enqueue_within_the_poll_bound() {
    let h = pgbouncer_harness().await;
    let clock = Arc::new(ManualClock::default());
    let open = |store: PgStore| {
        PgSpool::from_store(&store, clock.clone(), SpoolConfig::default()).unwrap()
    };
    let consumer = open(h.store().await.unwrap());
    let producer = open(h.store().await.unwrap());
    let poll = Duration::from_millis(100);
    consumer.set_wake_poll(poll);
    let queue = random_queue("wake");
    let mut wake = consumer.subscribe(&queue).await.unwrap();
    producer
        .enqueue(
            &queue,
            &DedupKey::from_parts(["k"]).unwrap(),
            b"payload".to_vec(),
            EnqueueOptions::default(),
        )
        .await
        .unwrap();
    let me = ConsumerId::new("worker").unwrap();
    let started = Instant::now();
    let deadline = started + Duration::from_secs(10);
    loop {
        wake.wait().await.unwrap();
        let claimed = consumer
            .claim(&queue, &me, Duration::from_secs(30), 1)
            .await
            .unwrap();
        if let Some(run) = claimed.first() {
            assert_eq!(run.payload, b"payload");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the run was not found within 10 s"
        );
    }
    // One poll, give or take scheduling: far below the deadline.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

/// Without the declaration, a store behind a transaction-mode pooler failed with what issue
/// 44 reported (`42P05 prepared statement "sqlx_s_1" already exists`, `26000 … does not
/// exist`, pool timeouts): now its open finds two connections served by one server session and
/// refuses with what to do (declare the pooler), and the prepared-statement errors say the
/// same should they come first. On a PgBouncer of its own: such a store leaves session state
/// on the server connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undeclared_transaction_pooler_is_refused_with_what_to_do() {
    let h = pgbouncer_harness().await;
    let url = pgbouncer_url_apart().await.unwrap();
    let opened =
        PgStore::open_with(PgOptions::new(url).schema(h.schema()).max_connections(8)).await;
    let err = match opened {
        Err(e) => e,
        Ok(store) => {
            let s = space("undeclared");
            let mut tasks = Vec::new();
            for i in 0..8 {
                let store = store.clone();
                let s = s.clone();
                tasks.push(tokio::spawn(async move {
                    for j in 0..5 {
                        store.append(&s, vec![event(i * 10 + j)]).await?;
                        store.heads(&s).await?;
                    }
                    Ok::<_, cairn_core::Error>(())
                }));
            }
            let mut first = None;
            for t in tasks {
                if let Err(e) = t.await.unwrap() {
                    first.get_or_insert(e);
                }
            }
            first.expect("every operation succeeded through an undeclared pooler")
        }
    };
    let text = err.to_string();
    assert!(text.contains("cairn_pooler=transaction"), "{text} {err:?}");
}

/// Issue 48 item 1: behind a transaction-mode pooler the migration lock is a transaction's, so
/// a no-transaction revision (which commits what ran before it and runs outside any
/// transaction) cannot run under it: the upgrade is refused before anything runs, saying to
/// use a direct connection, and the store is left as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_no_transaction_revision_is_refused_behind_the_pooler_before_anything_runs() {
    use cairn_migrate::{MigrateError, MigrationBackend, MigrationSet, Runner};
    let h = pgbouncer_harness().await;
    let set = |files: &[(&str, &str)]| MigrationSet::from_embedded("pooled_app", files).unwrap();
    let base = [(
        "0001_items.sql",
        "CREATE TABLE pooled_items (id BIGINT PRIMARY KEY, name TEXT)",
    )];
    let migrator = cairn_postgres::PgMigrator::new(h.options()).unwrap();
    Runner::new(set(&base)).open(&migrator).await.unwrap();
    let with_index = [
        base[0],
        ("0002_more.sql", "CREATE TABLE pooled_more (id BIGINT PRIMARY KEY)"),
        (
            "0003_index.sql",
            "-- cairn:no-transaction\nCREATE INDEX CONCURRENTLY pooled_items_name ON pooled_items (name)",
        ),
    ];
    let err = Runner::new(set(&with_index))
        .open(&migrator)
        .await
        .expect_err("refused behind the pooler");
    assert!(
        matches!(&err, MigrateError::RevisionFailed { revision, .. } if revision == "0003_index"),
        "{err:?}"
    );
    assert!(
        err.report().to_string().contains("direct connection"),
        "{}",
        err.report()
    );
    let state = migrator.read_state("pooled_app").await.unwrap();
    assert_eq!(state.stamp.as_deref(), Some("0001_items"), "nothing ran");
}
