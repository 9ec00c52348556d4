//! The child: opens the store (upgrading the application set by one revision per session),
//! then runs a seeded random mix of operations until it is killed, recording each
//! acknowledged operation in the side log.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use cairn::spool::{CancelOutcome, RetentionBudget, RetentionPolicy, RunEventId, SupersedeGroup};
use cairn::{
    ConsumerId, DedupKey, EnqueueOptions, EpochId, Error, Event, ForeignEpoch, ImportOutcome,
    LeaseToken, NackKind, QueueName, RunId, SpaceId, Store,
};

use super::log::{self, Entry, SideLog};
use super::rng::Rng;

/// Spaces the appends and imports go to.
const SPACES: [&str; 4] = ["s0", "s1", "s2", "s3"];
/// Queues the enqueues go to.
const QUEUES: [&str; 2] = ["q0", "q1"];
/// Keys shared by every session, so enqueues repeat keys across crashes.
const SHARED_KEYS: u64 = 48;
/// Lease of a claim: short, so the leases of killed children expire and runs come back.
const LEASE: Duration = Duration::from_secs(2);

/// The hidden `crash-child` command's arguments (set by the parent, not by hand).
#[derive(clap::Args, Debug)]
pub(crate) struct ChildArgs {
    /// The store URL.
    #[arg(long)]
    url: String,
    /// The side log.
    #[arg(long)]
    log: PathBuf,
    /// The session number (seeds the mix together with `--seed`).
    #[arg(long)]
    session: u64,
    /// The run's seed.
    #[arg(long)]
    seed: u64,
    /// How many application revisions this session's build knows.
    #[arg(long)]
    revisions: usize,
    /// Planted bug: record every fifth append as acknowledged without making it.
    #[arg(long)]
    plant_lost_append: bool,
}

/// The application migration set of a build that knows `revisions` revisions: each creates a
/// table and fills a row, so an upgrade writes schema and data in one transaction.
pub(crate) fn app_set(revisions: usize) -> Result<cairn::MigrationSet, String> {
    let files: Vec<(String, String)> = (1..=revisions)
        .map(|i| {
            (
                format!("{i:04}_crash_t{i}.sql"),
                format!(
                    "CREATE TABLE crash_t{i} (id INTEGER PRIMARY KEY, v TEXT NOT NULL);\n\
                     INSERT INTO crash_t{i} (id, v) VALUES (1, 'r{i}');\n"
                ),
            )
        })
        .collect();
    cairn::MigrationSet::from_files("crash", files).map_err(|e| e.to_string())
}

/// The dedup key the side log names `token`.
pub(crate) fn dedup_key(token: &str) -> Result<DedupKey, Error> {
    DedupKey::from_parts(["crash", token])
}

/// What the child knows: the side log's acknowledged state plus this session's leases.
struct Known {
    epochs: BTreeMap<String, Vec<EpochId>>,
    last_seq: BTreeMap<String, u64>,
    runs: Vec<RunId>,
    leases: Vec<(RunId, LeaseToken)>,
    events: u64,
}

impl Known {
    fn from_log(entries: &[Entry]) -> Self {
        let mut known = Known {
            epochs: BTreeMap::new(),
            last_seq: BTreeMap::new(),
            runs: Vec::new(),
            leases: Vec::new(),
            events: 0,
        };
        for e in entries {
            match e {
                Entry::Append { space, seq, id } | Entry::Import { space, seq, id } => {
                    known.epochs.entry(space.clone()).or_default().push(*id);
                    let last = known.last_seq.entry(space.clone()).or_default();
                    *last = (*last).max(*seq);
                }
                Entry::Enqueue { run, .. } if !known.runs.contains(run) => known.runs.push(*run),
                _ => {}
            }
        }
        known
    }
}

/// Runs the child until it is killed. Returns only on a failure the mix does not expect.
pub(crate) fn run(args: &ChildArgs) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    runtime.block_on(work(args))
}

