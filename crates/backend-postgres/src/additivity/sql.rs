//! The statements of the check. Identifiers spliced in are only the validated throwaway
//! [`SchemaName`] (and names derived from it); table names from the catalog are quoted
//! server-side by `format('%s', oid::regclass)` / `quote_ident`.

use crate::config::SchemaName;

/// Whether the session may create event triggers.
pub(super) const IS_SUPERUSER: &str = "SELECT rolsuper FROM pg_roles WHERE rolname = current_user";

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

/// The SQL condition "reloption `o` (`name=value`) is a storage parameter" (see [`REL_PROPS`]).
macro_rules! storage_option {
    () => {
        "(pg_catalog.regexp_replace(pg_catalog.split_part(o, '=', 1), '^toast\\.', '') \
          IN ('fillfactor', 'toast_tuple_target', 'parallel_workers', 'vacuum_index_cleanup', \
              'vacuum_truncate', 'log_autovacuum_min_duration') \
          OR pg_catalog.regexp_replace(pg_catalog.split_part(o, '=', 1), '^toast\\.', '') \
              LIKE 'autovacuum\\_%')"
    };
}
/// Table-level properties of the tables `$1`: oid, name, file node, the properties a query
/// can see (`props`), and the storage parameters apart (`storage`). A storage parameter —
/// `fillfactor`, `toast_tuple_target`, `parallel_workers`, the `autovacuum_*`, `vacuum_*` and
/// `log_autovacuum_min_duration` settings and their `toast.` forms — changes how rows are laid
/// out, vacuumed or scanned in parallel, never what a statement returns or refuses, so older
/// builds tolerate any change of it; every other option (e.g. `user_catalog_table`) stays in
/// `props`, with the owner, the parents a table inherits from and its partition bound (so that
/// an `ALTER TABLE` that also sets a storage parameter cannot hide such a change).
pub(super) const REL_PROPS: &str = concat!(
    "SELECT c.oid::int8, c.relname::text, c.relfilenode::int8, \
    concat_ws(' ', 'kind=' || c.relkind::text, 'persistence=' || c.relpersistence::text, \
      'replident=' || c.relreplident::text, 'rls=' || c.relrowsecurity, 'forcerls=' || c.relforcerowsecurity, \
      'am=' || c.relam, 'tablespace=' || c.reltablespace, \
      'options=' || array(SELECT o FROM unnest(c.reloptions) AS o WHERE NOT ",
    storage_option!(),
    ")::text, \
      'acl=' || coalesce(c.relacl::text, '-'), 'owner=' || c.relowner::int8, \
      'inherits=' || array(SELECT i.inhparent::int8 FROM pg_inherits i WHERE i.inhrelid = c.oid \
        ORDER BY i.inhseqno)::text, \
      'bound=' || coalesce(pg_get_expr(c.relpartbound, c.oid), '-')), \
    array(SELECT o FROM unnest(c.reloptions) AS o WHERE ",
    storage_option!(),
    ")::text \
    FROM pg_class c WHERE c.oid::int8 = ANY($1)"
);

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
pub(super) const INDEXES: &str = "SELECT i.indrelid::int8, i.indexrelid::int8, c.relname::text, \
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
        "SELECT id, source, tag, classid, objid, objsubid, otype, ident, rel, schema_name \
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

