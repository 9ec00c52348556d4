//! The dashboard at `/ui` over HTTP, as a browser without script would use it (issue 26):
//! sign-in and its cookie, CSRF, read-only sessions, escaping of everything printed, and the
//! pages on SQLite and Postgres. The real-browser half is `tests/browser.rs`.

use std::process::Child;
use std::time::{Duration, Instant};

mod common;

const FULL: &str = "full-token-6f1d2c8b9a0e";
const READ: &str = "read-token-3a7e5c1d9b2f";
const DEADLINE: Duration = Duration::from_secs(30);
const HOSTILE: &str = "<script>alert('x')</script>&\"";

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

/// One answer: status, headers we look at, body.
struct Answer {
    status: u16,
    location: Option<String>,
    set_cookies: Vec<String>,
    headers: ureq::http::HeaderMap,
    body: String,
}

impl Server {
    fn start(db: &str, extra: &[&str]) -> Self {
        let mut cmd = common::cairn(db);
        cmd.args(["serve", "--listen", "127.0.0.1:0"])
            .args(extra)
            .env("CAIRN_AUTH__TOKENS", FULL)
            .env("CAIRN_AUTH__READ_TOKENS", READ)
            .env("CAIRN_BACKFILL__ENABLED", "false");
        Self::launch(cmd)
    }

    /// Starts `cmd` (a `cairn … serve --listen 127.0.0.1:0 …`) and waits for `/healthz`.
    fn launch(mut cmd: std::process::Command) -> Self {
        let serving = common::serve(&mut cmd, DEADLINE);
        let server = Self {
            child: serving.child,
            base: format!("http://{}", serving.addr),
            agent: ureq::Agent::config_builder()
                .http_status_as_error(false)
                .max_redirects(0)
                .timeout_global(Some(DEADLINE))
                .build()
                .into(),
        };
        let deadline = Instant::now() + DEADLINE;
        while server.send("GET", "/healthz", None, &[], None).status != 200 {
            assert!(Instant::now() < deadline, "healthz answers in time");
            std::thread::yield_now();
        }
        server
    }

    fn send(
        &self,
        method: &str,
        path: &str,
        cookie: Option<&str>,
        headers: &[(&str, &str)],
        form: Option<&[(&str, &str)]>,
    ) -> Answer {
        let mut req = ureq::http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base));
        if let Some(c) = cookie {
            req = req.header("Cookie", c);
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let body = match form {
            Some(fields) => {
                req = req.header("Content-Type", "application/x-www-form-urlencoded");
                fields
                    .iter()
                    .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
                    .collect::<Vec<_>>()
                    .join("&")
            }
            None => String::new(),
        };
        self.run(req, body, method, path)
    }

    /// A form POST of `body` as it is (already encoded), with `cookie`.
    fn post_raw(&self, path: &str, cookie: &str, body: &str) -> Answer {
        let req = ureq::http::Request::builder()
            .method("POST")
            .uri(format!("{}{path}", self.base))
            .header("Cookie", cookie)
            .header("Content-Type", "application/x-www-form-urlencoded");
        self.run(req, body.to_owned(), "POST", path)
    }

    fn run(
        &self,
        req: ureq::http::request::Builder,
        body: String,
        method: &str,
        path: &str,
    ) -> Answer {
        let mut resp = self
            .agent
            .run(req.body(body).unwrap())
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let headers = resp.headers().clone();
        Answer {
            status: resp.status().as_u16(),
            location: headers
                .get("location")
                .map(|v| v.to_str().unwrap().to_owned()),
            set_cookies: headers
                .get_all("set-cookie")
                .iter()
                .map(|v| v.to_str().unwrap().to_owned())
                .collect(),
            body: resp.body_mut().read_to_string().unwrap_or_default(),
            headers,
        }
    }

    fn get(&self, path: &str, session: &str) -> Answer {
        self.send("GET", path, Some(session), &[], None)
    }

    /// A form POST with `cookie` and no other header.
    fn post(&self, path: &str, cookie: Option<&str>, fields: &[(&str, &str)]) -> Answer {
        self.send("POST", path, cookie, &[], Some(fields))
    }

    /// Signs in with `token` through the form; returns the `cairn_ui=…` cookie pair.
    fn sign_in(&self, token: &str) -> String {
        let form = self.send("GET", "/ui/login", None, &[], None);
        assert_eq!(form.status, 200, "{}", form.body);
        let nonce_cookie = pair(&form.set_cookies, "cairn_ui_login");
        let csrf = hidden(&form.body, "csrf");
        let a = self.post(
            "/ui/login",
            Some(&nonce_cookie),
            &[("csrf", &csrf), ("token", token), ("next", "/ui")],
        );
        assert_eq!(a.status, 303, "{}", a.body);
        pair(&a.set_cookies, "cairn_ui")
    }

    /// The CSRF token of the session's pages (the sign-out form carries it).
    fn csrf(&self, session: &str) -> String {
        hidden(&self.get("/ui", session).body, "csrf")
    }
}

fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
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

/// The value of the first hidden input called `name`.
#[track_caller]
fn hidden(html: &str, name: &str) -> String {
    let marker = format!("name=\"{name}\" value=\"");
    let at = html
        .find(&marker)
        .unwrap_or_else(|| panic!("no hidden {name} in {html}"))
        + marker.len();
    html[at..].split('"').next().unwrap().to_owned()
}

/// A store held open through the library (so its build stays live in the fleet registry
/// under a hostile build id); closed on drop.
struct Live {
    rt: tokio::runtime::Runtime,
    store: Option<cairn::Store>,
}

impl Drop for Live {
    fn drop(&mut self) {
        if let Some(store) = self.store.take() {
            let _ = self.rt.block_on(store.close());
        }
    }
}

/// Enqueues one run per key on `queue` through the library; parks those whose key starts
/// with `park`; appends one epoch to a hostile space. Returns the ids and the open store.
fn seed(db: &str, queue: &str, keys: &[&str]) -> (Vec<String>, Live) {
    use cairn::spool::{EnqueueOptions, NackKind};
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (ids, store) = rt.block_on(async {
        let store = cairn::Store::builder(db)
            .build_id(format!("build-{HOSTILE}"))
            .open()
            .await
            .unwrap();
        let spool = store.spool();
        let q = cairn::QueueName::new(queue).unwrap();
        let mut ids = Vec::new();
        for key in keys {
            let k = cairn::DedupKey::from_parts([*key]).unwrap();
            // A run to park goes first in the claim order (higher priority), so the claim
            // below takes it whatever is queued already.
            let park = key.starts_with("park");
            let options = EnqueueOptions::default().priority(if park { 10 } else { 0 });
            let run = spool
                .enqueue(&q, &k, HOSTILE.as_bytes().to_vec(), options)
                .await
                .unwrap();
            if park {
                let c = cairn::ConsumerId::new("worker-1").unwrap();
                let claimed = spool
                    .claim(&q, &c, Duration::from_secs(60), 1)
                    .await
                    .unwrap();
                assert_eq!(claimed[0].run_id, run.run_id);
                spool
                    .nack(run.run_id, claimed[0].token, NackKind::Permanent, HOSTILE)
                    .await
                    .unwrap();
            }
            ids.push(run.run_id.to_string());
        }
        let space = cairn::SpaceId::new(HOSTILE.as_bytes().to_vec()).unwrap();
        store
            .epochs()
            .append(
                &space,
                vec![cairn::Event::new("kv.put", HOSTILE.as_bytes().to_vec())],
            )
            .await
            .unwrap();
        (ids, store)
    });
    (
        ids,
        Live {
            rt,
            store: Some(store),
        },
    )
}

/// Every page a signed-in operator can open, for the checks that hold on all of them.
fn pages(server: &Server, session: &str, run: &str) -> Vec<(String, Answer)> {
    let space = server.get("/ui/spaces", session);
    let at = space.body.find("href=\"/ui/spaces/").expect("a space link") + 6;
    let space_path = space.body[at..].split('"').next().unwrap().to_owned();
    [
        "/ui".to_owned(),
        "/ui/runs".to_owned(),
        format!("/ui/runs/{run}"),
        "/ui/spaces".to_owned(),
        space_path,
        "/ui/fleet".to_owned(),
        "/ui/queues".to_owned(),
    ]
    .into_iter()
    .map(|p| {
        let a = server.get(&p, session);
        (p, a)
    })
    .collect()
}

