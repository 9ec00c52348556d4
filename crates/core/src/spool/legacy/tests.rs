//! The legacy planner on directories built record by record, and its properties: every
//! truncation of a valid log imports exactly the complete records (reporting the torn rest),
//! and any flipped byte before the last newline refuses the import at the line it hit.

use std::collections::BTreeMap;

use proptest::prelude::*;
use serde_json::{json, Value};

use super::*;
use crate::spool::{DedupKey, ImportedRun, RunId, RunState, Timestamp};
use crate::Error;

fn id(n: u32) -> String {
    format!("0190a5c0-0000-7000-8000-{n:012x}")
}

fn rid(n: u32) -> RunId {
    RunId::parse(&id(n)).unwrap()
}

/// A run record; `extra` members are merged in.
fn run(n: u32, state: &str, attempts: u32, extra: Value) -> Value {
    let mut v = json!({
        "run_id": id(n), "gate": "ci", "ref": "refs/heads/main", "input_sha": format!("sha{n}"),
        "payload": format!("{{\"n\":{n}}}"), "state": state, "attempts": attempts,
        "created_ms": 1_700_000_000_000i64 + i64::from(n), "updated_ms": 1_700_000_100_000i64,
    });
    if !matches!(state, "queued" | "running") {
        v["finished_ms"] = json!(1_700_000_200_000i64);
    }
    if let (Value::Object(m), Value::Object(e)) = (&mut v, extra) {
        m.extend(e);
    }
    v
}

fn line(v: &Value) -> String {
    format!("{}\n", seal_record(&v.to_string()).unwrap())
}

fn file(records: &[Value]) -> Vec<u8> {
    records.iter().map(line).collect::<String>().into_bytes()
}

fn checkpoint(generation: u64, runs: &[Value], events: &[Value], drained: u64) -> Vec<u8> {
    let mut recs = vec![json!({
        "kind": "checkpoint", "format": 1, "generation": generation, "runs": runs.len(),
        "events": events.len(), "spool_drained": drained, "written_ms": 1_700_000_300_000i64,
    })];
    recs.extend(runs.iter().map(|r| json!({"kind": "run", "run": r})));
    recs.extend(events.iter().cloned());
    file(&recs)
}

fn cp_event(run: u32, event: &str) -> Value {
    json!({"kind": "event", "run_id": id(run), "event_id": event, "payload": format!("p-{event}"), "at_ms": 1_700_000_050_000i64})
}

/// A log record of `gen`, `seq`.
fn wal(gen: u64, seq: u64, op: &str, fields: Value) -> Value {
    let mut v = json!({"gen": gen, "seq": seq, "op": op});
    if let (Value::Object(m), Value::Object(e)) = (&mut v, fields) {
        m.extend(e);
    }
    v
}

fn submission(n: u32, sha: &str, extra: Value) -> Value {
    let mut v = json!({
        "run_id": id(n), "gate": "ci", "ref": "refs/heads/main", "input_sha": sha,
        "payload": "{}", "submitted_ms": 1_700_000_400_000i64 + i64::from(n),
    });
    if let (Value::Object(m), Value::Object(e)) = (&mut v, extra) {
        m.extend(e);
    }
    v
}

fn files(cp: Option<Vec<u8>>, w: Option<Vec<u8>>, s: Option<Vec<u8>>) -> LegacyFiles {
    LegacyFiles {
        label: "/var/lib/made".into(),
        checkpoint: cp,
        wal: w,
        spool: s,
    }
}

fn plan_of(f: &LegacyFiles) -> Result<ImportPlan, LegacyError> {
    plan(f, &LegacyOptions::default())
}

fn by_id(p: &ImportPlan) -> BTreeMap<RunId, &ImportedRun> {
    p.runs.iter().map(|r| (r.run_id, r)).collect()
}

#[track_caller]
fn refused(f: &LegacyFiles, want_file: &str, want_line: u64) -> RecordProblem {
    match plan_of(f) {
        Err(LegacyError::Record {
            file,
            line,
            problem,
        }) => {
            assert_eq!((file, line), (want_file, want_line), "{problem}");
            problem
        }
        other => panic!("expected a refusal at {want_file}:{want_line}, got {other:?}"),
    }
}

/// [`refused`] where the problem must be a `Field` one: its field and reason.
fn refused_field(f: &LegacyFiles, want_file: &str, want_line: u64) -> (&'static str, String) {
    match refused(f, want_file, want_line) {
        RecordProblem::Field { field, reason } => (field, reason),
        other => panic!("expected a field problem, got {other:?}"),
    }
}

#[test]
fn a_directory_becomes_runs_with_ids_keys_events_and_facts() {
    let cp = checkpoint(
        3,
        &[
            run(
                1,
                "succeeded",
                1,
                json!({"stages": {"build": "passed"}, "decision": "approve", "merged_sha": "abc"}),
            ),
            run(2, "running", 1, json!({})),
            run(
                3,
                "queued",
                2,
                json!({"not_before_ms": 1_700_000_900_000i64, "last_error": "flaky", "supersede": ["repo", "main"]}),
            ),
        ],
        &[cp_event(1, "e1"), cp_event(1, "e2")],
        0,
    );
    let spool_lines = [
        submission(1, "sha1", json!({})),
        submission(7, "sha7", json!({"supersede": ["repo", "main"]})),
        submission(8, "sha4", json!({})),
    ];
    let first_len = line(&spool_lines[0]).len() as u64;
    let w = file(&[
        // A stale record of the generation the checkpoint folded in: never replayed.
        wal(2, 1, "run", json!({"run": run(1, "failed", 1, json!({}))})),
        wal(
            3,
            1,
            "event",
            json!({"run_id": id(2), "event_id": "b1", "payload": "x", "at_ms": 1}),
        ),
        wal(
            3,
            2,
            "ack",
            json!({"run_id": id(1), "event_ids": ["e1", "nope"]}),
        ),
        wal(3, 3, "run", json!({"run": run(4, "queued", 0, json!({}))})),
        wal(
            3,
            4,
            "event",
            json!({"run_id": id(2), "event_id": "b1", "payload": "x", "at_ms": 1}),
        ),
        wal(3, 5, "drain", json!({"through": first_len})),
    ]);
    let p = plan_of(&files(Some(cp), Some(w), Some(file(&spool_lines)))).unwrap();
    let runs = by_id(&p);
    assert_eq!(
        runs.keys().copied().collect::<Vec<_>>(),
        vec![rid(1), rid(2), rid(3), rid(4), rid(7)]
    );
    let a = runs[&rid(1)];
    assert_eq!(a.state, RunState::Succeeded, "the stale log did not replay");
    assert_eq!(
        a.dedup_key,
        DedupKey::from_parts(["ci", "refs/heads/main", "sha1"]).unwrap()
    );
    assert_eq!(a.events.len(), 1);
    assert_eq!(a.events[0].event_id.as_bytes(), b"e2");
    assert_eq!(
        a.events[0].payload, b"p-e2",
        "the checkpoint event's payload"
    );
    assert_eq!(
        a.events[0].created_at,
        Timestamp::from_unix_micros(1_700_000_050_000_000)
    );
    let facts: Vec<(&str, &[u8])> = a
        .facts
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_slice()))
        .collect();
    assert_eq!(
        facts,
        vec![
            ("decision", &b"approve"[..]),
            ("merged", b"abc"),
            ("stage.build", b"passed")
        ]
    );
    let b = runs[&rid(2)];
    assert_eq!((b.state, b.attempts), (RunState::Queued, 1));
    assert_eq!(b.events.len(), 1, "a re-appended event is a no-op");
    assert_eq!(
        (b.events[0].event_id.as_bytes(), &b.events[0].payload[..]),
        (&b"b1"[..], &b"x"[..]),
        "the log event's payload"
    );
    assert_eq!(b.events[0].created_at, Timestamp::from_unix_micros(1000));
    assert_eq!(
        runs[&rid(3)].state,
        RunState::Superseded,
        "a pending submission supersedes its group's queued runs"
    );
    assert_eq!(runs[&rid(4)].state, RunState::Queued);
    let e = runs[&rid(7)];
    assert_eq!((e.state, e.attempts), (RunState::Queued, 0));
    assert_eq!(
        e.due_at,
        Some(Timestamp::from_unix_micros(1_700_000_400_007_000))
    );
    assert_eq!(
        p.report,
        LegacyReport {
            generation: 3,
            checkpoint_written_at: Some(Timestamp::from_unix_micros(1_700_000_300_000_000)),
            checkpoint_runs: 3,
            wal_applied: 5,
            wal_stale: 1,
            submissions_drained: 1,
            submissions_queued: 1,
            aliases: vec![SubmissionAlias {
                line: 3,
                submitted: rid(8),
                kept: rid(4)
            }],
            torn: vec![],
            running_settled: 1,
            quarantined: vec![],
        }
    );
    assert!(p.source.description.contains("/var/lib/made"));
    crate::spool::check_import(&p.source, &p.runs).unwrap();
}

#[test]
fn running_runs_settle_as_an_expired_lease_would() {
    let cp = checkpoint(
        0,
        &[
            run(1, "running", 2, json!({"max_attempts": 5})),
            run(2, "running", 5, json!({"max_attempts": 5})),
            run(3, "running", 1, json!({"cancel_requested": true})),
            run(4, "queued", 3, json!({"max_attempts": 3})),
        ],
        &[],
        0,
    );
    let p = plan_of(&files(Some(cp), None, None)).unwrap();
    let runs = by_id(&p);
    let states: Vec<RunState> = (1..=4).map(|n| runs[&rid(n)].state).collect();
    assert_eq!(
        states,
        vec![
            RunState::Queued,
            RunState::Parked,
            RunState::Canceled,
            RunState::Parked
        ]
    );
    assert_eq!(p.report.running_settled, 3);
    assert!(runs[&rid(2)].reason.as_deref().unwrap().contains("expired"));
    crate::spool::check_import(&p.source, &p.runs).unwrap();
}

