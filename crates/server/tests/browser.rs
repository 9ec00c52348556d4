//! The dashboard in a real browser (issue 26): headless Chromium from the distribution's
//! packages, driven over the DevTools protocol (`headless_chrome`, without its download
//! feature). It signs in, opens a run, cancels it and sees the state change, opens a space
//! with a fork and its merge and finds both parents in the SVG, and takes a screenshot of
//! every page. It fails on any console error, uncaught exception, failed request or answer
//! of 400 and above, and it never skips: without Chromium it fails with the install command.
//!
//! Screenshots go to the test's temporary directory; with `CAIRN_UI_SCREENSHOTS=DIR` they are
//! also copied there (how docs/ui-*.png are made).

use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use headless_chrome::protocol::cdp::types::Event as Cdp;
use headless_chrome::protocol::cdp::{Network, Page};
use headless_chrome::{Browser, LaunchOptions, Tab};

mod common;

const FULL: &str = "full-token-9b4e1f6a2c7d";
const DEADLINE: Duration = Duration::from_secs(30);

/// Where Chromium is: `CAIRN_CHROMIUM`, else Debian's `/usr/bin/chromium`.
fn chromium() -> PathBuf {
    let path = std::env::var_os("CAIRN_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    assert!(
        path.exists(),
        "the browser test needs Chromium at {}: install it with \
         `apt-get install -y chromium chromium-driver` (or set CAIRN_CHROMIUM to its path)",
        path.display()
    );
    path
}

struct Server {
    child: Child,
    base: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the store holds for the walk: a queued run to cancel, a parked one, and a space
/// whose history forks (an imported epoch beside a local append) and merges again.
struct Seeded {
    queued: String,
    space_hex: String,
    fork: [String; 2],
    merge: String,
}

fn seed(db: &str) -> Seeded {
    use cairn::spool::{EnqueueOptions, NackKind};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let store = cairn::Store::open(db).await.unwrap();
        let spool = store.spool();
        let q = cairn::QueueName::new("reports").unwrap();
        let mut queued = String::new();
        for key in ["monthly-2026-11", "weekly-48", "parked-one"] {
            let k = cairn::DedupKey::from_parts([key]).unwrap();
            let run = spool
                .enqueue(
                    &q,
                    &k,
                    format!("{{\"report\":\"{key}\"}}").into_bytes(),
                    EnqueueOptions::default(),
                )
                .await
                .unwrap();
            if key == "parked-one" {
                let c = cairn::ConsumerId::new("host-a/4242/w1").unwrap();
                let claimed = spool
                    .claim(&q, &c, Duration::from_secs(60), 3)
                    .await
                    .unwrap();
                let mine = claimed.iter().find(|c| c.run_id == run.run_id).unwrap();
                spool
                    .nack(
                        run.run_id,
                        mine.token,
                        NackKind::Permanent,
                        "the template is missing",
                    )
                    .await
                    .unwrap();
                for other in claimed.iter().filter(|c| c.run_id != run.run_id) {
                    spool
                        .release(other.run_id, other.token, Duration::ZERO)
                        .await
                        .unwrap();
                }
            } else if queued.is_empty() {
                queued = run.run_id.to_string();
            }
        }
        let space = cairn::SpaceId::new("orders/eu-west").unwrap();
        let epochs = store.epochs();
        let first = epochs
            .append(&space, vec![cairn::Event::new("order.placed", "o-1")])
            .await
            .unwrap();
        let local = epochs
            .append(&space, vec![cairn::Event::new("order.paid", "o-1")])
            .await
            .unwrap();
        let events = vec![cairn::Event::new("order.placed", "o-2 (replica)")];
        let ids: Vec<_> = events.iter().map(cairn::Event::id).collect();
        let foreign = cairn::ForeignEpoch {
            space: space.clone(),
            id: cairn::epoch_id(&space, &[first.id], &ids),
            parents: vec![first.id],
            events,
        };
        let imported = foreign.id;
        epochs.import(foreign).await.unwrap();
        let merge = epochs
            .append(&space, vec![cairn::Event::new("order.shipped", "o-1")])
            .await
            .unwrap();
        store.close().await.unwrap();
        Seeded {
            queued,
            space_hex: hex::encode(space.as_bytes()),
            fork: [
                hex::encode(local.id.as_bytes()),
                hex::encode(imported.as_bytes()),
            ],
            merge: hex::encode(merge.id.as_bytes()),
        }
    })
}