fn on_both(case: impl Fn(&str)) {
    let dir = tempfile::tempdir().unwrap();
    case(&dir.path().join("ui.db").display().to_string());
    common::on_postgres("ui", |url| case(url));
}

#[test]
fn without_a_session_the_dashboard_asks_for_a_token_and_the_cookie_holds_none() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ui.db").display().to_string();
    let s = Server::start(&db, &[]);
    let a = s.send("GET", "/ui/runs?state=parked", None, &[], None);
    assert_eq!(a.status, 303);
    assert_eq!(
        a.location.as_deref(),
        Some("/ui/login?next=/ui/runs%3Fstate%3Dparked")
    );
    // A bearer header is not a dashboard session.
    let a = s.send(
        "GET",
        "/ui",
        None,
        &[("Authorization", &format!("Bearer {FULL}"))],
        None,
    );
    assert_eq!(a.status, 303);
    // The sign-in page's stylesheet is served without a session: the embedded file, as CSS.
    let css = s.send("GET", "/ui/assets/style.css", None, &[], None);
    assert_eq!(css.status, 200);
    assert_eq!(
        css.headers
            .get("content-type")
            .and_then(|v| v.to_str().ok()),
        Some("text/css; charset=utf-8")
    );
    assert_eq!(css.body, include_str!("../src/serve/ui/style.css"));
    let form = s.send("GET", "/ui/login", None, &[], None);
    assert_eq!(form.status, 200);
    assert!(form.body.contains("type=\"password\""));
    let nonce = pair(&form.set_cookies, "cairn_ui_login");
    let csrf = hidden(&form.body, "csrf");
    // Without the form's own cookie (a sign-in forged from elsewhere): refused.
    let a = s.post("/ui/login", None, &[("csrf", &csrf), ("token", FULL)]);
    assert_eq!(a.status, 403);
    assert!(a.set_cookies.iter().all(|c| !c.starts_with("cairn_ui=")));
    // A value the server did not issue, even with a matching cookie.
    let made_up = "A".repeat(43);
    let a = s.post(
        "/ui/login",
        Some(&format!("cairn_ui_login={made_up}")),
        &[("csrf", &made_up), ("token", FULL)],
    );
    assert_eq!(a.status, 403);
    // A second form (another tab) carries the same value, so both work.
    let second = s.send("GET", "/ui/login", Some(&nonce), &[], None);
    assert_eq!(hidden(&second.body, "csrf"), csrf);
    // A wrong token.
    let a = s.post(
        "/ui/login",
        Some(&nonce),
        &[("csrf", &csrf), ("token", "not-a-token-0123456789")],
    );
    assert_eq!(a.status, 401);
    assert!(a.body.contains("not one this server accepts"));
    // The right one, with a hostile `next`: the sign-in goes to the dashboard only.
    let a = s.send(
        "POST",
        "/ui/login",
        Some(&nonce),
        &[],
        Some(&[
            ("csrf", &csrf),
            ("token", FULL),
            ("next", "//evil.example/"),
        ]),
    );
    assert_eq!(a.status, 303);
    assert_eq!(a.location.as_deref(), Some("/ui"));
    let cookie = a
        .set_cookies
        .iter()
        .find(|c| c.starts_with("cairn_ui="))
        .unwrap();
    for part in ["HttpOnly", "SameSite=Strict", "Path=/ui"] {
        assert!(cookie.contains(part), "{cookie}");
    }
    assert!(!cookie.contains("Secure"), "plain HTTP: {cookie}");
    assert!(
        !cookie.contains(FULL) && !cookie.contains("token"),
        "{cookie}"
    );
    let session = pair(&a.set_cookies, "cairn_ui");
    let page = s.get("/ui", &session);
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("full access"));
    // Sign-out ends the session.
    let csrf = hidden(&page.body, "csrf");
    let out = s.post("/ui/logout", Some(&session), &[("csrf", &csrf)]);
    assert_eq!(out.status, 303);
    assert_eq!(s.get("/ui", &session).status, 303);
}

