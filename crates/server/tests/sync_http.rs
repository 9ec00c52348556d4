//! `cairn sync` over HTTP: the sync routes of `cairn serve` on SQLite and Postgres — each
//! route's answer and its refusal of hostile input (never a 5xx) —, the import route's
//! all-or-nothing refusal of a forged epoch, the long poll, the per-peer metrics, and
//! [`HttpEndpoint`] as a side of [`Sync`]: a served SQLite store and a local Postgres store
//! converge, and the conformance cases `r1_…`–`r6_…` run with `cairn serve` on either side.

mod common;

use std::process::Child;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use cairn::sync::{StoreId, Sync, SyncCursor, SyncEndpoint, SyncPeer};
use cairn::{
    Epoch, EpochId, EpochStore, EpochSummary, Error, Event, ForeignEpoch, Head, ImportOutcome,
    RepairOutcome, Seq, SpaceId,
};
use cairn_server::sync::{endpoint_for, HttpEndpoint};
use serde_json::{json, Value};

const FULL: &str = "sync-full-token-5b8e2a7c41";
const READ: &str = "sync-read-token-9d1f3e6a27";
const DEADLINE: Duration = Duration::from_secs(60);

/// A running `cairn serve` with a full-access and a read-only token; killed when dropped.
struct Server {
    child: Child,
    base: String,
    agent: ureq::Agent,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn start(db: &str, env: &[(&str, &str)]) -> Self {
        let mut cmd = common::cairn(db);
        cmd.args(["serve", "--listen", "127.0.0.1:0"])
            .env("CAIRN_AUTH__TOKENS", FULL)
            .env("CAIRN_AUTH__READ_TOKENS", READ)
            .env("CAIRN_BACKFILL__ENABLED", "false");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let serving = common::serve(&mut cmd, DEADLINE);
        Self {
            child: serving.child,
            base: format!("http://{}", serving.addr),
            agent: ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_global(Some(DEADLINE))
                .build()
                .into(),
        }
    }

