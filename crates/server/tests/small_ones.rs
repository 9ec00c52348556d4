//! What an outside tester broke at the edges (issue 44, items 4.6 and 5.5), driven through the
//! `cairn` binary and its HTTP server as a user would:
//!
//! - a Postgres URL parameter given twice and a `sqlite://` URL with a query are refused, and
//!   the SQLite URL creates no file;
//! - a time outside 1970-01-01 … 9999-12-31 UTC (`Timestamp::check`) is refused by the HTTP
//!   enqueue, the CLI's `--from-file` enqueue and the dashboard's date filter alike, and both
//!   ends of the range are accepted;
//! - the dashboard refuses cairn's reserved backfill-marker space as the API does;
//! - `cairn run show` and `cairn import` print times as RFC 3339.

use std::path::Path;
use std::process::{Child, Output};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

mod common;

const TOKEN: &str = "small-ones-token-5e2a9c7d1b";
const DEADLINE: Duration = Duration::from_secs(30);
/// 9999-12-31T23:59:59.999999Z, the last accepted microsecond.
const LATEST_US: i64 = 253_402_300_799_999_999;

fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "{:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

/// Exit 1 with one line on stderr, returned.
fn refused(out: Output) -> String {
    assert_eq!(
        out.status.code(),
        Some(1),
        "stdout: {} stderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    err
}

/// Whether `text` is RFC 3339 as cairn prints it: `YYYY-MM-DDTHH:MM:SS.ffffffZ`.
fn is_rfc3339(text: &str) -> bool {
    let b = text.as_bytes();
    let digits = |r: std::ops::Range<usize>| r.into_iter().all(|i| b[i].is_ascii_digit());
    b.len() == 27
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && b[10] == b'T'
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19)
        && b[19] == b'.'
        && digits(20..26)
        && b[26] == b'Z'
}

#[test]
fn a_postgres_parameter_given_twice_is_refused_naming_it() {
    // Refused while the URL is read, before any connection: no server is needed.
    let err = refused(
        common::cairn("postgres://u:hunter2@127.0.0.1:1/db?cairn_schema=a&cairn_schema=b")
            .args(["heads", "--space", "x"])
            .output()
            .unwrap(),
    );
    assert!(
        err.contains("`cairn_schema`") && err.contains("twice"),
        "{err}"
    );
    assert!(!err.contains("hunter2"), "{err}");
}

#[test]
fn a_sqlite_url_with_a_query_is_refused_and_creates_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=ro", dir.path().join("p.db").display());
    let err = refused(
        common::cairn(&url)
            .args(["append", "--space", "s", "--kind", "k", "--payload", "p"])
            .output()
            .unwrap(),
    );
    assert!(err.contains("`mode`"), "{err}");
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "no file is created: {left:?}");
}

/// `cairn enqueue --from-file` refuses a `not_before_us` outside the range, naming the line,
/// and accepts both ends; `cairn run show` prints the run's times as RFC 3339.
#[test]
fn the_cli_bounds_not_before_and_prints_rfc3339() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("store.db");
    let db = db.to_str().unwrap();
    let file = dir.path().join("items.jsonl");
    for bad in [-1, i64::MIN, LATEST_US + 1, i64::MAX] {
        std::fs::write(
            &file,
            format!("{{\"key\":\"k\",\"payload\":\"p\",\"not_before_us\":{bad}}}\n"),
        )
        .unwrap();
        let err = refused(
            common::cairn(db)
                .args(["enqueue", "--queue", "q", "--from-file"])
                .arg(&file)
                .output()
                .unwrap(),
        );
        assert!(
            err.contains("line 1") && err.contains("not-before time"),
            "{bad}: {err}"
        );
        assert!(err.contains("9999-12-31T23:59:59.999999Z"), "{err}");
    }
    std::fs::write(
        &file,
        format!(
            "{{\"key\":\"early\",\"payload\":\"p\",\"not_before_us\":0}}\n\
             {{\"key\":\"late\",\"payload\":\"p\",\"not_before_us\":{LATEST_US}}}\n"
        ),
    )
    .unwrap();
    let out = ok(common::cairn(db)
        .args(["enqueue", "--queue", "q", "--from-file"])
        .arg(&file)
        .output()
        .unwrap());
    let late = out
        .lines()
        .nth(1)
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or_else(|| panic!("two runs: {out}"))
        .to_owned();
    let show = ok(common::cairn(db)
        .args(["run", "show", &late])
        .output()
        .unwrap());
    let field = |name: &str| {
        show.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} in {show}"))
            .to_owned()
    };
    assert!(is_rfc3339(&field("enqueued_at")), "{show}");
    assert_eq!(field("due_at"), "9999-12-31T23:59:59.999999Z", "{show}");
}

