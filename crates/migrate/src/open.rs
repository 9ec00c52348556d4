//! The open protocol every backend runs: application sets, the contract gate, the fleet
//! registration and its heartbeat.
//!
//! A backend's open (`SqliteBackend::open`, `PgBackend::open`, a third party's
//! [`crate::Backend`]) opens cairn's own set when it opens its store, then hands its
//! [`MigrationBackend`] and what that open did to [`Session::open`], which
//!
//! 1. opens the application's sets ([`OpenOptions::migrations`]), in order, through the
//!    [`Runner`] on the options' clock, this open's instance exempt from its own contract gate;
//!    a contract revision that live builds lack is deferred
//!    ([`OpenOptions::defer_blocked_contracts`]) or refused;
//! 2. records the build in the store's fleet registry ([`crate::fleet`]) and checks the
//!    contract revisions again now that it is registered (one committed between the look and
//!    the registration refuses the open);
//! 3. starts the heartbeat task that keeps the entry live.
//!
//! [`Session::close`] stops the heartbeat and removes the entry; dropping the session stops
//! the heartbeat, and the entry expires after [`OpenOptions::fleet_expiry`]. So every open of
//! a backend — through the `cairn` facade or straight through a backend crate — registers and
//! is gated the same way.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use cairn_core::spool::{Clock, SpoolConfig, SystemClock};
use cairn_core::{Error, Result};

use crate::cairn_set::{cairn_set, CAIRN_SET};
use crate::fleet::{self, FleetEntry};
use crate::revision::MigrationSet;
pub use crate::runner::DeferredContract;
use crate::runner::{AppliedContract, MigrationBackend, Opened, Runner};

/// How long an open waits for another process's migration before it gives up with
/// [`Error::Retryable`].
pub const DEFAULT_MIGRATION_LOCK_TIMEOUT: Duration = Duration::from_secs(30);

/// The backend-independent options of an open: the clock, the spool's config, the
/// application's migration sets and the fleet protocol. Every field has a sensible default
/// ([`OpenOptions::default`]); the chainable methods set them one by one.
///
/// ```
/// use std::time::Duration;
/// let opts = cairn::backend::OpenOptions::default()
///     .build_id("inventory-2.4.1")
///     .heartbeat_interval(Duration::from_secs(10));
/// assert!(opts.register_in_fleet);
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub struct OpenOptions {
    /// The clock the spool, the contract gate and the fleet heartbeat read (default the system
    /// clock).
    pub clock: Arc<dyn Clock>,
    /// The spool's config: the retry backoff (default 1 s doubling to 60 s).
    pub spool_config: SpoolConfig,
    /// The application's migration sets, opened after cairn's own, in order.
    pub sets: Vec<MigrationSet>,
    /// How long an open waits for another process that is migrating the same store (default
    /// [`DEFAULT_MIGRATION_LOCK_TIMEOUT`]).
    pub migration_lock_timeout: Duration,
    /// Whether the open registers in the fleet registry and heartbeats (default `true`).
    pub register_in_fleet: bool,
    /// The build id recorded in the registry (default [`fleet::default_build_id`] of this
    /// crate's version and every set's head).
    pub build_id: Option<String>,
    /// The host name recorded in the registry (default the `HOSTNAME` environment variable,
    /// else `/etc/hostname`, else `unknown`).
    pub host: Option<String>,
    /// How often the heartbeat refreshes the entry (default
    /// [`fleet::DEFAULT_HEARTBEAT_INTERVAL`]).
    pub heartbeat_interval: Duration,
    /// How long an entry stays live without a heartbeat (default [`fleet::DEFAULT_EXPIRY`]).
    pub fleet_expiry: Duration,
    /// Whether contract revisions are applied past live builds that lack them (default
    /// `false`).
    pub force_contract: bool,
    /// Whether a contract revision that live builds lack is left pending (default `true`)
    /// rather than refusing the open.
    pub defer_blocked_contracts: bool,
    /// Whether the open upgrades a store behind this build (default `true`); see
    /// [`OpenOptions::upgrade`].
    pub upgrade: bool,
}

