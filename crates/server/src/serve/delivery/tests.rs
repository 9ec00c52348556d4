use std::collections::{HashSet, VecDeque};
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex};

use cairn::spool::{RunEvent, RunEventId, RunId};

use super::batch::*;
use super::config::*;
use super::credentials::*;
use super::deliverer::*;
use crate::config::Delivery;
use crate::serve::json::RunEventOut;
use crate::serve::metrics::Metrics;

const GOOD_URL: &str = "http://127.0.0.1:9/ingest";

fn delivery(url: &str) -> Delivery {
    Delivery {
        url: Some(url.to_owned()),
        ..Delivery::default()
    }
}

fn run_id(n: u128) -> RunId {
    RunId::from_slice(&n.to_be_bytes()).unwrap()
}

fn deliverer() -> Deliverer {
    Deliverer {
        http: reqwest::Client::builder().no_proxy().build().unwrap(),
        settings: settings(&delivery(GOOD_URL)).unwrap().unwrap(),
        metrics: Arc::new(Metrics::new().unwrap()),
        announced: Mutex::new(HashSet::new()),
        refusals: AtomicU32::new(0),
        paused_until: Mutex::new(None),
    }
}

#[test]
fn no_url_means_no_delivery() {
    assert!(matches!(settings(&Delivery::default()), Ok(None)));
}

#[test]
fn the_url_must_be_http_or_https_with_a_host_and_without_credentials() {
    for good in [GOOD_URL, "https://collector.example/v1/runs"] {
        let s = settings(&delivery(good))
            .unwrap_or_else(|p| panic!("{good} refused: {p:?}"))
            .expect("delivery is on");
        assert_eq!(s.url.as_str(), good);
    }
    for bad in [
        // Another scheme, though with a host and no credentials.
        "ftp://collector.example/ingest",
        "ws://collector.example/ingest",
        // No host.
        "unix:/run/collector.sock",
        "file:///srv/collector",
        // A user, a password, or both.
        "http://user@collector.example/ingest",
        "http://:secret-pw@collector.example/ingest",
        "https://user:secret-pw@collector.example/ingest",
        // Not a URL at all.
        "collector.example/ingest",
    ] {
        let problems = settings(&delivery(bad))
            .err()
            .unwrap_or_else(|| panic!("{bad} accepted"));
        assert_eq!(problems.len(), 1, "{bad}: {problems:?}");
        assert!(
            problems[0].starts_with("delivery.url: "),
            "{bad}: {problems:?}"
        );
        assert!(
            !problems[0].contains(bad) && !problems[0].contains("secret-pw"),
            "the URL is not repeated: {problems:?}"
        );
    }
}

#[test]
fn any_problem_refuses_the_settings_even_with_a_good_url() {
    type Change = fn(&mut Delivery);
    let cases: [(&str, Change); 9] = [
        ("delivery.batch", |d| d.batch = 0),
        ("delivery.batch", |d| d.batch = 1001),
        ("delivery.connect_timeout_ms", |d| d.connect_timeout_ms = 0),
        ("delivery.timeout_ms", |d| d.timeout_ms = 0),
        ("delivery.retry_base_ms", |d| {
            d.retry_base_ms = 0;
        }),
        ("delivery.poll_ms", |d| d.poll_ms = 0),
        ("delivery.max_response_bytes", |d| d.max_response_bytes = 0),
        ("delivery.retry_cap_ms", |d| {
            d.retry_cap_ms = d.retry_base_ms - 1
        }),
        ("delivery.queue", |d| d.queue = String::new()),
    ];
    for (key, change) in cases {
        let mut d = delivery(GOOD_URL);
        change(&mut d);
        let problems = settings(&d)
            .err()
            .unwrap_or_else(|| panic!("accepted with a bad {key}"));
        assert!(
            problems.iter().any(|p| p.starts_with(&format!("{key}: "))),
            "{key}: {problems:?}"
        );
    }
}

#[test]
fn a_blank_token_is_no_token_and_a_set_one_is_trimmed() {
    let set = Credentials::load(None, Some("  tok-123  ".into())).unwrap();
    assert_eq!(set.current().as_deref(), Some("tok-123"));
    for blank in ["", "   ", "\t\n"] {
        let c = Credentials::load(None, Some(blank.into())).unwrap();
        assert_eq!(c.current(), None, "{blank:?}");
    }
    assert_eq!(Credentials::load(None, None).unwrap().current(), None);
}

#[test]
fn a_token_must_be_one_word_of_printable_ascii() {
    for good in ["tok-123_ABC.~+/=", "  padded-token \n"] {
        assert_eq!(check_token(good), Ok(()), "{good:?}");
    }
    for bad in [
        "two words",
        "tab\tinside",
        "nul\u{0}inside",
        "bell\u{7}",
        "del\u{7f}",
        "t\u{f6}k\u{e9}n",
        "no\u{a0}break",
    ] {
        let e = check_token(bad).expect_err(bad);
        assert!(e.starts_with("delivery.token: "), "{e}");
        assert!(!e.contains(bad), "the token is not repeated: {e}");
    }
    // The settings refuse it, naming the key and never the token.
    let mut d = delivery(GOOD_URL);
    d.token = Some("secret with space".into());
    let problems = settings(&d).err().expect("a bad token is refused");
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].starts_with("delivery.token: "), "{problems:?}");
    assert!(!problems[0].contains("secret"), "{problems:?}");
}

