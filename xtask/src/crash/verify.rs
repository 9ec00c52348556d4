//! After every crash: read the store through the public API into a [`Snapshot`] and hold it to
//! the side log. [`check`] is pure, so its rules are unit-tested against planted faults.

use std::collections::{BTreeMap, BTreeSet};

use cairn::spool::{RunFilter, MAX_BATCH};
use cairn::{EpochId, FeedCursor, RepairOutcome, RunId, RunState, SpaceId, Store};

use super::log::Entry;

/// One run as the verifier sees it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub(crate) struct RunView {
    pub(crate) queue: String,
    /// The dedup key's last part (the side log's key token).
    pub(crate) key: String,
    pub(crate) state: RunState,
    pub(crate) attempts: u32,
    pub(crate) facts: BTreeMap<String, Vec<u8>>,
}

/// What the store holds, read through the public API.
#[derive(Clone, Default, Debug)]
pub(crate) struct Snapshot {
    /// Per space, every epoch in feed order: `(seq, id)`.
    pub(crate) epochs: BTreeMap<String, Vec<(u64, EpochId)>>,
    /// Every run, from the unfiltered listing.
    pub(crate) runs: BTreeMap<RunId, RunView>,
    /// Per run, the states whose filtered listing named it.
    pub(crate) listed: BTreeMap<RunId, Vec<RunState>>,
    /// Run counts per state from `stats()`.
    pub(crate) counted: BTreeMap<RunState, u64>,
    /// Per run the log wrote events to: the stored events `(seq, event id)`.
    pub(crate) events: BTreeMap<RunId, Vec<(u64, String)>>,
}

/// Findings that are not violations.
#[derive(Clone, Copy, Default, Debug)]
pub(crate) struct Notes {
    /// Spaces whose head cache differed from the anti-join and was repaired.
    pub(crate) caches_repaired: u64,
}

/// Reads the snapshot and checks the head cache of every space (repairing a stale one);
/// returns the head-cache violations with it.
pub(crate) async fn collect(
    store: &Store,
    entries: &[Entry],
) -> Result<(Snapshot, Vec<String>, Notes), cairn::Error> {
    let mut snap = Snapshot::default();
    let mut violations = Vec::new();
    let mut notes = Notes::default();
    let epochs = store.epochs();
    let diag = store.diagnostics();
    let mut after: Option<SpaceId> = None;
    loop {
        let spaces = epochs.list_spaces(after.as_ref(), 100).await?;
        let Some(last) = spaces.last().cloned() else {
            break;
        };
        for space in spaces {
            let name = String::from_utf8_lossy(space.as_bytes()).into_owned();
            let mut list: Vec<(u64, EpochId)> = Vec::new();
            let mut cursor: Option<FeedCursor> = None;
            loop {
                let page = epochs.events_since(&space, cursor.as_ref(), 500).await?;
                if page.events.is_empty() {
                    break;
                }
                for e in &page.events {
                    if list.last().map(|l| l.1) != Some(e.epoch) {
                        list.push((e.seq.0, e.epoch));
                    }
                }
                cursor = Some(page.next.clone());
            }
            snap.epochs.insert(name.clone(), list);

            let computed = diag.computed_heads(&space).await?;
            if epochs.heads(&space).await? != computed {
                violations.push(format!("space {name}: heads() differ from the anti-join"));
            }
            let mut cached = diag.cached_heads(&space).await?;
            if cached != computed {
                notes.caches_repaired += 1;
                match epochs.repair_heads(&space).await? {
                    RepairOutcome::Rewritten { after, .. } if after == computed => {}
                    other => violations.push(format!(
                        "space {name}: repair of a stale cache returned {other:?}, not the anti-join"
                    )),
                }
                cached = diag.cached_heads(&space).await?;
                if cached != computed {
                    violations.push(format!(
                        "space {name}: the cache still differs after repair"
                    ));
                }
            }
            let next = diag.next_seq(&space).await?;
            let max_cached = cached.iter().map(|h| h.seq.0).max().unwrap_or(0);
            if max_cached + 1 != next.0 {
                violations.push(format!(
                    "space {name}: cache not current (max cached seq {max_cached}, next seq {next})"
                ));
            }
        }
        after = Some(last);
    }

    let spool = store.spool();
    let mut filter = RunFilter::default();
    loop {
        let page = spool.runs(&filter, MAX_BATCH).await?;
        let Some(last) = page.last().map(|r| r.run_id) else {
            break;
        };
        for r in page {
            let key = r
                .dedup_key
                .parts()
                .and_then(|p| p.last().cloned())
                .map(|k| String::from_utf8_lossy(&k).into_owned())
                .unwrap_or_default();
            snap.runs.insert(
                r.run_id,
                RunView {
                    queue: r.queue.as_str().to_owned(),
                    key,
                    state: r.state,
                    attempts: r.attempts,
                    facts: r
                        .facts
                        .iter()
                        .map(|(n, v)| (n.as_str().to_owned(), v.clone()))
                        .collect(),
                },
            );
        }
        filter.after = Some(last);
    }
    for state in RunState::ALL {
        let mut filter = RunFilter {
            state: Some(state),
            ..RunFilter::default()
        };
        loop {
            let page = spool.runs(&filter, MAX_BATCH).await?;
            let Some(last) = page.last().map(|r| r.run_id) else {
                break;
            };
            for r in page {
                snap.listed.entry(r.run_id).or_default().push(state);
            }
            filter.after = Some(last);
        }
    }
    snap.counted = spool.stats().await?.runs;
    let with_events: BTreeSet<RunId> = entries
        .iter()
        .filter_map(|e| match e {
            Entry::Event { run, .. } => Some(*run),
            _ => None,
        })
        .collect();
    for run in with_events {
        if !snap.runs.contains_key(&run) {
            continue;
        }
        let mut stored = Vec::new();
        let mut after = 0;
        loop {
            let page = spool.events(run, after, MAX_BATCH).await?;
            let Some(last) = page.last().map(|e| e.seq) else {
                break;
            };
            stored.extend(page.into_iter().map(|e| {
                (
                    e.seq,
                    String::from_utf8_lossy(e.event_id.as_bytes()).into_owned(),
                )
            }));
            after = last;
        }
        snap.events.insert(run, stored);
    }
    Ok((snap, violations, notes))
}

