//! Every file the binary reads by path is a regular file of bounded size, or refused in one
//! line before it is read (issue 44 item 4.3): `--config`, `--token-file`,
//! `--delivery-token-file` and `migrate check --with-revision`, at start; and the delivery
//! token file at every re-read, where a file that holds no usable token spends no attempt.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use common::cairn;

const FULL: &str = "full-token-3a9c5e7b1d2f";
const DEADLINE: Duration = Duration::from_secs(30);

/// The bounds the binary documents: the config file and `auth.token_file` 1 MiB, the
/// delivery token file 64 KiB, a revision file 16 MiB.
const CONFIG_MAX: u64 = 1024 * 1024;
const TOKEN_FILE_MAX: u64 = 1024 * 1024;
const DELIVERY_TOKEN_FILE_MAX: u64 = 64 * 1024;
const REVISION_MAX: u64 = 16 * 1024 * 1024;

/// A file of `len` bytes (sparse: nothing is written).
fn sized(dir: &Path, name: &str, len: u64) -> String {
    let path = dir.join(name);
    std::fs::File::create(&path).unwrap().set_len(len).unwrap();
    path.display().to_string()
}

/// Runs `cairn ARGS` expecting a refusal with status `code`; its one line of stderr.
fn refused(db: &str, args: &[&str], code: i32) -> String {
    let started = Instant::now();
    let out = cairn(db)
        .args(args)
        .env("CAIRN_AUTH__TOKENS", FULL)
        .output()
        .unwrap();
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
    assert_eq!(err.lines().count(), 1, "{args:?}: one line: {err}");
    assert!(
        started.elapsed() < DEADLINE,
        "{args:?}: refused without reading"
    );
    err
}

#[test]
fn a_device_or_an_oversized_file_is_refused_in_one_line_for_each_flag() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("never.db").display().to_string();
    let collector = ["--delivery-url", "http://127.0.0.1:9/ingest"];
    let cases: [(&str, &[&str], u64, &str); 3] = [
        ("--config", &[], CONFIG_MAX, "cannot read the config file"),
        (
            "--token-file",
            &[],
            TOKEN_FILE_MAX,
            "auth.token_file: cannot read",
        ),
        (
            "--delivery-token-file",
            &collector,
            DELIVERY_TOKEN_FILE_MAX,
            "delivery.token_file: cannot read",
        ),
    ];
    for (flag, extra, max, says) in cases {
        let big = sized(dir.path(), &format!("big{flag}"), max + 1);
        for (path, why) in [
            (
                "/dev/zero".to_owned(),
                "it is not a regular file".to_owned(),
            ),
            (big.clone(), format!("it holds more than {max} bytes")),
        ] {
            let mut args = vec!["serve", "--listen", "127.0.0.1:0", flag, &path];
            args.extend_from_slice(extra);
            let err = refused(&db, &args, 2);
            assert!(err.starts_with("cairn: config: "), "{flag}: {err}");
            assert!(err.contains(says), "{flag}: {err}");
            assert!(err.contains(&path), "{flag} names the file: {err}");
            assert!(err.contains(&why), "{flag}: {err}");
        }
        // Exactly the limit is not refused for its size (it may be refused for what it
        // holds: a sparse file is NUL bytes).
        std::fs::File::options()
            .write(true)
            .open(&big)
            .unwrap()
            .set_len(max)
            .unwrap();
        let out = cairn(&db)
            .args(["serve", "--listen", "127.0.0.1:0", flag, &big])
            .args(extra)
            .env("CAIRN_AUTH__TOKENS", FULL)
            .output()
            .unwrap();
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(!err.contains("holds more than"), "{flag}: {err}");
    }
    assert!(!Path::new(&db).exists(), "nothing was opened");
}