    /// `method path` with `token` and a raw body: the status and the body as JSON (`Null`
    /// when it is not JSON).
    fn raw(&self, method: &str, path: &str, token: Option<&str>, body: Vec<u8>) -> (u16, Value) {
        let mut req = ureq::http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header("Content-Type", "application/json");
        if let Some(t) = token {
            req = req.header("Authorization", format!("Bearer {t}"));
        }
        let mut resp = self
            .agent
            .run(req.body(body).unwrap())
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let status = resp.status().as_u16();
        let text = resp
            .body_mut()
            .with_config()
            .limit(64 << 20)
            .read_to_string()
            .unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    fn call(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> (u16, Value) {
        let body = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
        self.raw(method, path, token, body)
    }

    fn get(&self, path: &str) -> Value {
        let (status, body) = self.call("GET", path, Some(READ), None);
        assert_eq!(status, 200, "GET {path}: {body}");
        body
    }

    fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.call("POST", path, Some(FULL), Some(body))
    }

    /// Appends one epoch of `events` to `space` (URL-safe text); its id.
    fn append(&self, space: &str, events: Value) -> String {
        let (status, body) = self.post(
            &format!("/v1/spaces/{space}/epochs"),
            json!({ "events": events }),
        );
        assert_eq!(status, 201, "{body}");
        body["id"].as_str().unwrap().to_owned()
    }

    fn metrics(&self) -> String {
        let mut resp = self
            .agent
            .get(format!("{}/metrics", self.base))
            .header("Authorization", format!("Bearer {READ}"))
            .call()
            .unwrap();
        resp.body_mut().read_to_string().unwrap()
    }

    fn endpoint(&self) -> Arc<HttpEndpoint> {
        Arc::new(HttpEndpoint::new(&self.base, Some(FULL.to_owned())).unwrap())
    }
}

/// A 4xx in the API's error shape with `code`; its body.
#[track_caller]
fn refused(answer: (u16, Value), status: u16, code: &str) -> Value {
    let (s, body) = answer;
    assert_eq!(
        (s, body["error"]["code"].as_str()),
        (status, Some(code)),
        "{body}"
    );
    assert!(body["error"]["message"].is_string(), "{body}");
    body
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn on_both(case: impl Fn(&str)) {
    let dir = tempfile::tempdir().unwrap();
    case(&dir.path().join("served.db").display().to_string());
    common::on_postgres("sync_http", |url| case(url));
}

fn hex_of(s: &str) -> String {
    hex::encode(s.as_bytes())
}

fn ids(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{i:064x}")).collect()
}

#[test]
fn every_sync_route_answers_and_refuses_hostile_input_on_both_engines() {
    on_both(|db| {
        let s = Server::start(db, &[]);
        // The store's id: stable, readable with a read-only token, never without one.
        let id = s.get("/v1/sync/id");
        let store_id = id["id"].as_str().unwrap().to_owned();
        StoreId::parse(&store_id).unwrap();
        assert_eq!(s.get("/v1/sync/id")["id"], store_id.as_str());
        assert_eq!(id["max_body_bytes"], 8 << 20);
        refused(
            s.call("GET", "/v1/sync/id", None, None),
            401,
            "unauthorized",
        );

        let e1 = s.append("alpha", json!([{"kind": "k", "payload": "one"}]));
        let e2 = s.append(
            "alpha",
            json!([{"kind": "k", "key_b64": "/wA=", "payload_b64": "/wA="}]),
        );
        s.append("beta", json!([{"kind": "k", "payload": "b"}]));

        // Spaces, hex, paged.
        let all = s.get("/v1/sync/spaces");
        assert_eq!(all["spaces"], json!([hex_of("alpha"), hex_of("beta")]));
        assert_eq!(
            s.get("/v1/sync/spaces?limit=1")["spaces"],
            json!([hex_of("alpha")])
        );
        let next = format!("/v1/sync/spaces?limit=1&after={}", hex_of("alpha"));
        assert_eq!(s.get(&next)["spaces"], json!([hex_of("beta")]));
        let long = format!("/v1/sync/spaces?after={}", "ab".repeat(257));
        for bad in [
            "/v1/sync/spaces?after=zz",
            "/v1/sync/spaces?after=abc",
            long.as_str(),
            "/v1/sync/spaces?limit=0",
            "/v1/sync/spaces?limit=1001",
            "/v1/sync/spaces?limit=-1",
            "/v1/sync/spaces?limit=99999999999999999999999",
        ] {
            refused(s.call("GET", bad, Some(READ), None), 400, "invalid_input");
        }

        // Summaries, newest first; an unknown space has none.
        let sums = s.get("/v1/spaces/alpha/sync/summaries");
        assert_eq!(sums["epochs"][0]["id"], e2.as_str());
        assert_eq!(sums["epochs"][0]["seq"], 2);
        assert_eq!(sums["epochs"][0]["parents"], json!([e1]));
        assert_eq!(sums["epochs"][0]["events"], 1);
        assert_eq!(sums["epochs"][1]["id"], e1.as_str());
        let older = s.get("/v1/spaces/alpha/sync/summaries?before=2&limit=5");
        assert_eq!(older["epochs"].as_array().unwrap().len(), 1);
        assert_eq!(
            s.get("/v1/spaces/nothing/sync/summaries")["epochs"],
            json!([])
        );
        for bad in [
            "/v1/spaces/alpha/sync/summaries?before=0",
            "/v1/spaces/alpha/sync/summaries?before=-1",
            "/v1/spaces/alpha/sync/summaries?before=9223372036854775808",
            "/v1/spaces/alpha/sync/summaries?limit=0",
            "/v1/spaces/alpha/sync/summaries?limit=1001",
        ] {
            refused(s.call("GET", bad, Some(READ), None), 400, "invalid_input");
        }
        for reserved in [
            "/v1/spaces/%00cairn%2Fx/sync/summaries",
            "/v1/spaces/%00cairn%2Fx/sync/peers",
            "/v1/spaces/%00cairn%2Fx/sync/wait?timeout_ms=0",
        ] {
            refused(s.call("GET", reserved, Some(READ), None), 400, "reserved");
        }

        // Whole epochs in the order asked, bytes by the bytes rule.
        let (st, got) = s.post("/v1/spaces/alpha/sync/epochs", json!({"ids": [e2, e1]}));
        assert_eq!(st, 200, "{got}");
        assert_eq!(got["epochs"][0]["id"], e2.as_str());
        assert_eq!(got["epochs"][0]["seq"], 2);
        assert_eq!(got["epochs"][0]["parents"], json!([e1]));
        assert_eq!(
            got["epochs"][0]["events"],
            json!([{"kind": "k", "key_b64": "/wA=", "payload_b64": "/wA="}])
        );
        assert_eq!(
            got["epochs"][1]["events"],
            json!([{"kind": "k", "payload": "one"}])
        );
        refused(
            s.post("/v1/spaces/alpha/sync/epochs", json!({"ids": [ids(1)[0]]})),
            404,
            "not_found",
        );
        for bad in [
            json!({"ids": ["zz"]}),
            json!({"ids": []}),
            json!({"ids": ids(1001)}),
            json!({"ids": [e1], "more": 1}),
            json!({"ids": "x"}),
        ] {
            refused(
                s.post("/v1/spaces/alpha/sync/epochs", bad),
                400,
                "invalid_input",
            );
        }
        // The two reads sent as POST take a read-only token.
        for (path, body) in [
            ("/v1/spaces/alpha/sync/epochs", json!({"ids": [e1]})),
            ("/v1/spaces/alpha/sync/missing", json!({"ids": [e1]})),
        ] {
            let (st, b) = s.call("POST", path, Some(READ), Some(body));
            assert_eq!(st, 200, "{path}: {b}");
        }

        // What the space lacks.
        let unknown = ids(1)[0].clone();
        let (st, m) = s.post(
            "/v1/spaces/alpha/sync/missing",
            json!({"ids": [e1, unknown]}),
        );
        assert_eq!((st, &m["missing"]), (200, &json!([unknown])), "{m}");
        let (_, m) = s.post("/v1/spaces/nothing/sync/missing", json!({"ids": [e1]}));
        assert_eq!(m["missing"], json!([e1]));
        for bad in [json!({"ids": ["1234"]}), json!({"ids": ids(10_001)})] {
            refused(
                s.post("/v1/spaces/alpha/sync/missing", bad),
                400,
                "invalid_input",
            );
        }

        // No peer yet.
        assert_eq!(s.get("/v1/spaces/alpha/sync/peers")["peers"], json!([]));

        // The long poll answers at once when the space is ahead, at its timeout otherwise.
        let w = s.get("/v1/spaces/alpha/sync/wait?seen=1");
        assert_eq!((&w["changed"], &w["newest"]), (&json!(true), &json!(2)));
        let w = s.get("/v1/spaces/alpha/sync/wait");
        assert_eq!(w["changed"], true);
        let w = s.get("/v1/spaces/alpha/sync/wait?seen=2&timeout_ms=50");
        assert_eq!(w["changed"], false);
        let w = s.get("/v1/spaces/nothing/sync/wait?timeout_ms=0");
        assert_eq!((&w["changed"], w.get("newest")), (&json!(false), None));
        for bad in [
            "/v1/spaces/alpha/sync/wait?timeout_ms=30001",
            "/v1/spaces/alpha/sync/wait?timeout_ms=-1",
            "/v1/spaces/alpha/sync/wait?seen=-1",
            "/v1/spaces/alpha/sync/wait?seen=9223372036854775808",
            "/v1/spaces/alpha/sync/wait?seen=x",
        ] {
            refused(s.call("GET", bad, Some(READ), None), 400, "invalid_input");
        }

        // A body over the server's limit is refused.
        let small = Server::start(db, &[("CAIRN_LIMITS__MAX_BODY_BYTES", "4096")]);
        let (st, b) = small.raw(
            "POST",
            "/v1/spaces/alpha/sync/missing",
            Some(FULL),
            json!({ "ids": ids(70) }).to_string().into_bytes(),
        );
        assert_eq!(st, 413, "{b}");
    });
}

/// The import route's bodies of a served space's epochs (their `seq` left out).
fn import_bodies(epochs: &Value) -> Vec<Value> {
    epochs
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let mut e = e.clone();
            e.as_object_mut().unwrap().remove("seq");
            e
        })
        .collect()
}