#[test]
fn the_cookie_is_secure_when_configured_and_the_dashboard_can_be_off() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ui.db").display().to_string();
    let s = {
        let mut cmd = common::cairn(&db);
        cmd.args(["serve", "--listen", "127.0.0.1:0"])
            .env("CAIRN_AUTH__TOKENS", FULL)
            .env("CAIRN_UI__SECURE_COOKIE", "true")
            .env("CAIRN_BACKFILL__ENABLED", "false");
        Server::launch(cmd)
    };
    let form = s.send("GET", "/ui/login", None, &[], None);
    assert!(form.set_cookies.iter().all(|c| c.ends_with("; Secure")));
    let session = s.sign_in(FULL);
    assert!(!session.is_empty());
    drop(s);
    let off = Server::start(&db, &["--ui", "false"]);
    let a = off.send("GET", "/ui", None, &[], None);
    assert_eq!(a.status, 404);
    let a = off.send("GET", "/ui/login", None, &[], None);
    assert_eq!(a.status, 404);
}

#[test]
fn without_tokens_only_loopback_host_names_are_answered() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ui.db").display().to_string();
    let mut cmd = common::cairn(&db);
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--insecure-no-auth"])
        .env("CAIRN_BACKFILL__ENABLED", "false");
    let s = Server::launch(cmd);
    // A page of another site whose name resolves to 127.0.0.1 (DNS rebinding) sends its own
    // name as Host: refused, on the dashboard and the API alike.
    let port = s.base.rsplit(':').next().unwrap().to_owned();
    let rebound = format!("rebind.evil.example:{port}");
    for path in ["/ui", "/v1/doctor", "/healthz"] {
        let a = s.send("GET", path, None, &[("Host", &rebound)], None);
        assert_eq!(a.status, 421, "{path}: {}", a.body);
        assert!(a.set_cookies.is_empty(), "{path}: no session for it");
    }
    // Two Host headers, the first a loopback one: refused too (which one a proxy in front
    // reads is not the server's to guess).
    let raw = |hosts: &[&str]| {
        use std::io::{Read, Write};
        let mut c = std::net::TcpStream::connect(s.base.trim_start_matches("http://")).unwrap();
        let mut req = "GET /healthz HTTP/1.1\r\n".to_owned();
        for h in hosts {
            req.push_str(&format!("Host: {h}\r\n"));
        }
        req.push_str("Connection: close\r\n\r\n");
        c.write_all(req.as_bytes()).unwrap();
        let mut answer = String::new();
        c.read_to_string(&mut answer).unwrap();
        answer
    };
    let loopback = format!("127.0.0.1:{port}");
    let answer = raw(&[&loopback, &rebound]);
    assert!(answer.starts_with("HTTP/1.1 421"), "{answer}");
    let answer = raw(&[&loopback, &loopback]);
    assert!(answer.starts_with("HTTP/1.1 421"), "{answer}");
    let answer = raw(&[&loopback]);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // Loopback names get the dashboard with a full-access session and no sign-in.
    for host in [format!("127.0.0.1:{port}"), format!("localhost:{port}")] {
        let a = s.send("GET", "/ui", None, &[("Host", &host)], None);
        assert_eq!(a.status, 200, "{host}: {}", a.body);
        assert!(a.body.contains("full access"));
        assert!(a.set_cookies.iter().any(|c| c.starts_with("cairn_ui=")));
    }
}