async fn work(args: &ChildArgs) -> Result<(), String> {
    let entries = log::read(&args.log)?;
    let mut known = Known::from_log(&entries);
    let mut side = SideLog::open(&args.log).map_err(|e| format!("side log: {e}"))?;
    let mut rng = Rng::seed(args.seed ^ args.session.wrapping_mul(0x2545_f491_4f6c_dd1d));
    let store = Store::builder(args.url.clone())
        .pool_size(2)
        .migrations(app_set(args.revisions)?)
        .open()
        .await
        .map_err(|e| format!("open: {e}"))?;
    record(
        &mut side,
        &Entry::Session {
            session: args.session,
            revisions: args.revisions,
        },
    )?;
    let me = ConsumerId::new(format!("crash-{}", args.session)).map_err(|e| e.to_string())?;
    let mut appends = 0u64;
    loop {
        let roll = rng.below(0..100);
        let result = match roll {
            0..25 => {
                appends += 1;
                if args.plant_lost_append && appends.is_multiple_of(5) {
                    plant_lost_append(&mut rng, &mut known, &mut side)
                } else {
                    append(&store, &mut rng, &mut known, &mut side).await
                }
            }
            25..31 => import(&store, &mut rng, &mut known, &mut side).await,
            31..51 => enqueue(&store, &mut rng, args.session, &mut known, &mut side).await,
            51..63 => claim(&store, &mut rng, &me, &mut known, &mut side).await,
            63..71 => ack(&store, &mut rng, &mut known, &mut side).await,
            71..76 => nack(&store, &mut rng, &mut known, &mut side).await,
            76..79 => cancel(&store, &mut rng, &known, &mut side).await,
            79..89 => event(&store, &mut rng, args.session, &mut known, &mut side).await,
            89..92 => acknowledge_events(&store, &mut rng, &known).await,
            92..97 => fact(&store, &mut rng, &known, &mut side).await,
            _ => retention(&store, &mut side).await,
        };
        match result {
            Ok(()) => {}
            Err(Step::Store(e)) if expected(&e) => {}
            Err(Step::Store(e)) => return Err(format!("unexpected store error: {e}")),
            Err(Step::Log(e)) => return Err(e),
        }
    }
}

/// Why a step stopped.
enum Step {
    /// The store refused or failed the call (nothing is recorded).
    Store(Error),
    /// The side log could not be written.
    Log(String),
}

impl From<Error> for Step {
    fn from(e: Error) -> Self {
        Step::Store(e)
    }
}

/// Verdicts the mix provokes on purpose (stale leases, finished runs, events for a finished run,
/// a second fact value) and a busy store: the operation did not happen and is not recorded.
fn expected(e: &Error) -> bool {
    matches!(
        e,
        Error::Retryable { .. }
            | Error::LeaseLost { .. }
            | Error::InvalidTransition { .. }
            | Error::FactConflict { .. }
            | Error::RunClosed { .. }
    )
}

fn record(side: &mut SideLog, entry: &Entry) -> Result<(), String> {
    side.record(entry).map_err(|e| format!("side log: {e}"))
}

fn logged(side: &mut SideLog, entry: &Entry) -> Result<(), Step> {
    record(side, entry).map_err(Step::Log)
}

fn pick<'a, T>(rng: &mut Rng, items: &'a [T]) -> Option<&'a T> {
    (!items.is_empty()).then(|| &items[rng.below(0..items.len())])
}

fn payload(rng: &mut Rng, min: usize, max: usize) -> Vec<u8> {
    let len = rng.below(min..max + 1);
    rng.bytes(len)
}

fn space(name: &str) -> Result<SpaceId, Step> {
    Ok(SpaceId::new(name.as_bytes().to_vec())?)
}

async fn append(
    store: &Store,
    rng: &mut Rng,
    known: &mut Known,
    side: &mut SideLog,
) -> Result<(), Step> {
    let name = SPACES[rng.below(0..SPACES.len())];
    let events = (0..rng.below(1..4))
        .map(|_| Event::new("crash.append", payload(rng, 8, 64)))
        .collect();
    let done = store.epochs().append(&space(name)?, events).await?;
    logged(
        side,
        &Entry::Append {
            space: name.to_owned(),
            seq: done.seq.0,
            id: done.id,
        },
    )?;
    known
        .epochs
        .entry(name.to_owned())
        .or_default()
        .push(done.id);
    known.last_seq.insert(name.to_owned(), done.seq.0);
    Ok(())
}