/// Holds the snapshot to the side log; returns one line per violation.
pub(crate) fn check(entries: &[Entry], snap: &Snapshot) -> Vec<String> {
    let mut v = Vec::new();
    check_epochs(entries, snap, &mut v);
    check_runs(entries, snap, &mut v);
    v
}

fn check_epochs(entries: &[Entry], snap: &Snapshot, v: &mut Vec<String>) {
    let mut by_id: BTreeMap<(&str, EpochId), u64> = BTreeMap::new();
    for (space, list) in &snap.epochs {
        let mut ids = BTreeSet::new();
        for (i, (seq, id)) in list.iter().enumerate() {
            let want = i as u64 + 1;
            if *seq != want {
                v.push(format!(
                    "space {space}: the feed's epoch #{want} has seq {seq}; seqs must be 1, 2, 3, …"
                ));
                break;
            }
            if !ids.insert(*id) {
                v.push(format!("space {space}: epoch {id} appears twice"));
            }
            by_id.insert((space.as_str(), *id), *seq);
        }
    }
    let mut last_append: BTreeMap<&str, u64> = BTreeMap::new();
    for e in entries {
        let (Entry::Append { space, seq, id } | Entry::Import { space, seq, id }) = e else {
            continue;
        };
        match by_id.get(&(space.as_str(), *id)) {
            None => v.push(format!(
                "space {space}: acknowledged epoch {id} (seq {seq}) is missing"
            )),
            Some(stored) if stored != seq => v.push(format!(
                "space {space}: acknowledged epoch {id} had seq {seq}, the store says {stored}"
            )),
            Some(_) => {}
        }
        if let Entry::Append { .. } = e {
            let last = last_append.entry(space.as_str()).or_insert(0);
            if *seq <= *last {
                v.push(format!(
                    "space {space}: append acknowledged with seq {seq} after one with seq {last}"
                ));
            }
            *last = (*last).max(*seq);
        }
    }
}

