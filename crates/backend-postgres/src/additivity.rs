//! The executed additivity check on PostgreSQL: [`PgAdditivity`], cairn-migrate's
//! [`AdditivityEngine`] for this backend.
//!
//! One check of one revision:
//!
//! 1. A throwaway schema `cairn_add_<hex>` is migrated to the revision's parent through the
//!    lineage-aware runner and seeded through cairn's real write paths: multi-event appends to
//!    three spaces (keyed and unkeyed events, JSON and binary payloads), an import that forks a
//!    space, a repair, and an append that merges the fork. Tables earlier revisions created that
//!    cairn does not write yet stay empty: their definitions are still checked, their rows and
//!    old-column writes cannot be. A set whose base is not cairn's is built but not seeded.
//! 2. On one connection, in one transaction that is always rolled back: the existing tables'
//!    catalog rows (columns with types, collations, nullability, defaults, generation and
//!    storage; constraints; indexes; triggers; table options, privileges and file node) and a
//!    digest of their rows are read, then capture is installed — an event trigger on
//!    `ddl_command_end` (`pg_event_trigger_ddl_commands()`), one on `sql_drop`
//!    (`pg_event_trigger_dropped_objects()`), and a statement-level trigger for INSERT, UPDATE,
//!    DELETE and TRUNCATE on every existing table, all enabled ALWAYS so a migration that sets
//!    `session_replication_role` cannot blind them. Event triggers are database-wide, but
//!    created in a transaction that never commits they are invisible to every other session;
//!    a deferred constraint trigger makes a `COMMIT` issued by the migration itself fail.
//! 3. Each statement of the revision runs in a savepoint, as the runner runs it; a failing
//!    statement is a [`Rule::Failed`] violation (VACUUM and other statements that cannot run in
//!    a transaction fail here too) and the check goes on with the rest.
//! 4. The captured commands are judged per statement (an `ALTER TABLE` on an existing table is an
//!    ADD COLUMN only when that statement's catalog change is new columns and nothing else), then
//!    the final catalog and rows are compared with the snapshot, and an UPDATE and a
//!    DELETE-and-INSERT naming only the old columns are run on one seeded row of each table.
//!
//! What this engine cannot observe: commands event triggers do not report (on PostgreSQL 15:
//! `REINDEX`, `CLUSTER`, `LOCK`, `SET`, `NOTIFY`, and commands on shared objects — roles,
//! databases, tablespaces); a rewritten table or index is still caught by its changed file
//! node. `GRANT`/`REVOKE` are reported without the object they touch, so they are flagged for
//! review wherever they point. Sequence advances (`nextval`, `setval`) are not writes a trigger
//! sees. And, like every engine of the check, it cannot see what rows mean to older code nor
//! side effects outside SQL.
//!
//! Stricter than needed, on purpose: any rewrite of an existing table or index (`CLUSTER`, a
//! column type change) is a rebuild; `COMMENT`, `GRANT` and `CREATE RULE` on an existing table
//! are flagged for review; `SET CONSTRAINTS ALL IMMEDIATE` fires the commit guard and fails; a
//! statement running longer than 60 s fails.

use std::collections::{BTreeMap, BTreeSet};
use std::str::FromStr;

use async_trait::async_trait;
use cairn_core::schema::Dialect;
use cairn_core::{epoch_id, EpochStore, Error, Event, EventId, ForeignEpoch, SpaceId};
use cairn_migrate::additivity::{AdditivityEngine, Rule, Violation};
use cairn_migrate::{cairn_revisions, MigrateError, MigrationSet, Revision, Runner, CAIRN_SET};
use sqlx::postgres::{PgConnectOptions, PgRow};
use sqlx::{Connection, PgConnection, Postgres, Row};

use crate::config::{PgOptions, SchemaName};
use crate::error::map_sqlx;
use crate::store::PgStore;
use crate::BOOKKEEPING_TABLES;

/// The statements of the check. Identifiers spliced in are only the validated throwaway
/// [`SchemaName`] (and names derived from it); table names from the catalog are quoted
/// server-side by `format('%s', oid::regclass)` / `quote_ident`.
mod sql {
    use crate::config::SchemaName;

    /// Whether the session may create event triggers.
    pub(super) const IS_SUPERUSER: &str =
        "SELECT rolsuper FROM pg_roles WHERE rolname = current_user";

    /// Bounds every wait inside the checked transaction.
    pub(super) const LOCAL_TIMEOUTS: &str =
        "SELECT set_config('lock_timeout', '10000', true), set_config('statement_timeout', '60000', true)";

    pub(super) const BEGIN: &str = "BEGIN";
    pub(super) const ROLLBACK: &str = "ROLLBACK";
    pub(super) const SAVEPOINT: &str = "SAVEPOINT cairn_add_stmt";
    pub(super) const RELEASE: &str = "RELEASE SAVEPOINT cairn_add_stmt";
    pub(super) const ROLLBACK_TO: &str = "ROLLBACK TO SAVEPOINT cairn_add_stmt";

    /// Ordinary and partitioned tables of schema `$1` except those named in `$2`, by oid.
    pub(super) const TABLES: &str = "SELECT c.oid::int8, c.relname::text FROM pg_class c \
        JOIN pg_namespace n ON n.oid = c.relnamespace \
        WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') AND NOT (c.relname = ANY($2)) ORDER BY c.oid";

    /// Every object of schema `$1` that a command could touch, as (catalog, oid).
    pub(super) const OBJECTS: &str = "WITH ns AS (SELECT oid FROM pg_namespace WHERE nspname = $1) \
        SELECT 'pg_class', oid::int8 FROM pg_class WHERE relnamespace = (SELECT oid FROM ns) \
        UNION ALL SELECT 'pg_proc', oid::int8 FROM pg_proc WHERE pronamespace = (SELECT oid FROM ns) \
        UNION ALL SELECT 'pg_type', oid::int8 FROM pg_type WHERE typnamespace = (SELECT oid FROM ns) \
        UNION ALL SELECT 'pg_constraint', oid::int8 FROM pg_constraint WHERE connamespace = (SELECT oid FROM ns) \
        UNION ALL SELECT 'pg_trigger', t.oid::int8 FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid \
          WHERE c.relnamespace = (SELECT oid FROM ns)";

    /// Table-level properties of the tables `$1`.
    pub(super) const REL_PROPS: &str = "SELECT c.oid::int8, c.relname::text, c.relfilenode::int8, \
        concat_ws(' ', 'kind=' || c.relkind::text, 'persistence=' || c.relpersistence::text, \
          'replident=' || c.relreplident::text, 'rls=' || c.relrowsecurity, 'forcerls=' || c.relforcerowsecurity, \
          'am=' || c.relam, 'tablespace=' || c.reltablespace, 'options=' || coalesce(c.reloptions::text, '{}'), \
          'acl=' || coalesce(c.relacl::text, '-')) \
        FROM pg_class c WHERE c.oid::int8 = ANY($1)";