#[test]
fn a_read_only_session_sees_every_page_and_no_button_and_any_post_is_refused() {
    on_both(|db| {
        let (ids, _live) = seed(db, "mail", &["park-1", "queued-1"]);
        let s = Server::start(db, &[]);
        let session = s.sign_in(READ);
        for (path, a) in pages(&s, &session, &ids[0]) {
            assert_eq!(a.status, 200, "{path}: {}", a.body);
            assert!(a.body.contains("read-only"), "{path}");
            for button in ["action-cancel", "action-retry", "action-discard"] {
                assert!(!a.body.contains(button), "{path} shows {button}");
            }
        }
        let csrf = s.csrf(&session);
        for action in ["cancel", "retry", "discard"] {
            let a = s.post(
                &format!("/ui/runs/{}/{action}", ids[0]),
                Some(&session),
                &[("csrf", &csrf)],
            );
            assert_eq!(a.status, 403, "{action}: {}", a.body);
            assert!(a.body.contains("read-only"));
        }
        let run = s.get(&format!("/ui/runs/{}", ids[0]), &session);
        assert!(run.body.contains("id=\"run-state\">parked<"), "unchanged");
        // The payload shows, as text or hex.
        assert!(run.body.contains("&lt;script&gt;alert"), "{}", run.body);
        // The sign-in form shows to a signed-in browser (to switch tokens), and a read-only
        // session may sign itself out.
        let form = s.get("/ui/login", &session);
        assert_eq!(form.status, 200);
        assert!(form.body.contains("signed in read-only"));
        let out = s.post("/ui/logout", Some(&session), &[("csrf", &csrf)]);
        assert_eq!(out.status, 303, "{}", out.body);
        assert_eq!(s.get("/ui", &session).status, 303, "signed out");
        // A signed-in full session sees the buttons on the same run.
        let full = s.sign_in(FULL);
        let run = s.get(&format!("/ui/runs/{}", ids[0]), &full);
        assert!(run.body.contains("action-retry") && run.body.contains("action-discard"));
    });
}

#[test]
fn every_mutating_form_needs_the_sessions_csrf_token_and_a_same_site_origin() {
    on_both(|db| {
        let (ids, _live) = seed(db, "mail", &["park-1", "queued-1", "queued-2"]);
        let s = Server::start(db, &[]);
        let session = s.sign_in(FULL);
        let csrf = s.csrf(&session);
        let other = s.sign_in(FULL);
        let other_csrf = s.csrf(&other);
        assert_ne!(csrf, other_csrf, "each session has its own");
        let cancel = format!("/ui/runs/{}/cancel", ids[1]);
        for (why, fields, headers) in [
            ("no token", vec![], vec![]),
            (
                "another session's",
                vec![("csrf", other_csrf.as_str())],
                vec![],
            ),
            ("a wrong one", vec![("csrf", "x")], vec![]),
            (
                "a cross-site origin",
                vec![("csrf", csrf.as_str())],
                vec![("Origin", "http://evil.example")],
            ),
            (
                "a cross-site fetch",
                vec![("csrf", csrf.as_str())],
                vec![("Sec-Fetch-Site", "cross-site")],
            ),
        ] {
            let a = s.send("POST", &cancel, Some(&session), &headers, Some(&fields));
            assert_eq!(a.status, 403, "{why}: {}", a.body);
        }
        let run = s.get(&format!("/ui/runs/{}", ids[1]), &session);
        assert!(
            run.body.contains("id=\"run-state\">queued<"),
            "{}",
            run.body
        );
        // Without a session at all.
        let a = s.send("POST", &cancel, None, &[], Some(&[("csrf", &csrf)]));
        assert_eq!(a.status, 401);
        // The real form.
        let origin = s.base.clone();
        let a = s.send(
            "POST",
            &cancel,
            Some(&session),
            &[("Origin", &origin), ("Sec-Fetch-Site", "same-origin")],
            Some(&[("csrf", &csrf)]),
        );
        assert_eq!(a.status, 303, "{}", a.body);
        let after = s.get(a.location.as_deref().unwrap(), &session);
        assert!(
            after.body.contains("id=\"run-state\">canceled<"),
            "{}",
            after.body
        );
        assert!(after.body.contains("Cancel requested."));
        // Retry and discard of parked runs, each recorded with who asked.
        let a = s.post(
            &format!("/ui/runs/{}/retry", ids[0]),
            Some(&session),
            &[("csrf", &csrf)],
        );
        assert_eq!(a.status, 303, "{}", a.body);
        let page = s.get(&format!("/ui/runs/{}", ids[0]), &session);
        assert!(page.body.contains("id=\"run-state\">queued<"));
        assert!(page.body.contains("retry by ui:token-"), "{}", page.body);
        // An action the run's state refuses is an error page, not a change.
        let a = s.post(
            &format!("/ui/runs/{}/discard", ids[2]),
            Some(&session),
            &[("csrf", &csrf)],
        );
        assert_eq!(a.status, 409, "{}", a.body);
        let a = s.post(
            &format!("/ui/runs/{}/explode", ids[2]),
            Some(&session),
            &[("csrf", &csrf)],
        );
        assert_eq!(a.status, 404);
    });
}