#[test]
fn a_rewritten_token_file_is_taken_only_when_it_holds_a_good_new_token() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    std::fs::write(&file, "first-token-1234\n").unwrap();
    let c = Credentials::load(Some(file.clone()), None).unwrap();
    assert_eq!(c.current().as_deref(), Some("first-token-1234"));
    assert!(!c.refresh(Some("first-token-1234")), "unchanged");
    std::fs::write(&file, "bad token here\n").unwrap();
    assert!(!c.refresh(Some("first-token-1234")), "a bad token");
    assert_eq!(c.current().as_deref(), Some("first-token-1234"));
    std::fs::write(&file, "\n  second-token-5678  \n").unwrap();
    assert!(c.refresh(Some("first-token-1234")));
    assert_eq!(c.current().as_deref(), Some("second-token-5678"));
}

fn event(seq: u64, payload: &str) -> RunEvent {
    RunEvent {
        seq,
        event_id: RunEventId::new(format!("e{seq}")).unwrap(),
        payload: payload.as_bytes().to_vec(),
        created_at: cairn::spool::Timestamp::from_unix_micros(1),
    }
}

fn json_len(e: &RunEvent) -> usize {
    serde_json::to_string(&RunEventOut::from(e)).unwrap().len()
}

/// What `take_batch` took, as the `events` array of the POST.
fn array(slice: &Slice) -> String {
    let parts: Vec<&str> = slice.events.iter().map(|e| e.get()).collect();
    format!("[{}]", parts.join(","))
}

#[test]
fn a_batch_takes_the_events_that_fit_its_byte_budget_in_order() {
    // A control byte takes six bytes of JSON (`\u0001`).
    let events: Vec<RunEvent> = (1..=5).map(|n| event(n, "x\u{1}y")).collect();
    let one = json_len(&events[0]);
    assert!(one > 6 + 2, "{one}");
    let two = 2 + one + 1 + one;

    // Exactly two fit: `[a,b]` is the budget.
    let mut pending: VecDeque<RunEvent> = events.iter().cloned().collect();
    let slice = take_batch(&mut pending, two).unwrap();
    assert_eq!(array(&slice).len(), two);
    assert_eq!(slice.last, Some(2));
    assert_eq!(
        slice.ids,
        [events[0].event_id.clone(), events[1].event_id.clone()]
    );
    let want: Vec<String> = events[..2]
        .iter()
        .map(|e| serde_json::to_string(&RunEventOut::from(e)).unwrap())
        .collect();
    assert_eq!(array(&slice), format!("[{}]", want.join(",")));
    assert_eq!(pending.front().map(|e| e.seq), Some(3), "the rest wait");

    // A byte less: only one.
    let slice = take_batch(&mut pending, two - 1).unwrap();
    assert_eq!((slice.last, slice.ids.len()), (Some(3), 1));
    // `[a,b,c]` holds two commas: with a byte less than it, two events go.
    let three = two + 1 + one;
    for (budget, taken) in [(three, 3), (three - 1, 2)] {
        let mut pending: VecDeque<RunEvent> = events.iter().cloned().collect();
        let slice = take_batch(&mut pending, budget).unwrap();
        assert_eq!(slice.ids.len(), taken, "within {budget} bytes");
        assert!(array(&slice).len() <= budget);
    }
    // The rest, within a large budget, then nothing.
    let slice = take_batch(
        &mut pending,
        crate::config::Delivery::default().max_batch_bytes,
    )
    .unwrap();
    assert_eq!((slice.last, slice.ids.len()), (Some(5), 2));
    assert!(pending.is_empty());
    let slice = take_batch(
        &mut pending,
        crate::config::Delivery::default().max_batch_bytes,
    )
    .unwrap();
    assert_eq!(
        (slice.last, slice.ids.len(), slice.events.len()),
        (None, 0, 0)
    );
}

#[test]
fn the_first_event_of_a_batch_goes_however_large() {
    let big = "z".repeat(100);
    let mut pending: VecDeque<RunEvent> = [event(1, &big), event(2, "a"), event(3, "b")]
        .into_iter()
        .collect();
    let slice = take_batch(&mut pending, 10).unwrap();
    assert_eq!((slice.last, slice.ids.len()), (Some(1), 1));
    assert!(array(&slice).len() > 100);
    let slice = take_batch(&mut pending, 1).unwrap();
    assert_eq!((slice.last, slice.ids.len()), (Some(2), 1));
    let slice = take_batch(&mut pending, 1).unwrap();
    assert_eq!((slice.last, slice.ids.len()), (Some(3), 1));
}

/// A run waiting for its producer is announced once; finished runs leave the memory, so
/// however many finish meanwhile, it is not announced again.
#[test]
fn a_waiting_run_stays_announced_however_many_runs_finish_meanwhile() {
    let d = deliverer();
    let waiting = run_id(u128::MAX);
    d.announce(waiting);
    for n in 0..=MAX_ANNOUNCED as u128 {
        let finished = run_id(n);
        d.announce(finished);
        assert!(d.announced(finished));
        d.forget(finished);
        assert!(!d.announced(finished));
    }
    assert!(d.announced(waiting));
}

/// The memory keeps every waiting run up to its bound; past it, it starts over.
#[test]
fn the_announced_memory_holds_up_to_its_bound() {
    let d = deliverer();
    for n in 0..MAX_ANNOUNCED as u128 {
        d.announce(run_id(n));
    }
    assert!((0..MAX_ANNOUNCED as u128).all(|n| d.announced(run_id(n))));
    let newest = run_id(u128::MAX);
    d.announce(newest);
    assert!(d.announced(newest));
    assert!(!d.announced(run_id(0)), "cleared past the bound");
    assert_eq!(d.announced.lock().unwrap().len(), 1);
}
