//! The fleet registry: which builds have the store open, and what each knows.
//!
//! Every open of a store through the facade records an entry per migration set (table
//! `cairn_fleet`, cairn revision `0004_fleet`): the build id, the newest revision of the set
//! that build knows, its host and process, when it started and when it last heartbeated. A
//! heartbeat refreshes `last_seen` while the store is open; an entry not refreshed within the
//! expiry window is not *live*, and neither is one whose `last_seen` is more than the window
//! ahead of the reader's clock (a heartbeat from a clock that ran ahead, or a row written by
//! hand: it would otherwise stay live until that time came, blocking every contract
//! revision). The runner reads the live entries under the migration lock before it applies a
//! *contract* revision ([`MigrationSet::with_contract`]) and refuses when a live build other
//! than the caller lacks it ([`contract_blockers`]).
//!
//! The statements are defined once per [`Dialect`] here ([`FleetSql`]); each backend runs
//! them. A store whose cairn set predates `0004_fleet` has no registry: it reads as an empty
//! fleet, and builds that predate the registry never appear in it.

use std::collections::BTreeMap;
use std::time::Duration;

use cairn_core::schema::Dialect;
use cairn_core::spool::Timestamp;

use crate::revision::MigrationSet;

/// The registry table (one row per open instance and migration set).
pub const FLEET_TABLE: &str = "cairn_fleet";

/// The table recording every contract revision applied (forced or not).
pub const CONTRACT_TABLE: &str = "cairn_contract";

/// Default heartbeat interval of an open store.
pub const DEFAULT_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(30);

/// Default expiry window: an entry not refreshed for this long is not live.
pub const DEFAULT_EXPIRY: Duration = Duration::from_secs(300);

/// One open store instance, as the registry records it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct FleetEntry {
    /// Unique per open (a store opened twice by one process is two instances).
    pub instance: String,
    /// The build that opened the store ([`default_build_id`] unless configured).
    pub build: String,
    /// Per migration set the build opened, the newest revision it knows (its head).
    pub heads: BTreeMap<String, String>,
    /// Host name of the process.
    pub host: String,
    /// Process id.
    pub pid: u32,
    /// When the instance opened the store.
    pub started_at: Timestamp,
    /// When the instance last registered or heartbeated.
    pub last_seen: Timestamp,
}

impl FleetEntry {
    /// Whether the entry was refreshed within `expiry` of `now`: `last_seen` no more than
    /// `expiry` before `now`, and no more than `expiry` after it. A heartbeat is written with
    /// its build's clock, so clocks that disagree by less than the window are tolerated; an
    /// entry further in the future than that cannot be judged by its age and is not live
    /// (its build's clock is wrong, as every lease it takes is).
    pub fn is_live(&self, now: Timestamp, expiry: Duration) -> bool {
        self.last_seen >= now.saturating_sub(expiry) && self.last_seen <= now.saturating_add(expiry)
    }

    /// The rows [`FleetSql::insert`] stores for this entry: `(set, revision)` pairs.
    pub fn rows(&self) -> impl Iterator<Item = (&str, &str)> {
        self.heads.iter().map(|(s, r)| (s.as_str(), r.as_str()))
    }
}

/// One row of [`FleetSql::list`], as a backend reads it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct FleetRow {
    /// `instance_id`.
    pub instance: String,
    /// `set_name`.
    pub set: String,
    /// `revision`.
    pub revision: String,
    /// `build_id`.
    pub build: String,
    /// `host`.
    pub host: String,
    /// `pid`.
    pub pid: i64,
    /// `started_at_us`.
    pub started_at_us: i64,
    /// `last_seen_us`.
    pub last_seen_us: i64,
}

/// Groups registry rows into entries, one per instance, ordered by instance id.
pub fn entries_from_rows(rows: impl IntoIterator<Item = FleetRow>) -> Vec<FleetEntry> {
    let mut by_instance: BTreeMap<String, FleetEntry> = BTreeMap::new();
    for row in rows {
        let entry = by_instance
            .entry(row.instance.clone())
            .or_insert_with(|| FleetEntry {
                instance: row.instance.clone(),
                build: row.build.clone(),
                heads: BTreeMap::new(),
                host: row.host.clone(),
                pid: u32::try_from(row.pid).unwrap_or(0),
                started_at: Timestamp::from_unix_micros(row.started_at_us),
                last_seen: Timestamp::from_unix_micros(row.last_seen_us),
            });
        // Rows of one instance are written together; the newest heartbeat wins should they
        // ever disagree.
        entry.last_seen = entry
            .last_seen
            .max(Timestamp::from_unix_micros(row.last_seen_us));
        entry.heads.insert(row.set, row.revision);
    }
    by_instance.into_values().collect()
}

