//! Flow control and schedules from the outside (issue 47): `cairn queue pause|resume|limits|
//! show|list`, `cairn schedule put|show|list|remove`, `cairn enqueue --partition`, their HTTP
//! routes (in the OpenAPI document), the paused gauge of `/metrics`, and what an operator sees
//! of a paused queue in `cairn runs`. The CLI on SQLite and Postgres; the HTTP routes on both.

use std::process::Output;
use std::time::Duration;

use serde_json::{json, Value};

mod common;

use common::{ok, text, ApiServer};

const TOKEN: &str = "flow-token-7c1e9a3b5d";
const DEADLINE: Duration = Duration::from_secs(30);

fn cairn(db: &str, args: &[&str]) -> Output {
    common::cairn(db).args(args).output().unwrap()
}

/// Fails with the command's output unless it failed with a message containing `needle`.
fn refused(out: Output, needle: &str) {
    let err = text(&out.stderr);
    assert!(
        !out.status.success() && err.contains(needle),
        "expected a refusal naming {needle:?}; exit {:?}\nstdout: {}\nstderr: {err}",
        out.status.code(),
        text(&out.stdout)
    );
}

fn queue_commands(db: &str) {
    ok(cairn(
        db,
        &[
            "enqueue",
            "--queue",
            "gate",
            "--key",
            "k1",
            "--payload",
            "p",
        ],
    ));
    assert_eq!(
        ok(cairn(db, &["queue", "show", "gate"])),
        "gate running max_claimed=- per_partition=- rate=-\n"
    );
    assert_eq!(ok(cairn(db, &["queue", "list"])), "", "nothing set yet");
    assert_eq!(
        ok(cairn(db, &["queue", "pause", "gate"])),
        "gate paused max_claimed=- per_partition=- rate=-\n"
    );
    let runs = cairn(db, &["runs", "--queue", "gate"]);
    assert!(ok(runs.clone()).contains(" gate queued attempts=0"));
    assert!(
        text(&runs.stderr).contains("queue gate is paused"),
        "{}",
        text(&runs.stderr)
    );
    assert_eq!(
        ok(cairn(
            db,
            &[
                "queue",
                "limits",
                "gate",
                "--max-claimed",
                "3",
                "--per-partition",
                "1",
                "--rate",
                "10/1s"
            ]
        )),
        "gate paused max_claimed=3 per_partition=1 rate=10/1s\n",
        "limits leave the pause alone"
    );
    // Bad limits are refused before the store is touched: the stored flow is unchanged.
    refused(
        cairn(db, &["queue", "limits", "gate", "--max-claimed", "0"]),
        "max claimed",
    );
    refused(
        cairn(db, &["queue", "limits", "gate", "--rate", "10"]),
        "N/DURATION",
    );
    refused(
        cairn(db, &["queue", "limits", "gate", "--rate", "10/25h"]),
        "rate interval",
    );
    refused(
        cairn(db, &["queue", "limits", "gate", "--rate", "10/1500us"]),
        "the unit must be ms, s, m or h",
    );
    assert_eq!(
        ok(cairn(db, &["queue", "resume", "gate"])),
        "gate running max_claimed=3 per_partition=1 rate=10/1s\n"
    );
    assert_eq!(
        ok(cairn(db, &["queue", "list"])),
        "gate running max_claimed=3 per_partition=1 rate=10/1s\n"
    );
    let runs = cairn(db, &["runs", "--queue", "gate"]);
    assert!(!text(&runs.stderr).contains("paused"), "resumed");
    assert_eq!(
        ok(cairn(db, &["queue", "limits", "gate"])),
        "gate running max_claimed=- per_partition=- rate=-\n",
        "no flag removes every limit"
    );
    assert_eq!(
        ok(cairn(db, &["queue", "list"])),
        "",
        "running and unlimited again: nothing stored, nothing listed"
    );
    refused(cairn(db, &["queue", "pause", ""]), "queue name");
}