#[test]
fn everything_printed_is_escaped_and_every_page_is_locked_down() {
    on_both(|db| {
        let (ids, _live) = seed(db, HOSTILE, &[HOSTILE, "park-1"]);
        let s = Server::start(db, &[]);
        let session = s.sign_in(FULL);
        for (path, a) in pages(&s, &session, &ids[1]) {
            assert_eq!(a.status, 200, "{path}: {}", a.body);
            assert!(
                !a.body.contains("<script"),
                "{path} prints a raw <script>: {}",
                a.body
            );
            let csp = a.headers["content-security-policy"].to_str().unwrap();
            assert!(csp.starts_with("default-src 'none'"), "{path}: {csp}");
            assert!(!csp.contains("script-src"), "no script at all: {csp}");
            assert_eq!(a.headers["x-frame-options"], "DENY");
            assert_eq!(a.headers["cache-control"], "no-store");
            assert_eq!(a.headers["x-content-type-options"], "nosniff");
            assert_eq!(a.headers["referrer-policy"], "same-origin");
        }
        let all: String = pages(&s, &session, &ids[1])
            .into_iter()
            .map(|(_, a)| a.body)
            .collect();
        for (what, text) in [
            (
                "the queue, key, payload or reason",
                "&lt;script&gt;alert('x')&lt;/script&gt;&amp;&quot;",
            ),
            ("the build id", "build-&lt;script&gt;"),
        ] {
            assert!(all.contains(text), "{what} is printed escaped");
        }
        // An unknown run, a malformed id and a bad filter are error pages.
        assert_eq!(s.get("/ui/runs/not-a-run", &session).status, 404);
        assert_eq!(
            s.get("/ui/runs/01234567-89ab-cdef-0123-456789abcdef", &session)
                .status,
            404
        );
        assert_eq!(s.get("/ui/runs?state=bogus", &session).status, 400);
        assert_eq!(s.get("/ui/runs?since=yesterday", &session).status, 400);
        assert_eq!(s.get("/ui/spaces/zz", &session).status, 404);
    });
}

#[test]
fn the_pages_show_the_spools_state_and_page_through_runs() {
    on_both(|db| {
        let keys: Vec<String> = (0..120).map(|i| format!("job-{i:03}")).collect();
        let mut all: Vec<&str> = keys.iter().map(String::as_str).collect();
        all.push("park-a");
        drop(seed(db, "reports", &all));
        drop(seed(db, "mail", &["m-1"]));
        let s = Server::start(db, &[]);
        let session = s.sign_in(READ);
        let o = s.get("/ui", &session);
        assert!(
            o.body
                .contains("/ui/runs?queue=reports&amp;state=queued\">120<"),
            "{}",
            o.body
        );
        assert!(o
            .body
            .contains("/ui/runs?queue=reports&amp;state=parked\">1<"));
        assert!(o.body.contains("/ui/runs?queue=mail&amp;state=queued\">1<"));
        assert!(o.body.contains("1 parked run needs an operator"));
        assert!(o.body.contains("svg class=\"rates\""));
        // Paging by run id: 121 runs of `reports` in pages of 50, no repeat, no gap.
        let mut seen = std::collections::BTreeSet::new();
        let mut path = "/ui/runs?queue=reports".to_owned();
        let mut pages = 0;
        loop {
            let a = s.get(&path, &session);
            assert_eq!(a.status, 200);
            for chunk in a.body.split("href=\"/ui/runs/").skip(1) {
                let id = chunk.split('"').next().unwrap().to_owned();
                assert!(seen.insert(id), "a run shows once");
            }
            pages += 1;
            let marker = "rel=\"next\" href=\"";
            match a.body.find(marker) {
                Some(at) => {
                    path = a.body[at + marker.len()..]
                        .split('"')
                        .next()
                        .unwrap()
                        .replace("&amp;", "&");
                }
                None => break,
            }
        }
        assert_eq!((seen.len(), pages), (121, 3));
        // Key part and state filters.
        let a = s.get("/ui/runs?key=job-11", &session);
        assert_eq!(
            a.body.matches("href=\"/ui/runs/").count(),
            10,
            "job-110..119"
        );
        let a = s.get("/ui/runs?state=parked", &session);
        assert_eq!(a.body.matches("href=\"/ui/runs/").count(), 1);
        let a = s.get("/ui/runs?since=2999-01-01T00:00", &session);
        assert!(a.body.contains("No run matches."));
        // Fleet and migrations: this server's set at head, the seeding build seen, doctor.
        let f = s.get("/ui/fleet", &session);
        assert!(f.body.contains("at head"), "{}", f.body);
        assert!(f.body.contains("Doctor"));
        assert!(f.body.contains("migrations:cairn"));
    });
}

