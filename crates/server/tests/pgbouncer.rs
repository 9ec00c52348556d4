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
