//! M12 (issue 48 item 1): revisions marked `-- cairn:no-transaction`. On Postgres such a
//! revision runs outside the upgrade transaction, one statement at a time under the migration
//! lock, after what ran before it committed; its stamp and lineage are written once it
//! succeeded, and an interrupted `CREATE INDEX CONCURRENTLY` (the invalid index it leaves) is
//! dropped and built again by the next upgrade. On SQLite the marker is accepted and the
//! revision runs in the upgrade transaction as any other.

use cairn_core::schema::Dialect;
use cairn_migrate::{MigrateError, MigrationSet, Opened, Runner};

use super::migrations::{run, DEADLINE};
use crate::MigrationHarness;

const SET: &str = "m12_app";

fn items_set(unique: bool) -> MigrationSet {
    let unique = if unique { "UNIQUE " } else { "" };
    let pg = format!(
        "-- cairn:no-transaction\n-- index the items by name, without blocking their writes\n\
         CREATE {unique}INDEX CONCURRENTLY m12_items_name ON m12_items (name)"
    );
    let sqlite = format!(
        "-- index the items by name\nCREATE {unique}INDEX m12_items_name ON m12_items (name)"
    );
    MigrationSet::from_files(
        SET,
        [
            (
                "0001_items.sql",
                "CREATE TABLE m12_items (id BIGINT NOT NULL PRIMARY KEY, name TEXT NOT NULL)"
                    .to_owned(),
            ),
            (
                "0002_two_alike.sql",
                "CREATE TABLE m12_before (id BIGINT NOT NULL PRIMARY KEY);\n\
                 INSERT INTO m12_items (id, name) VALUES (1, 'same'), (2, 'same')"
                    .to_owned(),
            ),
            ("0003_index.postgres.sql", pg),
            ("0003_index.sqlite.sql", sqlite),
            (
                "0004_after.sql",
                "CREATE TABLE m12_after (id BIGINT NOT NULL PRIMARY KEY)".to_owned(),
            ),
        ],
    )
    .expect("the fixture set is valid")
}

fn runner(set: MigrationSet) -> Runner {
    Runner::new(set).with_lock_timeout(DEADLINE)
}

async fn stamp<H: MigrationHarness>(h: &H) -> Option<String> {
    h.migrator()
        .await
        .read_state(SET)
        .await
        .expect("read the migration state")
        .stamp
}

/// The index `m12_items_name`: `(exists, valid)`.
async fn index<H: MigrationHarness>(h: &H) -> (bool, bool) {
    if h.backend() == "postgres" {
        let count = |valid: &str| {
            format!(
                "SELECT count(*) FROM pg_catalog.pg_index i JOIN pg_catalog.pg_class c \
                 ON c.oid = i.indexrelid WHERE c.relname = 'm12_items_name' \
                 AND c.relnamespace = pg_catalog.to_regnamespace(pg_catalog.current_schema())::oid \
                 AND {valid}"
            )
        };
        let all = h.query_i64(&count("TRUE")).await.expect("count indexes");
        let valid = h
            .query_i64(&count("i.indisvalid"))
            .await
            .expect("count valid indexes");
        (all == 1, valid == 1)
    } else {
        let all = h
            .query_i64(
                "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = 'm12_items_name'",
            )
            .await
            .expect("count indexes");
        (all == 1, all == 1)
    }
}

/// M12: a no-transaction revision applies, with the revisions around it, and the store ends at
/// head with the whole lineage. On Postgres its `CREATE INDEX CONCURRENTLY` — which fails
/// inside any transaction block — is what proves it ran outside one.
pub async fn m12_app_no_transaction_revision_applies_outside_the_transaction<
    H: MigrationHarness,
>(
    h: &H,
) {
    let set = items_set(false);
    assert!(set.is_no_transaction("0003_index", Dialect::Postgres));
    assert!(!set.is_no_transaction("0003_index", Dialect::Sqlite));
    let opened = run(h, &runner(set.clone()))
        .await
        .expect("M12: the upgrade applies");
    assert_eq!(
        opened,
        Opened::Upgraded {
            from: None,
            applied: set.revisions().iter().map(|r| r.id.clone()).collect(),
        }
    );
    assert_eq!(stamp(h).await.as_deref(), Some("0004_after"));
    assert_eq!(
        index(h).await,
        (true, true),
        "M12: the index is built and valid"
    );
    let lineage = h.migrator().await.read_state(SET).await.unwrap().lineage;
    assert_eq!(lineage, Some(set.lineage(h_dialect(h))));
    assert_eq!(run(h, &runner(set)).await.unwrap(), Opened::AtHead);
}