#[test]
fn the_queues_page_pauses_and_resumes_a_queue_and_lists_schedules() {
    on_both(|db| {
        let (_ids, _live) = seed(db, "mail", &["queued-1"]);
        let out = common::cairn(db)
            .args([
                "schedule",
                "put",
                "nightly",
                "--cron",
                "0 3 * * *",
                "--queue",
                "mail",
            ])
            .output()
            .unwrap();
        common::ok(out);
        let out = common::cairn(db)
            .args([
                "queue",
                "limits",
                "mail",
                "--max-claimed",
                "2",
                "--rate",
                "5/250ms",
            ])
            .output()
            .unwrap();
        common::ok(out);
        // A name holding an invisible character must not look like the name without it.
        let out = common::cairn(db)
            .args(["queue", "limits", "a\u{200b}b", "--max-claimed", "1"])
            .output()
            .unwrap();
        common::ok(out);
        let s = Server::start(db, &[]);
        let session = s.sign_in(FULL);
        let csrf = s.csrf(&session);
        let page = s.get("/ui/queues", &session);
        assert_eq!(page.status, 200, "{}", page.body);
        assert!(page.body.contains("nightly") && page.body.contains("0 3 * * *"));
        assert!(page.body.contains(">running<") && page.body.contains("class=\"action-pause\""));
        // The rate window exactly, as `cairn queue list` prints it (not rounded to seconds).
        assert!(page.body.contains(">5/250ms<"), "{}", page.body);
        assert!(
            page.body.contains(">a\\u{200b}b<") && !page.body.contains("a\u{200b}b<"),
            "{}",
            page.body
        );
        let a = s.post(
            "/ui/queues/pause",
            Some(&session),
            &[("csrf", &csrf), ("queue", "mail")],
        );
        assert_eq!(a.status, 303, "{}", a.body);
        let page = s.get("/ui/queues", &session);
        assert!(page.body.contains(">paused<") && page.body.contains("class=\"action-resume\""));
        let shown = common::ok(
            common::cairn(db)
                .args(["queue", "show", "mail"])
                .output()
                .unwrap(),
        );
        assert!(shown.starts_with("mail paused max_claimed=2"), "{shown}");
        // Without the session's CSRF token, or from a read-only session: refused, unchanged.
        let a = s.post(
            "/ui/queues/resume",
            Some(&session),
            &[("csrf", "x"), ("queue", "mail")],
        );
        assert_eq!(a.status, 403, "{}", a.body);
        // A good token but no queue, two queues, or one that is not UTF-8: refused as such.
        let a = s.post("/ui/queues/resume", Some(&session), &[("csrf", &csrf)]);
        assert_eq!(a.status, 400, "{}", a.body);
        assert!(a.body.contains("no `queue` field"), "{}", a.body);
        let a = s.post(
            "/ui/queues/resume",
            Some(&session),
            &[("csrf", &csrf), ("queue", "mail"), ("queue", "other")],
        );
        assert_eq!(a.status, 400, "{}", a.body);
        assert!(a.body.contains("more than one `queue` field"), "{}", a.body);
        let a = s.post_raw(
            "/ui/queues/pause",
            &session,
            &format!("csrf={csrf}&queue=%FF%FE"),
        );
        assert_eq!(a.status, 400, "{}", a.body);
        assert!(a.body.contains("not valid UTF-8"), "{}", a.body);
        let listed = common::ok(common::cairn(db).args(["queue", "list"]).output().unwrap());
        assert!(!listed.contains('\u{fffd}'), "{listed}");
        let read = s.sign_in(READ);
        let page = s.get("/ui/queues", &read);
        assert!(
            !page.body.contains("action-resume"),
            "no button for read-only"
        );
        let read_csrf = s.csrf(&read);
        let a = s.post(
            "/ui/queues/resume",
            Some(&read),
            &[("csrf", &read_csrf), ("queue", "mail")],
        );
        assert_eq!(a.status, 403, "{}", a.body);
        let a = s.post(
            "/ui/queues/explode",
            Some(&session),
            &[("csrf", &csrf), ("queue", "mail")],
        );
        assert_eq!(a.status, 404);
        let shown = common::ok(
            common::cairn(db)
                .args(["queue", "show", "mail"])
                .output()
                .unwrap(),
        );
        assert!(shown.starts_with("mail paused"), "{shown}");
        let a = s.post(
            "/ui/queues/resume",
            Some(&session),
            &[("csrf", &csrf), ("queue", "mail")],
        );
        assert_eq!(a.status, 303, "{}", a.body);
        let shown = common::ok(
            common::cairn(db)
                .args(["queue", "show", "mail"])
                .output()
                .unwrap(),
        );
        assert!(shown.starts_with("mail running max_claimed=2"), "{shown}");
    });
}

