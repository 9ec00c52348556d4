//! What the `cairn sync` tests share: the binary with a clean environment, and the checks
//! that read both stores with the library (heads, head caches, the epochs themselves, the
//! cursors).

// Each test binary compiles its own copy of this module and uses a part of it.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::process::{Command, Output};
use std::sync::Arc;

use cairn::{
    EpochDiagnostics, EpochId, EpochStore, Event, ForeignEpoch, RepairOutcome, SpaceId, Store,
};

/// The `cairn` binary with no `CAIRN_…` variable of the test's own environment.
pub(crate) fn cairn() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cairn"));
    for (var, _) in std::env::vars_os() {
        if var.to_string_lossy().starts_with("CAIRN_") {
            cmd.env_remove(var);
        }
    }
    cmd
}

/// Runs `cairn sync args…`.
pub(crate) fn sync(args: &[&str]) -> Output {
    cairn()
        .arg("sync")
        .args(args)
        .output()
        .expect("the cairn binary runs")
}

/// Asserts success with nothing on stderr; returns stdout.
pub(crate) fn ok(out: Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "cairn sync failed ({:?}): {err}",
        out.status
    );
    assert_eq!(err, "", "a successful sync prints nothing on stderr");
    String::from_utf8(out.stdout).expect("stdout is UTF-8")
}

/// Asserts the error contract (status 1, nothing on stdout, one `cairn: …` line on stderr);
/// returns the message.
pub(crate) fn fails(out: Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "exit status; stderr: {err}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "",
        "nothing on stdout"
    );
    assert_eq!(err.lines().count(), 1, "one line on stderr: {err:?}");
    err.strip_prefix("cairn: ")
        .unwrap_or_else(|| panic!("stderr starts with `cairn: `: {err:?}"))
        .trim_end()
        .to_owned()
}

/// The `key=value` words of a report line.
pub(crate) fn words(line: &str) -> BTreeMap<String, String> {
    line.split(' ')
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// The value of `key` on the `total …` line of a report.
pub(crate) fn total(report: &str, key: &str) -> u64 {
    let line = report
        .lines()
        .find(|l| l.starts_with("total "))
        .unwrap_or_else(|| panic!("a `total` line: {report}"));
    words(line)[key].parse().expect("a count")
}

/// A current-thread runtime for the library calls of a synchronous test.
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

pub(crate) fn space(name: &str) -> SpaceId {
    SpaceId::new(name).unwrap()
}

/// Opens (creating) the store at `url`.
pub(crate) async fn open(url: &str) -> Store {
    Store::open(url).await.expect("the store opens")
}

/// Appends `n` epochs of one event each (`tag-i`), each `pad` bytes of payload or more.
pub(crate) async fn append(store: &dyn EpochStore, space: &SpaceId, tag: &str, n: usize) {
    for i in 0..n {
        store
            .append(space, vec![Event::new("note", format!("{tag}-{i}"))])
            .await
            .unwrap();
    }
}

/// The head ids, sorted (seqs are each store's own).
pub(crate) async fn head_ids(store: &dyn EpochStore, space: &SpaceId) -> Vec<EpochId> {
    let mut ids: Vec<EpochId> = store
        .heads(space)
        .await
        .unwrap()
        .iter()
        .map(|h| h.id)
        .collect();
    ids.sort();
    ids
}

/// Every epoch of the space with its events, by id (empty for a space with no epoch).
pub(crate) async fn epochs(
    store: &Arc<dyn EpochDiagnostics>,
    space: &SpaceId,
) -> BTreeMap<EpochId, ForeignEpoch> {
    let mut out = BTreeMap::new();
    for id in ids(store, space).await {
        let e = store
            .epoch(space, &id)
            .await
            .unwrap()
            .expect("listed epoch");
        out.insert(id, e.to_foreign());
    }
    out
}

/// Every epoch id of the space with its parents, by local seq (ascending).
pub(crate) async fn summaries(
    store: &Arc<dyn EpochDiagnostics>,
    space: &SpaceId,
) -> Vec<(u64, EpochId, Vec<EpochId>)> {
    let mut out = Vec::new();
    let mut before = None;
    loop {
        let page = match store
            .recent_epochs(space, before, cairn::MAX_RECENT_EPOCHS)
            .await
        {
            Ok(p) => p,
            Err(cairn::Error::NotFound { .. }) => break,
            Err(e) => panic!("recent epochs: {e}"),
        };
        let Some(last) = page.last() else { break };
        before = Some(last.seq);
        let full = page.len() == cairn::MAX_RECENT_EPOCHS;
        out.extend(page.into_iter().map(|s| (s.seq.0, s.id, s.parents)));
        if !full {
            break;
        }
    }
    out.reverse();
    out
}

async fn ids(store: &Arc<dyn EpochDiagnostics>, space: &SpaceId) -> Vec<EpochId> {
    summaries(store, space)
        .await
        .into_iter()
        .map(|(_, id, _)| id)
        .collect()
}

/// How many epochs the space holds.
pub(crate) async fn count(store: &Arc<dyn EpochDiagnostics>, space: &SpaceId) -> u64 {
    store.next_seq(space).await.unwrap().0 - 1
}

/// The store's view of the space is sound: heads, computed heads and cache rows agree, a
/// repair finds nothing to do, every epoch's parents are there, and seqs run 1..=n.
pub(crate) async fn assert_consistent(store: &Arc<dyn EpochDiagnostics>, space: &SpaceId) {
    let all = summaries(store, space).await;
    if all.is_empty() {
        assert!(store.cached_heads(space).await.unwrap().is_empty());
        return;
    }
    let heads = store.heads(space).await.unwrap();
    assert_eq!(
        heads,
        store.computed_heads(space).await.unwrap(),
        "computed heads"
    );
    assert_eq!(
        heads,
        store.cached_heads(space).await.unwrap(),
        "cached heads"
    );
    assert_eq!(
        store.repair_heads(space).await.unwrap(),
        RepairOutcome::Unchanged,
        "repair finds the cache exact"
    );
    let held: HashSet<EpochId> = all.iter().map(|(_, id, _)| *id).collect();
    for (seq, id, parents) in &all {
        for p in parents {
            assert!(
                held.contains(p),
                "epoch {id} (seq {seq}) lacks its parent {p}"
            );
        }
    }
    let seqs: Vec<u64> = all.iter().map(|(s, _, _)| *s).collect();
    let want: Vec<u64> = (1..=all.len() as u64).collect();
    assert_eq!(seqs, want, "seqs run from 1 without a gap");
}

/// Both stores hold the same epochs (ids, parents, events) and the same heads, and each is
/// consistent.
pub(crate) async fn assert_same(
    a: &Arc<dyn EpochDiagnostics>,
    b: &Arc<dyn EpochDiagnostics>,
    space: &SpaceId,
) {
    assert_consistent(a, space).await;
    assert_consistent(b, space).await;
    assert_eq!(
        head_ids(a.as_ref(), space).await,
        head_ids(b.as_ref(), space).await,
        "the same heads"
    );
    let (ea, eb) = (epochs(a, space).await, epochs(b, space).await);
    let (ka, kb): (BTreeSet<_>, BTreeSet<_>) = (ea.keys().collect(), eb.keys().collect());
    assert_eq!(
        ka.symmetric_difference(&kb).count(),
        0,
        "the same epoch ids ({} and {})",
        ka.len(),
        kb.len()
    );
    assert!(ea == eb, "the same epochs, parents and events");
}
