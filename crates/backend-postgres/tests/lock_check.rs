//! The executed lock check on Postgres: a plain index build, `SET NOT NULL`, a validated foreign
//! key and a type change are each reported on the right table with the lock they hold; a
//! concurrent index build (in a no-transaction revision), a nullable column and `NOT VALID`
//! constraints are not, though their locks are measured.

use std::time::Duration;

use cairn_migrate::additivity::{check_set_locks, LockMode, LockReport, LockRule};
use cairn_migrate::MigrationSet;
use cairn_postgres::testkit::test_server_url;
use cairn_postgres::PgAdditivity;

/// The base revision: two tables holding rows (a base revision may insert them).
const BASE: &str = "CREATE TABLE parents (id BIGINT PRIMARY KEY);
INSERT INTO parents SELECT g FROM generate_series(1, 20) g;
CREATE TABLE items (id BIGINT PRIMARY KEY, parent_id BIGINT, name TEXT, qty INT);
INSERT INTO items SELECT g, 1 + g % 20, 'item ' || g, g FROM generate_series(1, 200) g;";

/// The lock report of revision `0002_x` (its file's text `second`) after [`BASE`].
async fn report(second: &str) -> LockReport {
    let url = test_server_url()
        .await
        .unwrap_or_else(|msg| panic!("{msg}"));
    let set = MigrationSet::from_files("locks", [("0001_base.sql", BASE), ("0002_x.sql", second)])
        .expect("a valid set");
    let reports = check_set_locks(&PgAdditivity::new(url), &set)
        .await
        .unwrap_or_else(|e| panic!("the lock check runs: {e}"))
        .expect("Postgres measures locks");
    assert_eq!(reports.len(), 1);
    let report = reports.into_iter().next().unwrap();
    assert_eq!(report.revision, "0002_x");
    assert_eq!(report.failed, None, "the revision ran: {report:?}");
    report
}