impl Default for OpenOptions {
    fn default() -> Self {
        Self {
            clock: Arc::new(SystemClock),
            spool_config: SpoolConfig::default(),
            sets: Vec::new(),
            migration_lock_timeout: DEFAULT_MIGRATION_LOCK_TIMEOUT,
            register_in_fleet: true,
            build_id: None,
            host: None,
            heartbeat_interval: fleet::DEFAULT_HEARTBEAT_INTERVAL,
            fleet_expiry: fleet::DEFAULT_EXPIRY,
            force_contract: false,
            defer_blocked_contracts: true,
            upgrade: true,
        }
    }
}

impl fmt::Debug for OpenOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenOptions")
            .field("clock", &self.clock)
            .field("spool_config", &self.spool_config)
            .field(
                "sets",
                &self.sets.iter().map(MigrationSet::name).collect::<Vec<_>>(),
            )
            .field("migration_lock_timeout", &self.migration_lock_timeout)
            .field("register_in_fleet", &self.register_in_fleet)
            .field("build_id", &self.build_id)
            .field("host", &self.host)
            .field("heartbeat_interval", &self.heartbeat_interval)
            .field("fleet_expiry", &self.fleet_expiry)
            .field("force_contract", &self.force_contract)
            .field("defer_blocked_contracts", &self.defer_blocked_contracts)
            .field("upgrade", &self.upgrade)
            .finish()
    }
}

impl OpenOptions {
    /// The clock the spool reads every time from (lease expiry, backoff, retention), and the
    /// contract gate and the heartbeat with it. Tests pass a `ManualClock` to drive time.
    #[must_use]
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The spool's config (the retry backoff). Every process of one store should use the same
    /// config, since the backoff decides when a run is due again.
    #[must_use]
    pub fn spool_config(mut self, config: SpoolConfig) -> Self {
        self.spool_config = config;
        self
    }

    /// Adds an application migration set, opened after cairn's own with the same protocol.
    /// Call it once per set; a set named `cairn` or given twice is refused by the open.
    #[must_use]
    pub fn migrations(mut self, set: MigrationSet) -> Self {
        self.sets.push(set);
        self
    }

    /// How long an open waits for another process that is migrating the same store; past it
    /// the open fails with [`Error::Retryable`] and changes nothing.
    #[must_use]
    pub fn migration_lock_timeout(mut self, timeout: Duration) -> Self {
        self.migration_lock_timeout = timeout;
        self
    }

    /// Whether the open records this build in the fleet registry and heartbeats it. Turn it
    /// off for read-only tools; a service that applies or depends on application sets keeps
    /// it on, so contract revisions wait for it.
    #[must_use]
    pub fn register_in_fleet(mut self, register: bool) -> Self {
        self.register_in_fleet = register;
        self
    }

    /// The build id recorded in the fleet registry. Name your release here.
    #[must_use]
    pub fn build_id(mut self, build: impl Into<String>) -> Self {
        self.build_id = Some(build.into());
        self
    }

    /// The host name recorded in the fleet registry.
    #[must_use]
    pub fn fleet_host(mut self, host: impl Into<String>) -> Self {
        self.host = Some(host.into());
        self
    }

    /// How often the open refreshes its registry entry: one write per interval, from a
    /// background task stopped by [`Session::close`] or the session's drop.
    #[must_use]
    pub fn heartbeat_interval(mut self, interval: Duration) -> Self {
        self.heartbeat_interval = interval;
        self
    }

    /// How long a registry entry stays live without a heartbeat, as the contract gate and
    /// [`Session::fleet`] judge it on the options' clock. Keep it several heartbeat intervals
    /// long.
    #[must_use]
    pub fn fleet_expiry(mut self, expiry: Duration) -> Self {
        self.fleet_expiry = expiry;
        self
    }

    /// Applies an application set's contract revisions even while live builds that lack them
    /// are registered. A forced revision is recorded in the store with the builds it was
    /// forced past, and reported in [`SetOpened::contracts`].
    #[must_use]
    pub fn force_contract(mut self, force: bool) -> Self {
        self.force_contract = force;
        self
    }