#[test]
fn the_import_route_takes_a_batch_whole_or_refuses_it_naming_the_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let source = Server::start(&dir.path().join("source.db").display().to_string(), &[]);
    let source_id = source.get("/v1/sync/id")["id"].as_str().unwrap().to_owned();
    let ids: Vec<String> = (0..3)
        .map(|i| source.append("gamma", json!([{"kind": "k", "payload": format!("p{i}")}])))
        .collect();
    let (_, got) = source.post("/v1/spaces/gamma/sync/epochs", json!({ "ids": ids }));
    let epochs = import_bodies(&got["epochs"]);
    on_both(|db| {
        let s = Server::start(db, &[]);
        let path = "/v1/spaces/gamma/sync/import";
        // A parent that is neither in the space nor earlier in the batch.
        let e = refused(
            s.post(path, json!({"epochs": [epochs[1]]})),
            422,
            "unknown_parent",
        );
        assert_eq!(e["error"]["index"], 0);
        // A forged epoch: its content changed under its id. Nothing of the batch is written.
        let mut forged = epochs[1].clone();
        forged["events"][0]["payload"] = json!("forged");
        let e = refused(
            s.post(path, json!({"epochs": [epochs[0], forged], "cursor": {"peer": source_id, "seq": 2, "id": ids[1]}})),
            422,
            "hash_mismatch",
        );
        assert_eq!(e["error"]["index"], 1);
        let message = e["error"]["message"].as_str().unwrap();
        assert!(message.contains(&ids[1]), "{message}");
        assert!(
            message.contains("nothing of the batch was written"),
            "{message}"
        );
        refused(
            s.call("GET", "/v1/spaces/gamma/heads", Some(READ), None),
            404,
            "not_found",
        );
        assert_eq!(s.get("/v1/spaces/gamma/sync/peers")["peers"], json!([]));

        // Hostile input: 4xx, never 5xx.
        let bad_cursor = |c: Value| json!({"epochs": [epochs[0]], "cursor": c});
        for (body, code) in [
            (
                bad_cursor(json!({"peer": "XYZ", "seq": 1, "id": ids[0]})),
                "invalid_input",
            ),
            (
                bad_cursor(json!({"peer": source_id, "seq": 0, "id": ids[0]})),
                "invalid_input",
            ),
            (
                bad_cursor(json!({"peer": source_id, "seq": -1, "id": ids[0]})),
                "invalid_input",
            ),
            (
                bad_cursor(
                    json!({"peer": source_id, "seq": 9_223_372_036_854_775_808_u64, "id": ids[0]}),
                ),
                "invalid_input",
            ),
            (
                bad_cursor(json!({"peer": source_id, "seq": 1, "id": "zz"})),
                "invalid_input",
            ),
            (
                json!({"epochs": vec![epochs[0].clone(); 1001]}),
                "invalid_input",
            ),
            (
                json!({"epochs": [{"id": "zz", "parents": [], "events": [{"kind": "k", "payload": "x"}]}]}),
                "invalid_batch_item",
            ),
            (
                json!({"epochs": [{"id": ids[0], "parents": [], "events": []}]}),
                "invalid_batch_item",
            ),
            (json!({"epochs": 3}), "invalid_input"),
        ] {
            let (st, b) = s.post(path, body);
            assert!((400..500).contains(&st), "{st} {b}");
            assert_eq!(b["error"]["code"], code, "{b}");
        }
        refused(
            s.call(
                "POST",
                path,
                Some(READ),
                Some(json!({"epochs": [epochs[0]]})),
            ),
            403,
            "forbidden",
        );
        refused(
            s.post("/v1/spaces/%00cairn%2Fx/sync/import", json!({"epochs": []})),
            400,
            "reserved",
        );

        // The batch with its cursor, in one transaction; again, nothing new.
        let cursor = json!({"peer": source_id, "seq": 3, "id": ids[2]});
        let (st, out) = s.post(path, json!({"epochs": epochs, "cursor": cursor}));
        assert_eq!(st, 201, "{out}");
        let outcomes: Vec<&str> = out["outcomes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["outcome"].as_str().unwrap())
            .collect();
        assert_eq!(outcomes, ["imported"; 3]);
        let (st, out) = s.post(path, json!({"epochs": epochs, "cursor": cursor}));
        assert_eq!(
            (st, &out["outcomes"][2]["outcome"]),
            (200, &json!("already_present"))
        );
        let peers = s.get("/v1/spaces/gamma/sync/peers")["peers"].clone();
        assert_eq!(peers.as_array().unwrap().len(), 1, "{peers}");
        let p = &peers[0];
        assert_eq!(
            (&p["peer"], &p["seq"], &p["id"]),
            (&json!(source_id), &json!(3), &json!(ids[2]))
        );
        assert_eq!(p["epochs"], 3);
        let bytes = p["bytes"].as_u64().unwrap();
        assert!(bytes > 0, "{p}");
        let age = common::now_us() - p["updated_at_us"].as_i64().unwrap();
        assert!(
            (0..60_000_000).contains(&age),
            "stamped by the server's clock: {p}"
        );

        // The metrics count what the route imported, by peer.
        let m = s.metrics();
        assert!(
            m.contains(&format!(
                "cairn_sync_epochs_total{{peer=\"{source_id}\"}} 3"
            )),
            "{m}"
        );
        assert!(
            m.contains(&format!(
                "cairn_sync_bytes_total{{peer=\"{source_id}\"}} {bytes}"
            )),
            "{m}"
        );
    });
}

