//! Two `cairn serve` nodes behind one PgBouncer 1.18 in transaction mode (issue 44 item 2):
//! the database URL declares the pooler (`cairn_pooler=transaction`); 8 concurrent HTTP
//! appenders on one space, spread over both nodes, all get 201, and the space ends with one
//! head and the seqs 1..=N, each handed out once. The PgBouncer is the test kit's private one
//! (`cairn_postgres::testkit::pgbouncer_url`): the test fails, never skips, without
//! `pgbouncer` (`apt-get install pgbouncer`).

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::json;

mod common;

use common::ApiServer as Server;

const TOKEN: &str = "pgbouncer-token-5c1a7e";
const DEADLINE: Duration = Duration::from_secs(60);
const APPENDERS: usize = 8;
const EACH: usize = 10;

/// A `cairn serve` on store `db` with this file's token.
fn start(db: &str) -> Server {
    Server::start(db, TOKEN, DEADLINE)
}

/// How long a command through the pooler, or a server's exit after SIGTERM, may take: far
/// more than they need (well under a second each), far less than a hang.
const PROMPT: Duration = Duration::from_secs(30);

/// Runs `case` on a store URL behind the test PgBouncer (a fresh schema, the pooler declared),
/// dropping the schema afterwards whether the case passed or not.
fn behind_pgbouncer(prefix: &str, case: impl FnOnce(&str)) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let pg = rt
        .block_on(cairn::testkit::postgres::testkit::test_server_url())
        .unwrap_or_else(|msg| panic!("{msg}"));
    let bouncer = rt
        .block_on(cairn::testkit::postgres::testkit::pgbouncer_url())
        .unwrap_or_else(|msg| panic!("{msg}"));
    let schema = cairn::testkit::scratch_name(prefix);
    let db = format!("{bouncer}?cairn_schema={schema}&cairn_pooler=transaction");
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| case(&db)));
    rt.block_on(common::drop_schema(&pg, &schema));
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// Appends one event to each of `spaces` through `server`.
fn append_to(server: &Server, spaces: &[&str]) {
    for space in spaces {
        let (status, body) = server.send(
            "POST",
            &format!("/v1/spaces/{space}/epochs"),
            Some(&json!({"events": [{"kind": "edit", "payload": format!("in {space}")}]})),
        );
        assert_eq!(status, 201, "append to {space}: {body}");
    }
}

/// A `cairn serve` behind the pooler that served writes, reads and `/v1/doctor` exits 0 soon
/// after SIGTERM: closing the store does not wait forever for a checkout.
#[test]
fn serve_behind_pgbouncer_exits_zero_promptly_on_sigterm() {
    behind_pgbouncer("cairn_pgb_sigterm", |db| {
        let mut server = start(db);
        append_to(&server, &["a", "b", "c"]);
        let (status, heads) = server.send("GET", "/v1/spaces/a/heads", None);
        assert_eq!(status, 200, "{heads}");
        let (status, report) = server.send("GET", "/v1/doctor", None);
        assert_eq!(status, 200, "{report}");
        let exited = server.terminate(PROMPT);
        let status = exited.unwrap_or_else(|| panic!("cairn serve exits within {PROMPT:?}"));
        assert!(status.success(), "SIGTERM exits 0: {status:?}");
    });
}

/// `cairn doctor` and `cairn backfill` behind the pooler finish with their usual output.
#[test]
fn doctor_and_backfill_behind_pgbouncer_finish() {
    behind_pgbouncer("cairn_pgb_cli", |db| {
        {
            let mut server = start(db);
            append_to(&server, &["a", "b", "c"]);
            // Stopped (killed at the deadline when it does not exit: not this test's subject).
            let _ = server.terminate(PROMPT);
        }
        let (status, out, err) = common::run_within(common::cairn(db).arg("doctor"), PROMPT);
        let status = status.unwrap_or_else(|| panic!("cairn doctor ends within {PROMPT:?}: {err}"));
        assert!(status.success(), "cairn doctor: {status:?}\n{out}\n{err}");
        for check in [
            "ok integrity",
            "ok migrations:cairn",
            "ok spool",
            "ok head_caches",
        ] {
            assert!(out.contains(check), "`{check}` in\n{out}\n{err}");
        }
        let (status, out, err) = common::run_within(common::cairn(db).arg("backfill"), PROMPT);
        let status =
            status.unwrap_or_else(|| panic!("cairn backfill ends within {PROMPT:?}: {err}"));
        assert!(status.success(), "cairn backfill: {status:?}\n{out}\n{err}");
        assert_eq!(out.trim(), "visited=3 repaired=0 current=3", "{err}");
    });
}

#[test]
fn two_serve_nodes_behind_pgbouncer_eight_http_appenders_one_head_unique_seqs() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let pg = rt
        .block_on(cairn::testkit::postgres::testkit::test_server_url())
        .unwrap_or_else(|msg| panic!("{msg}"));
    let bouncer = rt
        .block_on(cairn::testkit::postgres::testkit::pgbouncer_url())
        .unwrap_or_else(|msg| panic!("{msg}"));
    let schema = cairn::testkit::scratch_name("cairn_pgbouncer");
    let db = format!("{bouncer}?cairn_schema={schema}&cairn_pooler=transaction");

    let result = std::panic::catch_unwind(|| {
        let first = start(&db);
        let nodes = [first, start(&db)];
        let seqs: Vec<u64> = std::thread::scope(|scope| {
            let appenders: Vec<_> = (0..APPENDERS)
                .map(|writer| {
                    let node = &nodes[writer % 2];
                    scope.spawn(move || {
                        let mut seqs = Vec::new();
                        for i in 0..EACH {
                            let (status, body) = node.send(
                                "POST",
                                "/v1/spaces/shared/epochs",
                                Some(&json!({"events": [
                                    {"kind": "edit", "payload": format!("w{writer} e{i}")}
                                ]})),
                            );
                            assert_eq!(status, 201, "writer {writer} append {i}: {body}");
                            seqs.push(body["seq"].as_u64().expect("a seq"));
                        }
                        seqs
                    })
                })
                .collect();
            appenders
                .into_iter()
                .flat_map(|a| a.join().unwrap())
                .collect()
        });
        let unique: BTreeSet<u64> = seqs.iter().copied().collect();
        assert_eq!(unique.len(), seqs.len(), "a seq was handed out twice");
        let all = (APPENDERS * EACH) as u64;
        assert_eq!(unique, (1..=all).collect::<BTreeSet<u64>>());
        for node in &nodes {
            let (status, heads) = node.send("GET", "/v1/spaces/shared/heads", None);
            assert_eq!(status, 200, "{heads}");
            let heads = heads["heads"].as_array().unwrap().clone();
            assert_eq!(heads.len(), 1, "{heads:?}");
            assert_eq!(heads[0]["seq"], all);
        }
    });
    rt.block_on(common::drop_schema(&pg, &schema));
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}