    /// What an open does when an application set's pending contract revision is lacked by
    /// live builds (and not forced). `true`: it applies the revisions before the contract
    /// revision, leaves the contract revision pending and opens, reporting it in
    /// [`SetOpened::deferred`] — so a release that ships a contract revision rolls out while
    /// older nodes still run. `false`: the open is refused with [`Error::Incompatible`] naming
    /// the live builds, and nothing changes.
    #[must_use]
    pub fn defer_blocked_contracts(mut self, defer: bool) -> Self {
        self.defer_blocked_contracts = defer;
        self
    }

    /// Whether the open may upgrade a store that is behind this build, cairn's own set and the
    /// application's alike (default `true`). With `false`, a store stamped at an older
    /// revision of any set is refused with [`Error::Incompatible`] (the runner's
    /// [`crate::MigrateError::Behind`]) before anything of that set is written; a missing
    /// store is still created at head when the engine's options allow it, and a store behind
    /// only by a contract revision that live builds lack is served at its stamp with the
    /// revision deferred, as an upgrading open would serve it. For one-shot tools
    /// (the `cairn` binary's commands other than `serve` and `migrate`), and for services
    /// whose deploy runs `cairn migrate up` as a step of its own.
    #[must_use]
    pub fn upgrade(mut self, upgrade: bool) -> Self {
        self.upgrade = upgrade;
        self
    }

    /// Checks the options a backend cannot judge: no application set is named `cairn` or given
    /// twice. A backend calls it before it opens anything, so a bad option creates no store;
    /// [`Session::open`] calls it again.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming the set.
    pub fn check(&self) -> Result<()> {
        let mut names: Vec<&str> = vec![CAIRN_SET];
        for set in &self.sets {
            if names.contains(&set.name()) {
                return Err(Error::invalid(
                    "migration set",
                    format!(
                        "the set name `{}` is {}",
                        set.name(),
                        if set.name() == CAIRN_SET {
                            "reserved for cairn's own schema"
                        } else {
                            "given twice"
                        }
                    ),
                ));
            }
            names.push(set.name());
        }
        Ok(())
    }
}

/// What opening a store did for one migration set.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct SetOpened {
    /// The set's name (`cairn` for cairn's own schema).
    pub set: String,
    /// What the runner did: nothing (at head, ahead), an upgrade, or a lineage repair.
    pub outcome: Opened,
    /// The contract revisions the open applied, each with whether it was forced past live
    /// builds that lack it ([`OpenOptions::force_contract`]).
    pub contracts: Vec<AppliedContract>,
    /// A contract revision this open left pending because live builds lack it
    /// ([`OpenOptions::defer_blocked_contracts`]): the revisions before it were applied, the
    /// store stays behind this build until a later open (or `cairn migrate up`) finds no live
    /// build lacking it.
    pub deferred: Option<DeferredContract>,
}

/// One open of a store, as the migration layer sees it: what the open did per migration set,
/// and its entry in the fleet registry with the task that heartbeats it.
///
/// A backend creates it with [`Session::open`] once its store is open and keeps it for as
/// long as the store is open; [`Session::close`] deregisters. Dropping the session without
/// closing it stops the heartbeat, and the entry expires after the expiry window.
pub struct Session {
    migrator: Arc<dyn MigrationBackend>,
    migrations: Vec<SetOpened>,
    clock: Arc<dyn Clock>,
    expiry: Duration,
    registration: Option<Registration>,
}

/// This open's entry in the registry and the task that heartbeats it.
struct Registration {
    entry: FleetEntry,
    heartbeat: tokio::task::JoinHandle<()>,
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("migrations", &self.migrations)
            .field("fleet_entry", &self.fleet_entry())
            .field("expiry", &self.expiry)
            .finish_non_exhaustive()
    }
}

impl Drop for Session {
    /// The session gone without [`Session::close`]: the heartbeat stops and the entry expires
    /// after the expiry window.
    fn drop(&mut self) {
        if let Some(reg) = &self.registration {
            reg.heartbeat.abort();
        }
    }
}

