//! Fleet cases (F…): the fleet registry and the contract revisions it gates.
//!
//! Invariants:
//! - F1: a contract revision is applied only when no live build in the registry, other than
//!   the caller, lacks it. While an older build heartbeats, the open is refused naming it
//!   (build id, host, pid, the revision it knows) and nothing changes; once its entry expires
//!   — or it deregisters (closes) — the same open applies the revision.
//! - F2: a forced contract revision is applied past the live builds that lack it, and the
//!   store records it as forced, with those builds.
//! - F3: a build older than an applied contract revision refuses the store (it is *ahead*, but
//!   what the older build uses was dropped); once the contract revision is rolled back with
//!   `down`, the older build uses the store again.
//! - F4: the registry records, refreshes, expires and removes entries as the backend is told.
//!
//! Time is a [`ManualClock`]: an entry is live while its `last_seen` is within the expiry
//! window of the clock's `now`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use cairn_core::spool::{Clock, ManualClock, Timestamp};
use cairn_migrate::fleet::{self, FleetEntry};
use cairn_migrate::{MigrateError, MigrationSet, Opened, Revision, Runner};

use super::migrations::{rev, state, Subject, DEADLINE};
use crate::MigrationHarness;

/// The expiry window of these cases.
const EXPIRY: Duration = Duration::from_secs(300);

/// The expand revision of build v2: a new column beside the one the contract drops.
fn expand(s: Subject) -> Revision {
    rev(
        "f_0002_amount",
        &s.head(),
        &["ALTER TABLE app_items ADD COLUMN amount BIGINT"],
    )
}

/// The contract revision of build v3: drops the column builds v1 and v2 still write.
fn contract() -> Revision {
    rev(
        "f_0003_drop_qty",
        "f_0002_amount",
        &["ALTER TABLE app_items DROP COLUMN qty"],
    )
}

/// Build v3: the expand and the contract revision, the contract marked, with down SQL for both.
fn v3_set(s: Subject) -> MigrationSet {
    let down = |sql: &str| vec![sql.to_owned()];
    s.set(vec![expand(s), contract()])
        .with_contract("f_0003_drop_qty")
        .expect("a later revision")
        .with_down(
            "f_0002_amount",
            down("ALTER TABLE app_items DROP COLUMN amount"),
            down("ALTER TABLE app_items DROP COLUMN amount"),
        )
        .expect("valid down SQL")
        .with_down(
            "f_0003_drop_qty",
            down("ALTER TABLE app_items ADD COLUMN qty INTEGER NOT NULL DEFAULT 0"),
            down("ALTER TABLE app_items ADD COLUMN qty INTEGER NOT NULL DEFAULT 0"),
        )
        .expect("valid down SQL")
}

/// A runner for `set` on `clock`, as instance `me`.
fn runner(set: MigrationSet, clock: &ManualClock) -> Runner {
    Runner::new(set)
        .with_lock_timeout(DEADLINE)
        .with_clock(Arc::new(clock.clone()))
        .with_fleet_expiry(EXPIRY)
        .with_instance("me")
}

/// A registry entry for a build of the app set at `app_head`, registered now.
fn entry(instance: &str, build: &str, app_head: &str, now: Timestamp) -> FleetEntry {
    FleetEntry {
        instance: instance.into(),
        build: build.into(),
        heads: BTreeMap::from([
            ("cairn".to_owned(), "0004_fleet".to_owned()),
            ("app".to_owned(), app_head.to_owned()),
        ]),
        host: "node-a".into(),
        pid: 4242,
        started_at: now,
        last_seen: now,
    }
}

async fn register<H: MigrationHarness>(h: &H, e: &FleetEntry) {
    h.migrator()
        .await
        .register(e, Timestamp::UNIX_EPOCH)
        .await
        .unwrap_or_else(|err| panic!("{}: register {}: {err}", h.backend(), e.instance));
}

async fn open<H: MigrationHarness>(h: &H, r: &Runner) -> Result<Opened, MigrateError> {
    r.open(h.migrator().await.as_ref()).await
}

/// Prepares an app store at v1 with one row, and a manual clock well after the epoch.
async fn v1_store<H: MigrationHarness>(h: &H) -> ManualClock {
    let s = Subject::App;
    s.prepare(h).await;
    let clock = ManualClock::new(Timestamp::from_unix_micros(1_800_000_000_000_000));
    open(h, &runner(s.set(vec![]), &clock))
        .await
        .expect("v1 opens");
    h.execute_sql("INSERT INTO app_items (id, name, qty) VALUES (1, 'a', 5)")
        .await
        .expect("seed app_items");
    clock
}