/// A Postgres store for the test in a fresh schema: the store, the server's URL, the store's
/// URL and the schema (to drop afterwards).
async fn postgres_store(prefix: &str) -> (cairn::Store, String, String, String) {
    let pg = cairn::testkit::postgres::testkit::test_server_url()
        .await
        .unwrap_or_else(|msg| panic!("{msg}"));
    let schema = cairn::testkit::scratch_name(prefix);
    let sep = if pg.contains('?') { '&' } else { '?' };
    let url = format!("{pg}{sep}cairn_schema={schema}");
    let store = cairn::Store::open(&url).await.unwrap();
    (store, pg, url, schema)
}

fn ev(tag: &str) -> Vec<Event> {
    vec![
        Event::new("sync.http", tag.as_bytes().to_vec()),
        Event::with_key("sync.bin", vec![0xff, 0], vec![0u8, 0xfe, 7]),
    ]
}

async fn sorted_heads(store: &cairn::Store, space: &SpaceId) -> Vec<EpochId> {
    let mut h: Vec<EpochId> = store
        .epochs()
        .heads(space)
        .await
        .unwrap()
        .iter()
        .map(|h| h.id)
        .collect();
    h.sort();
    h
}

#[test]
fn a_served_sqlite_store_and_a_local_postgres_store_converge_through_http() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("served.db").display().to_string();
    let rt = rt();
    // The served file, also opened here: the checks read it directly.
    let served = rt.block_on(cairn::Store::open(&path)).unwrap();
    let server = Server::start(&path, &[]);
    let (pg, pg_server, pg_url, schema) = rt.block_on(postgres_store("sync_http_pg"));
    let space = SpaceId::new("shared notes").unwrap();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rt.block_on(async {
            for i in 0..30 {
                served
                    .epochs()
                    .append(&space, ev(&format!("served-{i}")))
                    .await
                    .unwrap();
            }
            for i in 0..12 {
                pg.epochs()
                    .append(&space, ev(&format!("pg-{i}")))
                    .await
                    .unwrap();
            }
            let http = server.endpoint();
            let local = endpoint_for(&pg_url, None, true).await.unwrap();
            let report = Sync::new(http.clone(), local.clone())
                .space(space.clone())
                .both_ways(true)
                .run()
                .await
                .unwrap();
            assert_eq!(report.epochs(), 42, "{report:#?}");
            let wire = http.wire_bytes();
            assert!(wire > 0);
            assert_eq!(
                sorted_heads(&served, &space).await,
                sorted_heads(&pg, &space).await
            );
            assert_eq!(sorted_heads(&served, &space).await.len(), 2);
            for store in [&served, &pg] {
                assert_eq!(
                    store.epochs().repair_heads(&space).await.unwrap(),
                    RepairOutcome::Unchanged
                );
            }
            // Each side keeps the other's cursor.
            let served_id = http.store_id().await.unwrap();
            let pg_id = local.store_id().await.unwrap();
            assert_eq!(http.peers(&space).await.unwrap()[0].cursor.peer, pg_id);
            assert_eq!(local.peers(&space).await.unwrap()[0].cursor.peer, served_id);
            // Settled, a second round moves nothing; a new epoch goes by the cursor.
            Sync::new(http.clone(), local.clone())
                .space(space.clone())
                .both_ways(true)
                .run()
                .await
                .unwrap();
            let again = Sync::new(http.clone(), local.clone())
                .space(space.clone())
                .both_ways(true)
                .run()
                .await
                .unwrap();
            assert_eq!(again.epochs(), 0, "{again:#?}");
            pg.epochs().append(&space, ev("late")).await.unwrap();
            let one = Sync::new(local.clone(), http.clone())
                .space(space.clone())
                .run()
                .await
                .unwrap();
            assert_eq!(one.epochs(), 1);
            assert_eq!(
                sorted_heads(&served, &space).await,
                sorted_heads(&pg, &space).await
            );
            // All spaces, through endpoint_for on both sides.
            let other = SpaceId::new("only on the server").unwrap();
            served.epochs().append(&other, ev("x")).await.unwrap();
            let by_url = endpoint_for(&server.base, Some(FULL.to_owned()), true)
                .await
                .unwrap();
            let all = Sync::new(by_url, local.clone())
                .all_spaces()
                .run()
                .await
                .unwrap();
            assert_eq!(all.epochs(), 1, "{all:#?}");
            assert_eq!(
                sorted_heads(&served, &other).await,
                sorted_heads(&pg, &other).await
            );
            // A read-only token is enough for a sending side, not for a receiving one.
            let reader: Arc<dyn SyncEndpoint> =
                Arc::new(HttpEndpoint::new(&server.base, Some(READ.to_owned())).unwrap());
            let fresh = cairn::MemoryStore::new();
            let copy = Sync::new(
                reader.clone(),
                Arc::new(cairn::sync::LocalEndpoint::new(
                    Arc::new(fresh.clone()),
                    "copy",
                )),
            )
            .space(space.clone())
            .run()
            .await
            .unwrap();
            assert_eq!(copy.epochs(), 43, "{copy:#?}");
            pg.epochs()
                .append(&space, ev("for the reader"))
                .await
                .unwrap();
            let err = Sync::new(local.clone(), reader)
                .space(space.clone())
                .run()
                .await
                .unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::InvalidInput {
                        what: "server token",
                        ..
                    }
                ),
                "{err}"
            );
        });
    }));
    rt.block_on(common::drop_schema(&pg_server, &schema));
    if let Err(p) = result {
        std::panic::resume_unwind(p);
    }
}