/// The one finding of `report`, which must be `rule` on `table` under `mode`.
fn only_finding(report: &LockReport, rule: LockRule, table: &str, mode: LockMode) {
    let found: Vec<_> = report
        .findings
        .iter()
        .filter(|f| f.table == table)
        .collect();
    assert_eq!(found.len(), 1, "{report:#?}");
    let f = found[0];
    assert_eq!((f.rule, f.mode, f.statement), (rule, mode, 1), "{f:?}");
    assert!(!f.accepted);
    let t = report
        .tables
        .iter()
        .find(|t| t.table == table)
        .expect("the table is reported");
    assert_eq!(t.mode, mode, "{t:?}");
    // Measured: the probe's write gave up after waiting (about its 100 ms lock timeout).
    let waited = t.writes_blocked.expect("writes were blocked");
    assert!(waited >= Duration::from_millis(90), "{waited:?}");
    assert_eq!(
        t.reads_blocked.is_some(),
        mode == LockMode::AccessExclusive,
        "{t:?}"
    );
    assert_eq!(f.reads_blocked, t.reads_blocked.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_index_build_is_reported_holding_share_on_its_table() {
    let r = report("CREATE INDEX items_name ON items (name);").await;
    only_finding(&r, LockRule::IndexBuild, "items", LockMode::Share);
    assert_eq!(r.findings.len(), 1, "{r:#?}");
    assert!(r.findings[0].sql.starts_with("CREATE INDEX items_name"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_not_null_is_reported_as_a_scan_under_access_exclusive() {
    let r = report("ALTER TABLE items ALTER COLUMN name SET NOT NULL;").await;
    only_finding(&r, LockRule::SetNotNull, "items", LockMode::AccessExclusive);
    assert!(r.tables[0].scanned_under_lock);
    assert!(!r.tables[0].rewritten);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_validated_foreign_key_is_reported_on_both_tables_under_share_row_exclusive() {
    let r = report(
        "ALTER TABLE items ADD CONSTRAINT items_parent FOREIGN KEY (parent_id) REFERENCES parents (id);",
    )
    .await;
    only_finding(
        &r,
        LockRule::ValidatedConstraint,
        "items",
        LockMode::ShareRowExclusive,
    );
    // The referenced table is read too (the validating join), with its writes blocked.
    only_finding(
        &r,
        LockRule::ValidatedConstraint,
        "parents",
        LockMode::ShareRowExclusive,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_type_change_is_reported_as_a_rewrite_under_access_exclusive() {
    let r = report("ALTER TABLE items ALTER COLUMN qty TYPE BIGINT;").await;
    only_finding(&r, LockRule::Rewrite, "items", LockMode::AccessExclusive);
    assert!(r.tables[0].rewritten);
    // A binary-compatible change rewrites nothing and is not reported.
    let r = report("ALTER TABLE items ALTER COLUMN name TYPE VARCHAR;").await;
    assert!(r.findings.is_empty(), "{r:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nullable_column_and_not_valid_constraints_are_measured_and_not_reported() {
    let r = report(
        "ALTER TABLE items ADD COLUMN note TEXT NULL;
         ALTER TABLE items ADD CONSTRAINT items_parent FOREIGN KEY (parent_id) REFERENCES parents (id) NOT VALID;
         ALTER TABLE items ADD CONSTRAINT items_qty CHECK (qty > 0) NOT VALID;",
    )
    .await;
    assert!(r.findings.is_empty(), "{r:#?}");
    // The locks were measured: ADD COLUMN holds ACCESS EXCLUSIVE for the transaction (brief,
    // no work under it), the foreign key SHARE ROW EXCLUSIVE on the referenced table.
    let items = r.tables.iter().find(|t| t.table == "items").unwrap();
    assert_eq!(items.mode, LockMode::AccessExclusive);
    assert!(items.reads_blocked.is_some() && items.writes_blocked.is_some());
    assert!(!items.rewritten && !items.scanned_under_lock);
    let parents = r.tables.iter().find(|t| t.table == "parents").unwrap();
    assert_eq!(parents.mode, LockMode::ShareRowExclusive);
    assert!(parents.writes_blocked.is_some() && parents.reads_blocked.is_none());
    assert!(!parents.scanned_under_lock);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrent_index_build_is_measured_while_it_runs_and_blocks_nothing() {
    let r =
        report("-- cairn:no-transaction\nCREATE INDEX CONCURRENTLY items_name ON items (name);")
            .await;
    assert!(r.outside_transaction);
    assert!(r.findings.is_empty(), "{r:#?}");
    // Measured during the build, holding its lock: reads and writes went on.
    let items = r.tables.iter().find(|t| t.table == "items");
    let items = items.unwrap_or_else(|| panic!("items was not measured: {r:#?}"));
    assert_eq!(items.mode, LockMode::ShareUpdateExclusive, "{r:#?}");
    assert_eq!((items.reads_blocked, items.writes_blocked), (None, None));
    assert_eq!(r.tables.len(), 1, "{r:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validate_in_the_transaction_of_its_not_valid_add_is_a_scan_under_lock() {
    let r = report(
        "ALTER TABLE items ADD CONSTRAINT items_qty CHECK (qty > 0) NOT VALID;
         ALTER TABLE items VALIDATE CONSTRAINT items_qty;",
    )
    .await;
    assert_eq!(r.findings.len(), 1, "{r:#?}");
    let f = &r.findings[0];
    assert_eq!(
        (f.rule, f.table.as_str(), f.statement, f.mode),
        (
            LockRule::ScanUnderLock,
            "items",
            2,
            LockMode::AccessExclusive
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_accepted_finding_is_listed_and_marked() {
    let r =
        report("-- cairn:accept-lock index-build\nCREATE INDEX items_name ON items (name);").await;
    assert_eq!(r.findings.len(), 1, "{r:#?}");
    assert!(r.findings[0].accepted);
    assert_eq!(r.open_findings().count(), 0);
}