impl Session {
    /// Runs the open protocol on a store whose cairn set the backend just opened (`cairn`
    /// says what that did, as [`crate::Runner::open_deferring`] reported it): opens `opts`' application sets in order through the runner (the
    /// contract gate on `opts`' clock, this open's instance exempt from its own gate; a
    /// blocked contract revision deferred or refused per
    /// [`OpenOptions::defer_blocked_contracts`]), then, unless
    /// [`OpenOptions::register_in_fleet`] is off, registers the build in the fleet registry,
    /// checks the sets' contract revisions again now that it is registered, and starts the
    /// heartbeat. Must run inside a tokio runtime (the heartbeat is a spawned task).
    ///
    /// The backend's `migrator` must reach the same store as its other capabilities; the
    /// session keeps it for the heartbeat, [`Session::fleet`] and [`Session::close`].
    ///
    /// # Errors
    /// - [`Error::InvalidInput`]: an application set named `cairn` or given twice
    ///   ([`OpenOptions::check`]);
    /// - [`Error::Incompatible`]: a set's stored history is one this build must not use, or a
    ///   contract revision live builds lack was not deferred (nothing was changed), or one was
    ///   applied between this open's look and its registration;
    /// - [`Error::Migration`]: a revision failed (its upgrade was rolled back);
    /// - [`Error::Retryable`]: another process held the migration lock past
    ///   [`OpenOptions::migration_lock_timeout`];
    /// - the store's errors (a store whose cairn set predates `0004_fleet` has no registry:
    ///   [`Error::NotFound`] when registering).
    pub async fn open(
        migrator: Arc<dyn MigrationBackend>,
        cairn: SetOpened,
        opts: &OpenOptions,
    ) -> Result<Self> {
        opts.check()?;
        let instance = instance_id();
        let mut migrations = vec![cairn];
        open_sets(migrator.as_ref(), opts, &instance, &mut migrations).await?;
        let registration = if opts.register_in_fleet {
            Some(register(&migrator, opts, instance).await?)
        } else {
            None
        };
        Ok(Self {
            migrator,
            migrations,
            clock: opts.clock.clone(),
            expiry: opts.fleet_expiry,
            registration,
        })
    }

    /// What the open did for each migration set: cairn's own first, then the application's in
    /// the order they were given.
    pub fn migrations(&self) -> &[SetOpened] {
        &self.migrations
    }

    /// This open's entry in the fleet registry (its instance id, build id, the newest revision
    /// it knows per set, host, pid), or `None` when registration was turned off
    /// ([`OpenOptions::register_in_fleet`]).
    pub fn fleet_entry(&self) -> Option<&FleetEntry> {
        self.registration.as_ref().map(|r| &r.entry)
    }

    /// The migration backend the session registered through.
    pub fn migrator(&self) -> Arc<dyn MigrationBackend> {
        self.migrator.clone()
    }

    /// The live builds in the store's fleet registry (this one included when registered),
    /// ordered by instance id: every entry refreshed within the expiry window
    /// ([`OpenOptions::fleet_expiry`]) of the options' clock. Takes no lock and writes
    /// nothing.
    ///
    /// # Errors
    /// Store errors.
    pub async fn fleet(&self) -> Result<Vec<FleetEntry>> {
        let all = self.migrator.read_fleet().await.map_err(Error::from)?;
        Ok(fleet::live(all, self.clock.now(), self.expiry))
    }

    /// Stops the heartbeat and removes this open's registry entry. Best effort: an entry that
    /// cannot be removed (the store is unreachable) expires after the window. Calling it again
    /// does nothing more. A backend's close calls it before it closes its connections.
    pub async fn close(&self) {
        if let Some(reg) = &self.registration {
            reg.heartbeat.abort();
            let _ = self.migrator.deregister(&reg.entry.instance).await;
        }
    }
}

/// Opens `opts`' application sets, in order, through the runner, appending what each open did
/// to `out`.
async fn open_sets(
    migrator: &dyn MigrationBackend,
    opts: &OpenOptions,
    instance: &str,
    out: &mut Vec<SetOpened>,
) -> Result<()> {
    let runner = |set: MigrationSet| {
        Runner::new(set)
            .with_lock_timeout(opts.migration_lock_timeout)
            .with_clock(opts.clock.clone())
            .with_fleet_expiry(opts.fleet_expiry)
            .with_instance(instance)
            .force_contract(opts.force_contract)
            .upgrade(opts.upgrade)
    };
    for set in &opts.sets {
        let (report, deferred) = if opts.defer_blocked_contracts {
            runner(set.clone()).open_deferring(migrator).await?
        } else {
            (runner(set.clone()).open_with_report(migrator).await?, None)
        };
        out.push(SetOpened {
            set: set.name().to_owned(),
            outcome: report.opened,
            contracts: report.contracts,
            deferred,
        });
    }
    Ok(())
}