    /// Columns of the tables `$1`. Column options named `pg_…` are left out: they are the
    /// server's own bookkeeping (some builds keep a per-column version there that moves whenever
    /// the table is touched), not settings a migration can make.
    pub(super) const COLUMNS: &str = "SELECT a.attrelid::int8, a.attnum::int4, a.attname::text, \
        format_type(a.atttypid, a.atttypmod), a.attcollation::int8, a.attnotnull, \
        pg_get_expr(d.adbin, d.adrelid), d.adbin::text, a.attgenerated::text, a.attidentity::text, \
        concat_ws(' ', 'storage=' || a.attstorage::text, 'stats=' || coalesce(a.attstattarget::int4, -1), \
          'options=' || array(SELECT o FROM unnest(a.attoptions) AS o WHERE o NOT LIKE 'pg\\_%')::text, 'acl=' || coalesce(a.attacl::text, '-')) \
        FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum \
        WHERE a.attrelid::int8 = ANY($1) AND a.attnum > 0 AND NOT a.attisdropped";

    /// Constraints of the tables `$1`.
    pub(super) const CONSTRAINTS: &str = "SELECT k.conrelid::int8, k.oid::int8, k.conname::text, \
        k.contype::text, pg_get_constraintdef(k.oid), coalesce(k.conkey::int4[], '{}') \
        FROM pg_constraint k WHERE k.conrelid::int8 = ANY($1)";

    /// Indexes of the tables `$1`.
    pub(super) const INDEXES: &str =
        "SELECT i.indrelid::int8, i.indexrelid::int8, c.relname::text, \
        pg_get_indexdef(i.indexrelid), c.relfilenode::int8, i.indisunique, i.indpred IS NOT NULL, \
        i.indexprs IS NOT NULL, ARRAY(SELECT k::int4 FROM unnest(i.indkey) AS k) \
        FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid::int8 = ANY($1)";

    /// Triggers of the tables `$1`, except the check's own (`$2`); internal ones (foreign keys)
    /// are listed with their enabled state only.
    pub(super) const TRIGGERS: &str = "SELECT t.tgrelid::int8, t.oid::int8, t.tgname::text, \
        CASE WHEN t.tgisinternal THEN 'internal' ELSE pg_get_triggerdef(t.oid) END, t.tgenabled::text, \
        t.tgisinternal FROM pg_trigger t WHERE t.tgrelid::int8 = ANY($1) AND t.tgname <> $2";

    /// Tables of schema `$1` by name, whatever their oid.
    pub(super) const TABLE_NAMES: &str = "SELECT c.relname::text, c.oid::int8 FROM pg_class c \
        JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind IN ('r', 'p')";

    /// Log rows after id `$1`.
    pub(super) fn read_log(s: &SchemaName) -> String {
        format!(
            "SELECT id, source, tag, classid, objid, objsubid, otype, ident, rel \
             FROM \"{s}\".cairn_add_log WHERE id > $1 ORDER BY id",
            s = s.as_str()
        )
    }

    /// Row digest of table `$1` over the columns numbered `$2`.
    pub(super) fn digest(s: &SchemaName) -> String {
        format!(
            "SELECT \"{s}\".cairn_add_digest($1::int8::oid, $2)",
            s = s.as_str()
        )
    }

    /// The old-column writes on table `$1` (columns `$2`); NULL when they succeed.
    pub(super) fn old_writes(s: &SchemaName) -> String {
        format!(
            "SELECT \"{s}\".cairn_add_old_writes($1::int8::oid, $2)",
            s = s.as_str()
        )
    }

    /// Installs the statement triggers (named `$2`) on the tables `$1`.
    pub(super) fn install_dml(s: &SchemaName) -> String {
        format!("SELECT \"{s}\".cairn_add_install($1, $2)", s = s.as_str())
    }

    /// The name of the check's statement triggers.
    pub(super) fn dml_trigger_name(s: &SchemaName) -> String {
        format!("{}_dml", s.as_str())
    }