#[test]
fn a_revision_file_is_bounded_too() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("never.db").display().to_string();
    let big = sized(dir.path(), "0002_big.sql", REVISION_MAX + 1);
    for (path, why) in [
        (
            "/dev/zero".to_owned(),
            "it is not a regular file".to_owned(),
        ),
        (big, format!("it holds more than {REVISION_MAX} bytes")),
    ] {
        let err = refused(
            &db,
            &[
                "migrate",
                "check",
                "--backend",
                "sqlite",
                "--with-revision",
                &path,
            ],
            1,
        );
        assert!(err.starts_with("cairn: "), "{err}");
        assert!(err.contains(&why), "{err}");
    }
}

const OLD_TOKEN: &str = "collector-token-old-1234";
const NEW_TOKEN: &str = "collector-token-new-5678";

/// A loopback collector: `OLD_TOKEN` is accepted until it is revoked, `NEW_TOKEN` always; an
/// `Authorization` header past 8 KiB is answered 431, as common servers do; anything else 401.
#[derive(Default)]
struct Collector {
    revoked: AtomicBool,
    /// Per request: the run and the length of its `Authorization` header.
    seen: Mutex<Vec<(String, usize, u16)>>,
}

impl Collector {
    fn start() -> (Arc<Self>, String) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let me = Arc::new(Self::default());
        let c = me.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let c = c.clone();
                std::thread::spawn(move || c.serve(stream));
            }
        });
        (me, format!("http://{addr}/ingest"))
    }

    fn serve(&self, stream: TcpStream) {
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut out = stream;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let (mut len, mut auth) = (0usize, String::new());
            loop {
                let mut h = String::new();
                if reader.read_line(&mut h).unwrap_or(0) == 0 {
                    return;
                }
                let h = h.trim_end();
                if h.is_empty() {
                    break;
                }
                let (name, value) = h.split_once(':').unwrap();
                match name.to_ascii_lowercase().as_str() {
                    "content-length" => len = value.trim().parse().unwrap(),
                    "authorization" => auth = value.trim().to_owned(),
                    _ => {}
                }
            }
            let mut body = vec![0; len];
            reader.read_exact(&mut body).unwrap();
            let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let run = body["run_id"].as_str().unwrap_or("").to_owned();
            let status = if auth.len() > 8 * 1024 {
                431
            } else if auth == format!("Bearer {NEW_TOKEN}")
                || (auth == format!("Bearer {OLD_TOKEN}") && !self.revoked.load(Ordering::SeqCst))
            {
                202
            } else {
                401
            };
            self.seen.lock().unwrap().push((run, auth.len(), status));
            let _ = write!(out, "HTTP/1.1 {status} X\r\ncontent-length: 2\r\n\r\nok");
        }
    }

    fn refusals(&self, run: &str) -> usize {
        let seen = self.seen.lock().unwrap();
        seen.iter()
            .filter(|(r, _, s)| r == run && *s != 202)
            .count()
    }
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + DEADLINE;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Replaces `path`'s content at once (the worker never reads half a file).
fn replace(path: &Path, content: &[u8]) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, content).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// Kills the server when the test ends, however it ends.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn call(agent: &ureq::Agent, base: &str, method: &str, path: &str, body: Value) -> Value {
    let req = ureq::http::Request::builder()
        .method(method)
        .uri(format!("{base}{path}"))
        .header("Authorization", format!("Bearer {FULL}"))
        .header("Content-Type", "application/json");
    let body = match body {
        Value::Null => Vec::new(),
        v => serde_json::to_vec(&v).unwrap(),
    };
    let mut resp = agent.run(req.body(body).unwrap()).unwrap();
    let status = resp.status().as_u16();
    let text = resp.body_mut().read_to_string().unwrap_or_default();
    assert!(status < 300, "{method} {path}: {status} {text}");
    serde_json::from_str(&text).unwrap_or(Value::Null)
}