/// Writes the documented example of docs/LEGACY_FORMAT.md into `dir`.
fn write_documented_legacy_dir(dir: &Path) {
    let doc = include_str!("../../../docs/LEGACY_FORMAT.md");
    let example = &doc[doc
        .find("## A complete example")
        .expect("the example section")..];
    let blocks: Vec<&str> = example.split("```").skip(1).step_by(2).collect();
    assert_eq!(blocks.len(), 3, "checkpoint, runs.wal and gate.spool");
    std::fs::create_dir_all(dir).unwrap();
    for (name, block) in ["checkpoint", "runs.wal", "gate.spool"].iter().zip(blocks) {
        std::fs::write(dir.join(name), block.trim_start_matches('\n')).unwrap();
    }
}

#[test]
fn a_repeated_import_names_its_time_in_rfc3339() {
    let dir = tempfile::tempdir().unwrap();
    let legacy = dir.path().join("legacy");
    write_documented_legacy_dir(&legacy);
    let db = dir.path().join("store.db");
    let db = db.to_str().unwrap();
    let import = || {
        common::cairn(db)
            .args(["import", "--legacy"])
            .arg(&legacy)
            .output()
            .unwrap()
    };
    ok(import());
    let again = ok(import());
    let at = again
        .lines()
        .find_map(|l| l.strip_prefix("already imported at "))
        .unwrap_or_else(|| panic!("a second import says it was done: {again}"));
    let at = at.split(' ').next().unwrap();
    assert!(is_rfc3339(at), "{again}");
}

/// A running `cairn serve` with the dashboard, on a SQLite file.
struct Server {
    child: Child,
    stderr: Arc<Mutex<Vec<u8>>>,
    base: String,
    agent: ureq::Agent,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One answer: status, `Set-Cookie` values and body.
struct Answer {
    status: u16,
    set_cookies: Vec<String>,
    body: String,
}

impl Server {
    fn start(db: &str) -> Self {
        let mut cmd = common::cairn(db);
        cmd.args(["serve", "--listen", "127.0.0.1:0"])
            .env("CAIRN_AUTH__TOKENS", TOKEN)
            .env("CAIRN_BACKFILL__ENABLED", "true")
            .env("CAIRN_BACKFILL__SPACES_PER_SECOND", "1000");
        let serving = common::serve(&mut cmd, DEADLINE);
        Self {
            child: serving.child,
            stderr: serving.stderr,
            base: format!("http://{}", serving.addr),
            agent: ureq::Agent::config_builder()
                .http_status_as_error(false)
                .max_redirects(0)
                .timeout_global(Some(DEADLINE))
                .build()
                .into(),
        }
    }