/// Records this open in the fleet registry, checks the contract revisions again, and starts
/// the heartbeat.
async fn register(
    migrator: &Arc<dyn MigrationBackend>,
    opts: &OpenOptions,
    instance: String,
) -> Result<Registration> {
    let mut heads: Vec<(String, String)> = vec![(CAIRN_SET.into(), cairn_set().head().id.clone())];
    heads.extend(
        opts.sets
            .iter()
            .map(|s| (s.name().to_owned(), s.head().id.clone())),
    );
    let build = opts.build_id.clone().unwrap_or_else(|| {
        fleet::default_build_id(
            env!("CARGO_PKG_VERSION"),
            heads.iter().map(|(s, r)| (s.as_str(), r.as_str())),
        )
    });
    let now = opts.clock.now();
    let entry = FleetEntry {
        instance,
        build,
        heads: heads.into_iter().collect(),
        host: opts.host.clone().unwrap_or_else(host_name),
        pid: std::process::id(),
        started_at: now,
        last_seen: now,
    };
    migrator
        .register(&entry, now.saturating_sub(fleet::PRUNE_AFTER))
        .await?;
    // Checked again now that this build is registered: a contract revision committed between
    // this open's look and its registration is found here (a registration waits for a
    // migration that read the registry), and the open is refused instead of running against a
    // schema this build breaks on.
    for set in &opts.sets {
        if let Err(e) = Runner::new(set.clone())
            .check_contracts_known(migrator.as_ref())
            .await
        {
            let _ = migrator.deregister(&entry.instance).await;
            return Err(e.into());
        }
    }
    let heartbeat = tokio::spawn(heartbeat(
        migrator.clone(),
        entry.instance.clone(),
        opts.clock.clone(),
        opts.heartbeat_interval,
    ));
    Ok(Registration { entry, heartbeat })
}

/// Refreshes instance `instance`'s registry entry every `interval` until aborted. A failed
/// refresh is retried at the next tick: the entry stays live as long as one succeeds within
/// the expiry window.
async fn heartbeat(
    migrator: Arc<dyn MigrationBackend>,
    instance: String,
    clock: Arc<dyn Clock>,
    interval: Duration,
) {
    let mut ticks = tokio::time::interval(interval.max(Duration::from_millis(1)));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick completes at once: the registration just wrote the entry.
    ticks.tick().await;
    loop {
        ticks.tick().await;
        let _ = migrator.heartbeat(&instance, clock.now()).await;
    }
}

/// A new instance id for one open: unique across processes and opens.
fn instance_id() -> String {
    cairn_core::scratch_name("open")
}

/// The host name as the environment or `/etc/hostname` gives it.
fn host_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::revision::Revision;

    fn set(name: &str) -> MigrationSet {
        let rev = Revision {
            id: "0001_a".into(),
            parent: None,
            up_sqlite: vec!["CREATE TABLE a (x INTEGER)".into()],
            up_postgres: vec!["CREATE TABLE a (x INTEGER)".into()],
            description: String::new(),
        };
        MigrationSet::new(name, vec![rev]).unwrap()
    }

    #[test]
    fn a_set_named_cairn_or_given_twice_is_refused_before_anything_opens() {
        assert!(OpenOptions::default()
            .migrations(set("app"))
            .check()
            .is_ok());
        let cairn = OpenOptions::default().migrations(set("cairn")).check();
        assert!(
            matches!(&cairn, Err(Error::InvalidInput { .. }))
                && cairn.as_ref().unwrap_err().to_string().contains("reserved"),
            "{cairn:?}"
        );
        let twice = OpenOptions::default()
            .migrations(set("app"))
            .migrations(set("app"))
            .check();
        assert!(
            twice
                .as_ref()
                .unwrap_err()
                .to_string()
                .contains("given twice"),
            "{twice:?}"
        );
    }
}