    /// Log, guard and helper functions, created inside the checked transaction.
    pub(super) fn capture_objects(s: &SchemaName) -> Vec<String> {
        let s = s.as_str();
        vec![
            format!(
                "CREATE TABLE \"{s}\".cairn_add_log (id bigserial PRIMARY KEY, source text NOT NULL, tag text, \
                 classid text, objid int8, objsubid int4, otype text, ident text, rel int8)"
            ),
            format!(
                "CREATE FUNCTION \"{s}\".cairn_add_on_ddl() RETURNS event_trigger LANGUAGE plpgsql AS $f$ BEGIN \
                 INSERT INTO \"{s}\".cairn_add_log (source, tag, classid, objid, objsubid, otype, ident, rel) \
                 SELECT 'ddl', c.command_tag, c.classid::regclass::text, c.objid::int8, c.objsubid, c.object_type, \
                 c.object_identity, (CASE c.classid \
                   WHEN 'pg_class'::regclass::oid THEN coalesce((SELECT i.indrelid FROM pg_index i WHERE i.indexrelid = c.objid), c.objid) \
                   WHEN 'pg_constraint'::regclass::oid THEN (SELECT k.conrelid FROM pg_constraint k WHERE k.oid = c.objid) \
                   WHEN 'pg_trigger'::regclass::oid THEN (SELECT t.tgrelid FROM pg_trigger t WHERE t.oid = c.objid) \
                   WHEN 'pg_rewrite'::regclass::oid THEN (SELECT r.ev_class FROM pg_rewrite r WHERE r.oid = c.objid) \
                   WHEN 'pg_policy'::regclass::oid THEN (SELECT p.polrelid FROM pg_policy p WHERE p.oid = c.objid) \
                   WHEN 'pg_attrdef'::regclass::oid THEN (SELECT d.adrelid FROM pg_attrdef d WHERE d.oid = c.objid) \
                   WHEN 'pg_statistic_ext'::regclass::oid THEN (SELECT x.stxrelid FROM pg_statistic_ext x WHERE x.oid = c.objid) \
                 END)::int8 FROM pg_event_trigger_ddl_commands() c; END $f$"
            ),
            format!(
                "CREATE FUNCTION \"{s}\".cairn_add_on_drop() RETURNS event_trigger LANGUAGE plpgsql AS $f$ BEGIN \
                 INSERT INTO \"{s}\".cairn_add_log (source, tag, classid, objid, objsubid, otype, ident) \
                 SELECT 'drop', tg_tag, d.classid::regclass::text, d.objid::int8, d.objsubid, d.object_type, \
                 d.object_identity FROM pg_event_trigger_dropped_objects() d; END $f$"
            ),
            format!(
                "CREATE FUNCTION \"{s}\".cairn_add_on_dml() RETURNS trigger LANGUAGE plpgsql AS $f$ BEGIN \
                 INSERT INTO \"{s}\".cairn_add_log (source, tag, rel) VALUES ('dml', TG_OP, TG_RELID::int8); \
                 RETURN NULL; END $f$"
            ),
            format!(
                "CREATE FUNCTION \"{s}\".cairn_add_install(tbls int8[], trg text) RETURNS void LANGUAGE plpgsql AS $f$ \
                 DECLARE t int8; BEGIN FOREACH t IN ARRAY tbls LOOP \
                 EXECUTE format('CREATE TRIGGER %I AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON %s \
                   FOR EACH STATEMENT EXECUTE FUNCTION \"{s}\".cairn_add_on_dml()', trg, t::oid::regclass); \
                 EXECUTE format('ALTER TABLE %s ENABLE ALWAYS TRIGGER %I', t::oid::regclass, trg); \
                 END LOOP; END $f$"
            ),
            format!(
                "CREATE FUNCTION \"{s}\".cairn_add_columns(tbl oid, cols int4[]) RETURNS text LANGUAGE sql STABLE AS $f$ \
                 SELECT CASE WHEN count(a.attname) = count(*) THEN string_agg(quote_ident(a.attname), ', ' ORDER BY k.ord) END \
                 FROM unnest(cols) WITH ORDINALITY AS k(num, ord) \
                 LEFT JOIN pg_attribute a ON a.attrelid = tbl AND a.attnum = k.num AND NOT a.attisdropped $f$"
            ),
            format!(
                "CREATE FUNCTION \"{s}\".cairn_add_digest(tbl oid, cols int4[]) RETURNS text LANGUAGE plpgsql AS $f$ \
                 DECLARE names text; out text; BEGIN \
                 IF NOT EXISTS (SELECT 1 FROM pg_class WHERE oid = tbl) THEN RETURN 'table gone'; END IF; \
                 names := \"{s}\".cairn_add_columns(tbl, cols); \
                 IF names IS NULL THEN RETURN 'an old column is gone'; END IF; \
                 EXECUTE format('SELECT count(*) || '':'' || md5(coalesce(string_agg(r, chr(10) ORDER BY r), '''')) \
                   FROM (SELECT ROW(%s)::text AS r FROM %s) q', names, tbl::regclass) INTO out; \
                 RETURN out; END $f$"
            ),
            format!(
                "CREATE FUNCTION \"{s}\".cairn_add_old_writes(tbl oid, cols int4[]) RETURNS text LANGUAGE plpgsql AS $f$ \
                 DECLARE names text; row_id tid; BEGIN \
                 IF NOT EXISTS (SELECT 1 FROM pg_class WHERE oid = tbl) THEN RETURN NULL; END IF; \
                 names := \"{s}\".cairn_add_columns(tbl, cols); \
                 IF names IS NULL THEN RETURN 'an old column is gone'; END IF; \
                 EXECUTE format('SELECT ctid FROM %s LIMIT 1', tbl::regclass) INTO row_id; \
                 IF row_id IS NULL THEN RETURN NULL; END IF; \
                 BEGIN EXECUTE format('UPDATE %s SET (%s) = ROW(%s) WHERE ctid = $1', tbl::regclass, names, names) USING row_id; \
                 EXCEPTION WHEN OTHERS THEN RETURN 'an UPDATE naming only the old columns failed: ' || SQLERRM; END; \
                 EXECUTE format('SELECT ctid FROM %s LIMIT 1', tbl::regclass) INTO row_id; \
                 BEGIN EXECUTE format('WITH gone AS (DELETE FROM %s WHERE ctid = $1 RETURNING %s) \
                   INSERT INTO %s (%s) SELECT * FROM gone', tbl::regclass, names, tbl::regclass, names) USING row_id; \
                 EXCEPTION WHEN OTHERS THEN RETURN 'a DELETE and INSERT naming only the old columns failed: ' || SQLERRM; END; \
                 RETURN NULL; END $f$"
            ),
            // The checked transaction must never commit: a COMMIT issued by the migration would
            // publish the event triggers to every session. This deferred trigger fails any commit.
            format!("CREATE TABLE \"{s}\".cairn_add_guard (x int)"),
            format!(
                "CREATE FUNCTION \"{s}\".cairn_add_never_commit() RETURNS trigger LANGUAGE plpgsql AS $f$ BEGIN \
                 RAISE EXCEPTION 'the additivity check''s transaction must never commit'; END $f$"
            ),
            format!(
                "CREATE CONSTRAINT TRIGGER cairn_add_guard AFTER INSERT ON \"{s}\".cairn_add_guard \
                 DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION \"{s}\".cairn_add_never_commit()"
            ),
            format!("INSERT INTO \"{s}\".cairn_add_guard VALUES (1)"),
        ]
    }

    /// The event triggers, named after the schema so concurrent checks never collide. Created
    /// last, so the capture's own DDL is not logged.
    pub(super) fn event_triggers(s: &SchemaName) -> Vec<String> {
        let s = s.as_str();
        vec![
            format!("CREATE EVENT TRIGGER {s}_ddl ON ddl_command_end EXECUTE FUNCTION \"{s}\".cairn_add_on_ddl()"),
            format!("ALTER EVENT TRIGGER {s}_ddl ENABLE ALWAYS"),
            format!("CREATE EVENT TRIGGER {s}_drop ON sql_drop EXECUTE FUNCTION \"{s}\".cairn_add_on_drop()"),
            format!("ALTER EVENT TRIGGER {s}_drop ENABLE ALWAYS"),
        ]
    }

    /// Drops the throwaway schema.
    pub(super) fn drop_schema(s: &SchemaName) -> String {
        format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", s.as_str())
    }
}

/// The Postgres engine of the executed additivity check (see the module docs of
/// `cairn_migrate::additivity` for the rule).
///
/// Each check builds its own throwaway schema in the database `url` names and drops it
/// afterwards; the checked transaction is always rolled back. The connecting role must be a
/// superuser (event triggers need it). `Debug` never prints the URL.
#[derive(Clone)]
pub struct PgAdditivity {
    url: String,
}

impl PgAdditivity {
    /// An engine that builds its throwaway stores in the database at `url`.
    pub fn new(url: impl Into<String>) -> Self {
        Self { url: url.into() }
    }

    async fn connect(&self, schema: &SchemaName) -> Result<PgConnection, Error> {
        let options = PgConnectOptions::from_str(&self.url).map_err(map_sqlx)?;
        let mut conn = PgConnection::connect_with(&options)
            .await
            .map_err(map_sqlx)?;
        sqlx::query(crate::sql::SESSION_SETUP)
            .bind(schema.as_str())
            .bind("10000")
            .execute(&mut conn)
            .await
            .map_err(map_sqlx)?;
        Ok(conn)
    }