/// M12: a no-transaction revision that fails keeps what ran before it (committed with the
/// stamp at its parent, on Postgres) and is retried by the next upgrade once its cause is
/// fixed: the failed concurrent unique build's invalid index is dropped and built again. On
/// SQLite the whole upgrade rolls back, as for any revision.
pub async fn m12_app_failed_no_transaction_revision_keeps_what_ran_before_and_is_retried<
    H: MigrationHarness,
>(
    h: &H,
) {
    let set = items_set(true);
    let err = run(h, &runner(set.clone()))
        .await
        .expect_err("M12: a unique index over two equal names fails");
    if h.backend() == "postgres" {
        assert!(
            matches!(
                &err,
                MigrateError::RevisionFailedPartly { revision, stamp, .. }
                    if revision == "0003_index" && stamp.as_deref() == Some("0002_two_alike")
            ),
            "{err:?}"
        );
        assert!(
            err.to_string()
                .contains("the store stays at 0002_two_alike"),
            "{err}"
        );
        assert_eq!(stamp(h).await.as_deref(), Some("0002_two_alike"));
        assert_eq!(
            index(h).await,
            (true, false),
            "M12: the failed concurrent build left its invalid index"
        );
        assert_eq!(
            h.query_i64("SELECT count(*) FROM m12_before")
                .await
                .unwrap(),
            0,
            "M12: the revisions before it committed"
        );
    } else {
        assert!(
            matches!(&err, MigrateError::RevisionFailed { revision, .. } if revision == "0003_index"),
            "{err:?}"
        );
        assert_eq!(
            stamp(h).await,
            None,
            "M12: SQLite rolled the whole upgrade back"
        );
        assert_eq!(index(h).await, (false, false));
        runner(set.up_to("0002_two_alike").unwrap())
            .open(h.migrator().await.as_ref())
            .await
            .expect("apply up to the revision before");
    }
    h.execute_sql("DELETE FROM m12_items WHERE id = 2")
        .await
        .expect("fix the data");
    let opened = run(h, &runner(set.clone()))
        .await
        .expect("M12: the next upgrade repairs and finishes");
    assert_eq!(
        opened,
        Opened::Upgraded {
            from: Some("0002_two_alike".into()),
            applied: vec!["0003_index".into(), "0004_after".into()],
        }
    );
    assert_eq!(index(h).await, (true, true), "M12: the index is valid now");
    assert_eq!(stamp(h).await.as_deref(), Some("0004_after"));
    assert_eq!(run(h, &runner(set)).await.unwrap(), Opened::AtHead);
}

fn h_dialect<H: MigrationHarness>(h: &H) -> Dialect {
    if h.backend() == "postgres" {
        Dialect::Postgres
    } else {
        Dialect::Sqlite
    }
}

/// The tables `items_set` makes up to `0002_two_alike`, created by hand (as another tool
/// would have), with `name`'s type as given.
async fn tables_by_hand<H: MigrationHarness>(h: &H, name_type: &str) {
    // A cairn store first (the application's tables sit beside cairn's own).
    h.open().await.expect("open the store");
    for sql in [
        format!(
            "CREATE TABLE m12_items (id BIGINT NOT NULL PRIMARY KEY, name {name_type} NOT NULL)"
        ),
        "CREATE TABLE m12_before (id BIGINT NOT NULL PRIMARY KEY)".to_owned(),
    ] {
        h.execute_sql(&sql).await.expect("create a table by hand");
    }
}