/// A run with one event, closed, that may spend at most 3 attempts.
fn closed_run(agent: &ureq::Agent, base: &str, key: &str) -> String {
    let v = call(
        agent,
        base,
        "POST",
        "/v1/queues/telemetry/runs",
        json!({"key": key, "payload": "p", "max_attempts": 3}),
    );
    let run = v["run_id"].as_str().unwrap().to_owned();
    call(
        agent,
        base,
        "POST",
        &format!("/v1/runs/{run}/events"),
        json!({"event_id": "e1", "payload": "x"}),
    );
    call(
        agent,
        base,
        "POST",
        &format!("/v1/runs/{run}/close"),
        Value::Null,
    );
    run
}

fn wait_state(
    agent: &ureq::Agent,
    base: &str,
    run: &str,
    state: &str,
    log: &Mutex<Vec<u8>>,
) -> Value {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let v = call(agent, base, "GET", &format!("/v1/runs/{run}"), Value::Null);
        if v["state"] == state {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "run {run} never became {state}: {v}; server stderr: {}",
            String::from_utf8_lossy(&log.lock().unwrap())
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The token file grows past its bound between deliveries while the collector revokes the
/// token in use: each refusal re-reads the file, which is refused unread, so the old token
/// stays, nothing oversized is sent and the run is given back without spending an attempt —
/// more refusals than its `max_attempts` leave it queued, and once the file holds a usable
/// token again it is delivered on its first attempt.
#[test]
fn a_token_file_grown_past_its_bound_spends_no_attempt() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("cairn.db").display().to_string();
    let token_file = dir.path().join("collector-token");
    replace(&token_file, format!("{OLD_TOKEN}\n").as_bytes());
    let (collector, url) = Collector::start();
    let mut cmd = cairn(&db);
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--delivery-url", &url])
        .args(["--delivery-token-file", token_file.to_str().unwrap()])
        .args([
            "--delivery-retry-base-ms",
            "20",
            "--delivery-retry-cap-ms",
            "50",
        ])
        .args(["--delivery-poll-ms", "50"])
        .env("CAIRN_AUTH__TOKENS", FULL);
    let common::Serving {
        child,
        stderr: log,
        addr,
    } = common::serve(&mut cmd, DEADLINE);
    let _server = Killed(child);
    let base = format!("http://{addr}");
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(DEADLINE))
        .build()
        .into();

    let first = closed_run(&agent, &base, "before");
    wait_state(&agent, &base, &first, "succeeded", &log);

    // One line of printable ASCII: before the bound, it was read whole and sent as the token.
    let mut huge = "x".repeat(DELIVERY_TOKEN_FILE_MAX as usize + 1);
    huge.push('\n');
    replace(&token_file, huge.as_bytes());
    collector.revoked.store(true, Ordering::SeqCst);
    let second = closed_run(&agent, &base, "after");
    wait_until(
        "the collector refused the run more often than it may be tried",
        || collector.refusals(&second) > 4,
    );
    let v = call(
        &agent,
        &base,
        "GET",
        &format!("/v1/runs/{second}"),
        Value::Null,
    );
    assert_ne!(v["state"], "parked", "{v}");

    replace(&token_file, format!("{NEW_TOKEN}\n").as_bytes());
    let v = wait_state(&agent, &base, &second, "succeeded", &log);
    assert_eq!(
        v["attempts"], 1,
        "no attempt was spent on the refusals: {v}"
    );
    let seen = collector.seen.lock().unwrap().clone();
    assert!(
        seen.iter()
            .all(|(_, len, status)| *len < 100 && *status != 431),
        "nothing oversized was sent: {:?}",
        seen.iter().map(|(_, len, s)| (len, s)).collect::<Vec<_>>()
    );
    let log = String::from_utf8_lossy(&log.lock().unwrap()).into_owned();
    assert!(
        log.contains(&format!(
            "it holds more than {DELIVERY_TOKEN_FILE_MAX} bytes"
        )),
        "the refused re-read is logged: {log}"
    );
}