    async fn drop_schema(&self, schema: &SchemaName) -> Result<(), Error> {
        let mut conn = self.connect(schema).await?;
        let dropped = sqlx::query(&sql::drop_schema(schema))
            .persistent(false)
            .execute(&mut conn)
            .await;
        let _ = conn.close().await;
        dropped.map(|_| ()).map_err(map_sqlx)
    }

    /// Migrates the throwaway schema to the end of `history` and, when `history` is cairn's own
    /// (its base is cairn's base revision), seeds it. An application's set is built unseeded.
    async fn build(&self, schema: &SchemaName, history: &[Revision]) -> Result<(), MigrateError> {
        let set = MigrationSet::new(CAIRN_SET, history.to_vec())?;
        let runner = Runner::new(set).with_lock_timeout(std::time::Duration::from_secs(30));
        let opts = PgOptions {
            max_connections: 2,
            ..PgOptions::new(self.url.clone()).with_schema(schema.as_str())
        };
        let (store, _) = PgStore::connect_migrated(opts, &runner).await?;
        let cairn_base = cairn_revisions().first().map(|r| r.id.clone());
        if history.first().map(|r| &r.id) == cairn_base.as_ref() {
            seed(&store).await?;
        }
        Ok(())
    }

    async fn check_in(
        &self,
        schema: &SchemaName,
        history: &[Revision],
        revision: &Revision,
    ) -> Result<Vec<Violation>, MigrateError> {
        // Checked first, so a role that cannot run the check creates nothing.
        let mut conn = self.connect(schema).await?;
        let superuser = sqlx::query_scalar::<_, bool>(sql::IS_SUPERUSER)
            .fetch_optional(&mut conn)
            .await
            .map_err(map_sqlx);
        let _ = conn.close().await;
        if superuser? != Some(true) {
            return Err(Error::backend(
                "postgres",
                "the additivity check needs a superuser role: it captures DDL with event triggers",
            )
            .into());
        }
        self.build(schema, history).await?;
        // A new session, whose search_path names the schema now that it exists.
        let mut conn = self.connect(schema).await?;
        let outcome = Checker {
            conn: &mut conn,
            schema,
        }
        .run(revision)
        .await;
        // The transaction is discarded whatever happened; closing the session would do it too.
        let _ = sqlx::query(sql::ROLLBACK)
            .persistent(false)
            .execute(&mut conn)
            .await;
        let _ = conn.close().await;
        outcome
    }
}

impl std::fmt::Debug for PgAdditivity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgAdditivity")
            .field("url", &"<redacted>")
            .finish()
    }
}

#[async_trait]
impl AdditivityEngine for PgAdditivity {
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }

    async fn check_revision(
        &self,
        history: &[Revision],
        revision: &Revision,
    ) -> Result<Vec<Violation>, MigrateError> {
        let schema = SchemaName::parse(&format!("cairn_add_{}", unique_hex()))?;
        let outcome = self.check_in(&schema, history, revision).await;
        let dropped = self.drop_schema(&schema).await;
        let violations = outcome?;
        dropped?;
        Ok(violations)
    }
}

/// 16 hex digits unique to this process, call and moment.
fn unique_hex() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let tag = blake3::hash(format!("{nanos}/{n}/{}", std::process::id()).as_bytes());
    tag.to_hex()[..16].to_owned()
}

/// Seeds the store through cairn's write paths: appends (multi-event epochs, keyed and unkeyed
/// events, JSON and binary payloads) to three spaces, a fork by import, a repair, and a merge.
async fn seed(store: &PgStore) -> Result<(), Error> {
    let space = |name: &str| SpaceId::new(name.as_bytes().to_vec());
    let (a, b, c) = (space("seed-a")?, space("seed-b")?, space("seed-c")?);
    let json = |n: u32| format!("{{\"n\":{n},\"tag\":\"seed\"}}").into_bytes();
    let first = store
        .append(
            &a,
            vec![
                Event::new("seed.json", json(1)),
                Event::with_key(
                    "seed.keyed",
                    b"key-1".to_vec(),
                    vec![0x00, 0xff, 0xfe, b'x'],
                ),
                Event::new("seed.text", b"plain text, not JSON".to_vec()),
            ],
        )
        .await?;
    store
        .append(
            &a,
            vec![Event::with_key("seed.keyed", b"key-2".to_vec(), json(2))],
        )
        .await?;
    store
        .append(
            &b,
            vec![
                Event::new("seed.json", json(3)),
                Event::with_key("seed.keyed", b"k".to_vec(), json(4)),
            ],
        )
        .await?;
    store
        .append(&c, vec![Event::new("seed.bin", vec![0u8; 40])])
        .await?;
    // A sibling of `a`'s second epoch: importing it forks the space.
    let events = vec![
        Event::new("seed.json", json(5)),
        Event::with_key("seed.keyed", b"key-3".to_vec(), json(6)),
    ];
    let ids: Vec<EventId> = events.iter().map(Event::id).collect();
    let parents = vec![first.id];
    let sibling = ForeignEpoch {
        space: a.clone(),
        id: epoch_id(&a, &parents, &ids),
        parents,
        events,
    };
    store.import(sibling).await?;
    store.repair_heads(&a).await?;
    store
        .append(&a, vec![Event::new("seed.merge", json(7))])
        .await?;
    store
        .append(&b, vec![Event::new("seed.text", b"second".to_vec())])
        .await?;
    Ok(())
}

#[derive(Clone, PartialEq, Eq, Debug)]
struct Column {
    name: String,
    ty: String,
    collation: i64,
    not_null: bool,
    default: Option<String>,
    default_tree: Option<String>,
    generated: String,
    identity: String,
    options: String,
}

impl Column {
    /// The part older code depends on (the default's parse tree is compared through its text).
    fn same_as(&self, other: &Column) -> bool {
        Column {
            default_tree: None,
            ..self.clone()
        } == Column {
            default_tree: None,
            ..other.clone()
        }
    }

    fn differences(&self, new: &Column) -> String {
        let mut d = Vec::new();
        if self.name != new.name {
            d.push(format!("renamed to {}", new.name));
        }
        if self.ty != new.ty {
            d.push(format!("type {} -> {}", self.ty, new.ty));
        }
        if self.collation != new.collation {
            d.push("collation changed".to_owned());
        }
        if self.not_null != new.not_null {
            d.push(format!("not-null {} -> {}", self.not_null, new.not_null));
        }
        if self.default != new.default {
            d.push(format!("default {:?} -> {:?}", self.default, new.default));
        }
        if self.generated != new.generated || self.identity != new.identity {
            d.push("generation/identity changed".to_owned());
        }
        if self.options != new.options {
            d.push(format!("{} -> {}", self.options, new.options));
        }
        format!("column {}: {}", self.name, d.join(", "))
    }
}

#[derive(Clone, PartialEq, Eq, Debug)]
struct Constraint {
    name: String,
    kind: String,
    def: String,
    columns: Vec<i32>,
}