/// Everything the page did wrong: console errors, exceptions, failed requests, answers ≥ 400.
#[derive(Default)]
struct Problems(Mutex<Vec<String>>);

impl Problems {
    fn push(&self, p: String) {
        self.0.lock().unwrap().push(p);
    }

    #[track_caller]
    fn assert_none(&self, step: &str) {
        let p = self.0.lock().unwrap();
        assert!(p.is_empty(), "{step}: the browser saw {p:#?}");
    }
}

fn watch(tab: &Tab) -> Arc<Problems> {
    let problems = Arc::new(Problems::default());
    let sink = problems.clone();
    tab.call_method(Network::Enable {
        max_total_buffer_size: None,
        max_resource_buffer_size: None,
        max_post_data_size: None,
        report_direct_socket_traffic: None,
        enable_durable_messages: None,
    })
    .unwrap();
    tab.enable_log().unwrap();
    tab.enable_runtime().unwrap();
    tab.add_event_listener(Arc::new(move |event: &Cdp| match event {
        Cdp::RuntimeConsoleAPICalled(e) => {
            use headless_chrome::protocol::cdp::Runtime::ConsoleAPICalledEventTypeOption as T;
            if matches!(e.params.Type, T::Error | T::Assert | T::Warning) {
                sink.push(format!("console {:?}: {:?}", e.params.Type, e.params.args));
            }
        }
        Cdp::RuntimeExceptionThrown(e) => {
            sink.push(format!("exception: {:?}", e.params.exception_details));
        }
        Cdp::LogEntryAdded(e) => {
            use headless_chrome::protocol::cdp::Log::LogEntryLevel as L;
            if matches!(e.params.entry.level, L::Error | L::Warning) {
                sink.push(format!(
                    "log {:?}: {} ({:?})",
                    e.params.entry.level, e.params.entry.text, e.params.entry.url
                ));
            }
        }
        Cdp::NetworkLoadingFailed(e) => {
            sink.push(format!("request failed: {}", e.params.error_text));
        }
        Cdp::NetworkResponseReceived(e) if e.params.response.status >= 400 => {
            sink.push(format!(
                "{} answered {}",
                e.params.response.url, e.params.response.status
            ));
        }
        _ => {}
    }))
    .unwrap();
    problems
}

fn shoot(tab: &Tab, dir: &Path, name: &str) {
    let png = tab
        .capture_screenshot(Page::CaptureScreenshotFormatOption::Png, None, None, true)
        .unwrap();
    assert!(png.starts_with(b"\x89PNG"), "{name} is a PNG");
    std::fs::write(dir.join(format!("{name}.png")), &png).unwrap();
    if let Some(out) = std::env::var_os("CAIRN_UI_SCREENSHOTS") {
        std::fs::create_dir_all(&out).unwrap();
        std::fs::write(Path::new(&out).join(format!("ui-{name}.png")), &png).unwrap();
    }
}

/// Waits for `selector`; when it does not come, fails with the page and what the browser saw.
#[track_caller]
fn wait<'t>(tab: &'t Tab, problems: &Problems, selector: &str) -> headless_chrome::Element<'t> {
    match tab.wait_for_element(selector) {
        Ok(el) => el,
        Err(e) => panic!(
            "{selector} did not appear ({e}) at {}; the browser saw {:#?}; the page: {}",
            tab.get_url(),
            problems.0.lock().unwrap(),
            tab.get_content().unwrap_or_default()
        ),
    }
}

/// The text of the element `selector` matches.
fn text(tab: &Tab, selector: &str) -> String {
    tab.wait_for_element(selector)
        .unwrap()
        .get_inner_text()
        .unwrap()
}

fn goto(tab: &Tab, url: &str) {
    tab.navigate_to(url).unwrap();
    tab.wait_until_navigated().unwrap();
}

