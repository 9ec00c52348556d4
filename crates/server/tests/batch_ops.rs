//! `POST /v1/batch`'s ops on runs (issue 44, item 6), on SQLite and Postgres: `close_run` and
//! `set_fact`, and an op naming its run as `run: {"op": N}`, the run enqueue op N of the same
//! batch answered. A batch that enqueues a run, appends its events, sets a fact and closes it
//! commits all of it; the same batch with a failing later op leaves nothing (no run, no event,
//! no fact); a reference to anything but an earlier enqueue op is refused before anything runs.

use std::time::Duration;

use serde_json::{json, Value};

mod common;

use common::ApiServer as Server;

const TOKEN: &str = "batch-ops-token-4b8f1a";
const DEADLINE: Duration = Duration::from_secs(60);

/// A `cairn serve` on store `db` with this file's token.
fn start(db: &str) -> Server {
    Server::start(db, TOKEN, DEADLINE)
}

/// How many runs `cairn runs --queue QUEUE` lists.
fn runs(db: &str, queue: &str) -> usize {
    let out = common::cairn(db)
        .args(["runs", "--queue", queue, "--limit", "1000"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).lines().count()
}

/// The ops that enqueue a run under `key` (op 0), append three events to it by reference,
/// set its fact `total` and close it.
fn whole_run(key: &str) -> Vec<Value> {
    let mut ops = vec![json!({"op": "enqueue", "queue": "whole", "key": key, "payload": "job"})];
    for i in 0..3 {
        ops.push(json!({"op": "append_event", "run": {"op": 0},
                        "event_id": format!("e{i}"), "payload": format!("{i}")}));
    }
    ops.push(json!({"op": "set_fact", "run": {"op": 0}, "name": "total", "value": "3"}));
    ops.push(json!({"op": "close_run", "run": {"op": 0}}));
    ops
}

fn case(db: &str) {
    let server = start(db);

    // A failing later op (an event for a run that does not exist) rolls the whole batch back.
    let mut failing = whole_run("failed");
    failing.push(
        json!({"op": "append_event", "run_id": "0190a5c0-0000-7000-8000-0000000000ff",
                        "event_id": "x", "payload": "x"}),
    );
    let (s, body) = server.batch(Value::Array(failing));
    assert_eq!(
        (
            s,
            body["error"]["code"].as_str(),
            body["error"]["index"].as_u64()
        ),
        (404, Some("unknown_run"), Some(6)),
        "{body}"
    );
    assert_eq!(runs(db, "whole"), 0, "no run after the rollback");
    // A fact conflict late in the batch rolls it back too.
    let (s, body) = server.batch(json!([
        {"op": "enqueue", "queue": "whole", "key": "clash", "payload": "job"},
        {"op": "set_fact", "run": {"op": 0}, "name": "f", "value": "a"},
        {"op": "set_fact", "run": {"op": 0}, "name": "f", "value": "b"},
    ]));
    assert_eq!(
        (s, body["error"]["code"].as_str()),
        (409, Some("fact_conflict")),
        "{body}"
    );
    assert_eq!(runs(db, "whole"), 0, "no run after the conflict");

    // The same batch without the failing op commits all of it, answered in the ops' order.
    let (s, body) = server.batch(Value::Array(whole_run("kept")));
    assert_eq!(s, 200, "{body}");
    let results = body["results"].as_array().unwrap();
    let ops: Vec<&str> = results.iter().map(|r| r["op"].as_str().unwrap()).collect();
    assert_eq!(
        ops,
        [
            "enqueue",
            "append_event",
            "append_event",
            "append_event",
            "set_fact",
            "close_run"
        ]
    );
    let run = results[0]["run_id"].as_str().unwrap().to_owned();
    assert_eq!(results[0]["status"], 201, "{body}");
    let seqs: Vec<u64> = results[1..4]
        .iter()
        .map(|r| r["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, [1, 2, 3], "{body}");
    assert_eq!(
        (&results[4]["outcome"], &results[4]["status"]),
        (&json!("set"), &json!(201))
    );
    assert_eq!(results[4]["run_id"], run.as_str());
    assert_eq!(
        (&results[5]["outcome"], &results[5]["run_id"]),
        (&json!("closed"), &json!(run))
    );
    let (_, info) = server.send("GET", &format!("/v1/runs/{run}"), None);
    let (_, events) = server.send("GET", &format!("/v1/runs/{run}/events"), None);
    let payloads: Vec<&str> = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["payload"].as_str().unwrap())
        .collect();
    assert_eq!(payloads, ["0", "1", "2"], "{events}");
    let (_, facts) = server.send("GET", &format!("/v1/runs/{run}/facts"), None);
    assert_eq!(facts["facts"][0]["name"], "total", "{facts}");
    assert_eq!(facts["facts"][0]["value"], "3", "{facts}");
    let (s, late) = server.send(
        "POST",
        &format!("/v1/runs/{run}/events"),
        Some(&json!({"event_id": "late", "payload": "x"})),
    );
    assert_eq!(
        (s, late["error"]["code"].as_str()),
        (409, Some("run_closed")),
        "the batch closed the run: {late} ({info})"
    );
    assert_eq!(runs(db, "whole"), 1, "one run");

    // Literal run ids take the new ops too; a second close and the same fact write nothing.
    let (s, body) = server.batch(json!([
        {"op": "close_run", "run_id": run},
        {"op": "set_fact", "run_id": run, "name": "total", "value_b64": "Mw=="},
    ]));
    assert_eq!(s, 200, "{body}");
    assert_eq!(body["results"][0]["outcome"], "already_closed", "{body}");
    assert_eq!(
        (
            &body["results"][1]["outcome"],
            &body["results"][1]["status"]
        ),
        (&json!("already_set"), &json!(200)),
        "{body}"
    );

    // A reference must name an earlier enqueue op: 422 before anything is written.
    for (ops, index) in [
        (
            json!([{"op": "close_run", "run": {"op": 1}},
                   {"op": "enqueue", "queue": "whole", "key": "later", "payload": "p"}]),
            0,
        ),
        (
            json!([{"op": "append", "space": "sp", "events": [{"kind": "k", "payload": "p"}]},
                   {"op": "close_run", "run": {"op": 0}}]),
            1,
        ),
        (
            json!([{"op": "enqueue", "queue": "whole", "key": "self", "payload": "p"},
                   {"op": "cancel", "run": {"op": 7}}]),
            1,
        ),
    ] {
        let (s, body) = server.batch(ops);
        assert_eq!(
            (
                s,
                body["error"]["code"].as_str(),
                body["error"]["index"].as_u64()
            ),
            (422, Some("invalid_reference"), Some(index)),
            "{body}"
        );
    }
    assert_eq!(runs(db, "whole"), 1, "nothing of the refused batches");
    let (s, _) = server.send("GET", "/v1/spaces/sp/heads", None);
    assert_eq!(s, 404, "no epoch of the refused batch");

    // Both `run_id` and `run`, or a malformed `run`, do not read: 400 with the op's index.
    for bad in [
        json!({"op": "close_run", "run_id": run, "run": {"op": 0}}),
        json!({"op": "close_run", "run": {"op": "zero"}}),
        json!({"op": "close_run", "run": {"op": 0, "x": 1}}),
        json!({"op": "close_run"}),
        json!({"op": "set_fact", "run_id": run, "name": "n", "value": "v", "x": 1}),
    ] {
        let (s, body) = server.batch(json!([
            {"op": "enqueue", "queue": "whole", "key": "k", "payload": "p"},
            bad
        ]));
        assert_eq!(
            (
                s,
                body["error"]["code"].as_str(),
                body["error"]["index"].as_u64()
            ),
            (400, Some("invalid_batch_item"), Some(1)),
            "{body}"
        );
    }
}

#[test]
fn batch_ops_on_runs_are_all_or_nothing_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    case(dir.path().join("s.db").to_str().unwrap());
}

#[test]
fn batch_ops_on_runs_are_all_or_nothing_on_postgres() {
    common::on_postgres("cairn_batch_ops", case);
}