fn assert_refused_naming(err: &MigrateError, build: &str, knows: &str, what: &str) {
    match err {
        MigrateError::ContractRefused {
            revision, blockers, ..
        } => {
            assert_eq!(revision, "f_0003_drop_qty", "{what}");
            assert_eq!(blockers.len(), 1, "{what}: {err}");
            assert_eq!(blockers[0].build, build, "{what}");
            assert_eq!(blockers[0].knows, knows, "{what}");
            let line = err.to_string();
            for part in [build, "node-a", "4242", knows] {
                assert!(line.contains(part), "{what}: {part} named in: {line}");
            }
            assert!(!line.contains('\n'), "{what}: one line");
        }
        other => panic!("{what}: expected a contract refusal, got {other}"),
    }
}

/// F1: refused while an older build heartbeats; applied once its entry expires. And applied
/// once an older build deregisters.
pub async fn f1_app_contract_refused_while_older_build_heartbeats_applied_once_it_expires<
    H: MigrationHarness,
>(
    h: &H,
) {
    let s = Subject::App;
    let clock = v1_store(h).await;
    let v1_head = s.head();
    register(h, &entry("v1-node", "v1", &v1_head, clock.now())).await;
    // The caller's own entry never blocks it, and a build that knows the revision does not.
    register(h, &entry("me", "v3", "f_0001_base_only", clock.now())).await;
    register(h, &entry("v3-node", "v3", "f_0003_drop_qty", clock.now())).await;
    let (schema, before) = (h.schema().await, state(h, s).await);

    let v3 = runner(v3_set(s), &clock);
    let err = open(h, &v3).await.expect_err("F1: refused");
    assert_refused_naming(&err, "v1", &v1_head, "F1");
    assert!(err.is_refusal());
    assert_eq!(h.schema().await, schema, "F1: nothing changed");
    assert_eq!(state(h, s).await, before, "F1: stamp and lineage unchanged");

    // Heartbeats keep it live past the window measured from its registration.
    let m = h.migrator().await;
    for _ in 0..3 {
        clock.advance(EXPIRY - Duration::from_secs(60));
        m.heartbeat("v1-node", clock.now())
            .await
            .expect("heartbeat");
        let err = open(h, &v3).await.expect_err("F1: still refused");
        assert_refused_naming(&err, "v1", &v1_head, "F1 heartbeating");
    }
    assert_eq!(h.schema().await, schema);

    // No heartbeat for longer than the window: the entry is not live any more.
    clock.advance(EXPIRY + Duration::from_secs(1));
    m.heartbeat("v3-node", clock.now())
        .await
        .expect("heartbeat");
    let report = v3
        .open_with_report(m.as_ref())
        .await
        .expect("F1: applied once v1's entry expired");
    assert!(
        matches!(report.opened, Opened::Upgraded { ref applied, .. } if applied.len() == 2),
        "{report:?}"
    );
    assert_eq!(report.contracts.len(), 1);
    assert!(!report.contracts[0].forced);
    assert!(
        !h.schema().await["app_items"].contains(&"qty".to_owned()),
        "F1: the contract ran"
    );
    assert_eq!(
        h.query_i64(
            "SELECT count(*) FROM cairn_contract WHERE revision = 'f_0003_drop_qty' AND forced = 0"
        )
        .await
        .expect("read cairn_contract"),
        1,
        "F1: the applied contract is recorded, not forced"
    );

    // Deregistering (a closed store) lifts the gate at once.
    let h = h.fresh().await;
    let clock = v1_store(&h).await;
    register(&h, &entry("v1-node", "v1", &v1_head, clock.now())).await;
    let v3 = runner(v3_set(s), &clock);
    let err = open(&h, &v3).await.expect_err("F1: refused");
    assert_refused_naming(&err, "v1", &v1_head, "F1 before close");
    h.migrator()
        .await
        .deregister("v1-node")
        .await
        .expect("deregister");
    open(&h, &v3)
        .await
        .expect("F1: applied once v1 deregistered");
}

