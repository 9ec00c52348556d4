//! `cairn serve` facing a hostile network (issue 21, items 9 and 10): clients that invent
//! methods and paths cannot grow the metrics, the logs or the server's memory; clients that
//! send an incomplete header, idle on a keep-alive connection or open more connections than the
//! cap cannot starve the others. The real binary on a loopback port, driven over raw TCP to
//! 127.0.0.1 only; every loop is bounded and every wait polls a condition with a deadline.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const FULL: &str = "full-token-6f1d2c9a8b7e";

/// How long a server may take to start or answer.
const DEADLINE: Duration = Duration::from_secs(30);

/// A running `cairn serve` on `127.0.0.1:0` with one full-access token.
struct Server {
    child: Child,
    addr: String,
    stderr: Arc<Mutex<Vec<u8>>>,
    _dir: tempfile::TempDir,
}

impl Server {
    fn start(env: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("hostile.db").display().to_string();
        let mut cmd = common::cairn(&db);
        cmd.args(["serve", "--listen", "127.0.0.1:0"])
            .env("CAIRN_AUTH__TOKENS", FULL)
            .env("TMPDIR", dir.path())
            .envs(env.iter().copied());
        let common::Serving {
            child,
            stderr,
            addr,
        } = common::serve(&mut cmd, DEADLINE);
        let server = Self {
            child,
            addr,
            stderr,
            _dir: dir,
        };
        let deadline = Instant::now() + DEADLINE;
        while server.try_get("/healthz", None, DEADLINE).map(|(s, _)| s) != Some(200) {
            assert!(Instant::now() < deadline, "healthz answers in time");
            std::thread::yield_now();
        }
        server
    }

    fn connect(&self) -> TcpStream {
        let conn = TcpStream::connect(&self.addr).expect("connect to the server");
        conn.set_nodelay(true).unwrap();
        conn
    }

    /// `GET path` on a new connection (`Connection: close`); the status and the body, or `None`
    /// when no whole answer came within `within`.
    fn try_get(&self, path: &str, token: Option<&str>, within: Duration) -> Option<(u16, String)> {
        let mut conn = TcpStream::connect(&self.addr).ok()?;
        conn.set_read_timeout(Some(within)).unwrap();
        let auth = token
            .map(|t| format!("Authorization: Bearer {t}\r\n"))
            .unwrap_or_default();
        let request = format!("GET {path} HTTP/1.1\r\nHost: t\r\n{auth}Connection: close\r\n\r\n");
        conn.write_all(request.as_bytes()).ok()?;
        let started = Instant::now();
        let mut answer = Vec::new();
        let mut buf = [0u8; 16 * 1024];
        loop {
            match conn.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
                Err(_) => return None,
            }
            if started.elapsed() > within {
                return None;
            }
        }
        parse_answer(&answer)
    }

    fn log(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned()
    }

    /// The server's resident memory, from `/proc/<pid>/status`, in bytes.
    fn rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let kb = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .expect("VmRSS in /proc/<pid>/status")
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse::<u64>()
            .unwrap();
        kb * 1024
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A whole `Connection: close` answer: the status and the body.
fn parse_answer(answer: &[u8]) -> Option<(u16, String)> {
    let text = String::from_utf8_lossy(answer);
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    Some((status, body.to_owned()))
}

/// Whether the server has closed `conn`: a read sees the end of the stream or a reset. Waits
/// at most `wait` for it.
fn closed_by_server(conn: &mut TcpStream, wait: Duration) -> bool {
    conn.set_read_timeout(Some(wait)).unwrap();
    let mut buf = [0u8; 4096];
    loop {
        match conn.read(&mut buf) {
            Ok(0) => return true,
            // A 408 or any other answer the server writes before closing.
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return false
            }
            Err(_) => return true,
        }
    }
}