/// The live entries of `entries` at `now`.
pub fn live(entries: Vec<FleetEntry>, now: Timestamp, expiry: Duration) -> Vec<FleetEntry> {
    entries
        .into_iter()
        .filter(|e| e.is_live(now, expiry))
        .collect()
}

/// A live build that lacks a contract revision (defined in `cairn-core`, whose
/// [`cairn_core::Error::Incompatible`] carries the builds that blocked a contract).
pub use cairn_core::Blocker;

/// The live builds in `fleet` (other than instance `except`, the caller's own) that lack
/// revision `revision` of `set`: those that recorded a head for the set that is before
/// `revision` in `set`'s chain, or that this build does not know (a diverged build; cairn
/// cannot tell what it has, so it counts as lacking). A build that recorded no head for the
/// set does not use the set's tables and never blocks. `fleet` must hold live entries only.
pub fn contract_blockers(
    set: &MigrationSet,
    revision: &str,
    fleet: &[FleetEntry],
    except: Option<&str>,
) -> Vec<Blocker> {
    let Some(needed) = set.position(revision) else {
        return Vec::new();
    };
    fleet
        .iter()
        .filter(|e| Some(e.instance.as_str()) != except)
        .filter_map(|e| {
            let knows = e.heads.get(set.name())?;
            let lacks = set.position(knows).is_none_or(|at| at < needed);
            lacks.then(|| Blocker {
                build: e.build.clone(),
                host: e.host.clone(),
                pid: e.pid,
                instance: e.instance.clone(),
                knows: knows.clone(),
            })
        })
        .collect()
}

/// A build id from a version and the heads a build knows: `VERSION+SET@HEAD,…` (sets in
/// name order), what the facade uses unless the service names its build.
pub fn default_build_id<'a>(
    version: &str,
    heads: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> String {
    let mut heads: Vec<(&str, &str)> = heads.into_iter().collect();
    heads.sort_unstable();
    let list: Vec<String> = heads.iter().map(|(s, r)| format!("{s}@{r}")).collect();
    format!("{version}+{}", list.join(","))
}

/// Every registry statement in one dialect. Parameters are positional (`?N` on SQLite, `$N` on
/// Postgres); each field documents its parameters and result columns.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub struct FleetSql {
    /// One row, one boolean-ish column (SQLite: a count; Postgres: a `bool`): whether the
    /// registry table exists (a store whose cairn set predates `0004_fleet` has none).
    pub has_table: &'static str,
    /// `1 = instance`: deletes the instance's rows (before registering, and at close).
    pub delete_instance: &'static str,
    /// `1 = instance, 2 = set, 3 = revision, 4 = build, 5 = host, 6 = pid, 7 = started_at_us,
    /// 8 = last_seen_us`: inserts one row.
    pub insert: &'static str,
    /// `1 = now_us, 2 = instance`: refreshes the instance's `last_seen_us` (one statement for
    /// all its rows).
    pub heartbeat: &'static str,
    /// `1 = before_us`: deletes the rows last seen before `before_us` (long-dead instances).
    pub prune: &'static str,
    /// Every row, ordered by instance and set: `instance_id, set_name, revision, build_id,
    /// host, pid, started_at_us, last_seen_us`.
    pub list: &'static str,
    /// `1 = set, 2 = revision, 3 = applied_at_us, 4 = forced (0/1), 5 = blockers`: records an
    /// applied contract revision.
    pub record_contract: &'static str,
    /// One row, one boolean-ish column: whether [`CONTRACT_TABLE`] exists.
    pub has_contract_table: &'static str,
    /// `1 = set` → the contract revisions recorded for the set: `revision`.
    pub contracts_of_set: &'static str,
    /// Run by the contract gate under the migration lock before it reads the registry, where
    /// the migration transaction alone does not already exclude registrations: until the
    /// transaction ends, no build can register, so a build that starts meanwhile registers
    /// after the contract revision is committed and then finds it (SQLite: none, the
    /// `BEGIN IMMEDIATE` write lock excludes every other writer; Postgres: a SHARE lock on the
    /// registry table).
    pub lock_for_gate: Option<&'static str>,
}