fn schedule_commands(db: &str) {
    let put = ok(cairn(
        db,
        &[
            "schedule",
            "put",
            "nightly",
            "--cron",
            "0 3 * * *",
            "--tz",
            "Europe/Berlin",
            "--queue",
            "reports",
            "--payload",
            "{}",
            "--catch-up",
            "all:5",
        ],
    ));
    assert!(
        put.starts_with("nightly reports \"0 3 * * *\" Europe/Berlin catch_up=all:5 high_water=")
            && put.trim_end().ends_with("revision=1"),
        "{put}"
    );
    let high_water = |line: &str| {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix("high_water="))
            .unwrap()
            .to_owned()
    };
    let again = ok(cairn(
        db,
        &[
            "schedule",
            "put",
            "nightly",
            "--cron",
            "0 3 * * *",
            "--tz",
            "Europe/Berlin",
            "--queue",
            "reports",
        ],
    ));
    assert!(again.trim_end().ends_with("revision=2"), "{again}");
    assert_eq!(
        high_water(&again),
        high_water(&put),
        "an edit of the same expression keeps progress"
    );
    let again = ok(cairn(
        db,
        &[
            "schedule",
            "put",
            "nightly",
            "--cron",
            "30 4 * * *",
            "--tz",
            "Europe/Berlin",
            "--queue",
            "reports",
        ],
    ));
    assert!(again.trim_end().ends_with("revision=3"), "{again}");
    assert!(
        high_water(&again) > high_water(&put),
        "a new expression starts from the edit"
    );
    assert_eq!(ok(cairn(db, &["schedule", "show", "nightly"])), again);
    assert_eq!(ok(cairn(db, &["schedule", "list"])), again);
    refused(
        cairn(
            db,
            &[
                "schedule",
                "put",
                "bad",
                "--cron",
                "61 * * * *",
                "--queue",
                "q",
            ],
        ),
        "cron",
    );
    refused(
        cairn(
            db,
            &[
                "schedule",
                "put",
                "bad",
                "--cron",
                "* * * * *",
                "--tz",
                "Mars/Olympus",
                "--queue",
                "q",
            ],
        ),
        "time zone",
    );
    refused(
        cairn(
            db,
            &[
                "schedule",
                "put",
                "bad",
                "--cron",
                "* * * * *",
                "--queue",
                "q",
                "--catch-up",
                "some",
            ],
        ),
        "catch-up",
    );
    // Names that could display as another are refused, and nothing is stored.
    for (name, partition, needle) in [
        (
            "night\u{202E}ly",
            "p",
            "bidirectional control character (found U+202E)",
        ),
        (" nightly", "p", "must not start or end with whitespace"),
        ("nightly2", "t\u{2066}1", "partition key"),
    ] {
        refused(
            cairn(
                db,
                &[
                    "schedule",
                    "put",
                    name,
                    "--cron",
                    "* * * * *",
                    "--queue",
                    "q",
                    "--partition",
                    partition,
                ],
            ),
            needle,
        );
    }
    refused(cairn(db, &["schedule", "show", "bad"]), "schedule bad");
    assert_eq!(
        ok(cairn(db, &["schedule", "remove", "nightly"])),
        "removed nightly\n"
    );
    refused(
        cairn(db, &["schedule", "remove", "nightly"]),
        "schedule nightly",
    );
    assert_eq!(ok(cairn(db, &["schedule", "list"])), "");
}

#[test]
fn queue_commands_pause_resume_and_limit_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    queue_commands(dir.path().join("s.db").to_str().unwrap());
}

/// A name that is not plain (spaces, quotes, invisible characters …) prints quoted and
/// escaped in `cairn queue list`, `cairn schedule list` and `cairn runs`, so it cannot forge the
/// words of a line or pass for another name; a plain name prints as it is.
#[test]
fn names_that_are_not_plain_print_quoted_in_listings() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let db = db.to_str().unwrap();
    ok(cairn(db, &["migrate", "up"]));
    let forged = "x paused max_claimed=5 per_partition=- rate=-";
    ok(cairn(
        db,
        &["queue", "limits", forged, "--max-claimed", "1"],
    ));
    ok(cairn(
        db,
        &["queue", "limits", "a\u{200b}b", "--max-claimed", "2"],
    ));
    ok(cairn(db, &["queue", "pause", "plain"]));
    let listed = ok(cairn(db, &["queue", "list"]));
    let lines: Vec<&str> = listed.lines().collect();
    assert_eq!(
        lines,
        [
            "\"a\\u{200b}b\" running max_claimed=2 per_partition=- rate=-",
            "plain paused max_claimed=- per_partition=- rate=-",
            "\"x paused max_claimed=5 per_partition=- rate=-\" running max_claimed=1 per_partition=- rate=-",
        ],
        "{listed}"
    );
    ok(cairn(
        db,
        &[
            "schedule",
            "put",
            "night ly",
            "--cron",
            "0 3 * * *",
            "--queue",
            forged,
        ],
    ));
    let schedules = ok(cairn(db, &["schedule", "list"]));
    assert!(
        schedules.starts_with(&format!("\"night ly\" \"{forged}\" \"0 3 * * *\" ")),
        "{schedules}"
    );
    ok(cairn(
        db,
        &[
            "enqueue",
            "--queue",
            "a\u{200b}b",
            "--key",
            "k",
            "--payload",
            "p",
        ],
    ));
    let runs = ok(cairn(db, &["runs"]));
    assert!(
        runs.contains(" \"a\\u{200b}b\" queued attempts=0"),
        "{runs}"
    );
}