/// The planted bug of `--plant-lost-append`: an append recorded as acknowledged that the store
/// never saw. The verifier must report it.
fn plant_lost_append(rng: &mut Rng, known: &mut Known, side: &mut SideLog) -> Result<(), Step> {
    let name = SPACES[rng.below(0..SPACES.len())];
    let seq = known.last_seq.get(name).copied().unwrap_or(0) + 1;
    logged(
        side,
        &Entry::Append {
            space: name.to_owned(),
            seq,
            id: EpochId(rng.array32()),
        },
    )
}

/// Imports an epoch whose parent is a random known epoch of the space: when that is not the
/// head, the space forks and the next append merges.
async fn import(
    store: &Store,
    rng: &mut Rng,
    known: &mut Known,
    side: &mut SideLog,
) -> Result<(), Step> {
    let name = SPACES[rng.below(0..SPACES.len())];
    let Some(parent) = known.epochs.get(name).and_then(|e| pick(rng, e)).copied() else {
        return Ok(());
    };
    let sp = space(name)?;
    let event = Event::new("crash.import", payload(rng, 8, 32));
    let id = cairn::epoch_id(&sp, &[parent], &[event.id()]);
    let outcome = store
        .epochs()
        .import(ForeignEpoch {
            space: sp,
            id,
            parents: vec![parent],
            events: vec![event],
        })
        .await?;
    let seq = match outcome {
        ImportOutcome::Imported(seq) | ImportOutcome::AlreadyPresent(seq) => seq.0,
    };
    logged(
        side,
        &Entry::Import {
            space: name.to_owned(),
            seq,
            id,
        },
    )?;
    known.epochs.entry(name.to_owned()).or_default().push(id);
    let last = known.last_seq.entry(name.to_owned()).or_default();
    *last = (*last).max(seq);
    Ok(())
}

async fn enqueue(
    store: &Store,
    rng: &mut Rng,
    session: u64,
    known: &mut Known,
    side: &mut SideLog,
) -> Result<(), Step> {
    let queue = QUEUES[rng.below(0..QUEUES.len())];
    let token = if rng.chance(60) {
        format!("k{}", rng.within(0..=SHARED_KEYS - 1))
    } else {
        format!("u{session}-{}", rng.next_u64() % 1_000_000_000)
    };
    let options = EnqueueOptions {
        supersede_group: if rng.chance(30) {
            Some(SupersedeGroup::from_parts([format!(
                "g{}",
                rng.within(0..=2)
            )])?)
        } else {
            None
        },
        max_attempts: Some(rng.within(1..=4) as u32),
        priority: rng.within(0..=2) as i32 - 1,
        ..EnqueueOptions::default()
    };
    let done = store
        .spool()
        .enqueue(
            &QueueName::new(queue)?,
            &dedup_key(&token)?,
            payload(rng, 4, 64),
            options,
        )
        .await?;
    logged(
        side,
        &Entry::Enqueue {
            queue: queue.to_owned(),
            key: token,
            run: done.run_id,
        },
    )?;
    if !known.runs.contains(&done.run_id) {
        known.runs.push(done.run_id);
    }
    Ok(())
}

async fn claim(
    store: &Store,
    rng: &mut Rng,
    me: &ConsumerId,
    known: &mut Known,
    side: &mut SideLog,
) -> Result<(), Step> {
    let queue = QueueName::new(QUEUES[rng.below(0..QUEUES.len())])?;
    let claimed = store
        .spool()
        .claim(&queue, me, LEASE, rng.below(1..4))
        .await?;
    for c in claimed {
        logged(
            side,
            &Entry::Claim {
                run: c.run_id,
                attempt: c.attempt,
            },
        )?;
        known.leases.push((c.run_id, c.token));
    }
    Ok(())
}

fn take_lease(rng: &mut Rng, known: &mut Known) -> Option<(RunId, LeaseToken)> {
    (!known.leases.is_empty()).then(|| {
        let i = rng.below(0..known.leases.len());
        known.leases.swap_remove(i)
    })
}

