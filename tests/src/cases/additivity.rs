//! Additivity-check cases (A…): a corpus of allowed and forbidden changes to cairn's own
//! schema, each run through the backend's executed check, plus a property test over random
//! combinations.
//!
//! Every change is written against the tables of cairn's base revision (`epoch`,
//! `epoch_parent`, `epoch_event`, `epoch_head`) and names its own objects (`a_…` for allowed,
//! `f_…` for forbidden), so changes combine without colliding.

use std::time::Duration;

use cairn_core::schema::Dialect;
use cairn_migrate::additivity::{check_set, Rule};
use cairn_migrate::{cairn_revisions, MigrationSet, Opened, Revision, Runner, CAIRN_SET};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use crate::{proptest_cases, random_space, AdditivityHarness};

/// One change of the corpus.
#[derive(Clone, Debug)]
pub struct Change {
    /// Short name, used in reports.
    pub name: &'static str,
    /// Whether the additive-only rule allows it.
    pub allowed: bool,
    /// The statements on SQLite (`None`: the change does not exist there).
    pub sqlite: Option<&'static [&'static str]>,
    /// The statements on Postgres (`None`: the change does not exist there).
    pub postgres: Option<&'static [&'static str]>,
    /// For a forbidden change: the rules it may be reported under (at least one must be).
    pub expect: &'static [Rule],
}

impl Change {
    fn sql(&self, dialect: Dialect) -> Option<&'static [&'static str]> {
        match dialect {
            Dialect::Sqlite => self.sqlite,
            Dialect::Postgres => self.postgres,
        }
    }
}

