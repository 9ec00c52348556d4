//! Issue 21 item 15: secrets in URLs stay out of the output. A delivery URL carrying any
//! credential — a user, or a password alone — is refused; a Postgres URL parameter the driver
//! does not read is refused before the driver sees it (the driver logs such a parameter with
//! its value). Each runs the real binary; every wait has a deadline.

mod common;

use std::io::Read;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use common::cairn;

const DEADLINE: Duration = Duration::from_secs(30);

/// Runs `cmd` until it exits or `DEADLINE` passes (then kills it); its exit status (`None`
/// when it had to be killed) and everything it wrote to stderr.
fn run_until_exit(cmd: &mut Command) -> (Option<ExitStatus>, String) {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the cairn binary runs");
    let mut pipe = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = pipe.read_to_end(&mut buf);
        buf
    });
    let deadline = Instant::now() + DEADLINE;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stderr = String::from_utf8_lossy(&reader.join().unwrap()).into_owned();
    (status, stderr)
}

/// A delivery URL with a user, with a user and a password, or with a password alone is
/// refused as a configuration problem (exit 2) naming `delivery.url`, never repeating the
/// secret; nothing is served.
#[test]
fn a_delivery_url_carrying_any_credential_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let db = db.to_str().unwrap();
    for url in [
        "http://collector-user@127.0.0.1:9/ingest",
        "http://collector-user:s3cretpw@127.0.0.1:9/ingest",
        "http://:s3cretpw@127.0.0.1:9/ingest",
        "https://:s3cretpw@collector.invalid/ingest",
    ] {
        let (status, stderr) = run_until_exit(
            cairn(db)
                .args(["serve", "--listen", "127.0.0.1:0", "--delivery-url", url])
                .env("CAIRN_DELIVERY__TOKEN", "token-0123456789"),
        );
        assert_eq!(
            status.and_then(|s| s.code()),
            Some(2),
            "{url} is refused before anything is served: {stderr}"
        );
        assert!(
            stderr.contains("cairn: config: delivery.url:") && stderr.contains("credentials"),
            "{url}: {stderr}"
        );
        for secret in ["s3cretpw", "collector-user"] {
            assert!(!stderr.contains(secret), "{url}: {stderr}");
        }
        assert!(!std::path::Path::new(db).exists(), "nothing was opened");
    }
}

/// A Postgres URL with a query parameter the driver does not read: `cairn serve` (with debug
/// logs) exits with one line naming the parameter, and no line anywhere carries its value —
/// the driver used to log `ignoring unrecognized connect parameter key=… value=…`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_log_line_prints_a_postgres_url_parameters_value() {
    const VALUE: &str = "hunter2-in-a-url";
    let pg = cairn::testkit::postgres::testkit::test_server_url()
        .await
        .unwrap_or_else(|msg| panic!("{msg}"));
    let schema = cairn::testkit::scratch_name("cairn_url_param");
    let sep = if pg.contains('?') { '&' } else { '?' };
    let url = format!("{pg}{sep}cairn_schema={schema}&passwrd={VALUE}");
    let (status, stderr) = tokio::task::spawn_blocking(move || {
        run_until_exit(
            cairn(&url)
                .args(["serve", "--listen", "127.0.0.1:0"])
                .env("CAIRN_AUTH__TOKENS", "token-0123456789abcdef")
                .env("CAIRN_LOG__LEVEL", "trace"),
        )
    })
    .await
    .unwrap();
    assert!(!stderr.contains(VALUE), "{stderr}");
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(1),
        "the URL is refused: {stderr}"
    );
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("cairn: ") && last.contains("`passwrd`"),
        "{stderr}"
    );

    // `cairn doctor` refuses it the same way, in its report.
    let url = format!("{pg}{sep}cairn_schema={schema}&passwrd={VALUE}");
    let out = tokio::task::spawn_blocking(move || {
        cairn(&url).args(["doctor", "--json"]).output().unwrap()
    })
    .await
    .unwrap();
    let shown = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(1), "{shown}");
    assert!(!shown.contains(VALUE), "{shown}");
    assert!(shown.contains("`passwrd`"), "{shown}");
}