const SQLITE: FleetSql = FleetSql {
    has_table: "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'cairn_fleet'",
    delete_instance: "DELETE FROM cairn_fleet WHERE instance_id = ?1",
    insert: "INSERT INTO cairn_fleet (instance_id, set_name, revision, build_id, host, pid, started_at_us, last_seen_us) \
        VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    heartbeat: "UPDATE cairn_fleet SET last_seen_us = ?1 WHERE instance_id = ?2",
    prune: "DELETE FROM cairn_fleet WHERE last_seen_us < ?1",
    list: "SELECT instance_id, set_name, revision, build_id, host, pid, started_at_us, last_seen_us \
        FROM cairn_fleet ORDER BY instance_id, set_name",
    record_contract: "INSERT INTO cairn_contract (set_name, revision, applied_at_us, forced, blockers) \
        VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (set_name, revision, applied_at_us) DO NOTHING",
    has_contract_table: "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'cairn_contract'",
    contracts_of_set: "SELECT DISTINCT revision FROM cairn_contract WHERE set_name = ?1 ORDER BY revision",
    lock_for_gate: None,
};

const POSTGRES: FleetSql = FleetSql {
    has_table: "SELECT to_regclass('cairn_fleet') IS NOT NULL",
    delete_instance: "DELETE FROM cairn_fleet WHERE instance_id = $1",
    insert: "INSERT INTO cairn_fleet (instance_id, set_name, revision, build_id, host, pid, started_at_us, last_seen_us) \
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    heartbeat: "UPDATE cairn_fleet SET last_seen_us = $1 WHERE instance_id = $2",
    prune: "DELETE FROM cairn_fleet WHERE last_seen_us < $1",
    list: "SELECT instance_id, set_name, revision, build_id, host, pid, started_at_us, last_seen_us \
        FROM cairn_fleet ORDER BY instance_id, set_name",
    record_contract: "INSERT INTO cairn_contract (set_name, revision, applied_at_us, forced, blockers) \
        VALUES ($1, $2, $3, $4, $5) ON CONFLICT (set_name, revision, applied_at_us) DO NOTHING",
    has_contract_table: "SELECT to_regclass('cairn_contract') IS NOT NULL",
    contracts_of_set: "SELECT DISTINCT revision FROM cairn_contract WHERE set_name = $1 ORDER BY revision",
    lock_for_gate: Some("LOCK TABLE cairn_fleet IN SHARE MODE"),
};

/// The registry statements for `dialect`.
pub fn sql(dialect: Dialect) -> &'static FleetSql {
    match dialect {
        Dialect::Sqlite => &SQLITE,
        Dialect::Postgres => &POSTGRES,
    }
}