#[test]
fn queue_commands_pause_resume_and_limit_on_postgres() {
    common::on_postgres("cairn_flow_cli", queue_commands);
}

#[test]
fn schedule_commands_store_edit_and_remove_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let db = db.to_str().unwrap();
    ok(cairn(db, &["migrate", "up"]));
    schedule_commands(db);
}

#[test]
fn schedule_commands_store_edit_and_remove_on_postgres() {
    common::on_postgres("cairn_sched_cli", |db| {
        ok(cairn(db, &["migrate", "up"]));
        schedule_commands(db);
    });
}

fn http_routes(db: &str) {
    let server = ApiServer::start(db, TOKEN, DEADLINE);
    let (status, flow) = server.send("GET", "/v1/queues/gate/flow", None);
    assert_eq!((status, &flow["paused"]), (200, &json!(false)), "{flow}");
    assert_eq!(
        server.send("GET", "/v1/queues", None).1["queues"],
        json!([])
    );

    // A run due in an hour is scheduled, not part of the queue's backlog.
    let (status, later) = server.send(
        "POST",
        "/v1/queues/gate/runs",
        Some(&json!({"key": "later", "payload": "p", "not_before_us": 4_102_444_800_000_000_i64})),
    );
    assert_eq!(status, 201, "{later}");
    // A partitioned run, enqueued while the queue is paused: it lands, and no claim takes it.
    let (status, enq) = server.send(
        "POST",
        "/v1/queues/gate/runs",
        Some(&json!({"key": "k", "payload": "p", "partition_key": "tenant-7"})),
    );
    assert_eq!(status, 201, "{enq}");
    let (status, paused) = server.send("POST", "/v1/queues/gate/pause", None);
    assert_eq!((status, &paused["paused"]), (200, &json!(true)), "{paused}");
    let run = enq["run_id"].as_str().unwrap();
    let (_, info) = server.send("GET", &format!("/v1/runs/{run}"), None);
    assert_eq!(info["partition_key"], "tenant-7", "{info}");
    let claim = json!({"consumer": "w", "lease_ms": 30_000, "limit": 10});
    let (status, claimed) = server.send("POST", "/v1/queues/gate/claim", Some(&claim));
    assert_eq!((status, &claimed["runs"]), (200, &json!([])), "{claimed}");
    let metrics = server.send_text("/metrics");
    assert!(
        metrics.contains("cairn_spool_queue_paused{queue=\"gate\"} 1")
            && metrics.contains("\ncairn_spool_queues_paused 1\n")
            && metrics.contains("cairn_spool_queue_runs{queue=\"gate\",state=\"queued\"} 1")
            && metrics.contains("cairn_spool_queue_runs{queue=\"gate\",state=\"scheduled\"} 1")
            && metrics.contains("cairn_spool_runs{state=\"pending\"} 1")
            && metrics.contains("cairn_spool_runs{state=\"scheduled\"} 1"),
        "{metrics}"
    );

    let (status, limited) = server.send(
        "PUT",
        "/v1/queues/gate/limits",
        Some(&json!({"max_claimed": 3, "rate": {"claims": 10, "per_us": 1_000_000}})),
    );
    assert_eq!(status, 200, "{limited}");
    assert_eq!(
        (
            &limited["max_claimed"],
            &limited["rate"]["claims"],
            &limited["paused"]
        ),
        (&json!(3), &json!(10), &json!(true))
    );
    for bad in [
        json!({"max_claimed": 0}),
        json!({"rate": {"claims": 10, "per_us": 999}}),
        json!({"per_partition": 1, "surprise": 1}),
        json!([]),
        json!([5, 2]),
    ] {
        let (status, body) = server.send("PUT", "/v1/queues/gate/limits", Some(&bad));
        assert_eq!(
            (status, &body["error"]["code"]),
            (400, &json!("invalid_input")),
            "{bad}: {body}"
        );
    }
    let (status, resumed) = server.send("POST", "/v1/queues/gate/resume", None);
    assert_eq!((status, &resumed["paused"]), (200, &json!(false)));
    assert_eq!(resumed["max_claimed"], 3, "resume keeps the limits");
    let (_, claimed) = server.send("POST", "/v1/queues/gate/claim", Some(&claim));
    assert_eq!(claimed["runs"][0]["run_id"], run, "{claimed}");
    let (_, all) = server.send("GET", "/v1/queues", None);
    assert_eq!(all["queues"][0]["queue"], "gate", "{all}");
    // A running queue has no paused series, even with limits stored; the count says none is.
    let metrics = server.send_text("/metrics");
    assert!(
        !metrics.contains("cairn_spool_queue_paused{")
            && metrics.contains("\ncairn_spool_queues_paused 0\n"),
        "{metrics}"
    );

    // A tick's key is the scheduler's alone: a producer cannot take a tick's place.
    let (status, body) = server.send(
        "POST",
        "/v1/queues/reports/runs",
        Some(
            &json!({"key_parts": ["cairn:schedule", "five", "2030-01-01T00:00:00.000000Z"],
                     "payload": "EVIL"}),
        ),
    );
    assert_eq!(
        (status, &body["error"]["code"]),
        (400, &json!("reserved")),
        "{body}"
    );

    // Schedules.
    let sched = json!({"cron": "*/5 * * * *", "queue": "reports", "payload": "{}",
                       "catch_up": "all", "catch_up_cap": 3, "supersede_group": ["g", "h"]});
    let (status, made) = server.send("PUT", "/v1/schedules/five", Some(&sched));
    assert_eq!((status, &made["revision"]), (201, &json!(1)), "{made}");
    assert_eq!(
        made["supersede_group"],
        json!(["g", "h"]),
        "read back: {made}"
    );
    assert_eq!(made["time_zone"], "UTC");
    let (status, edited) = server.send(
        "PUT",
        "/v1/schedules/five",
        Some(&json!({"cron": "*/10 * * * *", "queue": "reports"})),
    );
    assert_eq!((status, &edited["revision"]), (200, &json!(2)), "{edited}");
    assert!(
        edited["high_water_us"].as_i64() > made["high_water_us"].as_i64(),
        "a new expression starts from the edit: {edited}"
    );
    assert_eq!(edited["catch_up"], "none");
    let (status, bad) = server.send(
        "PUT",
        "/v1/schedules/bad",
        Some(&json!({"cron": "every day", "queue": "q"})),
    );
    assert_eq!(
        (status, &bad["error"]["code"]),
        (422, &json!("invalid_schedule")),
        "{bad}"
    );
    let (status, bad) = server.send(
        "PUT",
        "/v1/schedules/bad",
        Some(&json!({"cron": "* * * * *", "queue": "q", "payload": "a", "payload_b64": "YQ=="})),
    );
    assert_eq!(
        (status, &bad["error"]["code"]),
        (400, &json!("invalid_input")),
        "{bad}"
    );
    assert_eq!(server.send("GET", "/v1/schedules/bad", None).0, 404);
    let (_, list) = server.send("GET", "/v1/schedules", None);
    assert_eq!(list["schedules"].as_array().unwrap().len(), 1, "{list}");
    assert_eq!(list["schedules"][0]["cron"], "*/10 * * * *");
    assert!(server
        .send_text("/metrics")
        .contains("cairn_spool_schedules 1"));
    assert_eq!(server.send("DELETE", "/v1/schedules/five", None).0, 204);
    assert_eq!(server.send("DELETE", "/v1/schedules/five", None).0, 404);
}