async fn ack(
    store: &Store,
    rng: &mut Rng,
    known: &mut Known,
    side: &mut SideLog,
) -> Result<(), Step> {
    // Half the time 2–4 acks go out at once: one spool instance batches concurrent acks (on
    // Postgres one `ACK_MANY` statement on the ack lane, on SQLite one write group), so kills
    // land inside a batch too. Each ack is logged once its own call returned `Ok`.
    let n = if rng.below(0..2) == 0 {
        1
    } else {
        rng.below(2..5)
    };
    let leases: Vec<(RunId, LeaseToken)> = (0..n).filter_map(|_| take_lease(rng, known)).collect();
    let spool = store.spool();
    let mut acks = tokio::task::JoinSet::new();
    for (run, token) in leases {
        let spool = spool.clone();
        acks.spawn(async move { (run, spool.ack(run, token).await) });
    }
    // Of several refusals, an unexpected one is what the step reports.
    let mut refused: Option<Error> = None;
    while let Some(done) = acks.join_next().await {
        let (run, result) = done.map_err(|e| Step::Log(format!("an ack task failed: {e}")))?;
        match result {
            Ok(()) => logged(side, &Entry::Ack { run })?,
            Err(e) => {
                if refused.as_ref().is_none_or(expected) {
                    refused = Some(e);
                }
            }
        }
    }
    refused.map_or(Ok(()), |e| Err(Step::Store(e)))
}

async fn nack(
    store: &Store,
    rng: &mut Rng,
    known: &mut Known,
    side: &mut SideLog,
) -> Result<(), Step> {
    let Some((run, token)) = take_lease(rng, known) else {
        return Ok(());
    };
    let kind = match rng.within(0..=2) {
        0 => NackKind::Retryable,
        1 => NackKind::Permanent,
        _ => NackKind::Failed,
    };
    let done = store.spool().nack(run, token, kind, "crash mix").await?;
    logged(
        side,
        &Entry::Nack {
            run,
            state: done.state,
        },
    )
}

async fn cancel(
    store: &Store,
    rng: &mut Rng,
    known: &Known,
    side: &mut SideLog,
) -> Result<(), Step> {
    let Some(&run) = pick(rng, &known.runs) else {
        return Ok(());
    };
    match store.spool().cancel(run).await? {
        CancelOutcome::Canceled => logged(side, &Entry::Cancel { run }),
        _ => Ok(()),
    }
}

async fn event(
    store: &Store,
    rng: &mut Rng,
    session: u64,
    known: &mut Known,
    side: &mut SideLog,
) -> Result<(), Step> {
    let Some(&run) = pick(rng, &known.runs) else {
        return Ok(());
    };
    known.events += 1;
    let id = format!("e{session}-{}", known.events);
    let done = store
        .spool()
        .append_event(
            run,
            &RunEventId::new(id.clone().into_bytes())?,
            payload(rng, 64, 512),
        )
        .await?;
    logged(
        side,
        &Entry::Event {
            run,
            seq: done.seq,
            event: id,
        },
    )
}

async fn acknowledge_events(store: &Store, rng: &mut Rng, known: &Known) -> Result<(), Step> {
    let Some(&run) = pick(rng, &known.runs) else {
        return Ok(());
    };
    let events = store.spool().events(run, 0, 4).await?;
    let ids: Vec<RunEventId> = events.into_iter().map(|e| e.event_id).take(2).collect();
    store.spool().acknowledge_events(run, &ids).await?;
    Ok(())
}

async fn fact(store: &Store, rng: &mut Rng, known: &Known, side: &mut SideLog) -> Result<(), Step> {
    let Some(&run) = pick(rng, &known.runs) else {
        return Ok(());
    };
    let name = format!("f{}", rng.within(0..=2));
    let value = if rng.chance(50) {
        b"yes".to_vec()
    } else {
        b"no".to_vec()
    };
    // `Set` and `AlreadySet` both mean the store holds this value; a different stored value
    // is a `FactConflict`, which is not recorded.
    store
        .spool()
        .set_fact(
            run,
            &cairn::spool::FactName::new(name.clone())?,
            value.clone(),
        )
        .await?;
    logged(side, &Entry::Fact { run, name, value })
}

/// A retention pass with a small byte cap, so it deletes events in several batches; the age
/// limit stays a week, so no run the verifier expects is removed.
async fn retention(store: &Store, side: &mut SideLog) -> Result<(), Step> {
    let policy = RetentionPolicy {
        max_bytes: 24 * 1024,
        ..RetentionPolicy::default()
    };
    let budget = RetentionBudget {
        batch_size: 16,
        max_batches: 32,
        max_duration: Duration::from_secs(2),
    };
    store.spool().retention_pass(&policy, &budget).await?;
    logged(side, &Entry::Retention)
}