#[test]
fn a_space_page_lists_the_stores_that_synced_into_it() {
    on_both(|db| {
        let s = Server::start(db, &[]);
        // One epoch made elsewhere, imported by the sync route with its sender's cursor.
        let space = cairn::SpaceId::new("peered").unwrap();
        let event = cairn::Event::new("k", "hello");
        let id = cairn::epoch_id(&space, &[], &[event.id()]).to_string();
        let peer = "ab".repeat(16);
        let body = serde_json::json!({
            "epochs": [{"id": id, "parents": [], "events": [{"kind": "k", "payload": "hello"}]}],
            "cursor": {"peer": peer, "seq": 7, "id": id},
        })
        .to_string();
        let req = ureq::http::Request::builder()
            .method("POST")
            .uri(format!("{}/v1/spaces/peered/sync/import", s.base))
            .header("Authorization", format!("Bearer {FULL}"))
            .header("Content-Type", "application/json");
        let a = s.run(req, body, "POST", "/v1/spaces/peered/sync/import");
        assert_eq!(a.status, 201, "{}", a.body);
        let lonely = s.run(
            ureq::http::Request::builder()
                .method("POST")
                .uri(format!("{}/v1/spaces/lonely/epochs", s.base))
                .header("Authorization", format!("Bearer {FULL}"))
                .header("Content-Type", "application/json"),
            r#"{"events": [{"kind": "k", "payload": "x"}]}"#.to_owned(),
            "POST",
            "/v1/spaces/lonely/epochs",
        );
        assert_eq!(lonely.status, 201, "{}", lonely.body);

        let session = s.sign_in(READ);
        let page = s.get(&format!("/ui/spaces/{}", enc_hex("peered")), &session);
        assert_eq!(page.status, 200, "{}", page.body);
        let peers = &page.body[page.body.find("Sync peers").expect("a peers section")..];
        for shown in [
            peer.as_str(),
            "<td class=\"num\">7</td>",
            id.as_str(),
            "<td class=\"num\">1</td>",
            "<td class=\"num\">6</td>",
            " UTC</td>",
        ] {
            assert!(peers.contains(shown), "{shown} in {peers}");
        }
        let page = s.get(&format!("/ui/spaces/{}", enc_hex("lonely")), &session);
        assert!(
            page.body.contains("No store has synced into this space."),
            "{}",
            page.body
        );
    });
}

fn enc_hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}