fn check_runs(entries: &[Entry], snap: &Snapshot, v: &mut Vec<String>) {
    let mut tally: BTreeMap<RunState, u64> = BTreeMap::new();
    for (run, view) in &snap.runs {
        match snap.listed.get(run).map(Vec::as_slice) {
            Some([only]) if *only == view.state => {}
            other => v.push(format!(
                "run {run}: is {:?} but the state listings name it in {other:?}",
                view.state
            )),
        }
        *tally.entry(view.state).or_default() += 1;
    }
    for run in snap.listed.keys() {
        if !snap.runs.contains_key(run) {
            v.push(format!(
                "run {run}: in a state listing but not in the full listing"
            ));
        }
    }
    for state in RunState::ALL {
        let counted = snap.counted.get(&state).copied().unwrap_or(0);
        let listed = tally.get(&state).copied().unwrap_or(0);
        if counted != listed {
            v.push(format!(
                "stats() counts {counted} {} runs, the listing {listed}",
                state.as_str()
            ));
        }
    }
    let mut keys: BTreeMap<(&str, &str), RunId> = BTreeMap::new();
    for (run, view) in &snap.runs {
        if let Some(other) = keys.insert((&view.queue, &view.key), *run) {
            v.push(format!(
                "queue {} key {}: two runs, {other} and {run}",
                view.queue, view.key
            ));
        }
    }

    let mut enqueued: BTreeMap<(&str, &str), RunId> = BTreeMap::new();
    let mut event_seqs: BTreeMap<RunId, u64> = BTreeMap::new();
    for e in entries {
        let run = match e {
            Entry::Enqueue { run, .. }
            | Entry::Claim { run, .. }
            | Entry::Ack { run }
            | Entry::Nack { run, .. }
            | Entry::Cancel { run }
            | Entry::Event { run, .. }
            | Entry::Fact { run, .. } => *run,
            _ => continue,
        };
        let Some(view) = snap.runs.get(&run) else {
            v.push(format!("run {run}: acknowledged ({e:?}) but missing"));
            continue;
        };
        match e {
            Entry::Enqueue { queue, key, .. } => {
                if view.queue != *queue || view.key != *key {
                    v.push(format!(
                        "run {run}: enqueued as {queue}/{key}, stored as {}/{}",
                        view.queue, view.key
                    ));
                }
                if let Some(first) = enqueued.insert((queue, key), run) {
                    if first != run {
                        v.push(format!(
                            "queue {queue} key {key}: acknowledged as run {first} and as run {run}"
                        ));
                    }
                }
            }
            Entry::Claim { attempt, .. } if view.attempts < *attempt => v.push(format!(
                "run {run}: claimed for attempt {attempt}, stored attempts {}",
                view.attempts
            )),
            Entry::Ack { .. } if view.state != RunState::Succeeded => {
                v.push(format!("run {run}: acked but {}", view.state.as_str()))
            }
            Entry::Nack { state, .. } if state.is_terminal() && view.state != *state => {
                v.push(format!(
                    "run {run}: nacked to {} but {}",
                    state.as_str(),
                    view.state.as_str()
                ));
            }
            Entry::Cancel { .. } if view.state != RunState::Canceled => {
                v.push(format!("run {run}: canceled but {}", view.state.as_str()))
            }
            Entry::Event { seq, event, .. } => {
                let last = event_seqs.entry(run).or_insert(0);
                if *seq <= *last {
                    v.push(format!(
                        "run {run}: event {event} acknowledged with seq {seq} after seq {last}"
                    ));
                }
                *last = (*last).max(*seq);
                let stored = snap.events.get(&run).into_iter().flatten();
                if let Some((s, _)) = stored.clone().find(|(_, id)| id == event) {
                    if s != seq {
                        v.push(format!(
                            "run {run}: event {event} had seq {seq}, stored {s}"
                        ));
                    }
                }
            }
            Entry::Fact { name, value, .. } if view.facts.get(name) != Some(value) => {
                v.push(format!(
                    "run {run}: fact {name} acknowledged as {value:?}, stored {:?}",
                    view.facts.get(name)
                ));
            }
            _ => {}
        }
    }
    for (run, stored) in &snap.events {
        if stored.windows(2).any(|w| w[0].0 >= w[1].0) {
            v.push(format!(
                "run {run}: stored event seqs are not strictly increasing"
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(n: u8) -> RunId {
        RunId([n; 16])
    }

    /// A consistent pair: two epochs in s0, one run enqueued twice, claimed, acked, with an
    /// event and a fact.
    fn consistent() -> (Vec<Entry>, Snapshot) {
        let r = run(1);
        let entries = vec![
            Entry::Append {
                space: "s0".into(),
                seq: 1,
                id: EpochId([1; 32]),
            },
            Entry::Import {
                space: "s0".into(),
                seq: 2,
                id: EpochId([2; 32]),
            },
            Entry::Enqueue {
                queue: "q0".into(),
                key: "k1".into(),
                run: r,
            },
            Entry::Enqueue {
                queue: "q0".into(),
                key: "k1".into(),
                run: r,
            },
            Entry::Claim { run: r, attempt: 1 },
            Entry::Ack { run: r },
            Entry::Event {
                run: r,
                seq: 1,
                event: "e1".into(),
            },
            Entry::Fact {
                run: r,
                name: "f0".into(),
                value: b"yes".to_vec(),
            },
        ];
        let mut snap = Snapshot::default();
        snap.epochs.insert(
            "s0".into(),
            vec![(1, EpochId([1; 32])), (2, EpochId([2; 32]))],
        );
        snap.runs.insert(
            r,
            RunView {
                queue: "q0".into(),
                key: "k1".into(),
                state: RunState::Succeeded,
                attempts: 1,
                facts: [("f0".to_owned(), b"yes".to_vec())].into(),
            },
        );
        snap.listed.insert(r, vec![RunState::Succeeded]);
        snap.counted.insert(RunState::Succeeded, 1);
        snap.events.insert(r, vec![(1, "e1".into())]);
        (entries, snap)
    }

    #[test]
    fn a_consistent_store_passes() {
        let (entries, snap) = consistent();
        assert_eq!(check(&entries, &snap), Vec::<String>::new());
    }

    /// Each planted fault is one way a store could lose or undo an acknowledged write; the
    /// verifier must name every one.
    #[test]
    fn every_planted_fault_is_reported() {
        type Plant = fn(&mut Vec<Entry>, &mut Snapshot);
        let plants: [(&str, Plant); 11] = [
            ("lost epoch", |_, s| {
                s.epochs.get_mut("s0").unwrap().pop();
            }),
            ("seq gap", |_, s| {
                s.epochs.get_mut("s0").unwrap()[1].0 = 3;
            }),
            ("seq reused after a crash", |e, s| {
                e.push(Entry::Append {
                    space: "s0".into(),
                    seq: 1,
                    id: EpochId([9; 32]),
                });
                s.epochs.get_mut("s0").unwrap().push((3, EpochId([9; 32])));
            }),
            ("lost run", |_, s| {
                s.runs.clear();
                s.listed.clear();
                s.counted.clear();
            }),
            ("second run for a key", |e, _| {
                e.push(Entry::Enqueue {
                    queue: "q0".into(),
                    key: "k1".into(),
                    run: run(2),
                });
            }),
            ("ack undone", |_, s| {
                s.runs.get_mut(&run(1)).unwrap().state = RunState::Queued;
                s.listed.insert(run(1), vec![RunState::Queued]);
                s.counted = [(RunState::Queued, 1)].into();
            }),
            ("run in two states", |_, s| {
                s.listed
                    .insert(run(1), vec![RunState::Succeeded, RunState::Queued]);
            }),
            ("stats disagree", |_, s| {
                s.counted.insert(RunState::Parked, 1);
            }),
            ("event seq reused", |e, _| {
                e.push(Entry::Event {
                    run: run(1),
                    seq: 1,
                    event: "e2".into(),
                });
            }),
            ("fact lost", |_, s| {
                s.runs.get_mut(&run(1)).unwrap().facts.clear();
            }),
            ("claim attempt lost", |_, s| {
                s.runs.get_mut(&run(1)).unwrap().attempts = 0;
            }),
        ];
        for (name, plant) in plants {
            let (mut entries, mut snap) = consistent();
            plant(&mut entries, &mut snap);
            assert!(
                !check(&entries, &snap).is_empty(),
                "the planted fault `{name}` went unreported"
            );
        }
    }
}