    fn wait_for_log(&self, line: &str) {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let log = String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned();
            if log.contains(line) {
                return;
            }
            assert!(Instant::now() < deadline, "`{line}` in time: {log}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn send(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<(&str, String)>,
    ) -> Answer {
        let mut req = ureq::http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let body = match body {
            Some((content_type, text)) => {
                req = req.header("Content-Type", content_type);
                text
            }
            None => String::new(),
        };
        let mut resp = self
            .agent
            .run(req.body(body).unwrap())
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        Answer {
            status: resp.status().as_u16(),
            set_cookies: resp
                .headers()
                .get_all("set-cookie")
                .iter()
                .map(|v| v.to_str().unwrap().to_owned())
                .collect(),
            body: resp.body_mut().read_to_string().unwrap_or_default(),
        }
    }

    /// `POST /v1/queues/q/runs` with `body`: status and JSON answer.
    fn enqueue(&self, body: &Value) -> (u16, Value) {
        let auth = format!("Bearer {TOKEN}");
        let a = self.send(
            "POST",
            "/v1/queues/q/runs",
            &[("Authorization", &auth)],
            Some(("application/json", body.to_string())),
        );
        (
            a.status,
            serde_json::from_str(&a.body).unwrap_or(Value::Null),
        )
    }

    /// Signs in through the form; returns the `cairn_ui=…` cookie pair.
    fn sign_in(&self) -> String {
        let form = self.send("GET", "/ui/login", &[], None);
        assert_eq!(form.status, 200, "{}", form.body);
        let nonce = pair(&form.set_cookies, "cairn_ui_login");
        let csrf = hidden(&form.body, "csrf");
        let a = self.send(
            "POST",
            "/ui/login",
            &[("Cookie", &nonce)],
            Some((
                "application/x-www-form-urlencoded",
                format!("csrf={csrf}&token={TOKEN}&next=%2Fui"),
            )),
        );
        assert_eq!(a.status, 303, "{}", a.body);
        pair(&a.set_cookies, "cairn_ui")
    }

    fn page(&self, path: &str, session: &str) -> Answer {
        self.send("GET", path, &[("Cookie", session)], None)
    }
}

/// The `name=value` pair of cookie `name` among `Set-Cookie` values.
#[track_caller]
fn pair(set_cookies: &[String], name: &str) -> String {
    set_cookies
        .iter()
        .filter_map(|c| c.split(';').next())
        .find(|p| p.starts_with(&format!("{name}=")) && p.len() > name.len() + 1)
        .unwrap_or_else(|| panic!("no {name} cookie in {set_cookies:?}"))
        .to_owned()
}

/// The value of the first hidden input called `name` (URL-safe: the form's tokens are).
#[track_caller]
fn hidden(html: &str, name: &str) -> String {
    let marker = format!("name=\"{name}\" value=\"");
    let at = html
        .find(&marker)
        .unwrap_or_else(|| panic!("no hidden {name} in {html}"))
        + marker.len();
    html[at..].split('"').next().unwrap().to_owned()
}

/// The HTTP enqueue, the dashboard's date filter and its space pages on one server: one range
/// of times at both ends, and the reserved marker space refused as the API refuses it.
#[test]
fn the_server_bounds_times_and_refuses_the_reserved_space_on_the_dashboard() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("store.db");
    let server = Server::start(db.to_str().unwrap());
    // The backfill's pass writes its completion marker into the reserved space.
    server.wait_for_log("cairn backfill: pass complete");

    for bad in [-1, i64::MIN, LATEST_US + 1, i64::MAX] {
        let (status, body) =
            server.enqueue(&json!({"key": "k", "payload": "p", "not_before_us": bad}));
        assert_eq!(status, 400, "{bad}: {body}");
        assert_eq!(body["error"]["code"], "invalid_input", "{body}");
    }
    for (key, good) in [("early", 0), ("late", LATEST_US)] {
        let (status, body) =
            server.enqueue(&json!({"key": key, "payload": "p", "not_before_us": good}));
        assert_eq!(status, 201, "{good}: {body}");
    }

    let session = server.sign_in();
    for (query, want) in [
        ("since=0000-01-01T00:00", 400),
        ("since=1969-12-31T23:59:59.999999", 400),
        ("until=10000-01-01T00:00", 400),
        ("since=1970-01-01T00:00", 200),
        ("until=9999-12-31T23:59", 200),
        (
            "since=1970-01-01T00:00&until=9999-12-31T23:59:59.999999",
            200,
        ),
    ] {
        let a = server.page(&format!("/ui/runs?{query}"), &session);
        assert_eq!(a.status, want, "{query}: {}", a.body);
        if want == 400 {
            assert!(a.body.contains("9999-12-31T23:59:59.999999Z"), "{}", a.body);
        }
    }

    // `\0cairn/backfill`, hex-encoded as the dashboard's links encode space ids.
    let marker = hex_encode(b"\0cairn/backfill");
    let list = server.page("/ui/spaces", &session);
    assert_eq!(list.status, 200, "{}", list.body);
    assert!(
        list.body.contains("cairn&#39;s own") || list.body.contains("cairn's own"),
        "the marker space is listed: {}",
        list.body
    );
    assert!(
        !list.body.contains(&format!("/ui/spaces/{marker}")),
        "no link to a page that is refused: {}",
        list.body
    );
    for path in [
        format!("/ui/spaces/{marker}"),
        format!("/ui/spaces/{marker}/graph.svg"),
    ] {
        let a = server.page(&path, &session);
        assert_eq!(a.status, 400, "{path}: {}", a.body);
        assert!(a.body.contains("reserved"), "{path}: {}", a.body);
    }
}

fn hex_encode(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