/// A sending side that alters one epoch's content under its id.
#[derive(Debug)]
struct Forging {
    inner: Arc<dyn SyncEndpoint>,
    victim: EpochId,
}

#[async_trait]
impl SyncEndpoint for Forging {
    fn label(&self) -> String {
        "forger".into()
    }
    async fn store_id(&self) -> cairn::Result<StoreId> {
        self.inner.store_id().await
    }
    async fn list_spaces(
        &self,
        after: Option<&SpaceId>,
        limit: usize,
    ) -> cairn::Result<Vec<SpaceId>> {
        self.inner.list_spaces(after, limit).await
    }
    async fn heads(&self, space: &SpaceId) -> cairn::Result<Vec<Head>> {
        self.inner.heads(space).await
    }
    async fn summaries(
        &self,
        space: &SpaceId,
        before: Option<Seq>,
        limit: usize,
    ) -> cairn::Result<Vec<EpochSummary>> {
        self.inner.summaries(space, before, limit).await
    }
    async fn epochs(&self, space: &SpaceId, ids: &[EpochId]) -> cairn::Result<Vec<Epoch>> {
        let mut out = self.inner.epochs(space, ids).await?;
        for e in &mut out {
            if e.id == self.victim {
                e.events[0].payload = b"forged".to_vec();
            }
        }
        Ok(out)
    }
    async fn missing(&self, space: &SpaceId, ids: &[EpochId]) -> cairn::Result<Vec<EpochId>> {
        self.inner.missing(space, ids).await
    }
    async fn peers(&self, space: &SpaceId) -> cairn::Result<Vec<SyncPeer>> {
        self.inner.peers(space).await
    }
    async fn import_batch(
        &self,
        space: &SpaceId,
        epochs: Vec<ForeignEpoch>,
        cursor: Option<&SyncCursor>,
        at_us: i64,
    ) -> cairn::Result<Vec<ImportOutcome>> {
        self.inner.import_batch(space, epochs, cursor, at_us).await
    }
}