#[test]
fn torn_tails_are_left_out_and_reported() {
    let w = file(&[wal(
        0,
        1,
        "run",
        json!({"run": run(1, "queued", 0, json!({}))}),
    )]);
    let second = line(&wal(
        0,
        2,
        "run",
        json!({"run": run(2, "queued", 0, json!({}))}),
    ));
    let mut torn_wal = w.clone();
    torn_wal.extend_from_slice(&second.as_bytes()[..second.len() - 1]);
    let sub = line(&submission(9, "sha9", json!({})));
    let torn_spool = sub.as_bytes()[..10].to_vec();
    let p = plan_of(&files(None, Some(torn_wal), Some(torn_spool))).unwrap();
    assert_eq!(p.runs.len(), 1);
    assert_eq!(
        p.report.torn,
        vec![
            TornRecord {
                file: WAL_FILE,
                line: 2,
                offset: w.len() as u64,
                bytes: second.len() as u64 - 1
            },
            TornRecord {
                file: SPOOL_FILE,
                line: 1,
                offset: 0,
                bytes: 10
            },
        ]
    );
    // The fingerprint covers the accepted bytes only: cutting the torn tail away later is
    // the same source.
    let clean = plan_of(&files(None, Some(w.clone()), Some(Vec::new()))).unwrap();
    assert_eq!(clean.source.fingerprint, p.source.fingerprint);
    let other = plan_of(&files(None, Some(w), None)).unwrap();
    assert_ne!(other.source.fingerprint, p.source.fingerprint);
}

#[test]
fn a_log_newer_than_the_checkpoint_is_refused() {
    let cp = checkpoint(2, &[], &[], 0);
    let w = file(&[
        wal(2, 1, "run", json!({"run": run(1, "queued", 0, json!({}))})),
        wal(3, 1, "run", json!({"run": run(2, "queued", 0, json!({}))})),
    ]);
    let p = refused(&files(Some(cp), Some(w), None), WAL_FILE, 2);
    assert_eq!(
        p,
        RecordProblem::FutureGeneration {
            found: 3,
            checkpoint: 2
        }
    );
    // Without a checkpoint the state starts at generation 0.
    let w = file(&[wal(1, 1, "drain", json!({"through": 0}))]);
    refused(&files(None, Some(w), None), WAL_FILE, 1);
}