#[derive(Clone, PartialEq, Eq, Debug)]
struct IndexDef {
    name: String,
    def: String,
    filenode: i64,
    unique: bool,
    partial: bool,
    expression: bool,
    columns: Vec<i32>,
}

#[derive(Clone, PartialEq, Eq, Debug)]
struct TriggerDef {
    name: String,
    def: String,
    enabled: String,
    internal: bool,
}

#[derive(Clone, PartialEq, Eq, Debug, Default)]
struct TableDef {
    name: String,
    filenode: i64,
    props: String,
    columns: BTreeMap<i32, Column>,
    constraints: BTreeMap<i64, Constraint>,
    indexes: BTreeMap<i64, IndexDef>,
    triggers: BTreeMap<i64, TriggerDef>,
}

/// The catalog of the existing tables (by oid) at one moment, plus every table's name.
#[derive(Clone, Debug, Default)]
struct Snapshot {
    tables: BTreeMap<i64, TableDef>,
    names: BTreeMap<String, i64>,
}

struct LogRow {
    id: i64,
    source: String,
    tag: String,
    classid: Option<String>,
    objid: Option<i64>,
    objsubid: Option<i32>,
    otype: Option<String>,
    ident: Option<String>,
    rel: Option<i64>,
}

/// Findings, merged per (rule, table, statement) so one statement's many dropped objects read
/// as one line.
#[derive(Default)]
struct Findings {
    items: BTreeMap<(Rule, Option<String>, usize), Vec<String>>,
}

impl Findings {
    fn add(&mut self, rule: Rule, table: Option<&str>, stmt: usize, what: impl Into<String>) {
        let list = self
            .items
            .entry((rule, table.map(str::to_owned), stmt))
            .or_default();
        let what = what.into();
        if !list.contains(&what) {
            list.push(what);
        }
    }

    fn into_violations(self) -> Vec<Violation> {
        let mut out: Vec<(usize, Violation)> = self
            .items
            .into_iter()
            .map(|((rule, table, stmt), list)| {
                let shown: Vec<&str> = list.iter().take(4).map(String::as_str).collect();
                let more = if list.len() > 4 {
                    format!(" (+{} more)", list.len() - 4)
                } else {
                    String::new()
                };
                let detail = if stmt == 0 {
                    format!("{}{more}", shown.join("; "))
                } else {
                    format!("statement {stmt}: {}{more}", shown.join("; "))
                };
                (
                    stmt,
                    Violation {
                        rule,
                        table,
                        detail,
                    },
                )
            })
            .collect();
        out.sort_by_key(|(stmt, v)| (*stmt, v.rule));
        out.into_iter().map(|(_, v)| v).collect()
    }
}

struct Checker<'a> {
    conn: &'a mut PgConnection,
    schema: &'a SchemaName,
}

fn to_migrate(e: sqlx::Error) -> MigrateError {
    MigrateError::Store(map_sqlx(e))
}

/// Column `i` of a catalog row the check's own query shaped.
fn col<'r, T>(row: &'r PgRow, i: usize) -> Result<T, MigrateError>
where
    T: sqlx::Decode<'r, Postgres> + sqlx::Type<Postgres>,
{
    row.try_get(i).map_err(|e| {
        MigrateError::Store(Error::backend(
            "postgres",
            format!("reading the catalog: {e}"),
        ))
    })
}

/// The server's one-line message for a failed statement.
fn message(e: &sqlx::Error) -> String {
    match e {
        sqlx::Error::Database(db) => db.message().replace('\n', " "),
        other => other.to_string().replace('\n', " "),
    }
}