#[test]
fn a_forged_epoch_sent_through_http_is_refused_with_its_id_and_nothing_of_its_batch_written() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("served.db").display().to_string(), &[]);
    let rt = rt();
    rt.block_on(async {
        let model = cairn::MemoryStore::new();
        let space = SpaceId::new("forged").unwrap();
        let mut appended = Vec::new();
        for i in 0..5 {
            appended.push(model.append(&space, ev(&format!("m{i}"))).await.unwrap().id);
        }
        let source: Arc<dyn SyncEndpoint> = Arc::new(Forging {
            inner: Arc::new(cairn::sync::LocalEndpoint::new(Arc::new(model), "model")),
            victim: appended[3],
        });
        let http = server.endpoint();
        let err = Sync::new(source, http.clone())
            .space(space.clone())
            .run()
            .await
            .unwrap_err();
        match &err {
            Error::EpochRefused { epoch, error, .. } => {
                assert_eq!(*epoch, appended[3]);
                assert!(matches!(**error, Error::HashMismatch { claimed, .. } if claimed == appended[3]), "{error}");
            }
            other => panic!("{other}"),
        }
        // One batch: nothing of it is on the server.
        assert!(http.heads(&space).await.unwrap().is_empty());
        assert!(http.peers(&space).await.unwrap().is_empty());
    });
}