#[test]
fn an_operator_signs_in_cancels_a_run_and_reads_a_forked_and_merged_dag() {
    let chromium = chromium();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("browser.db").display().to_string();
    let seeded = seed(&db);
    let server = {
        let mut cmd = common::cairn(&db);
        cmd.args(["serve", "--listen", "127.0.0.1:0"])
            .env("CAIRN_AUTH__TOKENS", FULL)
            .env("CAIRN_BACKFILL__ENABLED", "false");
        let serving = common::serve(&mut cmd, DEADLINE);
        Server {
            child: serving.child,
            base: format!("http://{}", serving.addr),
        }
    };
    let shots = dir.path().join("screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let browser = Browser::new(
        LaunchOptions::default_builder()
            .path(Some(chromium))
            .headless(true)
            .sandbox(false)
            .window_size(Some((1280, 900)))
            .idle_browser_timeout(Duration::from_secs(120))
            .build()
            .unwrap(),
    )
    .expect("Chromium starts");
    let tab = browser.new_tab().unwrap();
    tab.set_default_timeout(DEADLINE);
    let problems = watch(&tab);
    let base = &server.base;

    // Signing in: the dashboard sends a browser without a session to the form.
    goto(&tab, &format!("{base}/ui"));
    let token = tab
        .wait_for_element("form[action='/ui/login'] #token")
        .unwrap();
    shoot(&tab, &shots, "signin");
    token.click().unwrap();
    tab.type_str(FULL).unwrap();
    tab.find_element("button[type=submit]")
        .unwrap()
        .click()
        .unwrap();
    // Signed in: the form sends the browser on to the overview.
    wait(&tab, &problems, "table.queues");
    assert!(text(&tab, "header.top").contains("full access"));
    let cookies = tab.get_cookies().unwrap();
    let session = cookies.iter().find(|c| c.name == "cairn_ui").unwrap();
    assert!(session.http_only, "the session cookie is HttpOnly");
    assert!(!session.value.contains(FULL), "the cookie holds no token");
    problems.assert_none("the overview");
    shoot(&tab, &shots, "overview");

    // A run: open it from the list, cancel it, see the state change.
    goto(&tab, &format!("{base}/ui/runs?queue=reports"));
    tab.wait_for_element("table.runs").unwrap();
    shoot(&tab, &shots, "runs");
    tab.wait_for_element(&format!("a[href='/ui/runs/{}']", seeded.queued))
        .unwrap()
        .click()
        .unwrap();
    tab.wait_for_element("#action-cancel").unwrap();
    assert_eq!(text(&tab, "#run-state"), "queued");
    shoot(&tab, &shots, "run");
    tab.find_element("#action-cancel").unwrap().click().unwrap();
    // The form posts, the server redirects back to the run: wait (up to the tab's deadline)
    // for the state badge to read canceled.
    let state = wait(&tab, &problems, "#run-state.canceled");
    assert_eq!(state.get_inner_text().unwrap(), "canceled");
    assert!(text(&tab, "p.notice").contains("Cancel requested."));
    assert!(
        tab.find_element("#action-cancel").is_err(),
        "no cancel on a canceled run"
    );
    problems.assert_none("cancelling a run");

    // The space: a fork (a local append and an imported epoch on the same parent) and the
    // merge that has both as parents.
    goto(&tab, &format!("{base}/ui/spaces"));
    tab.wait_for_element("table.spaces").unwrap();
    shoot(&tab, &shots, "spaces");
    goto(&tab, &format!("{base}/ui/spaces/{}", seeded.space_hex));
    let merge = tab
        .wait_for_element(&format!(
            "svg.cairn-dag g.epoch[id='epoch-{}']",
            seeded.merge
        ))
        .unwrap();
    let parents = merge
        .get_attribute_value("data-parents")
        .unwrap()
        .unwrap_or_default();
    for p in &seeded.fork {
        assert!(
            parents.contains(p.as_str()),
            "the merge's parents {parents} hold {p}"
        );
        tab.find_element(&format!("svg.cairn-dag g.epoch[id='epoch-{p}']"))
            .unwrap();
        tab.find_element(&format!(
            "svg.cairn-dag path.edge[data-child='{}'][data-parent='{p}']",
            seeded.merge
        ))
        .unwrap();
    }
    let head_class = merge
        .get_attribute_value("class")
        .unwrap()
        .unwrap_or_default();
    assert!(head_class.split(' ').any(|c| c == "head"), "{head_class}");
    problems.assert_none("the space's DAG");
    shoot(&tab, &shots, "space");

    goto(&tab, &format!("{base}/ui/fleet"));
    tab.wait_for_element("table.doctor").unwrap();
    problems.assert_none("the fleet page");
    shoot(&tab, &shots, "fleet");
    for name in [
        "signin", "overview", "runs", "run", "spaces", "space", "fleet",
    ] {
        let len = std::fs::metadata(shots.join(format!("{name}.png")))
            .unwrap()
            .len();
        assert!(len > 1000, "{name}.png holds a picture ({len} bytes)");
    }
}