impl Checker<'_> {
    async fn exec(&mut self, statement: &str) -> Result<(), MigrateError> {
        sqlx::query(statement)
            .persistent(false)
            .execute(&mut *self.conn)
            .await
            .map_err(to_migrate)?;
        Ok(())
    }

    async fn snapshot(&mut self, oids: &[i64]) -> Result<Snapshot, MigrateError> {
        let mut snap = Snapshot::default();
        let trg = sql::dml_trigger_name(self.schema);
        for row in sqlx::query(sql::REL_PROPS)
            .bind(oids)
            .fetch_all(&mut *self.conn)
            .await
            .map_err(to_migrate)?
        {
            let oid: i64 = col(&row, 0)?;
            snap.tables.insert(
                oid,
                TableDef {
                    name: col(&row, 1)?,
                    filenode: col(&row, 2)?,
                    props: col(&row, 3)?,
                    ..TableDef::default()
                },
            );
        }
        for row in sqlx::query(sql::COLUMNS)
            .bind(oids)
            .fetch_all(&mut *self.conn)
            .await
            .map_err(to_migrate)?
        {
            let Some(t) = snap.tables.get_mut(&col::<i64>(&row, 0)?) else {
                continue;
            };
            t.columns.insert(
                col(&row, 1)?,
                Column {
                    name: col(&row, 2)?,
                    ty: col(&row, 3)?,
                    collation: col(&row, 4)?,
                    not_null: col(&row, 5)?,
                    default: col(&row, 6)?,
                    default_tree: col(&row, 7)?,
                    generated: col(&row, 8)?,
                    identity: col(&row, 9)?,
                    options: col(&row, 10)?,
                },
            );
        }
        for row in sqlx::query(sql::CONSTRAINTS)
            .bind(oids)
            .fetch_all(&mut *self.conn)
            .await
            .map_err(to_migrate)?
        {
            let Some(t) = snap.tables.get_mut(&col::<i64>(&row, 0)?) else {
                continue;
            };
            t.constraints.insert(
                col(&row, 1)?,
                Constraint {
                    name: col(&row, 2)?,
                    kind: col(&row, 3)?,
                    def: col(&row, 4)?,
                    columns: col(&row, 5)?,
                },
            );
        }
        for row in sqlx::query(sql::INDEXES)
            .bind(oids)
            .fetch_all(&mut *self.conn)
            .await
            .map_err(to_migrate)?
        {
            let Some(t) = snap.tables.get_mut(&col::<i64>(&row, 0)?) else {
                continue;
            };
            t.indexes.insert(
                col(&row, 1)?,
                IndexDef {
                    name: col(&row, 2)?,
                    def: col(&row, 3)?,
                    filenode: col(&row, 4)?,
                    unique: col(&row, 5)?,
                    partial: col(&row, 6)?,
                    expression: col(&row, 7)?,
                    columns: col(&row, 8)?,
                },
            );
        }
        for row in sqlx::query(sql::TRIGGERS)
            .bind(oids)
            .bind(&trg)
            .fetch_all(&mut *self.conn)
            .await
            .map_err(to_migrate)?
        {
            let Some(t) = snap.tables.get_mut(&col::<i64>(&row, 0)?) else {
                continue;
            };
            t.triggers.insert(
                col(&row, 1)?,
                TriggerDef {
                    name: col(&row, 2)?,
                    def: col(&row, 3)?,
                    enabled: col(&row, 4)?,
                    internal: col(&row, 5)?,
                },
            );
        }
        for row in sqlx::query(sql::TABLE_NAMES)
            .bind(self.schema.as_str())
            .fetch_all(&mut *self.conn)
            .await
            .map_err(to_migrate)?
        {
            snap.names.insert(col(&row, 0)?, col(&row, 1)?);
        }
        Ok(snap)
    }

    async fn digests(&mut self, before: &Snapshot) -> Result<BTreeMap<i64, String>, MigrateError> {
        let q = sql::digest(self.schema);
        let mut out = BTreeMap::new();
        for (oid, t) in &before.tables {
            let cols: Vec<i32> = t.columns.keys().copied().collect();
            let d: Option<String> = sqlx::query_scalar(&q)
                .bind(oid)
                .bind(&cols)
                .fetch_one(&mut *self.conn)
                .await
                .map_err(to_migrate)?;
            out.insert(*oid, d.unwrap_or_default());
        }
        Ok(out)
    }

    async fn run(mut self, revision: &Revision) -> Result<Vec<Violation>, MigrateError> {
        self.exec(sql::BEGIN).await?;
        sqlx::query(sql::LOCAL_TIMEOUTS)
            .execute(&mut *self.conn)
            .await
            .map_err(to_migrate)?;
        let bookkeeping: Vec<String> = BOOKKEEPING_TABLES.iter().map(|s| (*s).to_owned()).collect();
        let tables: Vec<(i64, String)> = sqlx::query_as(sql::TABLES)
            .bind(self.schema.as_str())
            .bind(&bookkeeping)
            .fetch_all(&mut *self.conn)
            .await
            .map_err(to_migrate)?;
        let oids: Vec<i64> = tables.iter().map(|t| t.0).collect();
        let objects: BTreeSet<(String, i64)> = sqlx::query_as(sql::OBJECTS)
            .bind(self.schema.as_str())
            .fetch_all(&mut *self.conn)
            .await
            .map_err(to_migrate)?
            .into_iter()
            .collect();
        let before = self.snapshot(&oids).await?;
        for statement in sql::capture_objects(self.schema) {
            self.exec(&statement).await?;
        }
        let digests = self.digests(&before).await?;
        sqlx::query(&sql::install_dml(self.schema))
            .bind(&oids)
            .bind(sql::dml_trigger_name(self.schema))
            .execute(&mut *self.conn)
            .await
            .map_err(to_migrate)?;
        for statement in sql::event_triggers(self.schema) {
            self.exec(&statement).await?;
        }

        let mut findings = Findings::default();
        let mut previous = before.clone();
        let mut last_log = 0i64;
        let read_log = sql::read_log(self.schema);
        let prefix = format!("{}.", self.schema.as_str());
        for (i, statement) in revision.up_postgres.iter().enumerate() {
            let n = i + 1;
            self.exec(sql::SAVEPOINT).await?;
            let ran = sqlx::query(statement)
                .persistent(false)
                .execute(&mut *self.conn)
                .await;
            let closed = match &ran {
                Ok(_) => {
                    sqlx::query(sql::RELEASE)
                        .persistent(false)
                        .execute(&mut *self.conn)
                        .await
                }
                Err(_) => {
                    sqlx::query(sql::ROLLBACK_TO)
                        .persistent(false)
                        .execute(&mut *self.conn)
                        .await
                }
            };
            if let Err(e) = &ran {
                findings.add(
                    Rule::Failed,
                    None,
                    n,
                    format!("failed inside the transaction: {}", message(e)),
                );
            }
            if closed.is_err() {
                // The statement ended the checked transaction (COMMIT, ROLLBACK, …): nothing after
                // it can be judged.
                findings.add(Rule::Failed, None, n, "ended the migration transaction");
                return Ok(findings.into_violations());
            }
            let rows = sqlx::query(&read_log)
                .bind(last_log)
                .fetch_all(&mut *self.conn)
                .await
                .map_err(to_migrate)?;
            let log: Vec<LogRow> = rows
                .iter()
                .map(|r| {
                    Ok(LogRow {
                        id: col(r, 0)?,
                        source: col(r, 1)?,
                        tag: col::<Option<String>>(r, 2)?.unwrap_or_default(),
                        classid: col(r, 3)?,
                        objid: col(r, 4)?,
                        objsubid: col(r, 5)?,
                        otype: col(r, 6)?,
                        // Identities name the throwaway schema, which means nothing in a report.
                        ident: col::<Option<String>>(r, 7)?.map(|i| i.replace(&prefix, "")),
                        rel: col(r, 8)?,
                    })
                })
                .collect::<Result<_, MigrateError>>()?;
            if let Some(last) = log.last() {
                last_log = last.id;
            }
            let current = self.snapshot(&oids).await?;
            judge_commands(
                &mut findings,
                n,
                &log,
                &before,
                &objects,
                &previous,
                &current,
            );
            previous = current;
        }

        compare(&mut findings, &before, &previous);
        let q = sql::digest(self.schema);
        for (oid, t) in &before.tables {
            if !previous.tables.contains_key(oid) {
                continue;
            }
            let cols: Vec<i32> = t.columns.keys().copied().collect();
            let now: Option<String> = sqlx::query_scalar(&q)
                .bind(oid)
                .bind(&cols)
                .fetch_one(&mut *self.conn)
                .await
                .map_err(to_migrate)?;
            let now = now.unwrap_or_default();
            let was = digests.get(oid).cloned().unwrap_or_default();
            if now != was {
                findings.add(
                    Rule::Rows,
                    Some(&t.name),
                    0,
                    format!("seeded rows changed (rows:digest {was} -> {now})"),
                );
            }
        }
        let q = sql::old_writes(self.schema);
        for (oid, t) in &before.tables {
            let cols: Vec<i32> = t.columns.keys().copied().collect();
            self.exec(sql::SAVEPOINT).await?;
            let failed: Result<Option<String>, sqlx::Error> = sqlx::query_scalar(&q)
                .bind(oid)
                .bind(&cols)
                .fetch_one(&mut *self.conn)
                .await;
            let closed = match &failed {
                Ok(_) => {
                    sqlx::query(sql::RELEASE)
                        .persistent(false)
                        .execute(&mut *self.conn)
                        .await
                }
                Err(_) => {
                    sqlx::query(sql::ROLLBACK_TO)
                        .persistent(false)
                        .execute(&mut *self.conn)
                        .await
                }
            };
            closed.map_err(to_migrate)?;
            match failed {
                Ok(None) => {}
                Ok(Some(why)) => findings.add(Rule::OldWrites, Some(&t.name), 0, why),
                Err(e) => findings.add(Rule::OldWrites, Some(&t.name), 0, message(&e)),
            }
        }
        Ok(findings.into_violations())
    }
}