/// F2: `force_contract` applies the revision past the live builds that lack it and the store
/// records it as forced with them.
pub async fn f2_app_forced_contract_is_applied_and_recorded<H: MigrationHarness>(h: &H) {
    let s = Subject::App;
    let clock = v1_store(h).await;
    register(h, &entry("v1-node", "v1", &s.head(), clock.now())).await;
    let forced = runner(v3_set(s), &clock).force_contract(true);
    let report = forced
        .open_with_report(h.migrator().await.as_ref())
        .await
        .expect("F2: forced");
    assert_eq!(report.contracts.len(), 1, "{report:?}");
    let c = &report.contracts[0];
    assert!(c.forced);
    assert_eq!(c.revision, "f_0003_drop_qty");
    assert_eq!(c.blockers.len(), 1);
    assert_eq!(c.blockers[0].build, "v1");
    assert_eq!(
        h.query_i64(
            "SELECT count(*) FROM cairn_contract WHERE revision = 'f_0003_drop_qty' AND forced = 1 AND blockers LIKE '%build v1 on node-a pid 4242%'"
        )
        .await
        .expect("read cairn_contract"),
        1,
        "F2: recorded as forced, naming the build"
    );
    assert!(!h.schema().await["app_items"].contains(&"qty".to_owned()));
    assert_eq!(
        h.query_i64("SELECT count(*) FROM app_items WHERE id = 1")
            .await
            .expect("read"),
        1,
        "F2: rows kept"
    );
}

/// F3: builds older than an applied contract revision refuse the store; after `down` past the
/// contract revision they use it again.
pub async fn f3_app_older_build_refuses_a_store_with_an_unknown_contract<H: MigrationHarness>(
    h: &H,
) {
    let s = Subject::App;
    let clock = v1_store(h).await;
    let v3 = runner(v3_set(s), &clock);
    open(h, &v3).await.expect("v3 applies (no live build)");
    let v1 = runner(s.set(vec![]), &clock);
    let v2 = runner(s.set(vec![expand(s)]), &clock);
    for (name, build) in [("v1", &v1), ("v2", &v2)] {
        let err = open(h, build).await.expect_err("F3: refused");
        assert!(
            matches!(err, MigrateError::ContractAhead { ref revision, .. } if revision == "f_0003_drop_qty"),
            "F3 {name}: {err}"
        );
        assert!(err.is_refusal());
    }
    // The same check a build makes once registered (closing the window between its look and
    // its registration) refuses too, without the lock.
    let err = v1
        .check_contracts_known(h.migrator().await.as_ref())
        .await
        .expect_err("F3: refused once registered");
    assert!(matches!(err, MigrateError::ContractAhead { .. }), "{err}");
    v3.check_contracts_known(h.migrator().await.as_ref())
        .await
        .expect("F3: v3 knows its contract revision");
    // v1 rolls the contract back (and the expand with it) and is at head again; v2 is ahead.
    v1.down(h.migrator().await.as_ref(), "f_0002_amount")
        .await
        .expect("F3: down past the contract");
    assert_eq!(open(h, &v2).await.expect("F3: v2 at head"), Opened::AtHead);
    assert!(
        matches!(open(h, &v1).await, Ok(Opened::Ahead { .. })),
        "F3: v1 uses the store again"
    );
    assert!(h.schema().await["app_items"].contains(&"qty".to_owned()));
    v1.check_contracts_known(h.migrator().await.as_ref())
        .await
        .expect("F3: rolled back, v1 lacks nothing applied");
}

/// F4: register, list, heartbeat, expire, deregister.
pub async fn f4_fleet_registry_records_refreshes_expires_and_removes<H: MigrationHarness>(h: &H) {
    Subject::App.prepare(h).await;
    let m = h.migrator().await;
    let t0 = Timestamp::from_unix_micros(1_000_000_000_000_000);
    assert!(m.read_fleet().await.expect("read").is_empty());
    let a = entry("a", "build-a", "0001_items", t0);
    let b = entry("b", "build-b", "0002_x", t0);
    register(h, &a).await;
    register(h, &b).await;
    // Registering again replaces the instance's rows rather than adding to them.
    register(h, &a).await;
    let all = m.read_fleet().await.expect("read");
    assert_eq!(all, vec![a.clone(), b.clone()], "F4: read back exactly");

    let later = t0.saturating_add(EXPIRY + Duration::from_secs(1));
    m.heartbeat("b", later).await.expect("heartbeat");
    let live = fleet::live(m.read_fleet().await.expect("read"), later, EXPIRY);
    assert_eq!(live.len(), 1, "F4: a expired, b refreshed");
    assert_eq!(live[0].instance, "b");
    assert_eq!(live[0].last_seen, later);

    m.deregister("b").await.expect("deregister");
    let left: Vec<String> = m
        .read_fleet()
        .await
        .expect("read")
        .into_iter()
        .map(|e| e.instance)
        .collect();
    assert_eq!(left, ["a"], "F4: b removed");
    // A registration prunes long-dead entries.
    let c = entry("c", "build-c", "0001_items", later);
    m.register(&c, later).await.expect("register with pruning");
    let left: Vec<String> = m
        .read_fleet()
        .await
        .expect("read")
        .into_iter()
        .map(|e| e.instance)
        .collect();
    assert_eq!(left, ["c"], "F4: a pruned");
}