#[test]
fn the_long_poll_wakes_on_an_append_through_the_server_and_on_a_write_by_another_process() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("served.db").display().to_string();
    let server = Arc::new(Server::start(&path, &[]));
    let rt = rt();
    rt.block_on(async {
        let http = server.endpoint();
        let space = SpaceId::new("watched").unwrap();
        let long = Duration::from_secs(25);
        let within = Duration::from_secs(15);

        // An append through the server.
        let started = Instant::now();
        let waiting = {
            let (http, space) = (http.clone(), space.clone());
            tokio::spawn(async move { http.wait_change(&space, None, long).await })
        };
        let s = server.clone();
        tokio::task::spawn_blocking(move || {
            s.append("watched", json!([{"kind": "k", "payload": "1"}]))
        })
        .await
        .unwrap();
        tokio::time::timeout(within, waiting)
            .await
            .expect("woken in time")
            .unwrap()
            .unwrap();
        assert!(started.elapsed() < within);
        assert_eq!(http.heads(&space).await.unwrap().len(), 1);

        // An append to the store file by another handle (this process, not the server).
        let other = cairn::Store::open(&path).await.unwrap();
        let started = Instant::now();
        let waiting = {
            let (http, space) = (http.clone(), space.clone());
            tokio::spawn(async move { http.wait_change(&space, Some(Seq(1)), long).await })
        };
        other.epochs().append(&space, ev("direct")).await.unwrap();
        tokio::time::timeout(within, waiting)
            .await
            .expect("woken in time")
            .unwrap()
            .unwrap();
        assert!(started.elapsed() < within);

        // A wait with nothing new ends at its timeout, not before.
        let started = Instant::now();
        http.wait_change(&space, Some(Seq(2)), Duration::from_millis(300))
            .await
            .unwrap();
        assert!(started.elapsed() >= Duration::from_millis(300));
    });
}

#[test]
fn import_batches_split_under_the_body_limit_and_epoch_pages_are_asked_again() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        &dir.path().join("served.db").display().to_string(),
        &[
            ("CAIRN_LIMITS__MAX_BODY_BYTES", "20000"),
            ("CAIRN_LIMITS__MAX_PAGE_BYTES", "9000"),
        ],
    );
    let rt = rt();
    rt.block_on(async {
        let space = SpaceId::new("bulky").unwrap();
        let model = cairn::MemoryStore::new();
        for i in 0..30 {
            let payload = format!("{i:04}").repeat(500);
            model
                .append(&space, vec![Event::new("bulk", payload.into_bytes())])
                .await
                .unwrap();
        }
        let source: Arc<dyn SyncEndpoint> = Arc::new(cairn::sync::LocalEndpoint::new(
            Arc::new(model.clone()),
            "model",
        ));
        let http = server.endpoint();
        let report = Sync::new(source.clone(), http.clone())
            .space(space.clone())
            .run()
            .await
            .unwrap();
        assert_eq!(report.epochs(), 30, "{report:#?}");
        let peers = http.peers(&space).await.unwrap();
        assert_eq!(peers[0].cursor.seq, Seq(30));
        let counted = peers[0].epochs;
        // With a cursor kept, every part of a split batch counts.
        for i in 30..60 {
            let payload = format!("{i:04}").repeat(500);
            model
                .append(&space, vec![Event::new("bulk", payload.into_bytes())])
                .await
                .unwrap();
        }
        let report = Sync::new(source.clone(), http.clone())
            .space(space.clone())
            .run()
            .await
            .unwrap();
        assert_eq!(report.epochs(), 30, "{report:#?}");
        let peers = http.peers(&space).await.unwrap();
        assert_eq!(
            (peers[0].cursor.seq, peers[0].epochs),
            (Seq(60), counted + 30)
        );
        // Back into an empty model: the server's pages of epochs hold about four each.
        let back = cairn::MemoryStore::new();
        let to: Arc<dyn SyncEndpoint> = Arc::new(cairn::sync::LocalEndpoint::new(
            Arc::new(back.clone()),
            "back",
        ));
        let wire_before = http.wire_bytes();
        let report = Sync::new(http.clone(), to)
            .space(space.clone())
            .run()
            .await
            .unwrap();
        assert_eq!(report.epochs(), 60, "{report:#?}");
        assert!(http.wire_bytes() - wire_before > 60 * 2000);
        assert_eq!(
            back.heads(&space).await.unwrap(),
            model.heads(&space).await.unwrap()
        );
    });
}