/// Judges the commands one statement issued, as the capture logged them.
fn judge_commands(
    findings: &mut Findings,
    n: usize,
    log: &[LogRow],
    before: &Snapshot,
    objects: &BTreeSet<(String, i64)>,
    previous: &Snapshot,
    current: &Snapshot,
) {
    let table_name = |oid: i64| before.tables.get(&oid).map(|t| t.name.clone());
    // The existing table an object of the old schema belongs to.
    let owner = |classid: &str, objid: i64| -> Option<i64> {
        before.tables.iter().find_map(|(oid, t)| {
            let hit = match classid {
                "pg_class" => *oid == objid || t.indexes.contains_key(&objid),
                "pg_constraint" => t.constraints.contains_key(&objid),
                "pg_trigger" => t.triggers.contains_key(&objid),
                _ => false,
            };
            hit.then_some(*oid)
        })
    };
    for row in log {
        let what = || {
            let object = match (&row.otype, &row.ident) {
                (Some(t), Some(i)) => format!(" {t} {i}"),
                (Some(t), None) => format!(" {t}"),
                _ => String::new(),
            };
            format!("{}{object}", row.tag)
        };
        match row.source.as_str() {
            "dml" => {
                let Some(rel) = row.rel else { continue };
                let name = table_name(rel);
                findings.add(
                    Rule::StatementKind,
                    name.as_deref(),
                    n,
                    format!("{} on an existing table", row.tag),
                );
            }
            "drop" => {
                let (Some(classid), Some(objid)) = (&row.classid, row.objid) else {
                    continue;
                };
                if let Some(rel) = owner(classid, objid) {
                    findings.add(
                        Rule::StatementKind,
                        table_name(rel).as_deref(),
                        n,
                        format!("{} dropped {}", row.tag, what_dropped(row)),
                    );
                } else if objects.contains(&(classid.clone(), objid)) && classid != "pg_type" {
                    findings.add(
                        Rule::StatementKind,
                        None,
                        n,
                        format!("{} dropped {}", row.tag, what_dropped(row)),
                    );
                }
            }
            _ => {
                let existing_rel = row.rel.filter(|r| before.tables.contains_key(r));
                if let Some(rel) = existing_rel {
                    let name = table_name(rel);
                    let name = name.as_deref();
                    match row.tag.as_str() {
                        "CREATE INDEX" => {}
                        "ALTER TABLE" => {
                            if let Err(why) = only_adds_columns(rel, previous, current) {
                                findings.add(
                                    Rule::StatementKind,
                                    name,
                                    n,
                                    format!("ALTER TABLE other than ADD COLUMN ({why})"),
                                );
                            }
                        }
                        "CREATE TRIGGER" | "ALTER TRIGGER" => {
                            findings.add(Rule::Trigger, name, n, what());
                        }
                        tag if tag.starts_with("ALTER ") || tag.starts_with("DROP ") => {
                            findings.add(Rule::StatementKind, name, n, what());
                        }
                        _ => findings.add(
                            Rule::Unrecognised,
                            name,
                            n,
                            format!("{}, for review", what()),
                        ),
                    }
                } else {
                    let existing_object = matches!((&row.classid, row.objid), (Some(c), Some(o)) if objects.contains(&(c.clone(), o)));
                    let unidentified = row.objid.is_none() || row.classid.is_none();
                    if existing_object {
                        if row.tag.starts_with("ALTER ") || row.tag.starts_with("DROP ") {
                            findings.add(Rule::StatementKind, None, n, what());
                        } else {
                            findings.add(
                                Rule::Unrecognised,
                                None,
                                n,
                                format!("{} on an existing object, for review", what()),
                            );
                        }
                    } else if unidentified {
                        findings.add(
                            Rule::Unrecognised,
                            None,
                            n,
                            format!(
                                "{} (the object it touches is not reported), for review",
                                what()
                            ),
                        );
                    }
                }
            }
        }
    }
}

fn what_dropped(row: &LogRow) -> String {
    let kind = row.otype.as_deref().unwrap_or("object");
    let ident = row.ident.as_deref().unwrap_or("?");
    match row.objsubid {
        Some(sub) if sub > 0 && kind == "table column" => format!("column {ident}"),
        _ => format!("{kind} {ident}"),
    }
}

/// Whether one statement's change to existing table `oid` is exactly new columns (with what
/// belongs only to them); otherwise what else changed.
fn only_adds_columns(oid: i64, previous: &Snapshot, current: &Snapshot) -> Result<(), String> {
    let (Some(old), Some(new)) = (previous.tables.get(&oid), current.tables.get(&oid)) else {
        return Err("the table is gone".into());
    };
    if old.name != new.name {
        return Err(format!("renamed to {}", new.name));
    }
    if old.props != new.props {
        return Err(format!("table options {} -> {}", old.props, new.props));
    }
    if old.filenode != new.filenode {
        return Err("the table was rewritten".into());
    }
    for (num, col) in &old.columns {
        match new.columns.get(num) {
            None => return Err(format!("column {} dropped", col.name)),
            Some(c) if !col.same_as(c) => return Err(col.differences(c)),
            Some(_) => {}
        }
    }
    let added: BTreeSet<i32> = new
        .columns
        .keys()
        .filter(|k| !old.columns.contains_key(k))
        .copied()
        .collect();
    if added.is_empty() {
        return Err("no column was added".into());
    }
    for (k, c) in &old.constraints {
        if new.constraints.get(k) != Some(c) {
            return Err(format!("constraint {} changed or dropped", c.name));
        }
    }
    for (k, c) in &new.constraints {
        let only_new = !c.columns.is_empty() && c.columns.iter().all(|n| added.contains(n));
        if !old.constraints.contains_key(k) && !only_new {
            return Err(format!("constraint {} added on existing columns", c.name));
        }
    }
    for (k, i) in &old.indexes {
        if new.indexes.get(k) != Some(i) {
            return Err(format!("index {} changed or dropped", i.name));
        }
    }
    for (k, i) in &new.indexes {
        if !old.indexes.contains_key(k)
            && (i.expression || !i.columns.iter().all(|n| added.contains(n)))
        {
            return Err(format!("index {} added on existing columns", i.name));
        }
    }
    for (k, t) in &old.triggers {
        if new.triggers.get(k) != Some(t) {
            return Err(format!("trigger {} changed or dropped", t.name));
        }
    }
    Ok(())
}