/// 10,000 requests, each with a method name never seen before and half of them to a path no
/// route matches: afterwards `/metrics` is small and names none of them, the server's memory
/// grew by a bounded amount, and no log line carries an invented method or path.
#[test]
fn invented_methods_and_paths_leave_metrics_logs_and_memory_bounded() {
    let server = Server::start(&[]);
    const PER_CONNECTION: usize = 1_000;
    // `connections` clients at once, each sending PER_CONNECTION pipelined requests; request
    // `n` of the test is unique from `first`.
    let send_all = |first: usize, connections: usize| {
        std::thread::scope(|scope| {
            for c in 0..connections {
                let server = &server;
                scope.spawn(move || {
                    let mut conn = server.connect();
                    conn.set_read_timeout(Some(DEADLINE)).unwrap();
                    let mut writer = conn.try_clone().unwrap();
                    let requests = std::thread::spawn(move || {
                        let mut out = Vec::new();
                        for i in 0..PER_CONNECTION {
                            let n = first + c * PER_CONNECTION + i;
                            // A method token of 47 to 146 characters, unique per request.
                            let method = format!("M{n:06}{}", "Q".repeat(40 + n % 100));
                            let path = if n % 2 == 0 {
                                "/healthz".to_owned()
                            } else {
                                format!("/nowhere/{n}/{}", "p".repeat(n % 300))
                            };
                            let close = if i + 1 == PER_CONNECTION {
                                "Connection: close\r\n"
                            } else {
                                ""
                            };
                            out.extend_from_slice(
                                format!(
                                    "{method} {path} HTTP/1.1\r\nHost: t\r\nUser-Agent: ua-{n}-{}\r\n\
                                     {close}\r\n",
                                    "u".repeat(400)
                                )
                                .as_bytes(),
                            );
                        }
                        writer.write_all(&out).unwrap();
                    });
                    let mut answers = Vec::new();
                    conn.read_to_end(&mut answers).unwrap();
                    requests.join().unwrap();
                    let text = String::from_utf8_lossy(&answers);
                    assert_eq!(
                        text.matches("HTTP/1.1 ").count(),
                        PER_CONNECTION,
                        "every request is answered"
                    );
                    assert!(!text.contains("HTTP/1.1 5"), "no server error");
                });
            }
        });
    };
    // 2,000 requests to warm up (allocator arenas, the store), then the measured 10,000.
    send_all(0, 2);
    let before = server.rss();
    send_all(2 * PER_CONNECTION, 10);
    let after = server.rss();
    let (status, metrics) = server
        .try_get("/metrics", Some(FULL), DEADLINE)
        .expect("/metrics answers");
    assert_eq!(status, 200, "{metrics}");
    assert!(
        metrics.len() < 64 * 1024,
        "/metrics is {} bytes after 12,000 invented methods",
        metrics.len()
    );
    assert!(!metrics.contains("M0000"), "no invented method is a label");
    assert!(
        !metrics.contains("/nowhere"),
        "no unmatched path is a label"
    );
    assert!(
        metrics.contains(r#"method="other",route="unmatched""#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"method="other",route="/healthz""#),
        "{metrics}"
    );
    assert!(
        after < before + 32 * 1024 * 1024,
        "resident memory grew from {before} to {after} bytes"
    );
    assert!(after < 256 * 1024 * 1024, "resident memory {after} bytes");
    let log = server.log();
    for line in log.lines() {
        assert!(line.len() <= 1024, "a log line of {} bytes", line.len());
        assert!(
            !line.contains(&"Q".repeat(60))
                && !line.contains("/nowhere")
                && !line.contains(&"u".repeat(100)),
            "an invented method or user agent is logged past 64 bytes, or a path at all: {line}"
        );
    }
}

/// A few hundred clients that dribble an incomplete header neither keep `/healthz` from
/// answering a new client promptly nor hold their connections past the header-read timeout.
#[test]
fn slow_clients_are_cut_off_at_the_header_read_timeout_and_never_starve_healthz() {
    let server = Server::start(&[("CAIRN_LIMITS__HEADER_READ_TIMEOUT_SECS", "2")]);
    const SLOW: usize = 300;
    let started = Instant::now();
    let mut slow: Vec<Option<TcpStream>> = (0..SLOW)
        .map(|_| {
            let mut conn = server.connect();
            conn.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Slow: ")
                .unwrap();
            Some(conn)
        })
        .collect();
    let deadline = Instant::now() + DEADLINE;
    let mut healthz_checked = false;
    while slow.iter().any(Option::is_some) {
        assert!(
            Instant::now() < deadline,
            "{} of {SLOW} slow clients still connected after {:?}",
            slow.iter().flatten().count(),
            started.elapsed()
        );
        if !healthz_checked {
            let asked = Instant::now();
            let answer = server.try_get("/healthz", None, Duration::from_secs(2));
            assert_eq!(
                answer.as_ref().map(|(s, _)| *s),
                Some(200),
                "healthz answers within 2 s beside {SLOW} slow clients"
            );
            assert!(asked.elapsed() < Duration::from_secs(2));
            healthz_checked = true;
        }
        // One more byte of the header from each slow client still connected.
        for entry in &mut slow {
            let Some(conn) = entry else { continue };
            if conn.write_all(b"a").is_err() || closed_by_server(conn, Duration::from_millis(1)) {
                *entry = None;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "cut off at the timeout, not before: {:?}",
        started.elapsed()
    );
    assert_eq!(
        server
            .try_get("/healthz", None, DEADLINE)
            .map(|(status, _)| status),
        Some(200)
    );
}

/// A keep-alive connection left idle after its answer is closed by the server after the
/// keep-alive timeout.
#[test]
fn an_idle_keep_alive_connection_is_closed_after_the_keep_alive_timeout() {
    let server = Server::start(&[("CAIRN_LIMITS__KEEP_ALIVE_TIMEOUT_SECS", "1")]);
    let mut conn = server.connect();
    conn.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    conn.set_read_timeout(Some(DEADLINE)).unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    while !answer.ends_with(b"}") {
        let n = conn.read(&mut buf).unwrap();
        assert!(n > 0, "answered before closing");
        answer.extend_from_slice(&buf[..n]);
    }
    let answered = Instant::now();
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(
        !text.to_ascii_lowercase().contains("connection: close"),
        "{text}"
    );
    // The connection stays usable for a while…
    conn.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let mut again = Vec::new();
    while !again.ends_with(b"}") {
        let n = conn.read(&mut buf).unwrap();
        assert!(n > 0, "the kept-alive connection answers a second request");
        again.extend_from_slice(&buf[..n]);
    }
    // …and is closed once idle for the timeout.
    assert!(
        closed_by_server(&mut conn, DEADLINE),
        "the idle connection is closed within {DEADLINE:?}"
    );
    let idle = answered.elapsed();
    assert!(idle >= Duration::from_millis(900), "closed after {idle:?}");
}

/// Over the connection cap a new client waits (its request is not read) instead of taking the
/// server down; once connections close, it is answered, and the server serves as before.
#[test]
fn over_the_connection_cap_new_clients_wait_and_are_served_once_a_slot_frees() {
    let server = Server::start(&[
        ("CAIRN_LIMITS__MAX_CONNECTIONS", "8"),
        ("CAIRN_LIMITS__HEADER_READ_TIMEOUT_SECS", "60"),
    ]);
    let mut held: Vec<TcpStream> = (0..8)
        .map(|_| {
            let mut conn = server.connect();
            conn.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n")
                .unwrap();
            conn
        })
        .collect();
    // The ninth client connects (the kernel queues it) but is not served while the cap is
    // reached.
    let mut waiting = server.connect();
    waiting
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    waiting
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut buf = [0u8; 1024];
    match waiting.read(&mut buf) {
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
        other => panic!("a client over the cap was served at once: {other:?}"),
    }
    // The held clients finish their requests and close; the waiting one is then answered.
    for conn in &mut held {
        conn.write_all(b"Connection: close\r\n\r\n").unwrap();
    }
    for conn in &mut held {
        assert!(
            closed_by_server(conn, DEADLINE),
            "a held client is answered"
        );
    }
    waiting.set_read_timeout(Some(DEADLINE)).unwrap();
    let mut answer = Vec::new();
    waiting.read_to_end(&mut answer).unwrap();
    assert_eq!(
        parse_answer(&answer).map(|(s, _)| s),
        Some(200),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    // The server serves as before, with every slot free again.
    for _ in 0..16 {
        assert_eq!(
            server.try_get("/healthz", None, DEADLINE).map(|(s, _)| s),
            Some(200)
        );
    }
}