#[test]
fn at_most_64_long_polls_wait_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let server = Arc::new(Server::start(
        &dir.path().join("served.db").display().to_string(),
        &[],
    ));
    let answers: Vec<u16> = std::thread::scope(|scope| {
        let polls: Vec<_> = (0..72)
            .map(|_| {
                let s = server.clone();
                scope.spawn(move || {
                    let agent: ureq::Agent = ureq::Agent::config_builder()
                        .http_status_as_error(false)
                        .timeout_global(Some(DEADLINE))
                        .build()
                        .into();
                    agent
                        .get(format!(
                            "{}/v1/spaces/quiet/sync/wait?timeout_ms=4000",
                            s.base
                        ))
                        .header("Authorization", format!("Bearer {READ}"))
                        .call()
                        .unwrap()
                        .status()
                        .as_u16()
                })
            })
            .collect();
        polls.into_iter().map(|p| p.join().unwrap()).collect()
    });
    let waited = answers.iter().filter(|s| **s == 200).count();
    let turned = answers.iter().filter(|s| **s == 429).count();
    assert_eq!(waited + turned, answers.len(), "{answers:?}");
    // 72 polls of 4 s sent at once: 64 wait, the others are turned away at once.
    assert!(turned >= 1 && waited >= 1, "{answers:?}");
}

/// A side behind `cairn serve`: a fresh store served by a child process, reached by
/// [`HttpEndpoint`] and read directly by the checks (a second handle on the same store).
mod sides {
    use super::*;
    use cairn_conformance::sync::{harness_sides, OpenSide, SyncSide};

    pub(crate) fn postgres() -> OpenSide {
        harness_sides("postgres", cairn::testkit::postgres::testkit::harness)
    }

    pub(crate) fn served_sqlite() -> OpenSide {
        Arc::new(|| {
            Box::pin(async {
                let dir = tempfile::tempdir().unwrap();
                let path = dir.path().join("served.db").display().to_string();
                let store = cairn::Store::open(&path).await.unwrap();
                let server = tokio::task::spawn_blocking(move || Server::start(&path, &[]))
                    .await
                    .unwrap();

                SyncSide {
                    endpoint: server.endpoint(),
                    store: store.diagnostics(),
                    keep: Some(Arc::new((store.clone(), server, dir))),
                }
            })
        })
    }
}

macro_rules! over_http {
    ($module:ident, $name:literal, $a:expr, $b:expr) => {
        mod $module {
            cairn_conformance::sync_suite!(cairn_conformance::sync::SyncPair::new($name, $a, $b));
        }
    };
}

over_http!(
    served_sqlite_to_postgres,
    "http(sqlite)→postgres",
    super::sides::served_sqlite(),
    super::sides::postgres()
);
over_http!(
    postgres_to_served_sqlite,
    "postgres→http(sqlite)",
    super::sides::postgres(),
    super::sides::served_sqlite()
);
over_http!(
    served_to_served,
    "http(sqlite)→http(sqlite)",
    super::sides::served_sqlite(),
    super::sides::served_sqlite()
);