/// How long a dead instance's rows stay before a registration prunes them: long after any
/// sensible expiry window, so `cairn migrate fleet` never loses a live entry.
pub const PRUNE_AFTER: Duration = Duration::from_secs(7 * 24 * 3600);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::revision::Revision;

    fn set() -> MigrationSet {
        let rev = |id: &str, parent: Option<&str>| Revision {
            id: id.into(),
            parent: parent.map(str::to_owned),
            up_sqlite: vec![format!("CREATE TABLE {id} (x INTEGER)")],
            up_postgres: vec![format!("CREATE TABLE {id} (x INTEGER)")],
            description: String::new(),
        };
        MigrationSet::new(
            "app",
            vec![
                rev("a1", None),
                rev("a2", Some("a1")),
                rev("a3", Some("a2")),
            ],
        )
        .unwrap()
    }

    fn entry(instance: &str, heads: &[(&str, &str)], last_seen: i64) -> FleetEntry {
        FleetEntry {
            instance: instance.into(),
            build: format!("build-{instance}"),
            heads: heads
                .iter()
                .map(|(s, r)| ((*s).into(), (*r).into()))
                .collect(),
            host: "h".into(),
            pid: 7,
            started_at: Timestamp::from_unix_micros(0),
            last_seen: Timestamp::from_unix_micros(last_seen),
        }
    }

    #[test]
    fn builds_that_lack_the_revision_block_it_and_others_do_not() {
        let fleet = vec![
            entry("old", &[("app", "a2")], 0),
            entry("same", &[("app", "a3")], 0),
            entry("me", &[("app", "a1")], 0),
            entry("cli", &[("cairn", "0004_fleet")], 0),
            entry("diverged", &[("app", "x9")], 0),
        ];
        let blockers = contract_blockers(&set(), "a3", &fleet, Some("me"));
        let names: Vec<&str> = blockers.iter().map(|b| b.instance.as_str()).collect();
        assert_eq!(names, ["old", "diverged"]);
        assert_eq!(blockers[0].knows, "a2");
        assert_eq!(
            blockers[0].to_string(),
            "build build-old on h pid 7 (knows a2)"
        );
        assert!(contract_blockers(&set(), "a2", &fleet, Some("me"))
            .iter()
            .all(|b| b.instance == "diverged"));
        // Without an exception the caller counts too.
        assert_eq!(contract_blockers(&set(), "a3", &fleet, None).len(), 3);
    }

    #[test]
    fn entries_group_rows_and_expire_by_last_seen() {
        let row = |instance: &str, set: &str, seen: i64| FleetRow {
            instance: instance.into(),
            set: set.into(),
            revision: format!("{set}-head"),
            build: "b".into(),
            host: "h".into(),
            pid: 3,
            started_at_us: 1,
            last_seen_us: seen,
        };
        let entries = entries_from_rows([
            row("i1", "cairn", 100),
            row("i1", "app", 100),
            row("i2", "cairn", 10),
        ]);
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].heads.len(), 2);
        assert_eq!(entries[0].heads["app"], "app-head");
        let now = Timestamp::from_unix_micros(150);
        let alive = live(entries, now, Duration::from_micros(50));
        assert_eq!(alive.len(), 1);
        assert_eq!(alive[0].instance, "i1");
    }

    /// An entry seen in the future is live while it is within the expiry window of `now` (a
    /// clock a little ahead), and not live past it: a heartbeat dated a year ahead must not
    /// block contract revisions for a year.
    #[test]
    fn an_entry_from_beyond_the_window_in_the_future_is_not_live() {
        let at = |seen: i64| FleetEntry {
            instance: format!("i{seen}"),
            build: "b".into(),
            heads: BTreeMap::new(),
            host: "h".into(),
            pid: 1,
            started_at: Timestamp::from_unix_micros(1),
            last_seen: Timestamp::from_unix_micros(seen),
        };
        let now = Timestamp::from_unix_micros(1_000);
        let window = Duration::from_micros(100);
        assert!(at(900).is_live(now, window), "the window's oldest edge");
        assert!(!at(899).is_live(now, window), "just expired");
        assert!(at(1_100).is_live(now, window), "ahead by the window");
        assert!(
            !at(1_101).is_live(now, window),
            "ahead by more than the window"
        );
        assert!(!at(i64::MAX).is_live(now, window), "the far future");
        let alive = live(vec![at(1_000), at(1_101), at(i64::MAX)], now, window);
        assert_eq!(alive.len(), 1);
        assert_eq!(alive[0].instance, "i1000");
    }

    #[test]
    fn the_default_build_id_names_the_version_and_every_head() {
        assert_eq!(
            default_build_id("0.1.0", [("cairn", "0004_fleet"), ("app", "0002_x")]),
            "0.1.0+app@0002_x,cairn@0004_fleet"
        );
    }

    #[test]
    fn statements_follow_the_dialect_and_name_the_tables() {
        for d in [Dialect::Sqlite, Dialect::Postgres] {
            let s = sql(d);
            for stmt in [
                s.has_table,
                s.delete_instance,
                s.insert,
                s.heartbeat,
                s.prune,
                s.list,
            ] {
                assert!(stmt.contains(FLEET_TABLE), "{stmt}");
            }
            for stmt in [s.record_contract, s.has_contract_table, s.contracts_of_set] {
                assert!(stmt.contains(CONTRACT_TABLE), "{stmt}");
            }
        }
        assert!(sql(Dialect::Sqlite).insert.contains("?8"));
        assert!(sql(Dialect::Postgres).insert.contains("$8"));
    }
}
