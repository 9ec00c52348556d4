use super::op::*;
use super::plan::*;
use super::wire::*;
use cairn::spool;
use cairn::{Error, SpaceId};
use serde_json::{json, Value};

fn read(v: Value) -> cairn::Result<Op> {
    Op::from_json(&v.to_string())
}

fn refusal(v: Value) -> String {
    read(v).unwrap_err().to_string()
}

#[test]
fn ops_read_as_their_routes_read_their_bodies() {
    let run = "0190a5c0-0000-7000-8000-000000000001";
    assert!(matches!(
        read(json!({"op": "enqueue", "queue": "q", "key": "k", "payload": "p"})),
        Ok(Op::Enqueue { .. })
    ));
    assert!(matches!(
        read(json!({"op": "append", "space": "s",
                                  "events": [{"kind": "k", "payload": "p"}]})),
        Ok(Op::Append { .. })
    ));
    assert!(matches!(
        read(json!({"op": "append_event", "run_id": run,
                                  "event_id": "e", "payload_b64": "/wA="})),
        Ok(Op::AppendEvent { .. })
    ));
    assert!(matches!(
        read(json!({"op": "cancel", "run_id": run})),
        Ok(Op::Cancel { .. })
    ));
    assert!(matches!(
        read(json!({"op": "close_run", "run": {"op": 3}})),
        Ok(Op::CloseRun { run: RunRef::Op(3) })
    ));
    assert!(matches!(
        read(json!({"op": "set_fact", "run_id": run, "name": "n", "value_b64": "/wA="})),
        Ok(Op::SetFact { value, .. }) if value == [0xff, 0]
    ));
    for (bad, says) in [
        (json!([]), "not a JSON object"),
        (json!({"queue": "q"}), "has no `op`"),
        (json!({"op": 1}), "`op` is not a string"),
        (json!({"op": "frobnicate"}), "names no op"),
        (
            json!({"op": "enqueue", "key": "k", "payload": "p"}),
            "has no `queue`",
        ),
        (
            json!({"op": "enqueue", "queue": "q", "key": "k", "payload": 5}),
            "invalid type",
        ),
        (
            json!({"op": "enqueue", "queue": "q", "key": "k", "payload": "p", "x": 1}),
            "unknown field `x`",
        ),
        (
            json!({"op": "append", "space": "s", "events": []}),
            "at least one event",
        ),
        (
            json!({"op": "append_event", "run_id": run, "event_id": "cairn:x",
                       "payload": "p"}),
            "reserved",
        ),
        (
            json!({"op": "cancel", "run_id": run, "reason": "r"}),
            "unknown field `reason`",
        ),
        (json!({"op": "cancel", "run_id": "nope"}), "run id"),
        (
            json!({"op": "close_run", "run_id": run, "run": {"op": 0}}),
            "both `run_id` and `run`",
        ),
        (json!({"op": "close_run"}), "has no `run_id`"),
        (
            json!({"op": "close_run", "run": {"op": -1}}),
            "earlier enqueue op",
        ),
        (
            json!({"op": "set_fact", "run_id": run, "value": "v"}),
            "has no `name`",
        ),
        (
            json!({"op": "set_fact", "run_id": run, "name": "n"}),
            "fact value",
        ),
    ] {
        let msg = refusal(bad.clone());
        assert!(msg.contains(says), "{bad}: {msg}");
    }
}

#[test]
fn a_batch_locks_spaces_first_then_queues_by_name_then_runs() {
    let ops: Vec<Op> = [
        json!({"op": "enqueue", "queue": "b", "key": "k", "payload": "p"}),
        json!({"op": "append", "space": "s2", "events": [{"kind": "k", "payload": "p"}]}),
        json!({"op": "enqueue", "queue": "a", "key": "k", "payload": "p"}),
        json!({"op": "close_run", "run": {"op": 0}}),
        json!({"op": "append", "space": "s1", "events": [{"kind": "k", "payload": "p"}]}),
        json!({"op": "enqueue", "queue": "b", "key": "j", "payload": "p"}),
        json!({"op": "append", "space": "s2", "events": [{"kind": "k", "payload": "p"}]}),
    ]
    .into_iter()
    .map(|v| read(v).unwrap())
    .collect();
    let plan = Plan::new(&ops);
    let space = |s: &str| SpaceId::new(s).unwrap();
    assert_eq!(
        plan.spaces,
        [space("s2"), space("s1")],
        "each space once (lock_spaces sorts them)"
    );
    let queues: Vec<(&str, &[usize])> = plan
        .enqueues
        .iter()
        .map(|(q, i)| (q.as_str(), i.as_slice()))
        .collect();
    assert_eq!(queues, [("a", &[2][..]), ("b", &[0, 5][..])]);
    assert_eq!(plan.appends, [1, 4, 6]);
    assert_eq!(plan.on_runs, [3]);
    assert!(check_references(&ops).is_ok());
    let later = [ops[3].clone(), ops[0].clone()];
    let e = check_references(&later).unwrap_err();
    assert_eq!((e.code, e.index), ("invalid_reference", Some(0)));
}

#[test]
fn a_field_written_twice_is_refused() {
    for (text, field) in [
        (
            r#"{"op":"cancel","op":"enqueue","queue":"q","key":"k","payload":"p"}"#,
            "op",
        ),
        (
            r#"{"op":"enqueue","queue":"q","key":"a","key":"b","payload":"p"}"#,
            "key",
        ),
        (
            r#"{"op":"append","space":"s","space":"t","events":[]}"#,
            "space",
        ),
    ] {
        let msg = Op::from_json(text).unwrap_err().to_string();
        assert!(
            msg.contains(&format!("duplicate field `{field}`")),
            "{text}: {msg}"
        );
    }
}

#[test]
fn batches_over_their_count_are_refused_as_they_are_read() {
    let ops = |n: usize| format!(r#"{{"ops":[{}]}}"#, vec!["0"; n].join(","));
    let read = serde_json::from_str::<BatchRequest>(&ops(MAX_BATCH_OPS)).unwrap();
    assert_eq!(read.ops.len(), MAX_BATCH_OPS, "exactly the limit is read");
    let e = serde_json::from_str::<BatchRequest>(&ops(MAX_BATCH_OPS + 1))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("the batch holds more than 1000 items"), "{e}");
    // The refusal comes at item 1001 (column ~2010), not after the body's 200,000 bytes.
    let e = serde_json::from_str::<BatchRequest>(&ops(MAX_BATCH_OPS * 100))
        .err()
        .unwrap();
    assert!(e.column() < 3 * MAX_BATCH_OPS, "{e}");
    let items = |n: usize| format!(r#"{{"items":[{}]}}"#, vec!["{}"; n].join(","));
    let read = serde_json::from_str::<EnqueueBatchRequest>(&items(spool::MAX_ENQUEUE_BATCH));
    assert_eq!(read.unwrap().items.len(), spool::MAX_ENQUEUE_BATCH);
    let e = serde_json::from_str::<EnqueueBatchRequest>(&items(spool::MAX_ENQUEUE_BATCH + 1))
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("the enqueue batch holds more than 10000 items"),
        "{e}"
    );
    assert!(check_payload_bytes(spool::MAX_ENQUEUE_BATCH_BYTES).is_ok());
    let e = check_payload_bytes(spool::MAX_ENQUEUE_BATCH_BYTES + 1).unwrap_err();
    assert!(matches!(e, Error::InvalidInput { .. }), "{e}");
    let e = item(7)(Error::invalid("x", "y"));
    assert!(matches!(e, Error::InvalidBatchItem { index: 7, .. }), "{e}");
}