/// The old-column writes on table `$1` naming the columns `$2` (those an older writer may
/// write); NULL when they succeed.
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
             classid text, objid int8, objsubid int4, otype text, ident text, rel int8, schema_name text)"
        ),
        format!(
            "CREATE FUNCTION \"{s}\".cairn_add_on_ddl() RETURNS event_trigger LANGUAGE plpgsql AS $f$ BEGIN \
             INSERT INTO \"{s}\".cairn_add_log (source, tag, classid, objid, objsubid, otype, ident, schema_name, rel) \
             SELECT 'ddl', c.command_tag, c.classid::regclass::text, c.objid::int8, c.objsubid, c.object_type, \
             c.object_identity, c.schema_name, (CASE c.classid \
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
             INSERT INTO \"{s}\".cairn_add_log (source, tag, classid, objid, objsubid, otype, ident, schema_name) \
             SELECT 'drop', tg_tag, d.classid::regclass::text, d.objid::int8, d.objsubid, d.object_type, \
             d.object_identity, d.schema_name FROM pg_event_trigger_dropped_objects() d; END $f$"
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
        // An older writer names only the columns it may write: the caller passes the old
        // columns that are neither generated nor identity-always (`cols` may be empty). The
        // delete and re-insert gives back the row's identity-always values too (`OVERRIDING
        // SYSTEM VALUE`), in the same statement, so a row that other rows reference keeps its
        // key and the references hold (an older writer's fresh row takes a fresh key).
        format!(
            "CREATE FUNCTION \"{s}\".cairn_add_old_writes(tbl oid, cols int4[]) RETURNS text LANGUAGE plpgsql AS $f$ \
             DECLARE names text; kept text; row_id tid; part oid; BEGIN \
             IF NOT EXISTS (SELECT 1 FROM pg_class WHERE oid = tbl) THEN RETURN NULL; END IF; \
             names := \"{s}\".cairn_add_columns(tbl, cols); \
             IF names IS NULL AND cardinality(cols) > 0 THEN RETURN 'an old column is gone'; END IF; \
             SELECT concat_ws(', ', names, string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum)) INTO kept \
               FROM pg_attribute a WHERE a.attrelid = tbl AND a.attnum > 0 AND NOT a.attisdropped \
               AND a.attidentity = 'a'; \
             EXECUTE format('SELECT ctid, tableoid FROM %s LIMIT 1', tbl::regclass) INTO row_id, part; \
             IF row_id IS NULL THEN RETURN NULL; END IF; \
             IF names IS NOT NULL THEN \
               BEGIN EXECUTE format('UPDATE %s SET (%s) = ROW(%s) WHERE ctid = $1 AND tableoid = $2', \
                 tbl::regclass, names, names) USING row_id, part; \
               EXCEPTION WHEN OTHERS THEN RETURN 'an UPDATE naming only the old columns failed: ' || SQLERRM; END; \
             END IF; \
             EXECUTE format('SELECT ctid, tableoid FROM %s LIMIT 1', tbl::regclass) INTO row_id, part; \
             BEGIN IF kept = '' THEN \
               EXECUTE format('DELETE FROM %s WHERE ctid = $1 AND tableoid = $2', tbl::regclass) USING row_id, part; \
               EXECUTE format('INSERT INTO %s DEFAULT VALUES', tbl::regclass); \
             ELSE \
               EXECUTE format('WITH gone AS (DELETE FROM %s WHERE ctid = $1 AND tableoid = $2 RETURNING %s) \
                 INSERT INTO %s (%s) OVERRIDING SYSTEM VALUE SELECT * FROM gone', \
                 tbl::regclass, kept, tbl::regclass, kept) USING row_id, part; \
             END IF; \
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

/// The columns of table `$1` as the row synthesizer needs them, in column order: name, type
/// (a domain's base type), NOT NULL, has a default (an identity counts), whether no value may
/// be given (generated, or `GENERATED ALWAYS AS IDENTITY`), the enum's labels, the CHECK
/// constraints on the column (the table's and its domain's), and the partition bounds it is a
/// key of (a partitioned table's: every partition's bound; a partition's: its own).
pub(super) const SEED_COLUMNS: &str = "SELECT a.attname::text, \
    CASE WHEN t.typtype = 'd' THEN format_type(t.typbasetype, t.typtypmod) ELSE format_type(a.atttypid, a.atttypmod) END, \
    a.attnotnull, a.atthasdef OR a.attidentity <> '', a.attgenerated <> '' OR a.attidentity = 'a', \
    array(SELECT e.enumlabel::text FROM pg_enum e \
      WHERE e.enumtypid = CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE a.atttypid END ORDER BY e.enumsortorder), \
    array(SELECT pg_get_constraintdef(k.oid) FROM pg_constraint k WHERE k.contype = 'c' \
      AND ((k.conrelid = a.attrelid AND a.attnum = ANY(k.conkey)) OR k.contypid = a.atttypid) ORDER BY k.conname), \
    array(SELECT pg_get_expr(ch.relpartbound, ch.oid) FROM pg_partitioned_table p \
      JOIN pg_inherits i ON i.inhparent = p.partrelid JOIN pg_class ch ON ch.oid = i.inhrelid \
      WHERE p.partrelid = a.attrelid AND a.attnum = ANY(p.partattrs::int2[]) ORDER BY ch.oid) \
    || array(SELECT pg_get_expr(c.relpartbound, c.oid) FROM pg_class c \
      JOIN pg_inherits i ON i.inhrelid = c.oid JOIN pg_partitioned_table p ON p.partrelid = i.inhparent \
      JOIN pg_attribute pa ON pa.attrelid = p.partrelid AND pa.attname = a.attname \
      WHERE c.oid = a.attrelid AND c.relispartition AND pa.attnum = ANY(p.partattrs::int2[])) \
    FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid \
    WHERE a.attrelid = $1::int8::oid AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum";

/// A session-local helper that gives table `tbl` one row when it has none: the columns `cols`
/// take the values `vals` in their types' input syntax (through `json_populate_record`, which
/// runs each type's input function). Returns whether it inserted. Lives in `pg_temp`, so it
/// vanishes with the session and is never part of the checked schema.
pub(super) const CREATE_SEED_ROW: &str = "CREATE FUNCTION pg_temp.cairn_add_seed_row(tbl oid, cols text[], vals text[]) \
    RETURNS boolean LANGUAGE plpgsql AS $f$ DECLARE names text; has boolean; BEGIN \
    EXECUTE format('SELECT EXISTS (SELECT 1 FROM %s)', tbl::regclass) INTO has; \
    IF has THEN RETURN false; END IF; \
    IF cardinality(cols) = 0 THEN EXECUTE format('INSERT INTO %s DEFAULT VALUES', tbl::regclass); \
    ELSE \
      SELECT string_agg(quote_ident(c), ', ' ORDER BY o) INTO names FROM unnest(cols) WITH ORDINALITY AS k(c, o); \
      EXECUTE format('INSERT INTO %s (%s) SELECT %s FROM json_populate_record(NULL::%s, $1)', \
        tbl::regclass, names, names, tbl::regclass) USING json_object(cols, vals); \
    END IF; RETURN true; END $f$";

/// Calls [`CREATE_SEED_ROW`]'s helper: `$1` table oid, `$2` column names, `$3` values.
pub(super) const SEED_ROW: &str = "SELECT pg_temp.cairn_add_seed_row($1::int8::oid, $2, $3)";

/// Throwaway schemas of earlier checks: `$1` a `LIKE` pattern.
pub(super) const SCRATCH_SCHEMAS: &str =
    "SELECT nspname::text FROM pg_namespace WHERE nspname LIKE $1 ORDER BY nspname";

/// Takes the session lock `$1` (a check's claim on its schema; never contended: the schema's
/// name is new).
pub(super) const CLAIM: &str = "SELECT pg_advisory_lock($1)";

/// Tries the session lock `$1`: true when no live check holds it.
pub(super) const TRY_CLAIM: &str = "SELECT pg_try_advisory_lock($1)";

/// Releases the session lock `$1`.
pub(super) const UNCLAIM: &str = "SELECT pg_advisory_unlock($1)";

/// Ends every other session named `$1` (an abandoned check's), so its locks go with it.
pub(super) const END_SESSIONS: &str =
    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
    WHERE application_name = $1 AND pid <> pg_backend_pid()";

/// Relations outside the throwaway schema `$1` that this session holds a lock on, with the
/// lock mode: whatever a statement read, wrote or altered there (a statement that touches a
/// relation an earlier one touched shows as a new mode). The server's own schemas are left out
/// (every query locks catalogs).
pub(super) const OUTSIDE_LOCKS: &str = "SELECT DISTINCT format('%s', l.relation::regclass), l.mode::text \
    FROM pg_locks l JOIN pg_class c ON c.oid = l.relation JOIN pg_namespace n ON n.oid = c.relnamespace \
    WHERE l.pid = pg_backend_pid() AND l.locktype = 'relation' \
    AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
    AND n.nspname <> $1 AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast') \
    AND n.nspname NOT LIKE 'pg\\_temp\\_%' AND n.nspname NOT LIKE 'pg\\_toast\\_temp\\_%' ORDER BY 1, 2";

/// The up-then-down check's view of schema `$1`, tables `$2` left out (the bookkeeping):
/// every object as `(kind, table, name, definition)` — tables (their options), columns (type,
/// collation, NOT NULL, default, generation, identity), constraints, indexes and triggers by
/// their definitions, views and sequences by name. Compared before and after up then down;
/// oids and column positions are left out (a column dropped and added back is the same
/// column if its definition is).
pub(super) const DOWN_OBJECTS: &str = "WITH ns AS (SELECT oid FROM pg_namespace WHERE nspname = $1), \
    rels AS (SELECT c.oid, c.relname::text AS name, c.relkind::text AS kind FROM pg_class c \
      WHERE c.relnamespace = (SELECT oid FROM ns) AND NOT (c.relname = ANY($2)) \
      AND c.relkind IN ('r', 'p', 'v', 'm', 'S')) \
    SELECT CASE r.kind WHEN 'S' THEN 'sequence' WHEN 'v' THEN 'view' WHEN 'm' THEN 'view' ELSE 'table' END, \
      r.name, r.name, coalesce(c.reloptions::text, '') FROM rels r JOIN pg_class c ON c.oid = r.oid \
    UNION ALL SELECT 'column', r.name, a.attname::text, concat_ws(' ', format_type(a.atttypid, a.atttypmod), \
      'collation=' || a.attcollation, 'notnull=' || a.attnotnull, 'default=' || coalesce(pg_get_expr(d.adbin, d.adrelid), '-'), \
      'generated=' || a.attgenerated::text, 'identity=' || a.attidentity::text) \
      FROM rels r JOIN pg_attribute a ON a.attrelid = r.oid \
      LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum \
      WHERE r.kind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped \
    UNION ALL SELECT 'constraint', r.name, k.conname::text, pg_get_constraintdef(k.oid) \
      FROM rels r JOIN pg_constraint k ON k.conrelid = r.oid \
    UNION ALL SELECT 'index', r.name, ic.relname::text, pg_get_indexdef(i.indexrelid) \
      FROM rels r JOIN pg_index i ON i.indrelid = r.oid JOIN pg_class ic ON ic.oid = i.indexrelid \
    UNION ALL SELECT 'trigger', r.name, t.tgname::text, pg_get_triggerdef(t.oid) \
      FROM rels r JOIN pg_trigger t ON t.tgrelid = r.oid WHERE NOT t.tgisinternal";

/// The ordinary columns of table `$2` in schema `$1`, in position order.
pub(super) const DOWN_COLUMNS: &str = "SELECT a.attname::text FROM pg_attribute a \
    JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace \
    WHERE n.nspname = $1 AND c.relname = $2 AND a.attnum > 0 AND NOT a.attisdropped \
    AND a.attgenerated = '' ORDER BY a.attnum";

/// Every row of `table` (in `schema`) over `cols` as JSON text, sorted: compared before and
/// after up then down. Identifiers come from the throwaway store's own catalog, quoted.
pub(super) fn down_rows(schema: &SchemaName, table: &str, cols: &[String]) -> String {
    let q = |i: &str| format!("\"{}\"", i.replace('"', "\"\""));
    let list: Vec<String> = cols.iter().map(|c| q(c)).collect();
    format!(
        "SELECT row_to_json(t)::text AS r FROM (SELECT {} FROM {}.{}) t ORDER BY 1",
        list.join(", "),
        q(schema.as_str()),
        q(table)
    )
}