#[test]
fn damaged_or_contradictory_records_are_refused_at_their_line() {
    let put = |gen, seq, n: u32, sha: &str| {
        let mut r = run(n, "queued", 0, json!({}));
        r["input_sha"] = json!(sha);
        wal(gen, seq, "run", json!({ "run": r }))
    };
    let ok = [put(0, 1, 1, "a"), put(0, 2, 2, "b"), put(0, 3, 3, "c")];
    let with = |i: usize, v: Value| {
        let mut recs = ok.to_vec();
        recs[i] = v;
        files(None, Some(file(&recs)), None)
    };
    // Damage: a flipped byte in the middle record.
    let mut bytes = file(&ok);
    let mid = line(&ok[0]).len() + 10;
    bytes[mid] ^= 0x20;
    assert_eq!(
        refused(&files(None, Some(bytes), None), WAL_FILE, 2),
        RecordProblem::Checksum
    );
    type Expect = fn(&RecordProblem) -> bool;
    let cases: Vec<(LegacyFiles, Expect)> = vec![
        (with(1, put(0, 3, 2, "b")), |p| {
            matches!(
                p,
                RecordProblem::Sequence {
                    expected: 2,
                    found: 3
                }
            )
        }),
        (with(1, put(0, 1, 2, "b")), |p| {
            matches!(p, RecordProblem::Sequence { .. })
        }),
        (with(1, put(1, 1, 2, "b")), |p| {
            matches!(p, RecordProblem::FutureGeneration { .. })
        }),
        (
            with(1, put(0, 2, 9, "a")),
            |p| matches!(p, RecordProblem::Ambiguous(s) if s.contains("two ids")),
        ),
        (
            with(1, put(0, 2, 1, "z")),
            |p| matches!(p, RecordProblem::Ambiguous(s) if s.contains("two submissions")),
        ),
        (
            with(
                1,
                wal(0, 2, "ack", json!({"run_id": id(7), "event_ids": []})),
            ),
            |p| matches!(p, RecordProblem::UnknownRun { .. }),
        ),
        (with(1, wal(0, 2, "vacuum", json!({}))), |p| {
            matches!(p, RecordProblem::Malformed(_))
        }),
        (
            with(1, {
                let mut v = put(0, 2, 2, "b");
                v["color"] = json!("red");
                v
            }),
            |p| matches!(p, RecordProblem::Malformed(s) if s.contains("color")),
        ),
        (
            with(1, {
                let mut v = put(0, 2, 2, "b");
                v["run"]["attempts"] = json!(11);
                v
            }),
            |p| {
                matches!(
                    p,
                    RecordProblem::Field {
                        field: "attempts",
                        ..
                    }
                )
            },
        ),
        (
            with(1, {
                let mut v = put(0, 2, 2, "b");
                v["run"]["state"] = json!("succeeded");
                v
            }),
            |p| {
                matches!(
                    p,
                    RecordProblem::Field {
                        field: "finished_ms",
                        ..
                    }
                )
            },
        ),
    ];
    for (i, (f, want)) in cases.into_iter().enumerate() {
        let p = refused(&f, WAL_FILE, 2);
        assert!(want(&p), "case {i}: {p:?}");
    }

    // A field twice is ambiguous: hand-written, since a JSON map cannot hold it.
    let twice = seal_record(r#"{"gen":0,"seq":1,"op":"drain","through":0,"through":5}"#).unwrap();
    let p = refused(
        &files(None, Some(format!("{twice}\n").into_bytes()), None),
        WAL_FILE,
        1,
    );
    assert!(matches!(p, RecordProblem::Malformed(s) if s.contains("duplicate")));
    // A damaged last line with its newline is damage, not a torn write.
    let mut last = file(&ok);
    let n = last.len();
    last[n - 5] ^= 0x01;
    refused(&files(None, Some(last), None), WAL_FILE, 3);
}

#[test]
fn a_checkpoint_is_whole_or_refused() {
    let good = checkpoint(1, &[run(1, "queued", 0, json!({}))], &[cp_event(1, "e")], 0);
    let cut = good[..good.len() - 1].to_vec();
    assert_eq!(
        refused(&files(Some(cut), None, None), CHECKPOINT_FILE, 3),
        RecordProblem::Unterminated
    );
    let mut short = checkpoint(1, &[run(1, "queued", 0, json!({}))], &[], 0);
    let header = json!({"kind": "checkpoint", "format": 1, "generation": 1, "runs": 1, "events": 1, "spool_drained": 0, "written_ms": 0});
    let body: Vec<u8> = short.split_off(short.iter().position(|b| *b == b'\n').unwrap() + 1);
    let mut promised = line(&header).into_bytes();
    promised.extend(body);
    assert!(matches!(
        refused(&files(Some(promised), None, None), CHECKPOINT_FILE, 1),
        RecordProblem::Count { .. }
    ));
    let v2 = file(&[
        json!({"kind": "checkpoint", "format": 2, "generation": 1, "runs": 0, "events": 0, "spool_drained": 0, "written_ms": 0}),
    ]);
    assert!(matches!(
        refused(&files(Some(v2), None, None), CHECKPOINT_FILE, 1),
        RecordProblem::Field {
            field: "format",
            ..
        }
    ));
    let misplaced = file(&[
        json!({"kind": "checkpoint", "format": 1, "generation": 1, "runs": 1, "events": 0, "spool_drained": 0, "written_ms": 0}),
        cp_event(1, "e"),
    ]);
    assert!(matches!(
        refused(&files(Some(misplaced), None, None), CHECKPOINT_FILE, 2),
        RecordProblem::Count { .. }
    ));
    let orphan = checkpoint(1, &[run(1, "queued", 0, json!({}))], &[cp_event(5, "e")], 0);
    assert!(matches!(
        refused(&files(Some(orphan), None, None), CHECKPOINT_FILE, 3),
        RecordProblem::UnknownRun { .. }
    ));
}

#[test]
fn the_drain_offset_must_fall_between_submissions() {
    let subs = file(&[submission(1, "a", json!({})), submission(2, "b", json!({}))]);
    let first = subs.iter().position(|b| *b == b'\n').unwrap() as u64 + 1;
    let at = |through: u64| {
        files(
            Some(checkpoint(0, &[], &[], through)),
            None,
            Some(subs.clone()),
        )
    };
    let p = plan_of(&at(first)).unwrap();
    assert_eq!(
        p.runs.len(),
        1,
        "the drained submission is not brought back"
    );
    assert_eq!(p.runs[0].run_id, rid(2));
    assert_eq!(plan_of(&at(0)).unwrap().runs.len(), 2);
    assert_eq!(plan_of(&at(subs.len() as u64)).unwrap().runs.len(), 0);
    refused(&at(first - 1), SPOOL_FILE, 1);
    refused(&at(first + 1), SPOOL_FILE, 2);
    refused(&at(subs.len() as u64 + 1), SPOOL_FILE, 3);
    let back = file(&[
        wal(0, 1, "drain", json!({"through": first})),
        wal(0, 2, "drain", json!({"through": 0})),
    ]);
    refused(&files(None, Some(back), None), WAL_FILE, 2);
}

#[test]
fn read_dir_refuses_links_and_empty_directories() {
    let dir = std::env::temp_dir().join(format!(
        "cairn-legacy-unit-{}-{}",
        std::process::id(),
        rand::random::<u64>()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    assert!(matches!(
        read_dir(&dir, &LegacyOptions::default()),
        Err(LegacyError::NotLegacy { .. })
    ));
    std::fs::write(
        dir.join(WAL_FILE),
        file(&[wal(0, 1, "drain", json!({"through": 0}))]),
    )
    .unwrap();
    let p = read_dir(&dir, &LegacyOptions::default()).unwrap();
    assert!(p.runs.is_empty());
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(dir.join(WAL_FILE), dir.join(SPOOL_FILE)).unwrap();
        let e = read_dir(&dir, &LegacyOptions::default()).unwrap_err();
        assert!(matches!(e, LegacyError::UnsafePath { .. }));
        assert!(matches!(Error::from(e), Error::UnsafePath { .. }));
    }
    assert_eq!(
        backup_files(&dir),
        vec![
            dir.join("checkpoint"),
            dir.join("checkpoint.tmp"),
            dir.join("runs.wal"),
            dir.join("gate.spool")
        ]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn refusals_name_the_file_line_and_next_step() {
    let e = LegacyError::record(WAL_FILE, 7, RecordProblem::Checksum);
    let msg = e.to_string();
    assert!(msg.starts_with("runs.wal line 7: "), "{msg}");
    assert!(msg.contains("Nothing was imported"));
    assert!(matches!(Error::from(e), Error::InvalidInput { .. }));
}

/// One step of a generated history.
#[derive(Clone, Debug)]
enum Op {
    Put { run: u32, state: u8, attempts: u32 },
    Event { run: u32, event: u32 },
    Ack { run: u32, event: u32 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..4u32, 0..3u8, 0..4u32).prop_map(|(run, state, attempts)| Op::Put {
            run,
            state,
            attempts
        }),
        (0..4u32, 0..4u32).prop_map(|(run, event)| Op::Event { run, event }),
        (0..4u32, 0..4u32).prop_map(|(run, event)| Op::Ack { run, event }),
    ]
}

/// The model's view of a run: state, attempts, pending event ids.
type View = BTreeMap<RunId, (RunState, u32, Vec<String>)>;

fn view(p: &ImportPlan) -> View {
    p.runs
        .iter()
        .map(|r| {
            let evs = r
                .events
                .iter()
                .map(|e| String::from_utf8(e.event_id.as_bytes().to_vec()).unwrap())
                .collect();
            (r.run_id, (r.state, r.attempts, evs))
        })
        .collect()
}

/// A checkpoint at generation 1 holding run 100, a stale generation-0 prefix, then the
/// generation-1 log of `ops`; with the model's view after each applied record.
fn history(ops: &[Op], stale: usize) -> (Vec<u8>, Vec<u8>, Vec<(usize, View)>) {
    let cp = checkpoint(1, &[run(100, "queued", 0, json!({}))], &[], 0);
    let mut recs = Vec::new();
    for s in 0..stale {
        recs.push(wal(
            0,
            s as u64 + 1,
            "run",
            json!({"run": run(200 + s as u32, "failed", 1, json!({}))}),
        ));
    }
    let mut model: View = BTreeMap::new();
    model.insert(rid(100), (RunState::Queued, 0, vec![]));
    // Stale records change nothing: the first view holds from the start.
    let mut views = vec![(0, model.clone())];
    let mut seq = 0u64;
    for o in ops {
        let rec = match *o {
            Op::Put {
                run: n,
                state,
                attempts,
            } => {
                let (name, st) = [
                    ("queued", RunState::Queued),
                    ("succeeded", RunState::Succeeded),
                    ("failed", RunState::Failed),
                ][state as usize];
                let events = model.get(&rid(n)).map(|v| v.2.clone()).unwrap_or_default();
                model.insert(rid(n), (st, attempts, events));
                Some(("run", json!({"run": run(n, name, attempts, json!({}))})))
            }
            Op::Event { run, event } => model.get_mut(&rid(run)).map(|v| {
                let e = format!("e{event}");
                if !v.2.contains(&e) {
                    v.2.push(e.clone());
                }
                (
                    "event",
                    json!({"run_id": id(run), "event_id": e, "payload": "same", "at_ms": 5}),
                )
            }),
            Op::Ack { run, event } => model.get_mut(&rid(run)).map(|v| {
                let e = format!("e{event}");
                v.2.retain(|x| *x != e);
                ("ack", json!({"run_id": id(run), "event_ids": [e]}))
            }),
        };
        if let Some((name, fields)) = rec {
            seq += 1;
            recs.push(wal(1, seq, name, fields));
            views.push((recs.len(), model.clone()));
        }
    }
    (cp, file(&recs), views)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(crate::spool::legacy::tests::cases()))]

    /// Every truncation of a valid log imports the complete records' state — never a partial
    /// or wrong one — and reports the torn rest exactly when the cut is inside a record.
    #[test]
    fn every_truncation_imports_the_prefix_or_is_refused(
        ops in prop::collection::vec(op(), 0..24),
        stale in 0..3usize,
        picks in prop::collection::vec(any::<prop::sample::Index>(), 16),
    ) {
        let (cp, w, views) = history(&ops, stale);
        let ends: Vec<usize> = w.iter().enumerate().filter(|(_, b)| **b == b'\n').map(|(i, _)| i + 1).collect();
        let mut cuts: Vec<usize> = vec![0, w.len()];
        for e in &ends {
            cuts.extend([*e - 1, *e, (*e + 1).min(w.len())]);
        }
        cuts.extend(picks.iter().map(|p| p.index(w.len() + 1)));
        for k in cuts {
            let complete = ends.iter().filter(|e| **e <= k).count();
            let got = plan_of(&files(Some(cp.clone()), Some(w[..k].to_vec()), None));
            let p = got.map_err(|e| TestCaseError::fail(format!("cut at {k}: refused: {e}")))?;
            // The view after the last complete record (stale ones change nothing).
            let want = &views.iter().rev().find(|(n, _)| *n <= complete).unwrap().1;
            prop_assert_eq!(&view(&p), want, "cut at {}", k);
            let boundary = k == 0 || w[k - 1] == b'\n';
            prop_assert_eq!(p.report.torn.is_empty(), boundary, "cut at {}", k);
        }
    }

    /// A flipped byte anywhere before the log's last newline refuses the import, naming the
    /// line the byte was on.
    #[test]
    fn a_flipped_byte_is_refused_at_its_line(
        ops in prop::collection::vec(op(), 1..16),
        pick in any::<prop::sample::Index>(),
        flip in 1..=255u8,
    ) {
        let (cp, mut w, _) = history(&ops, 1);
        let at = pick.index(w.len() - 1);
        let line = w[..at].iter().filter(|b| **b == b'\n').count() as u64 + 1;
        w[at] ^= flip;
        match plan_of(&files(Some(cp), Some(w), None)) {
            Err(LegacyError::Record { file, line: l, .. }) => {
                prop_assert_eq!(file, WAL_FILE);
                prop_assert_eq!(l, line);
            }
            other => prop_assert!(false, "flip at {} accepted: {:?}", at, other.map(|p| p.report)),
        }
    }
}

/// Modest by default; `CAIRN_PROPTEST_CASES` for a deep run (as the conformance suite).
fn cases() -> u32 {
    std::env::var("CAIRN_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24)
}

/// The example in docs/LEGACY_FORMAT.md, byte for byte: its checksums are pinned here, and it
/// plans as the document says.
#[test]
fn the_documented_example_plans_as_documented() {
    let doc = include_str!("../../../../../docs/LEGACY_FORMAT.md");
    let example = &doc[doc.find("## A complete example").unwrap()..];
    let blocks: Vec<String> = example
        .split("```")
        .skip(1)
        .step_by(2)
        .map(|b| b.trim_start_matches('\n').to_owned())
        .collect();
    assert_eq!(blocks.len(), 3);
    let p = plan_of(&files(
        Some(blocks[0].clone().into_bytes()),
        Some(blocks[1].clone().into_bytes()),
        Some(blocks[2].clone().into_bytes()),
    ))
    .unwrap();
    assert_eq!(p.runs.len(), 2);
    let (a, b) = (&p.runs[0], &p.runs[1]);
    assert_eq!(a.run_id, rid(1));
    assert_eq!(a.queue.as_str(), "gate");
    assert_eq!((a.state, a.attempts), (RunState::Queued, 1));
    assert_eq!(
        a.due_at,
        Some(Timestamp::from_unix_micros(1_700_000_100_000_000))
    );
    assert!(a.events.is_empty());
    assert_eq!(a.facts.len(), 1);
    assert_eq!(
        (b.run_id, b.state, b.attempts),
        (rid(2), RunState::Queued, 0)
    );
    assert_eq!(
        b.due_at,
        Some(Timestamp::from_unix_micros(1_700_000_400_000_000))
    );
    assert_eq!(p.report.generation, 4);
    assert!(p.report.torn.is_empty());
    // The checksum is BLAKE3 of the record without its sum member: pinned.
    assert_eq!(
        seal_record(r#"{"gen":4,"seq":2,"op":"drain","through":0}"#).unwrap(),
        r#"{"gen":4,"seq":2,"op":"drain","through":0,"sum":"e0b8a121a9d832bf5e330655d94d59ff89ba43350c311a0f3be05159fd2e1220"}"#
    );
}

#[test]
fn a_member_given_twice_is_refused_in_every_object() {
    // A stage given twice inside a run's `stages` map: today serde keeps the last.
    let mut r = run(1, "queued", 0, json!({}));
    r["stages"] = json!({"build": "passed"});
    let body = wal(0, 1, "run", json!({ "run": r })).to_string();
    let twice = body.replace(
        r#""build":"passed""#,
        r#""build":"passed","build":"failed""#,
    );
    assert_ne!(twice, body);
    let f = files(
        None,
        Some(format!("{}\n", seal_record(&twice).unwrap()).into_bytes()),
        None,
    );
    let p = refused(&f, WAL_FILE, 1);
    assert!(
        matches!(&p, RecordProblem::Malformed(s) if s.contains("duplicate") && s.contains("build")),
        "{p:?}"
    );
    // The same key spelled with an escape is the same key.
    let escaped = body.replace(
        r#""build":"passed""#,
        r#""build":"passed","bu\u0069ld":"failed""#,
    );
    let f = files(
        None,
        Some(format!("{}\n", seal_record(&escaped).unwrap()).into_bytes()),
        None,
    );
    assert!(matches!(
        refused(&f, WAL_FILE, 1),
        RecordProblem::Malformed(_)
    ));
    // The tag twice, a member of the nested run twice, a spool member twice, a checkpoint
    // header member twice.
    let tag_twice = r#"{"gen":0,"seq":1,"op":"drain","op":"drain","through":0}"#;
    let f = files(
        None,
        Some(format!("{}\n", seal_record(tag_twice).unwrap()).into_bytes()),
        None,
    );
    assert!(matches!(
        refused(&f, WAL_FILE, 1),
        RecordProblem::Malformed(_)
    ));
    let nested = body.replace(r#""gate":"ci""#, r#""gate":"ci","gate":"cd""#);
    let f = files(
        None,
        Some(format!("{}\n", seal_record(&nested).unwrap()).into_bytes()),
        None,
    );
    assert!(matches!(
        refused(&f, WAL_FILE, 1),
        RecordProblem::Malformed(_)
    ));
    let sub = submission(2, "s", json!({}))
        .to_string()
        .replace(r#""payload":"{}""#, r#""payload":"{}","payload":"x""#);
    let f = files(
        None,
        None,
        Some(format!("{}\n", seal_record(&sub).unwrap()).into_bytes()),
    );
    assert!(matches!(
        refused(&f, SPOOL_FILE, 1),
        RecordProblem::Malformed(_)
    ));
    let header = r#"{"kind":"checkpoint","format":1,"generation":1,"generation":2,"runs":0,"events":0,"spool_drained":0,"written_ms":0}"#;
    let f = files(
        Some(format!("{}\n", seal_record(header).unwrap()).into_bytes()),
        None,
        None,
    );
    assert!(matches!(
        refused(&f, CHECKPOINT_FILE, 1),
        RecordProblem::Malformed(_)
    ));
}

#[test]
fn hostile_counts_are_refused_without_overflow() {
    // A header counting u64::MAX events, followed by one run and one event: the slot check
    // must not compute `runs + events`.
    let header = json!({"kind": "checkpoint", "format": 1, "generation": 1, "runs": 1, "events": u64::MAX, "spool_drained": 0, "written_ms": 0});
    let mut cp = line(&header).into_bytes();
    cp.extend(line(&json!({"kind": "run", "run": run(1, "queued", 0, json!({}))})).into_bytes());
    cp.extend(line(&cp_event(1, "e")).into_bytes());
    assert!(matches!(
        refused(&files(Some(cp), None, None), CHECKPOINT_FILE, 1),
        RecordProblem::Count { .. }
    ));
    let header = json!({"kind": "checkpoint", "format": 1, "generation": 1, "runs": u64::MAX, "events": u64::MAX, "spool_drained": 0, "written_ms": 0});
    assert!(matches!(
        refused(
            &files(Some(file(&[header])), None, None),
            CHECKPOINT_FILE,
            1
        ),
        RecordProblem::Count { .. }
    ));
    // A log sequence number at u64::MAX, then one more record of its generation.
    let w = file(&[
        wal(0, u64::MAX, "drain", json!({"through": 0})),
        wal(0, 1, "drain", json!({"through": 0})),
    ]);
    refused(&files(None, Some(w), None), WAL_FILE, 1);
}

/// A reader that counts the bytes read through it.
struct Counting<R> {
    inner: R,
    read: std::rc::Rc<std::cell::Cell<u64>>,
}

impl<R: std::io::Read> std::io::Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read.set(self.read.get() + n as u64);
        Ok(n)
    }
}

impl<R: std::io::Seek> std::io::Seek for Counting<R> {
    fn seek(&mut self, pos: std::io::SeekFrom) -> std::io::Result<u64> {
        self.inner.seek(pos)
    }
}

/// A new directory under the system temp dir (also used by `backup`'s tests).
pub(super) fn temp_dir(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "cairn-legacy-{tag}-{}-{}",
        std::process::id(),
        rand::random::<u64>()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn a_tail_over_the_record_limit_is_damage_read_with_bounded_memory() {
    let dir = temp_dir("huge");
    // Two good records, then 3 MiB more than the limit with no newline.
    let good = file(&[
        wal(0, 1, "drain", json!({"through": 0})),
        wal(0, 2, "drain", json!({"through": 0})),
    ]);
    let mut f = std::fs::File::create(dir.join(WAL_FILE)).unwrap();
    std::io::Write::write_all(&mut f, &good).unwrap();
    let chunk = vec![b'x'; 1024 * 1024];
    for _ in 0..(MAX_LEGACY_LINE / chunk.len() + 3) {
        std::io::Write::write_all(&mut f, &chunk).unwrap();
    }
    drop(f);
    // Not a torn record: refused at its line, as damage.
    match read_dir(&dir, &LegacyOptions::default()) {
        Err(LegacyError::Record {
            file: WAL_FILE,
            line: 3,
            problem: RecordProblem::TooLong { .. },
        }) => {}
        other => panic!("expected a refusal at runs.wal line 3, got {other:?}"),
    }
    // And reading stops just past the limit: the file is never read (nor held) whole.
    let read = std::rc::Rc::new(std::cell::Cell::new(0));
    let source = Counting {
        inner: std::fs::File::open(dir.join(WAL_FILE)).unwrap(),
        read: read.clone(),
    };
    let got = plan_sources(
        "huge",
        &dir,
        [None, Some(source), None],
        &LegacyOptions::default(),
    );
    assert!(matches!(
        got,
        Err(LegacyError::Record {
            problem: RecordProblem::TooLong { .. },
            ..
        })
    ));
    let limit = (good.len() + MAX_LEGACY_LINE + 2 * READ_BUFFER) as u64;
    assert!(
        read.get() <= limit,
        "read {} bytes of a {} byte file; the bound is {limit}",
        read.get(),
        std::fs::metadata(dir.join(WAL_FILE)).unwrap().len()
    );
    // The same in the spool; in a quarantine the long tail is left out as a corrupt record,
    // not as a torn one.
    std::fs::rename(dir.join(WAL_FILE), dir.join(SPOOL_FILE)).unwrap();
    let mut spool = file(&[submission(1, "a", json!({}))]);
    spool.extend(vec![b'y'; MAX_LEGACY_LINE + 5]);
    std::fs::write(dir.join(SPOOL_FILE), &spool).unwrap();
    assert!(matches!(
        read_dir(&dir, &LegacyOptions::default()),
        Err(LegacyError::Record {
            file: SPOOL_FILE,
            line: 2,
            problem: RecordProblem::TooLong { .. }
        })
    ));
    let q = read_dir(&dir, &quarantine()).unwrap();
    assert_eq!(q.runs.len(), 1);
    assert!(q.report.torn.is_empty());
    assert_eq!(q.report.quarantined.len(), 1);
    let bad = &q.report.quarantined[0];
    assert_eq!(
        (bad.file, bad.line, bad.bytes),
        (SPOOL_FILE, 2, MAX_LEGACY_LINE as u64 + 5)
    );
    assert_eq!(
        bad.problem,
        RecordProblem::TooLong {
            len: MAX_LEGACY_LINE + 5
        }
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

fn quarantine() -> LegacyOptions {
    LegacyOptions {
        quarantine: true,
        ..LegacyOptions::default()
    }
}

#[test]
fn read_dir_never_reads_through_a_link_or_a_fifo() {
    let dir = temp_dir("links");
    let elsewhere = temp_dir("elsewhere");
    std::fs::write(
        elsewhere.join("secret"),
        file(&[wal(0, 1, "drain", json!({"through": 0}))]),
    )
    .unwrap();
    #[cfg(unix)]
    for name in [CHECKPOINT_FILE, WAL_FILE, SPOOL_FILE] {
        let link = dir.join(name);
        std::os::unix::fs::symlink(elsewhere.join("secret"), &link).unwrap();
        match read_dir(&dir, &LegacyOptions::default()) {
            Err(LegacyError::UnsafePath { path, reason }) => {
                assert_eq!(path, link);
                assert!(reason.contains("symbolic link"), "{reason}");
            }
            other => panic!("{name}: a link is refused, got {other:?}"),
        }
        assert!(matches!(
            open_file(&dir, name),
            Err(LegacyError::UnsafePath { .. })
        ));
        std::fs::remove_file(&link).unwrap();
        // A dangling link too.
        std::os::unix::fs::symlink(elsewhere.join("missing"), &link).unwrap();
        assert!(matches!(
            read_dir(&dir, &LegacyOptions::default()),
            Err(LegacyError::UnsafePath { .. })
        ));
        std::fs::remove_file(&link).unwrap();
    }
    // checkpoint.tmp is never planned but is backed up: opened the same way.
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(elsewhere.join("secret"), dir.join(CHECKPOINT_TMP_FILE))
            .unwrap();
        assert!(matches!(
            open_file(&dir, CHECKPOINT_TMP_FILE),
            Err(LegacyError::UnsafePath { .. })
        ));
        // A FIFO is refused at once rather than waited on.
        let fifo = dir.join(WAL_FILE);
        assert!(std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        assert!(matches!(
            read_dir(&dir, &LegacyOptions::default()),
            Err(LegacyError::UnsafePath { reason, .. }) if reason.contains("regular")
        ));
    }
    assert!(open_file(&dir, "absent").unwrap().is_none());
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_dir_all(&elsewhere).unwrap();
}

#[test]
fn a_quarantine_imports_every_valid_record_and_lists_the_others() {
    let put = |seq, n: u32| {
        wal(
            0,
            seq,
            "run",
            json!({"run": run(n, "queued", 0, json!({}))}),
        )
    };
    // Log: a damaged record (checksum), then a run given a stage twice, then a good record
    // numbered after both.
    let mut twice = run(4, "queued", 0, json!({}));
    twice["stages"] = json!({"build": "passed"});
    let twice = wal(0, 3, "run", json!({ "run": twice }))
        .to_string()
        .replace(
            r#""build":"passed""#,
            r#""build":"passed","build":"failed""#,
        );
    let mut w = file(&[put(1, 1), put(2, 2)]);
    let second = line(&put(2, 2)).len();
    let at = w.len() - second + 12;
    w[at] ^= 0x01;
    w.extend(format!("{}\n", seal_record(&twice).unwrap()).into_bytes());
    w.extend(file(&[put(4, 3)]));
    // Spool: a good submission, then one with an unknown member.
    let s = file(&[
        submission(8, "s8", json!({})),
        submission(9, "s9", json!({"color": "red"})),
    ]);
    let f = files(None, Some(w.clone()), Some(s.clone()));
    // Without a quarantine: refused at the first bad record, as before.
    assert_eq!(refused(&f, WAL_FILE, 2), RecordProblem::Checksum);
    let p = plan(&f, &quarantine()).unwrap();
    assert_eq!(
        by_id(&p).keys().copied().collect::<Vec<_>>(),
        vec![rid(1), rid(3), rid(8)]
    );
    let q: Vec<(&str, u64)> = p
        .report
        .quarantined
        .iter()
        .map(|q| (q.file, q.line))
        .collect();
    assert_eq!(q, vec![(WAL_FILE, 2), (WAL_FILE, 3), (SPOOL_FILE, 2)]);
    let first = &p.report.quarantined[0];
    assert_eq!(first.problem, RecordProblem::Checksum);
    assert_eq!(first.offset, line(&put(1, 1)).len() as u64);
    assert_eq!(first.bytes, second as u64 - 1);
    assert!(
        matches!(&p.report.quarantined[1].problem, RecordProblem::Malformed(m) if m.contains("duplicate"))
    );
    assert_eq!(p.report.wal_applied, 2);
    assert!(
        p.source
            .description
            .starts_with("partial import, 3 corrupt record(s) quarantined: "),
        "{}",
        p.source.description
    );
    crate::spool::check_import(&p.source, &p.runs).unwrap();
    assert_eq!(plan(&f, &quarantine()).unwrap(), p, "deterministic");
    // A directory without damage plans the same with or without a quarantine.
    let clean = files(None, Some(file(&[put(1, 1)])), None);
    assert_eq!(
        plan(&clean, &quarantine()).unwrap(),
        plan_of(&clean).unwrap()
    );
    // Display names the file, line and reason, with control characters escaped.
    let shown = QuarantinedRecord {
        file: WAL_FILE,
        line: 7,
        offset: 9,
        bytes: 3,
        problem: RecordProblem::Malformed("unknown field `a\nb`".into()),
    }
    .to_string();
    assert_eq!(
        shown,
        "runs.wal line 7 (3 bytes at offset 9): the record is malformed: unknown field `a\\nb`"
    );
}

#[test]
fn a_quarantine_cannot_stand_in_for_a_missing_or_misplaced_record() {
    let put = |seq, n: u32| {
        wal(
            0,
            seq,
            "run",
            json!({"run": run(n, "queued", 0, json!({}))}),
        )
    };
    // A gap with nothing damaged: a record is missing, not corrupt.
    let gap = files(None, Some(file(&[put(1, 1), put(3, 3)])), None);
    match plan(&gap, &quarantine()) {
        Err(LegacyError::Record {
            line: 2,
            problem: RecordProblem::Sequence { .. },
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
    // One damaged line accounts for one missing number, not two.
    let mut w = file(&[put(1, 1), put(2, 2)]);
    let n = w.len();
    w[n - 10] ^= 0x01;
    w.extend(file(&[put(4, 4)]));
    assert!(matches!(
        plan(&files(None, Some(w), None), &quarantine()),
        Err(LegacyError::Record {
            line: 3,
            problem: RecordProblem::Sequence { .. },
            ..
        })
    ));
    // A damaged checkpoint header is refused: nothing after it could be placed.
    let mut cp = checkpoint(1, &[run(1, "queued", 0, json!({}))], &[], 0);
    cp[5] ^= 0x01;
    assert!(matches!(
        plan(&files(Some(cp), None, None), &quarantine()),
        Err(LegacyError::Record { line: 1, .. })
    ));
}

#[test]
fn a_quarantined_checkpoint_record_keeps_its_place() {
    let cp = checkpoint(
        1,
        &[
            run(1, "queued", 0, json!({})),
            run(2, "queued", 0, json!({})),
        ],
        &[cp_event(1, "e1"), cp_event(2, "e2")],
        0,
    );
    // Damage run 1's record (line 2): its event (line 4) then names an unknown run.
    let mut bad = cp.clone();
    let at = cp.iter().position(|b| *b == b'\n').unwrap() + 20;
    bad[at] ^= 0x01;
    let p = plan(&files(Some(bad.clone()), None, None), &quarantine()).unwrap();
    assert_eq!(by_id(&p).keys().copied().collect::<Vec<_>>(), vec![rid(2)]);
    assert_eq!(p.runs[0].events.len(), 1);
    let q: Vec<(u64, bool)> = p
        .report
        .quarantined
        .iter()
        .map(|q| {
            (
                q.line,
                matches!(q.problem, RecordProblem::UnknownRun { .. }),
            )
        })
        .collect();
    assert_eq!(q, vec![(2, false), (4, true)]);
    // An unterminated last record is quarantined too (and still counted in its slot).
    let cut = cp[..cp.len() - 1].to_vec();
    let p = plan(&files(Some(cut), None, None), &quarantine()).unwrap();
    assert_eq!(p.report.quarantined.len(), 1);
    assert_eq!(p.report.quarantined[0].problem, RecordProblem::Unterminated);
    // The fingerprint of a partial import is its own.
    let whole = plan_of(&files(Some(cp), None, None)).unwrap();
    assert_ne!(whole.source.fingerprint, p.source.fingerprint);
}

#[cfg(unix)]
#[test]
fn the_backup_never_writes_through_a_link_and_verifies_what_it_finds() {
    let root = temp_dir("backup");
    let dir = root.join("made");
    std::fs::create_dir_all(&dir).unwrap();
    let w = file(&[wal(0, 1, "drain", json!({"through": 0}))]);
    let s = file(&[submission(1, "a", json!({}))]);
    std::fs::write(dir.join(WAL_FILE), &w).unwrap();
    std::fs::write(dir.join(SPOOL_FILE), &s).unwrap();
    let p = read_dir(&dir, &LegacyOptions::default()).unwrap();
    let target = backup_dir(&dir, &p);
    assert!(target
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .starts_with("made.cairn-backup-"));

    // A link planted at the predictable path of a backup file: refused, its target intact.
    let victim = root.join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    std::fs::create_dir(&target).unwrap();
    std::os::unix::fs::symlink(&victim, target.join(SPOOL_FILE)).unwrap();
    let e = back_up(&dir, &p).unwrap_err();
    assert!(
        matches!(&e, LegacyError::UnsafeBackup { path, .. } if *path == target.join(SPOOL_FILE)),
        "{e}"
    );
    assert!(e.to_string().contains("symbolic link"), "{e}");
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    std::fs::remove_dir_all(&target).unwrap();

    // The backup directory itself a link: refused, nothing written where it points.
    let elsewhere = root.join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &target).unwrap();
    assert!(matches!(
        back_up(&dir, &p),
        Err(LegacyError::UnsafeBackup { .. })
    ));
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
    std::fs::remove_file(&target).unwrap();

    // A source file that is a link (checkpoint.tmp is only ever backed up): refused.
    std::os::unix::fs::symlink(&victim, dir.join(CHECKPOINT_TMP_FILE)).unwrap();
    assert!(matches!(
        back_up(&dir, &p),
        Err(LegacyError::UnsafePath { .. })
    ));
    std::fs::remove_file(dir.join(CHECKPOINT_TMP_FILE)).unwrap();
    std::fs::remove_dir_all(&target).unwrap();

    // A clean backup: byte for byte; a second run verifies it and writes nothing.
    let b = back_up(&dir, &p).unwrap();
    assert_eq!(b.dir, target);
    assert_eq!(b.quarantine_report, None);
    assert_eq!(std::fs::read(target.join(WAL_FILE)).unwrap(), w);
    assert_eq!(std::fs::read(target.join(SPOOL_FILE)).unwrap(), s);
    assert!(!target.join(CHECKPOINT_FILE).exists());
    back_up(&dir, &p).unwrap();
    // An existing copy that differs is refused and left as it is.
    std::fs::write(target.join(SPOOL_FILE), b"tampered\n").unwrap();
    let e = back_up(&dir, &p).unwrap_err();
    assert!(e.to_string().contains("differs"), "{e}");
    assert_eq!(
        std::fs::read(target.join(SPOOL_FILE)).unwrap(),
        b"tampered\n"
    );
    std::fs::remove_dir_all(&root).unwrap();
}

/// A copy cut short (a full disk, a kill) leaves at most a temporary: the next run removes it
/// and completes the backup instead of refusing a truncated copy.
#[test]
fn an_interrupted_backup_copy_does_not_block_the_next_run() {
    let root = temp_dir("interrupted");
    let dir = root.join("made");
    std::fs::create_dir_all(&dir).unwrap();
    let w = file(&[wal(0, 1, "drain", json!({"through": 0}))]);
    let s = file(&[submission(1, "a", json!({})), submission(2, "b", json!({}))]);
    std::fs::write(dir.join(WAL_FILE), &w).unwrap();
    std::fs::write(dir.join(SPOOL_FILE), &s).unwrap();
    let p = read_dir(&dir, &LegacyOptions::default()).unwrap();
    let target = backup_dir(&dir, &p);
    // What an earlier run killed during the copy of gate.spool leaves: the directory, the
    // copy of runs.wal finished, and the first bytes of gate.spool under its temporary name.
    std::fs::create_dir(&target).unwrap();
    std::fs::write(target.join(WAL_FILE), &w).unwrap();
    let partial = target.join(format!(".{SPOOL_FILE}.cairn-partial-4242"));
    std::fs::write(&partial, &s[..s.len() / 2]).unwrap();

    let b = back_up(&dir, &p).unwrap();
    assert_eq!(std::fs::read(target.join(SPOOL_FILE)).unwrap(), s);
    assert_eq!(std::fs::read(target.join(WAL_FILE)).unwrap(), w);
    assert!(!partial.exists(), "the leftover temporary is removed");
    let mut names: Vec<_> = std::fs::read_dir(&b.dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, [SPOOL_FILE, WAL_FILE]);
    // And the run after that verifies the finished copies.
    back_up(&dir, &p).unwrap();
    std::fs::remove_dir_all(&root).unwrap();
}

#[cfg(unix)]
#[test]
fn a_quarantine_keeps_each_record_verbatim_beside_a_report() {
    let root = temp_dir("qbackup");
    let dir = root.join("made");
    std::fs::create_dir_all(&dir).unwrap();
    let good = submission(1, "a", json!({}));
    let bad = submission(2, "b", json!({"color": "red"}));
    let mut s = file(&[good, bad.clone()]);
    s.extend(file(&[submission(3, "c", json!({}))]));
    std::fs::write(dir.join(SPOOL_FILE), &s).unwrap();
    let p = read_dir(&dir, &quarantine()).unwrap();
    assert_eq!(p.runs.len(), 2);
    let b = back_up(&dir, &p).unwrap();
    let q = b.dir.join(QUARANTINE_DIR);
    let kept = std::fs::read(q.join("gate.spool.line-2")).unwrap();
    assert_eq!(
        kept,
        line(&bad).trim_end().as_bytes(),
        "the record, verbatim"
    );
    let report = std::fs::read_to_string(b.quarantine_report.as_ref().unwrap()).unwrap();
    assert_eq!(b.quarantine_report, Some(q.join(QUARANTINE_REPORT)));
    let entry = report.lines().nth(1).unwrap();
    assert!(entry.starts_with("gate.spool line 2 ("), "{report}");
    assert!(entry.contains("color"), "{report}");
    assert!(entry.ends_with("-> gate.spool.line-2"), "{report}");
    assert_eq!(report.lines().count(), 2);
    // Again: verified, not rewritten.
    assert_eq!(back_up(&dir, &p).unwrap(), b);
    std::fs::remove_dir_all(&root).unwrap();
}

/// A source whose bytes are `first` until it is rewound to the start (the fingerprint's second
/// read), then `second`; it counts the read calls of the first pass.
struct Rewritten {
    first: std::io::Cursor<Vec<u8>>,
    second: std::io::Cursor<Vec<u8>>,
    rewound: bool,
    first_pass_reads: std::rc::Rc<std::cell::Cell<u64>>,
}

impl Rewritten {
    fn new(first: Vec<u8>, second: Vec<u8>) -> Self {
        Self {
            first: std::io::Cursor::new(first),
            second: std::io::Cursor::new(second),
            rewound: false,
            first_pass_reads: std::rc::Rc::default(),
        }
    }
}

impl std::io::Read for Rewritten {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.rewound {
            self.second.read(buf)
        } else {
            self.first_pass_reads.set(self.first_pass_reads.get() + 1);
            self.first.read(buf)
        }
    }
}

impl std::io::Seek for Rewritten {
    fn seek(&mut self, pos: std::io::SeekFrom) -> std::io::Result<u64> {
        if pos == std::io::SeekFrom::Start(0) {
            self.rewound = true;
        }
        if self.rewound {
            self.second.seek(pos)
        } else {
            self.first.seek(pos)
        }
    }
}

fn plan_log(source: Rewritten) -> Result<ImportPlan, LegacyError> {
    plan_sources(
        "changing",
        Path::new("changing"),
        [None, Some(source), None],
        &LegacyOptions::default(),
    )
}

#[test]
fn a_file_that_changes_between_the_two_reads_is_refused() {
    let w = file(&[
        wal(0, 1, "drain", json!({"through": 0})),
        wal(0, 2, "drain", json!({"through": 0})),
    ]);
    // Read twice, the same bytes: planned.
    plan_log(Rewritten::new(w.clone(), w.clone())).unwrap();
    // The same length, one byte different (a writer rewriting a record in place): the
    // fingerprint would name other bytes than those validated.
    let mut flipped = w.clone();
    let middle = flipped.len() / 2;
    flipped[middle] ^= 0x20;
    match plan_log(Rewritten::new(w.clone(), flipped)) {
        Err(LegacyError::Changed { path }) => assert_eq!(path, Path::new("changing/runs.wal")),
        other => panic!("a byte changed in place must be refused, got {other:?}"),
    }
    // Shorter on the second read (truncated meanwhile).
    assert!(matches!(
        plan_log(Rewritten::new(w.clone(), w[..w.len() - 1].to_vec())),
        Err(LegacyError::Changed { .. })
    ));
    // Bytes appended after the validated ones are not read again: a torn tail growing is not
    // a change of what was accepted.
    let mut grown = w.clone();
    grown.extend_from_slice(b"{\"op\":");
    plan_log(Rewritten::new(w, grown)).unwrap();
}

#[test]
fn a_legacy_file_is_read_in_large_chunks() {
    // About 1.5 MiB of log: the planner reads it through a 64 KiB buffer, not a small one
    // (each read is a system call on a real file).
    let records: Vec<Value> = (1..=10_000)
        .map(|seq| wal(0, seq, "drain", json!({"through": 0})))
        .collect();
    let w = file(&records);
    assert!(w.len() > 1024 * 1024, "{} bytes", w.len());
    let source = Rewritten::new(w.clone(), w.clone());
    let reads = source.first_pass_reads.clone();
    let p = plan_log(source).unwrap();
    assert_eq!(p.report.wal_applied, 10_000);
    let most = (w.len() / (32 * 1024) + 2) as u64;
    assert!(
        reads.get() <= most,
        "{} read calls for {} bytes; at most {most} expected with a 64 KiB buffer",
        reads.get(),
        w.len()
    );
}

#[test]
fn a_directory_that_cannot_be_opened_is_an_error_not_an_empty_import() {
    // The "directory" is a regular file: opening `<file>/checkpoint` fails (ENOTDIR), which
    // is an I/O error naming the path, not an absent file (NotLegacy).
    let root = temp_dir("notdir");
    let not_dir = root.join("plain");
    std::fs::write(&not_dir, b"not a directory").unwrap();
    match read_dir(&not_dir, &LegacyOptions::default()) {
        Err(LegacyError::Io { path, .. }) => assert_eq!(path, not_dir.join(CHECKPOINT_FILE)),
        other => panic!("expected an I/O error, got {other:?}"),
    }
    match open_file(&not_dir, WAL_FILE) {
        Err(LegacyError::Io { path, .. }) => assert_eq!(path, not_dir.join(WAL_FILE)),
        other => panic!("expected an I/O error, got {other:?}"),
    }
    std::fs::remove_dir_all(&root).unwrap();
}

/// The three files of docs/LEGACY_FORMAT.md's complete example.
fn documented_example() -> LegacyFiles {
    let doc = include_str!("../../../../../docs/LEGACY_FORMAT.md");
    let example = &doc[doc.find("## A complete example").unwrap()..];
    let blocks: Vec<Vec<u8>> = example
        .split("```")
        .skip(1)
        .step_by(2)
        .map(|b| b.trim_start_matches('\n').as_bytes().to_vec())
        .collect();
    files(
        Some(blocks[0].clone()),
        Some(blocks[1].clone()),
        Some(blocks[2].clone()),
    )
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The fingerprint is the import's completion marker: a directory imported by one build must
/// be recognised as imported by the next, so its value is pinned, for a whole import and for
/// a partial one (whose quarantined records are part of it). The input is the documented
/// example, itself pinned by `the_documented_example_plans_as_documented`.
#[test]
fn the_fingerprint_of_a_directory_is_stable_across_builds() {
    let whole = plan_of(&documented_example()).unwrap();
    assert!(whole.report.quarantined.is_empty());
    // Damage the spool's first record (a checksum mismatch): a quarantine leaves it out.
    let mut damaged = documented_example();
    let spool = damaged.spool.as_mut().unwrap();
    let at = spool.iter().position(|b| *b == b':').unwrap() + 2;
    spool[at] ^= 0x01;
    let partial = plan(&damaged, &quarantine()).unwrap();
    assert_eq!(partial.report.quarantined.len(), 1);
    assert_eq!(
        (
            hex(&whole.source.fingerprint),
            hex(&partial.source.fingerprint)
        ),
        (
            "e35c9e69c440a23ab7a1ae48d867b0a3ea10ffcf9c02016a552100ae9bf6bef3".to_owned(),
            "5dd2c446c5798a8ee027dc4c73a0fd98a86826ffc2ba8089b18a4c22cf269fcc".to_owned()
        ),
        "the marker of a directory an earlier build imported; if this changes, every \
         directory imported before would be imported again"
    );
}

#[test]
fn the_description_is_bounded_at_a_character_boundary() {
    let fixed = "legacy directory ".len() + ", checkpoint generation 0".len();
    // Short: whole.
    let d = describe("/var/lib/gate", 3, 0);
    assert_eq!(d, "legacy directory /var/lib/gate, checkpoint generation 3");
    // Control characters cannot forge lines.
    assert_eq!(
        describe("a\nb", 0, 0),
        "legacy directory a?b, checkpoint generation 0"
    );
    // Exactly the limit: kept whole.
    let exact = "x".repeat(MAX_IMPORT_DESCRIPTION - fixed);
    let d = describe(&exact, 0, 0);
    assert_eq!(d.len(), MAX_IMPORT_DESCRIPTION);
    assert!(d.ends_with("checkpoint generation 0"), "{d}");
    // Over it, ASCII: cut at the limit.
    let long = "y".repeat(2 * MAX_IMPORT_DESCRIPTION);
    let d = describe(&long, 0, 0);
    assert_eq!(d.len(), MAX_IMPORT_DESCRIPTION);
    assert!(d.starts_with("legacy directory yyy"), "{d}");
    assert!(d.chars().skip("legacy directory ".len()).all(|c| c == 'y'));
    // Over it with a three-byte character across the limit: cut before that character.
    let prefix = "legacy directory ".len();
    let mut label = "z".repeat(MAX_IMPORT_DESCRIPTION - prefix - 1);
    label.push('€');
    label.push_str(&"z".repeat(100));
    let d = describe(&label, 0, 0);
    assert_eq!(d.len(), MAX_IMPORT_DESCRIPTION - 1);
    assert!(d.ends_with('z'), "{}", &d[d.len() - 10..]);
    // A partial import says so first, where a long label cannot cut it off.
    let d = describe(&long, 0, 2);
    assert!(
        d.starts_with("partial import, 2 corrupt record(s) quarantined: legacy directory yyy"),
        "{}",
        &d[..80]
    );
    assert_eq!(d.len(), MAX_IMPORT_DESCRIPTION);
}

#[test]
fn reports_print_their_records() {
    let torn = TornRecord {
        file: WAL_FILE,
        line: 7,
        offset: 1024,
        bytes: 33,
    };
    assert_eq!(
        torn.to_string(),
        "runs.wal line 7: a torn final record (33 bytes at offset 1024) was left out"
    );
    let q = QuarantinedRecord {
        file: SPOOL_FILE,
        line: 2,
        offset: 10,
        bytes: 5,
        problem: RecordProblem::Malformed("unknown field `a\nb`".into()),
    };
    // A control character a record quoted is escaped: one report line per record.
    assert_eq!(
        q.to_string(),
        "gate.spool line 2 (5 bytes at offset 10): the record is malformed: unknown field `a\\nb`"
    );
}

#[test]
fn the_backup_sits_beside_the_directory() {
    let p = plan_of(&documented_example()).unwrap();
    let fp = hex(&p.source.fingerprint[..8]);
    assert_eq!(
        backup_dir(Path::new("/srv/gate/state"), &p),
        Path::new(&format!("/srv/gate/state.cairn-backup-{fp}"))
    );
    assert_eq!(
        backup_dir(Path::new("state"), &p),
        Path::new(&format!("./state.cairn-backup-{fp}"))
    );
}

#[cfg(unix)]
#[test]
fn the_backup_refuses_what_is_not_a_directory_or_a_file_and_keeps_its_copies_private() {
    use std::os::unix::fs::PermissionsExt;
    let root = temp_dir("backup-kinds");
    let dir = root.join("made");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(SPOOL_FILE), file(&[submission(1, "a", json!({}))])).unwrap();
    let p = read_dir(&dir, &LegacyOptions::default()).unwrap();
    let target = backup_dir(&dir, &p);

    // A regular file where the backup directory goes: refused, left as it is.
    std::fs::write(&target, b"not a directory").unwrap();
    let e = back_up(&dir, &p).unwrap_err();
    assert!(
        matches!(&e, LegacyError::UnsafeBackup { path, .. } if *path == target),
        "{e}"
    );
    assert_eq!(std::fs::read(&target).unwrap(), b"not a directory");
    std::fs::remove_file(&target).unwrap();

    // A FIFO where a copy goes: refused at once, not waited on for a writer.
    std::fs::create_dir(&target).unwrap();
    assert!(std::process::Command::new("mkfifo")
        .arg(target.join(SPOOL_FILE))
        .status()
        .unwrap()
        .success());
    let e = back_up(&dir, &p).unwrap_err();
    assert!(
        matches!(&e, LegacyError::UnsafeBackup { path, reason }
            if *path == target.join(SPOOL_FILE) && reason.contains("not a regular file")),
        "{e}"
    );
    std::fs::remove_dir_all(&target).unwrap();

    // The copies are the owner's alone (0600), in a directory of the owner's (0700).
    let b = back_up(&dir, &p).unwrap();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&b.dir), 0o700);
    assert_eq!(mode(&b.dir.join(SPOOL_FILE)), 0o600);
    std::fs::remove_dir_all(&root).unwrap();
}

/// A line with the sum member closing `head` (the record without its last `}`), whose sum is
/// right for the body `head}`: only the frame's shape can refuse it.
fn framed(head: &str) -> Vec<u8> {
    let sum = blake3::hash(format!("{head}}}").as_bytes()).to_hex();
    format!("{head},\"sum\":\"{sum}\"}}").into_bytes()
}

#[test]
fn what_seal_record_accepts_opens_again_and_nothing_else_frames() {
    // The shortest bodies seal accepts, and ordinary ones, open to themselves.
    for body in ["{ }", "{1}", r#"{"a":1}"#, r#"{"op":"drain","through":0}"#] {
        let sealed = seal_record(body).unwrap();
        assert_eq!(frame::open_record(sealed.as_bytes()).unwrap(), body);
    }
    // What is not an object's text is never sealed.
    for body in ["", "{}", "{", "}", "x1}", "{1x", "[1]", "x}}", "{{x"] {
        assert!(
            matches!(seal_record(body), Err(RecordProblem::Malformed(_))),
            "{body:?} was sealed"
        );
    }
    // A line whose checksum is right for its bytes but which does not frame an object
    // whose body is at least three bytes is not a record.
    for head in ["xy", "{", "ab"] {
        assert_eq!(
            frame::open_record(&framed(head)),
            Err(RecordProblem::NoChecksum),
            "{head:?}"
        );
    }
    for short in [&b"{\"}"[..], b"\"}", b"{", b""] {
        assert_eq!(
            frame::open_record(short),
            Err(RecordProblem::NoChecksum),
            "{short:?}"
        );
    }
}

#[test]
fn a_record_of_exactly_eight_mebibytes_is_read_and_one_byte_more_is_not() {
    // docs/LEGACY_FORMAT.md: a record line is at most 8 MiB without its newline.
    assert_eq!(MAX_LEGACY_LINE, 8 * 1024 * 1024);
    let overhead = seal_record(r#"{"p":""}"#).unwrap().len();
    let body = |fill: usize| format!(r#"{{"p":"{}"}}"#, "x".repeat(fill));
    let exact = seal_record(&body(8 * 1024 * 1024 - overhead)).unwrap();
    assert_eq!(exact.len(), 8 * 1024 * 1024);
    assert!(frame::open_record(exact.as_bytes()).is_ok());
    let over = seal_record(&body(8 * 1024 * 1024 - overhead + 1)).unwrap();
    assert_eq!(
        frame::open_record(over.as_bytes()),
        Err(RecordProblem::TooLong {
            len: 8 * 1024 * 1024 + 1
        })
    );
}

/// Fails its first read with `kind`, then reads `inner`.
struct FailsOnce<R> {
    inner: R,
    kind: Option<std::io::ErrorKind>,
}

impl<R: std::io::Read> std::io::Read for FailsOnce<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self.kind.take() {
            Some(kind) => Err(kind.into()),
            None => self.inner.read(buf),
        }
    }
}

#[test]
fn an_interrupted_read_is_retried_and_any_other_error_is_returned() {
    let data = file(&[wal(0, 1, "drain", json!({"through": 0}))]);
    let reader = |kind| {
        frame::LineReader::new(std::io::BufReader::new(FailsOnce {
            inner: &data[..],
            kind: Some(kind),
        }))
    };
    let mut r = reader(std::io::ErrorKind::Interrupted);
    let l = r.next_line(false).unwrap().unwrap();
    assert_eq!((l.number, l.terminated), (1, true));
    assert!(r.next_line(false).unwrap().is_none());
    let mut r = reader(std::io::ErrorKind::PermissionDenied);
    let e = r.next_line(false).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied);
}

#[test]
fn a_line_buffer_grows_by_doubling_and_never_past_the_limit() {
    // 1000 bytes arriving 16 at a time: the buffer doubles (16, 32, …, 1024), so copying
    // stays linear; it is not grown to the exact need at every chunk.
    let mut data = vec![b'a'; 1000];
    data.push(b'\n');
    let mut r = frame::LineReader::new(std::io::BufReader::with_capacity(16, &data[..]));
    let b = r.next_line(false).unwrap().unwrap().bytes.unwrap();
    assert_eq!(b.len(), 1000);
    assert!(
        (1001..=2000).contains(&b.capacity()),
        "capacity {}",
        b.capacity()
    );
    // 1024 bytes fill the buffer exactly: it is not doubled again for nothing.
    let mut data = vec![b'a'; 1024];
    data.push(b'\n');
    let mut r = frame::LineReader::new(std::io::BufReader::with_capacity(16, &data[..]));
    let b = r.next_line(false).unwrap().unwrap().bytes.unwrap();
    assert_eq!((b.len(), b.capacity()), (1024, 1024));
    // A line of exactly the limit after a 9-byte one, so that its chunks do not start at a
    // power of two: the buffer is never given more room than the limit.
    let mut data = b"123456789\n".to_vec();
    data.extend(std::iter::repeat_n(b'b', MAX_LEGACY_LINE));
    data.push(b'\n');
    let mut r = frame::LineReader::new(std::io::BufReader::new(&data[..]));
    assert_eq!(r.next_line(false).unwrap().unwrap().len, 9);
    let b = r.next_line(false).unwrap().unwrap().bytes.unwrap();
    assert_eq!(b.len(), MAX_LEGACY_LINE);
    assert!(
        b.capacity() <= MAX_LEGACY_LINE,
        "capacity {} over the {MAX_LEGACY_LINE}-byte limit",
        b.capacity()
    );
}

#[test]
fn payloads_are_carried_up_to_their_limits_and_refused_past_them() {
    use crate::spool::{MAX_RUN_EVENT_PAYLOAD, MAX_RUN_PAYLOAD};
    let event = |len: usize| {
        file(&[
            wal(0, 1, "run", json!({"run": run(1, "queued", 0, json!({}))})),
            wal(
                0,
                2,
                "event",
                json!({"run_id": id(1), "event_id": "big", "payload": "e".repeat(len), "at_ms": 1}),
            ),
        ])
    };
    let p = plan_of(&files(None, Some(event(MAX_RUN_EVENT_PAYLOAD)), None)).unwrap();
    assert_eq!(
        p.runs[0].events[0].payload,
        vec![b'e'; MAX_RUN_EVENT_PAYLOAD]
    );
    let (field, reason) = refused_field(
        &files(None, Some(event(MAX_RUN_EVENT_PAYLOAD + 1)), None),
        WAL_FILE,
        2,
    );
    assert_eq!(field, "payload");
    assert!(
        reason.contains(&format!("{}", MAX_RUN_EVENT_PAYLOAD + 1)),
        "{reason}"
    );
    // A submission's payload: the run's own.
    let sub = |len: usize| file(&[submission(1, "a", json!({"payload": "s".repeat(len)}))]);
    let p = plan_of(&files(None, None, Some(sub(MAX_RUN_PAYLOAD)))).unwrap();
    assert_eq!(p.runs[0].payload, vec![b's'; MAX_RUN_PAYLOAD]);
    let (field, _) = refused_field(
        &files(None, None, Some(sub(MAX_RUN_PAYLOAD + 1))),
        SPOOL_FILE,
        1,
    );
    assert_eq!(field, "payload");
}

#[test]
fn a_submission_names_its_gate_and_input() {
    for (gate, sha) in [("", "sha"), ("ci", ""), ("", "")] {
        let s = file(&[submission(1, sha, json!({"gate": gate}))]);
        let (field, reason) = refused_field(&files(None, None, Some(s)), SPOOL_FILE, 1);
        assert_eq!(field, "gate", "gate {gate:?}, sha {sha:?}");
        assert!(reason.contains("must not be empty"), "{reason}");
    }
    // The ref may be empty: the key is still (gate, "", sha).
    let s = file(&[submission(1, "sha", json!({"ref": ""}))]);
    let p = plan_of(&files(None, None, Some(s))).unwrap();
    assert_eq!(
        p.runs[0].dedup_key,
        DedupKey::from_parts(["ci", "", "sha"]).unwrap()
    );
}

#[test]
fn a_stage_value_is_carried_up_to_the_fact_limit_and_refused_past_it() {
    use crate::spool::MAX_FACT_VALUE;
    let with_stage = |len: usize| {
        let r = run(
            1,
            "succeeded",
            1,
            json!({"stages": {"build": "v".repeat(len)}}),
        );
        file(&[wal(0, 1, "run", json!({ "run": r }))])
    };
    let p = plan_of(&files(None, Some(with_stage(MAX_FACT_VALUE)), None)).unwrap();
    let (name, value) = p.runs[0].facts.iter().next().unwrap();
    assert_eq!(name.as_str(), "stage.build");
    assert_eq!(*value, vec![b'v'; MAX_FACT_VALUE]);
    let (field, reason) = refused_field(
        &files(None, Some(with_stage(MAX_FACT_VALUE + 1)), None),
        WAL_FILE,
        1,
    );
    assert_eq!(field, "stages");
    assert!(
        reason.contains(&format!("{}", MAX_FACT_VALUE + 1)),
        "{reason}"
    );
}

#[test]
fn an_event_given_twice_must_carry_the_same_payload() {
    let ev = |seq, payload: &str| {
        wal(
            0,
            seq,
            "event",
            json!({"run_id": id(1), "event_id": "e", "payload": payload, "at_ms": 1}),
        )
    };
    let put = wal(0, 1, "run", json!({"run": run(1, "queued", 0, json!({}))}));
    // The same payload again: a no-op, as a re-append is in the spool.
    let same = file(&[put.clone(), ev(2, "one"), ev(3, "one")]);
    let p = plan_of(&files(None, Some(same), None)).unwrap();
    assert_eq!(p.runs[0].events.len(), 1);
    assert_eq!(p.runs[0].events[0].payload, b"one");
    // Another payload under the same id: which one is the event? Refused at the second.
    let other = file(&[put, ev(2, "one"), ev(3, "two")]);
    match refused(&files(None, Some(other), None), WAL_FILE, 3) {
        RecordProblem::Ambiguous(why) => assert!(why.contains("different payloads"), "{why}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn checkpoint_records_must_come_in_the_header_order() {
    let header = |runs: u64, events: u64| {
        json!({
            "kind": "checkpoint", "format": 1, "generation": 1, "runs": runs,
            "events": events, "spool_drained": 0, "written_ms": 1_700_000_300_000i64,
        })
    };
    let r = |n| json!({"kind": "run", "run": run(n, "queued", 0, json!({}))});
    // One run then one event announced; a second run where the event is due is out of
    // order, even though the total count matches: refused at its line.
    let cp = file(&[header(1, 1), r(1), r(2)]);
    match refused(&files(Some(cp), None, None), CHECKPOINT_FILE, 3) {
        RecordProblem::Count {
            runs: 1,
            events: 1,
            problem,
        } => {
            assert!(problem.contains("record 2 does not fit"), "{problem}")
        }
        other => panic!("{other:?}"),
    }
    // An event where a run is due: the same.
    let cp = file(&[header(1, 1), cp_event(1, "e"), r(1)]);
    assert!(matches!(
        refused(&files(Some(cp), None, None), CHECKPOINT_FILE, 2),
        RecordProblem::Count { .. }
    ));
    // One event more than announced: refused at that event's line, not only by the total.
    let cp = file(&[header(1, 1), r(1), cp_event(1, "a"), cp_event(1, "b")]);
    match refused(&files(Some(cp), None, None), CHECKPOINT_FILE, 4) {
        RecordProblem::Count { problem, .. } => {
            assert!(problem.contains("record 3 does not fit"), "{problem}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn log_generations_never_go_back() {
    let cp = checkpoint(2, &[], &[], 0);
    let put = |gen, seq, n| {
        wal(
            gen,
            seq,
            "run",
            json!({"run": run(n, "queued", 0, json!({}))}),
        )
    };
    // Generation 1 (folded into the checkpoint: stale) then 2: fine.
    let forward = file(&[put(1, 1, 1), put(2, 1, 2)]);
    let p = plan_of(&files(Some(cp.clone()), Some(forward), None)).unwrap();
    assert_eq!((p.report.wal_stale, p.report.wal_applied), (1, 1));
    // Generation 2 then 1: a log that goes back is refused where it does, even though the
    // older record alone would only be stale.
    let back = file(&[put(2, 1, 1), put(1, 1, 2)]);
    match refused(&files(Some(cp), Some(back), None), WAL_FILE, 2) {
        RecordProblem::GenerationBack { found, previous } => assert_eq!((found, previous), (1, 2)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn each_finished_legacy_state_keeps_its_meaning() {
    let states = [
        ("succeeded", RunState::Succeeded),
        ("failed", RunState::Failed),
        ("canceled", RunState::Canceled),
        ("superseded", RunState::Superseded),
        ("parked", RunState::Parked),
    ];
    let runs: Vec<Value> = states
        .iter()
        .zip(1..)
        .map(|((s, _), n)| run(n, s, 1, json!({})))
        .collect();
    let p = plan_of(&files(Some(checkpoint(1, &runs, &[], 0)), None, None)).unwrap();
    let got = by_id(&p);
    for ((s, want), n) in states.iter().zip(1..) {
        let r = got[&rid(n)];
        assert_eq!(r.state, *want, "legacy {s}");
        assert_eq!(r.due_at, None, "legacy {s}");
        assert_eq!(
            r.finished_at,
            Some(Timestamp::from_unix_micros(1_700_000_200_000_000)),
            "legacy {s}: finished when the source says"
        );
    }
}

#[test]
fn a_drained_submission_whose_run_is_gone_is_counted_not_brought_back() {
    // The log drained the first submission; its run was removed since (retention), so it
    // is neither in the checkpoint nor in the log. The second is still pending.
    let subs = [submission(1, "a", json!({})), submission(2, "b", json!({}))];
    let first = line(&subs[0]).len() as u64;
    let w = file(&[wal(0, 1, "drain", json!({"through": first}))]);
    let p = plan_of(&files(None, Some(w), Some(file(&subs)))).unwrap();
    assert_eq!(
        by_id(&p).keys().copied().collect::<Vec<_>>(),
        vec![rid(2)],
        "the drained submission is not made a run again"
    );
    assert_eq!(
        (
            p.report.submissions_drained,
            p.report.submissions_queued,
            p.report.aliases.len()
        ),
        (1, 1, 0)
    );
}