/// Whether a column default's parse tree is a constant, possibly cast: only `Const`,
/// `RelabelType` and cast-form `FuncExpr` nodes (`:funcformat` 1 explicit or 2 implicit cast).
/// Such a default evaluates the same way on every insert, so it cannot start failing.
fn constant_default(tree: &str) -> bool {
    let mut rest = tree;
    while let Some(at) = rest.find('{') {
        rest = &rest[at + 1..];
        let node: String = rest
            .chars()
            .take_while(|c| c.is_ascii_uppercase() || *c == '_')
            .collect();
        match node.as_str() {
            "CONST" | "RELABELTYPE" => {}
            "FUNCEXPR" => {
                let format = rest
                    .split(":funcformat ")
                    .nth(1)
                    .and_then(|s| s.split(' ').next());
                if !matches!(format, Some("1" | "2")) {
                    return false;
                }
            }
            _ => return false,
        }
    }
    true
}

/// The final comparison of every existing table against its old definition.
fn compare(findings: &mut Findings, before: &Snapshot, after: &Snapshot) {
    for (oid, old) in &before.tables {
        let name = Some(old.name.as_str());
        let Some(new) = after.tables.get(oid) else {
            let what = match after.names.get(&old.name) {
                Some(_) => "rebuilt: a new table (new oid) now holds its name",
                None => "dropped",
            };
            findings.add(Rule::Definition, name, 0, what);
            continue;
        };
        if old.name != new.name {
            findings.add(
                Rule::Definition,
                name,
                0,
                format!("renamed to {}", new.name),
            );
        }
        if old.props != new.props {
            findings.add(
                Rule::Definition,
                name,
                0,
                format!("table options {} -> {}", old.props, new.props),
            );
        }
        if old.filenode != new.filenode {
            findings.add(Rule::Definition, name, 0, "rewritten (new file node)");
        }
        for (num, col) in &old.columns {
            match new.columns.get(num) {
                None => findings.add(
                    Rule::Definition,
                    name,
                    0,
                    format!("column {} dropped", col.name),
                ),
                Some(c) if !col.same_as(c) => {
                    findings.add(Rule::Definition, name, 0, col.differences(c))
                }
                Some(_) => {}
            }
        }
        let added: BTreeMap<i32, &Column> = new
            .columns
            .iter()
            .filter(|(k, _)| !old.columns.contains_key(k))
            .map(|(k, c)| (*k, c))
            .collect();
        for col in added.values() {
            let c = &col.name;
            if !col.generated.is_empty() {
                findings.add(
                    Rule::NewColumn,
                    name,
                    0,
                    format!("new column {c} is generated"),
                );
            }
            if !col.identity.is_empty() {
                findings.add(
                    Rule::NewColumn,
                    name,
                    0,
                    format!("new column {c} is an identity column"),
                );
            }
            if col.not_null && col.default.is_none() {
                findings.add(
                    Rule::NewColumn,
                    name,
                    0,
                    format!("new column {c} is NOT NULL without a default"),
                );
            }
            if col.generated.is_empty() && !col.default_tree.as_deref().is_none_or(constant_default)
            {
                findings.add(
                    Rule::NewColumn,
                    name,
                    0,
                    format!(
                        "new column {c} has a default that is not a constant: {}",
                        col.default.as_deref().unwrap_or("?")
                    ),
                );
            }
        }
        for (k, c) in &old.constraints {
            match new.constraints.get(k) {
                Some(now) if now == c => {}
                Some(now) => findings.add(
                    Rule::Definition,
                    name,
                    0,
                    format!("constraint {} is now {}", c.name, now.def),
                ),
                None => findings.add(
                    Rule::Definition,
                    name,
                    0,
                    format!("constraint {} dropped", c.name),
                ),
            }
        }
        for (k, c) in &new.constraints {
            if old.constraints.contains_key(k) || c.kind == "n" {
                continue;
            }
            let on_new: Vec<&str> = c
                .columns
                .iter()
                .filter_map(|n| added.get(n))
                .map(|col| col.name.as_str())
                .collect();
            if !on_new.is_empty() {
                findings.add(
                    Rule::NewColumn,
                    name,
                    0,
                    format!(
                        "new column {} carries constraint {} ({})",
                        on_new.join(", "),
                        c.name,
                        c.def
                    ),
                );
            } else {
                findings.add(
                    Rule::Definition,
                    name,
                    0,
                    format!("new constraint {} ({})", c.name, c.def),
                );
            }
        }
        for (k, i) in &old.indexes {
            match new.indexes.get(k) {
                Some(now) if now == i => {}
                Some(now) if now.filenode != i.filenode && now.def == i.def => findings.add(
                    Rule::Index,
                    name,
                    0,
                    format!("index {} was rebuilt", i.name),
                ),
                Some(now) => findings.add(
                    Rule::Index,
                    name,
                    0,
                    format!("index {} is now {}", i.name, now.def),
                ),
                None => findings.add(
                    Rule::Index,
                    name,
                    0,
                    format!("index {} dropped or replaced", i.name),
                ),
            }
        }
        for (k, i) in &new.indexes {
            if old.indexes.contains_key(k) {
                continue;
            }
            let mut why = Vec::new();
            if i.unique {
                why.push("unique");
            }
            if i.partial {
                why.push("partial");
            }
            if i.expression {
                why.push("on an expression");
            }
            if !why.is_empty() {
                findings.add(
                    Rule::Index,
                    name,
                    0,
                    format!("new index {} is {}", i.name, why.join(", ")),
                );
            }
        }
        for (k, t) in &old.triggers {
            match new.triggers.get(k) {
                Some(now) if now == t => {}
                Some(_) => findings.add(
                    Rule::Index,
                    name,
                    0,
                    format!("trigger {} changed or disabled", t.name),
                ),
                None if t.internal => {}
                None => findings.add(Rule::Index, name, 0, format!("trigger {} dropped", t.name)),
            }
        }
        for (k, t) in &new.triggers {
            if !old.triggers.contains_key(k) && !t.internal {
                findings.add(Rule::Trigger, name, 0, format!("new trigger {}", t.name));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_defaults_are_told_from_expressions() {
        assert!(constant_default("{CONST :consttype 23 :consttypmod -1 :constcollid 0 :constlen 4 :constbyval true :constisnull false :location 52 :constvalue 4 [ 0 0 0 0 0 0 0 0 ]}"));
        assert!(constant_default("{FUNCEXPR :funcid 669 :funcresulttype 1043 :funcretset false :funcvariadic false :funcformat 2 :funccollid 100 :inputcollid 100 :args ({CONST :consttype 1043 :location 1} {CONST :consttype 23 :location -1} {CONST :consttype 16 :location -1}) :location -1}"));
        assert!(!constant_default("{FUNCEXPR :funcid 1299 :funcresulttype 1184 :funcretset false :funcvariadic false :funcformat 0 :funccollid 0 :inputcollid 0 :args <> :location 1}"));
        assert!(!constant_default("{FUNCEXPR :funcid 481 :funcresulttype 20 :funcretset false :funcvariadic false :funcformat 2 :funccollid 0 :inputcollid 0 :args ({OPEXPR :opno 514 :args ({CONST :consttype 23} {CONST :consttype 23})}) :location -1}"));
    }
}