#[test]
fn flow_and_schedule_routes_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    http_routes(dir.path().join("s.db").to_str().unwrap());
}

#[test]
fn flow_and_schedule_routes_on_postgres() {
    common::on_postgres("cairn_flow_http", http_routes);
}

/// The routes are in the served OpenAPI document.
#[test]
fn the_document_lists_the_flow_routes() {
    let dir = tempfile::tempdir().unwrap();
    let server = ApiServer::start(dir.path().join("s.db").to_str().unwrap(), TOKEN, DEADLINE);
    let (_, doc) = server.send("GET", "/v1/openapi.json", None);
    let paths: Vec<&String> = doc["paths"].as_object().unwrap().keys().collect();
    for path in [
        "/v1/queues",
        "/v1/queues/{queue}/flow",
        "/v1/queues/{queue}/pause",
        "/v1/queues/{queue}/resume",
        "/v1/queues/{queue}/limits",
        "/v1/schedules",
        "/v1/schedules/{name}",
    ] {
        assert!(paths.iter().any(|p| *p == path), "{path} in {paths:?}");
    }
    let props: &Value = &doc["components"]["schemas"]["EnqueueRequest"]["properties"];
    assert_eq!(props["partition_key"]["x-max-bytes"], 256);
}

/// `cairn serve` runs a scheduler: a schedule stored through the API fires while it serves,
/// one run per tick, and `[scheduler] enabled = false` runs none.
fn serve_fires_schedules(db: &str) {
    let server = ApiServer::start(db, TOKEN, DEADLINE);
    let (status, made) = server.send(
        "PUT",
        "/v1/schedules/every-second",
        Some(&json!({"cron": "* * * * * *", "queue": "ticks", "payload": "t"})),
    );
    assert_eq!(status, 201, "{made}");
    let deadline = std::time::Instant::now() + DEADLINE;
    let runs = loop {
        let listed = ok(cairn(db, &["runs", "--queue", "ticks"]));
        if listed.lines().count() >= 2 {
            break listed;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no two ticks fired within {DEADLINE:?}: {listed:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(runs.lines().all(|l| l.contains(" ticks ")), "{runs}");
    let (_, after) = server.send("GET", "/v1/schedules/every-second", None);
    assert!(
        after["high_water_us"].as_i64() > made["high_water_us"].as_i64(),
        "the mark moved: {after}"
    );
}

#[test]
fn serve_fires_schedules_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    serve_fires_schedules(dir.path().join("s.db").to_str().unwrap());
}

#[test]
fn serve_fires_schedules_on_postgres() {
    common::on_postgres("cairn_sched_serve", serve_fires_schedules);
}

#[test]
fn serve_with_the_scheduler_off_fires_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let db = db.to_str().unwrap();
    ok(cairn(
        db,
        &[
            "schedule",
            "put",
            "s",
            "--cron",
            "* * * * * *",
            "--queue",
            "ticks",
        ],
    ));
    let mut cmd = common::cairn(db);
    cmd.args(["serve", "--listen", "127.0.0.1:0"])
        .env("CAIRN_AUTH__TOKENS", TOKEN)
        .env("CAIRN_BACKFILL__ENABLED", "false")
        .env("CAIRN_SCHEDULER__ENABLED", "false");
    let mut serving = common::serve(&mut cmd, DEADLINE);
    // The control: the same schedule on a store whose server runs its scheduler. Once that one
    // has fired two ticks, two ticks have passed while the scheduler-less server ran.
    let control = dir.path().join("control.db");
    let control = control.to_str().unwrap();
    ok(cairn(
        control,
        &[
            "schedule",
            "put",
            "s",
            "--cron",
            "* * * * * *",
            "--queue",
            "ticks",
        ],
    ));
    let mark = ok(cairn(db, &["schedule", "show", "s"]));
    let fired = ApiServer::start(control, TOKEN, DEADLINE);
    let deadline = std::time::Instant::now() + DEADLINE;
    while ok(cairn(control, &["runs", "--queue", "ticks"]))
        .lines()
        .count()
        < 2
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the control scheduler fired no two ticks within {DEADLINE:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(fired);
    assert_eq!(ok(cairn(db, &["runs", "--queue", "ticks"])), "");
    assert_eq!(ok(cairn(db, &["schedule", "show", "s"])), mark);
    let _ = serving.child.kill();
    let _ = serving.child.wait();
}