const fn ok(name: &'static str, both: &'static [&'static str]) -> Change {
    Change {
        name,
        allowed: true,
        sqlite: Some(both),
        postgres: Some(both),
        expect: &[],
    }
}

const fn bad(name: &'static str, both: &'static [&'static str], expect: &'static [Rule]) -> Change {
    Change {
        name,
        allowed: false,
        sqlite: Some(both),
        postgres: Some(both),
        expect,
    }
}

use Rule::{Definition, Failed, Index, NewColumn, StatementKind, Trigger};

/// The corpus: allowed changes first, then forbidden ones.
pub fn corpus() -> Vec<Change> {
    vec![
        ok("new_table", &["CREATE TABLE a_new (id BIGINT NOT NULL PRIMARY KEY, note TEXT)"]),
        ok(
            "new_table_with_constraints",
            &["CREATE TABLE a_con (id BIGINT NOT NULL PRIMARY KEY, code TEXT NOT NULL UNIQUE CHECK (length(code) > 0), n INTEGER DEFAULT 0 CHECK (n >= 0))"],
        ),
        ok("nullable_column", &["ALTER TABLE epoch_event ADD COLUMN a_note TEXT"]),
        ok("defaulted_column", &["ALTER TABLE epoch ADD COLUMN a_flag INTEGER NOT NULL DEFAULT 0"]),
        ok("defaulted_text_column", &["ALTER TABLE epoch_parent ADD COLUMN a_label TEXT DEFAULT 'x'"]),
        ok("plain_index", &["CREATE INDEX a_idx_kind ON epoch_event (kind)"]),
        ok(
            "index_on_new_column",
            &["ALTER TABLE epoch_head ADD COLUMN a_seen BIGINT", "CREATE INDEX a_idx_seen ON epoch_head (a_seen)"],
        ),
        ok(
            "new_table_with_unique_index",
            &["CREATE TABLE a_tbl2 (id BIGINT NOT NULL, tag TEXT)", "CREATE UNIQUE INDEX a_tbl2_tag ON a_tbl2 (tag)"],
        ),
        // ---- forbidden ----
        Change {
            name: "generated_column",
            allowed: false,
            sqlite: Some(&["ALTER TABLE epoch ADD COLUMN f_gen INTEGER GENERATED ALWAYS AS (seq * 2) VIRTUAL"]),
            postgres: Some(&["ALTER TABLE epoch ADD COLUMN f_gen BIGINT GENERATED ALWAYS AS (seq * 2) STORED"]),
            expect: &[NewColumn],
        },
        Change {
            name: "generated_column_failing_on_valid_data",
            allowed: false,
            sqlite: Some(&["ALTER TABLE epoch_event ADD COLUMN f_genj TEXT GENERATED ALWAYS AS (json_extract(payload, '$.x')) VIRTUAL"]),
            postgres: Some(&["ALTER TABLE epoch_event ADD COLUMN f_genj BIGINT GENERATED ALWAYS AS (seq / (seq - seq)) STORED"]),
            expect: &[NewColumn, Failed],
        },
        Change {
            name: "delete_where_json_valid",
            allowed: false,
            sqlite: Some(&["DELETE FROM epoch_event WHERE json_valid(payload)"]),
            postgres: Some(&["DELETE FROM epoch_event WHERE payload LIKE '{%'::bytea"]),
            expect: &[StatementKind],
        },
        bad("conditional_update", &["UPDATE epoch_event SET kind = kind WHERE 1 = 0"], &[StatementKind]),
        bad(
            "delete_through_with",
            &["WITH doomed AS (SELECT space, seq FROM epoch_event WHERE 1 = 0) DELETE FROM epoch_event WHERE seq IN (SELECT seq FROM doomed)"],
            &[StatementKind],
        ),
        bad("insert_rows", &["INSERT INTO epoch_head (space, id, seq) SELECT space, id, seq FROM epoch WHERE 1 = 0"], &[StatementKind]),
        bad("update_rows", &["UPDATE epoch_event SET kind = upper(kind)"], &[StatementKind]),
        Change {
            name: "empty_a_table",
            allowed: false,
            sqlite: Some(&["DELETE FROM epoch_head"]),
            postgres: Some(&["TRUNCATE epoch_head"]),
            expect: &[StatementKind],
        },
        Change {
            name: "rebuild_changing_a_collation",
            allowed: false,
            sqlite: Some(&[
                "CREATE TABLE f_head_new (space BLOB NOT NULL, id BLOB NOT NULL COLLATE NOCASE, seq BIGINT NOT NULL, PRIMARY KEY (space, id))",
                "INSERT INTO f_head_new SELECT space, id, seq FROM epoch_head",
                "DROP TABLE epoch_head",
                "ALTER TABLE f_head_new RENAME TO epoch_head",
            ]),
            postgres: Some(&["ALTER TABLE epoch_event ALTER COLUMN kind TYPE TEXT COLLATE \"C\""]),
            expect: &[StatementKind, Definition],
        },
        Change {
            name: "identical_rebuild",
            allowed: false,
            sqlite: Some(&[
                "CREATE TABLE f_head_copy (space BLOB NOT NULL, id BLOB NOT NULL, seq BIGINT NOT NULL, PRIMARY KEY (space, id))",
                "INSERT INTO f_head_copy SELECT space, id, seq FROM epoch_head",
                "DROP TABLE epoch_head",
                "ALTER TABLE f_head_copy RENAME TO epoch_head",
            ]),
            postgres: Some(&[
                "CREATE TABLE f_head_copy (LIKE epoch_head INCLUDING ALL)",
                "INSERT INTO f_head_copy SELECT * FROM epoch_head",
                "DROP TABLE epoch_head",
                "ALTER TABLE f_head_copy RENAME TO epoch_head",
            ]),
            expect: &[StatementKind, Definition],
        },
        Change {
            name: "batch_style_rebuild",
            allowed: false,
            sqlite: Some(&[
                "ALTER TABLE epoch_head RENAME TO f_head_old",
                "CREATE TABLE epoch_head (space BLOB NOT NULL, id BLOB NOT NULL, seq BIGINT NOT NULL, extra TEXT, PRIMARY KEY (space, id))",
                "INSERT INTO epoch_head (space, id, seq) SELECT space, id, seq FROM f_head_old",
                "DROP TABLE f_head_old",
            ]),
            postgres: Some(&[
                "ALTER TABLE epoch_head RENAME TO f_head_old",
                "CREATE TABLE epoch_head (space BYTEA NOT NULL, id BYTEA NOT NULL, seq BIGINT NOT NULL, extra TEXT, PRIMARY KEY (space, id))",
                "INSERT INTO epoch_head (space, id, seq) SELECT space, id, seq FROM f_head_old",
                "DROP TABLE f_head_old",
            ]),
            expect: &[StatementKind, Definition],
        },
        bad(
            "replace_an_index",
            &["DROP INDEX epoch_event_space_epoch", "CREATE INDEX epoch_event_space_epoch ON epoch_event (space, epoch, seq)"],
            &[StatementKind, Index],
        ),
        bad("unique_index", &["CREATE UNIQUE INDEX f_uniq ON epoch_event (event_id, space, seq)"], &[Index]),
        bad("partial_index", &["CREATE INDEX f_part ON epoch_event (kind) WHERE key IS NOT NULL"], &[Index]),
        bad("expression_index", &["CREATE INDEX f_expr ON epoch_event (lower(kind))"], &[Index]),
        bad("check_column", &["ALTER TABLE epoch_event ADD COLUMN f_chk INTEGER CHECK (f_chk > 0)"], &[NewColumn]),
        bad("not_null_column_without_default", &["ALTER TABLE epoch_event ADD COLUMN f_nn TEXT NOT NULL"], &[NewColumn, Failed]),
        bad("unique_column", &["ALTER TABLE epoch_event ADD COLUMN f_uq TEXT UNIQUE"], &[NewColumn, Failed]),
        bad("expression_default", &["ALTER TABLE epoch_event ADD COLUMN f_def BIGINT DEFAULT (length('x') * 2)"], &[NewColumn, Failed]),
        Change {
            name: "foreign_key_column",
            allowed: false,
            sqlite: Some(&["CREATE TABLE f_target (id BLOB NOT NULL PRIMARY KEY)", "ALTER TABLE epoch_head ADD COLUMN f_ref BLOB REFERENCES f_target (id)"]),
            postgres: Some(&["CREATE TABLE f_target (id BYTEA NOT NULL PRIMARY KEY)", "ALTER TABLE epoch_head ADD COLUMN f_ref BYTEA REFERENCES f_target (id)"]),
            expect: &[NewColumn],
        },
        bad("drop_column", &["ALTER TABLE epoch_event DROP COLUMN key"], &[StatementKind]),
        bad("rename_column", &["ALTER TABLE epoch_event RENAME COLUMN kind TO f_kind"], &[StatementKind]),
        bad("drop_table", &["DROP TABLE epoch_head"], &[StatementKind]),
        bad("rename_table", &["ALTER TABLE epoch_head RENAME TO f_head_renamed"], &[StatementKind]),
        bad("drop_index", &["DROP INDEX epoch_event_space_epoch"], &[StatementKind, Index]),
        Change {
            name: "trigger",
            allowed: false,
            sqlite: Some(&["CREATE TRIGGER f_trg AFTER INSERT ON epoch_event BEGIN SELECT 1; END"]),
            postgres: Some(&[
                "CREATE FUNCTION f_trg_fn() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NEW; END$$",
                "CREATE TRIGGER f_trg AFTER INSERT ON epoch_event FOR EACH ROW EXECUTE FUNCTION f_trg_fn()",
            ]),
            expect: &[Trigger],
        },
        bad("vacuum", &["VACUUM"], &[Failed]),
        Change {
            name: "alter_column_default",
            allowed: false,
            sqlite: None,
            postgres: Some(&["ALTER TABLE epoch_event ALTER COLUMN key SET DEFAULT '\\x00'::bytea"]),
            expect: &[StatementKind],
        },
        Change {
            name: "alter_column_type",
            allowed: false,
            sqlite: None,
            postgres: Some(&["ALTER TABLE epoch_event ALTER COLUMN epoch_seq TYPE BIGINT"]),
            expect: &[StatementKind, Definition],
        },
        Change {
            name: "add_table_constraint",
            allowed: false,
            sqlite: None,
            postgres: Some(&["ALTER TABLE epoch_event ADD CONSTRAINT f_ck CHECK (epoch_seq >= 0)"]),
            expect: &[StatementKind],
        },
    ]
}

fn cairn_head() -> String {
    cairn_revisions()
        .last()
        .expect("cairn has revisions")
        .id
        .clone()
}

/// A revision on top of cairn's head holding `changes`' statements for `dialect`, in order.
fn revision(id: &str, changes: &[&Change], dialect: Dialect) -> Revision {
    let sql: Vec<String> = changes
        .iter()
        .flat_map(|c| {
            c.sql(dialect)
                .unwrap_or_default()
                .iter()
                .map(|s| (*s).to_owned())
        })
        .collect();
    Revision {
        id: id.into(),
        parent: Some(cairn_head()),
        up_sqlite: if dialect == Dialect::Sqlite {
            sql.clone()
        } else {
            Vec::new()
        },
        up_postgres: if dialect == Dialect::Postgres {
            sql
        } else {
            Vec::new()
        },
        description: changes
            .iter()
            .map(|c| c.name)
            .collect::<Vec<_>>()
            .join(" + "),
    }
}

async fn check<H: AdditivityHarness>(
    h: &H,
    rev: &Revision,
) -> Vec<cairn_migrate::additivity::Violation> {
    h.additivity()
        .check_revision(&cairn_revisions(), rev)
        .await
        .unwrap_or_else(|e| panic!("{}: check failed to run: {e}", h.backend()))
}

/// A4: the store code of this build works on a store migrated by `rev` and stamped as that
/// future revision: it opens ahead, appends, reads and repairs.
async fn store_works_ahead<H: AdditivityHarness>(h: &H, rev: &Revision) {
    let h = h.fresh().await;
    let mut revs = cairn_revisions();
    revs.push(rev.clone());
    let future = Runner::new(MigrationSet::new(CAIRN_SET, revs).unwrap())
        .with_lock_timeout(Duration::from_secs(20));
    h.open_as(&future)
        .await
        .unwrap_or_else(|e| panic!("A4: {} migrates: {e}", rev.description));
    let this_build = Runner::new(MigrationSet::new(CAIRN_SET, cairn_revisions()).unwrap());
    assert_eq!(
        this_build
            .open(h.migrator().await.as_ref())
            .await
            .expect("A4: opens"),
        Opened::Ahead {
            stamp: rev.id.clone()
        }
    );
    let store = h.open_as(&this_build).await.expect("A4: the store opens");
    let space = random_space("a4");
    let a = store
        .append(&space, super::ev("a4-1"))
        .await
        .unwrap_or_else(|e| panic!("A4 {}: append: {e}", rev.description));
    let b = store.append(&space, super::ev("a4-2")).await.unwrap();
    assert_eq!(b.parents, vec![a.id]);
    assert_eq!(store.heads(&space).await.unwrap().len(), 1);
    assert_eq!(
        store
            .events_since(&space, None, 10)
            .await
            .unwrap()
            .events
            .len(),
        2
    );
    store
        .repair_heads(&space)
        .await
        .unwrap_or_else(|e| panic!("A4 {}: repair: {e}", rev.description));
}

/// A1: every packaged revision of cairn's own migration set passes the check (a future
/// non-additive revision fails this test), and a deliberately bad fixture revision fails it.
pub async fn a1_every_packaged_revision_passes<H: AdditivityHarness>(h: &H) {
    let engine = h.additivity();
    let set = cairn_migrate::cairn_set();
    for report in check_set(engine.as_ref(), &set)
        .await
        .expect("the check runs")
    {
        assert!(
            report.violations.is_empty(),
            "A1: packaged revision {} is not additive: {:?}",
            report.revision,
            report.violations
        );
    }
    // An application's set checked after cairn's own: a harmless base, then a revision that
    // drops a column of cairn's epoch log.
    let revs = vec![
        Revision {
            id: "fixture_base".into(),
            parent: None,
            up_sqlite: vec!["CREATE TABLE fixture_base (id BIGINT)".into()],
            up_postgres: vec!["CREATE TABLE fixture_base (id BIGINT)".into()],
            description: "a table of its own".into(),
        },
        Revision {
            id: "fixture_bad".into(),
            parent: Some("fixture_base".into()),
            up_sqlite: vec!["ALTER TABLE epoch_event DROP COLUMN key".into()],
            up_postgres: vec!["ALTER TABLE epoch_event DROP COLUMN key".into()],
            description: "drops a column".into(),
        },
    ];
    let bad = MigrationSet::new("fixture", revs).unwrap();
    let reports = check_set(engine.as_ref(), &bad)
        .await
        .expect("the check runs");
    assert_eq!(reports.len(), 1);
    assert!(
        !reports[0].violations.is_empty(),
        "A1: the bad fixture is flagged"
    );
}

/// A2: each allowed change alone passes (and A4: this build works on it); each forbidden change
/// alone is reported for its own reason.
pub async fn a2_each_change_alone_is_judged_for_its_own_reason<H: AdditivityHarness>(h: &H) {
    let dialect = h.additivity().dialect();
    let mut counted = (0, 0);
    for change in corpus() {
        if change.sql(dialect).is_none() {
            continue;
        }
        let rev = revision(&format!("a2_{}", change.name), &[&change], dialect);
        let violations = check(h, &rev).await;
        if change.allowed {
            counted.0 += 1;
            assert!(
                violations.is_empty(),
                "A2: allowed change {} was flagged: {violations:?}",
                change.name
            );
            store_works_ahead(h, &rev).await;
        } else {
            counted.1 += 1;
            assert!(
                !violations.is_empty(),
                "A2: forbidden change {} passed",
                change.name
            );
            assert!(
                violations.iter().any(|v| change.expect.contains(&v.rule)),
                "A2: forbidden change {} reported for {violations:?}, expected one of {:?}",
                change.name,
                change.expect
            );
        }
    }
    assert!(
        counted.0 >= 7 && counted.1 >= 24,
        "corpus too small on {}: {counted:?}",
        h.backend()
    );
}

/// A2 + A4 (property): over random combinations of corpus changes, a problem is reported iff a
/// forbidden change is present, and every accepted combination leaves a store this build's code
/// works with.
pub async fn a2_random_combinations_flag_iff_forbidden<H: AdditivityHarness>(h: &H) {
    let dialect = h.additivity().dialect();
    let changes: Vec<Change> = corpus()
        .into_iter()
        .filter(|c| c.sql(dialect).is_some())
        .collect();
    let n = changes.len();
    let cases = proptest_cases().max(80);
    tokio::task::block_in_place(|| {
        let mut runner = TestRunner::new(Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        });
        let handle = tokio::runtime::Handle::current();
        let strategy = proptest::collection::btree_set(0..n, 1..=4)
            .prop_map(|s| s.into_iter().collect::<Vec<usize>>())
            .prop_shuffle();
        let result = runner.run(&strategy, |picked| {
            let chosen: Vec<&Change> = picked.iter().map(|i| &changes[*i]).collect();
            let names: Vec<&str> = chosen.iter().map(|c| c.name).collect();
            let forbidden = chosen.iter().any(|c| !c.allowed);
            let rev = revision("a2_combo", &chosen, dialect);
            handle.block_on(async {
                let violations = check(h, &rev).await;
                prop_assert_eq!(
                    !violations.is_empty(),
                    forbidden,
                    "{:?}: {:?}",
                    names,
                    violations
                );
                if !forbidden {
                    store_works_ahead(h, &rev).await;
                }
                Ok(())
            })
        });
        if let Err(e) = result {
            panic!("{}: {e}", h.backend());
        }
    });
}