/// M12 (issue 48 item 4): a baseline adopts a store whose tables were made by hand exactly as
/// the set's revision makes them: it is stamped there with the lineage, without running the
/// revisions' SQL (the rows the revision would insert are not there), and the next upgrade
/// applies only what follows. A store whose tables differ is refused with the difference
/// named, and so is a store already stamped; neither is written.
pub async fn m12_app_baseline_adopts_a_matching_schema_and_refuses_another<H: MigrationHarness>(
    h: &H,
) {
    let set = items_set(false);
    let m = h.migrator().await;

    // A column of another type: refused, naming it, nothing stamped.
    let other = h.fresh().await;
    tables_by_hand(&other, "BIGINT").await;
    let om = other.migrator().await;
    let err = runner(set.clone())
        .baseline(om.as_ref(), om.scratch().await.unwrap(), "0002_two_alike")
        .await
        .expect_err("M12: a schema that differs is refused");
    assert!(
        matches!(&err, MigrateError::BaselineMismatch { differences, .. }
            if differences.iter().any(|d| d.contains("m12_items") && d.contains("name"))),
        "{err:?}"
    );
    assert_eq!(
        om.read_state(SET).await.unwrap().stamp,
        None,
        "M12: nothing stamped"
    );

    // The same tables as the revision makes: adopted.
    tables_by_hand(h, "TEXT").await;
    let done = runner(set.clone())
        .baseline(m.as_ref(), m.scratch().await.unwrap(), "0002_two_alike")
        .await
        .expect("M12: a matching schema is adopted");
    assert_eq!(done.at, "0002_two_alike");
    let state = m.read_state(SET).await.unwrap();
    assert_eq!(state.stamp.as_deref(), Some("0002_two_alike"));
    assert_eq!(
        state.lineage,
        Some(set.up_to("0002_two_alike").unwrap().lineage(h_dialect(h)))
    );
    assert_eq!(
        h.query_i64("SELECT count(*) FROM m12_items").await.unwrap(),
        0,
        "M12: the revisions' SQL did not run"
    );

    // Already stamped: refused.
    let err = runner(set.clone())
        .baseline(m.as_ref(), m.scratch().await.unwrap(), "0001_items")
        .await
        .expect_err("M12: a stamped store is not baselined again");
    assert!(
        matches!(err, MigrateError::BaselineRefused { .. }),
        "{err:?}"
    );

    // The next upgrade applies only what follows.
    assert_eq!(
        run(h, &runner(set)).await.unwrap(),
        Opened::Upgraded {
            from: Some("0002_two_alike".into()),
            applied: vec!["0003_index".into(), "0004_after".into()],
        }
    );
    assert_eq!(index(h).await, (true, true));
}

/// M12 (issue 48 item 3): an upgrade whose revision waits for a table an application
/// transaction holds gives up after its revision lock timeout, is rolled back (releasing the
/// migration lock and every query queued behind it) and runs again; once the transaction ends
/// (here: released right before the second try) it applies, reporting its tries. When every
/// try gives up, it fails with the lock timeout and changes nothing. Backends whose upgrades
/// wait for no table lock (SQLite) apply it at the first try.
pub async fn m12_app_revision_waiting_for_a_table_gives_way_and_is_tried_again<
    H: MigrationHarness,
>(
    h: &H,
) {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    let base = items_set(false).up_to("0001_items").unwrap();
    run(h, &runner(base)).await.expect("the base applies");
    let set = MigrationSet::from_files(
        SET,
        [
            (
                "0001_items.sql",
                "CREATE TABLE m12_items (id BIGINT NOT NULL PRIMARY KEY, name TEXT NOT NULL)",
            ),
            (
                "0002_note.sql",
                "ALTER TABLE m12_items ADD COLUMN note TEXT",
            ),
        ],
    )
    .unwrap();
    let Some(held) = h.hold_table("m12_items").await.expect("hold the table") else {
        let report = runner(set)
            .with_revision_lock_timeout(Duration::from_millis(50))
            .open_with_report(h.migrator().await.as_ref())
            .await
            .expect("M12: nothing waits");
        assert_eq!(report.tries, 1);
        return;
    };

    // Every try gives up: the lock timeout, nothing changed.
    let err = runner(set.clone())
        .with_revision_lock_timeout(Duration::from_millis(50))
        .with_revision_tries(2)
        .open_with_report(h.migrator().await.as_ref())
        .await
        .expect_err("M12: the table stays held");
    assert!(
        matches!(&err, MigrateError::RevisionFailed { revision, source }
            if revision == "0002_note" && source.is_retryable()),
        "{err:?}"
    );
    assert_eq!(stamp(h).await.as_deref(), Some("0001_items"));

    // Released before the second try: applied then.
    let held = Arc::new(Mutex::new(Some(held)));
    let tries = Arc::new(Mutex::new(0u32));
    let hooks = cairn_migrate::RunnerHooks {
        before_lock: Some(Arc::new({
            let (held, tries) = (held.clone(), tries.clone());
            move || {
                let mut n = tries.lock().unwrap();
                *n += 1;
                if *n == 2 {
                    if let Some(lock) = held.lock().unwrap().take() {
                        // The hook is synchronous; the release runs at once on the runtime,
                        // and a try that still finds the table held is followed by another.
                        tokio::spawn(lock.release());
                    }
                }
            }
        })),
        ..Default::default()
    };
    let report = runner(set)
        .with_revision_lock_timeout(Duration::from_millis(50))
        .with_revision_tries(100)
        .with_hooks(hooks)
        .open_with_report(h.migrator().await.as_ref())
        .await
        .expect("M12: applied once the table is free");
    assert!(report.tries >= 2, "{report:?}");
    assert!(report.lock_waits >= Duration::from_millis(50), "{report:?}");
    assert_eq!(stamp(h).await.as_deref(), Some("0002_note"));
}
