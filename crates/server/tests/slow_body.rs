//! Request bodies cannot hold the server's connection slots (issue 44, item 4.2): a sign-in
//! body that never finishes is cut off after the header-read timeout's grace, and a body
//! announced over the limit is answered 413 before it is sent.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

const TOKEN: &str = "slow-body-test-token-5d1f0b";
/// The grace a body gets (`--header-read-timeout`).
const GRACE: Duration = Duration::from_secs(2);
/// The request timeout: what a stalled body held its slot for before the fix.
const REQUEST_TIMEOUT_SECS: u64 = 60;

struct Server(common::Serving);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.child.kill();
        let _ = self.0.child.wait();
    }
}

fn start(dir: &tempfile::TempDir) -> Server {
    let db = dir.path().join("store.db");
    let mut cmd = common::cairn(db.to_str().unwrap());
    cmd.env("CAIRN_AUTH__TOKENS", TOKEN).args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--max-connections",
        "20",
        "--header-read-timeout",
        &GRACE.as_secs().to_string(),
        "--request-timeout",
        &REQUEST_TIMEOUT_SECS.to_string(),
        "--retention-enabled",
        "false",
        "--backfill-enabled",
        "false",
    ]);
    Server(common::serve(&mut cmd, Duration::from_secs(30)))
}

/// Sends `head` (and nothing else) and reads the answer until the server closes the
/// connection or `within` passes; returns the status (0 when none came) and how long it took.
fn exchange(addr: &str, head: &str, within: Duration) -> (u16, String, Duration) {
    let started = Instant::now();
    let mut conn = TcpStream::connect(addr).unwrap();
    conn.write_all(head.as_bytes()).unwrap();
    let (status, text) = read_answer(&mut conn, within);
    (status, text, started.elapsed())
}

fn read_answer(conn: &mut TcpStream, within: Duration) -> (u16, String) {
    let deadline = Instant::now() + within;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        conn.set_read_timeout(Some(left)).unwrap();
        match conn.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    let text = String::from_utf8_lossy(&got).into_owned();
    let status = text
        .strip_prefix("HTTP/1.1 ")
        .and_then(|t| t.get(..3))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, text)
}

#[test]
fn stalled_sign_in_bodies_on_every_slot_leave_an_authenticated_request_answered_promptly() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir);
    let addr = server.0.addr.clone();
    // Twenty sockets, the server's whole cap, each announcing a sign-in form and sending its
    // first field only.
    let mut stalled: Vec<TcpStream> = (0..20)
        .map(|_| {
            let mut c = TcpStream::connect(&addr).unwrap();
            c.write_all(
                b"POST /ui/login HTTP/1.1\r\nHost: 127.0.0.1\r\n\
                  Content-Type: application/x-www-form-urlencoded\r\n\
                  Content-Length: 100\r\n\r\ncsrf=",
            )
            .unwrap();
            c
        })
        .collect();
    // Before the fix this waited for the request timeout (60 s here); now a slot frees once a
    // stalled body's grace is spent.
    let (status, text, took) = exchange(
        &addr,
        &format!(
            "GET /v1/doctor HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n\
             Connection: close\r\n\r\n"
        ),
        Duration::from_secs(REQUEST_TIMEOUT_SECS / 3),
    );
    assert_eq!(status, 200, "{text}");
    assert!(
        took < GRACE + Duration::from_secs(8),
        "the authenticated request took {took:?}; the request timeout is {REQUEST_TIMEOUT_SECS} s"
    );
    // Each stalled sign-in was answered and its connection closed.
    for c in &mut stalled {
        let (status, text) = read_answer(c, Duration::from_secs(10));
        assert!((400..500).contains(&status), "{text}");
    }
}

#[test]
fn a_body_announced_over_the_limit_is_refused_413_before_it_is_sent() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir);
    let addr = &server.0.addr;
    // Waiting for any of these bodies would take the grace at least.
    let at_once = GRACE;
    for (what, head) in [
        (
            "the API, authenticated",
            format!(
                "POST /v1/batch HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n\
                 Content-Type: application/json\r\nContent-Length: 99999999999\r\n\r\n{{"
            ),
        ),
        (
            "the API, without a token",
            "POST /v1/queues/q/runs HTTP/1.1\r\nHost: 127.0.0.1\r\n\
             Content-Length: 99999999999\r\n\r\n"
                .to_owned(),
        ),
        (
            "the sign-in form, over its own cap",
            "POST /ui/login HTTP/1.1\r\nHost: 127.0.0.1\r\n\
             Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 5000\r\n\r\ncsrf="
                .to_owned(),
        ),
    ] {
        let (status, text, took) = exchange(addr, &head, Duration::from_secs(20));
        assert_eq!(status, 413, "{what}: {text}");
        assert!(text.contains("body_too_large"), "{what}: {text}");
        assert!(took < at_once, "{what}: answered after {took:?}");
    }
    // A sign-in form within its cap is still read (and refused for its stale CSRF value).
    let form = "csrf=x&token=y";
    let (status, text, _) = exchange(
        addr,
        &format!(
            "POST /ui/login HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\
             Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{form}",
            form.len()
        ),
        Duration::from_secs(20),
    );
    assert_eq!(status, 403, "{text}");
}
