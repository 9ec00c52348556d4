//! The operator dashboard at `/ui`: server-rendered HTML (maud, which escapes every value it
//! prints), one embedded stylesheet, no script.
//!
//! - **Auth.** A browser signs in once with a bearer token ([`session`]); every page then reads
//!   the session cookie. A read-only token sees every page and no button, and any mutating
//!   request it sends is answered 403. With `--insecure-no-auth` every browser gets a
//!   full-access session without signing in (loopback only, as for the API).
//! - **Forms.** Every mutating form carries the session's CSRF token; a request a browser marks
//!   as cross-site is refused first. Each action is one store call, recorded: retry and
//!   discard append the spool's operator event naming the session's token fingerprint, and
//!   every action is logged on `cairn::ui`.
//! - **Reads.** Pages read through the same store handles as the JSON routes; nothing here
//!   bypasses them. Every page answers `Content-Security-Policy: default-src 'none'` with only
//!   the stylesheet and inline SVG allowed, `X-Frame-Options: DENY`, `no-store` caching and
//!   no referrer to other sites.

mod fleet;
mod login;
mod page;
mod pages;
mod queues;
mod rates;
mod router;
pub(crate) mod session;
mod spaces;
mod state;
mod text;

pub(crate) use self::rates::Rates;
pub(crate) use self::router::router;
pub(crate) use self::state::{Ui, UiSettings};

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use axum::http::StatusCode;
    use axum::response::IntoResponse;

    use super::login::safe_next;
    use super::page::read_permit;
    use super::page::{layout, Nav};
    use super::text::{age, encode_query, printable, printable_bytes, shown, trusted, when};
    use super::{Ui, UiSettings};
    use crate::serve::state::{AppState, Target};

    #[test]
    fn a_sign_in_goes_back_to_dashboard_paths_only() {
        assert_eq!(safe_next(Some("/ui/runs?queue=a")), "/ui/runs?queue=a");
        assert_eq!(safe_next(Some("/ui")), "/ui");
        for bad in [
            "https://evil.example/",
            "//evil.example",
            "/ui//evil",
            "/uix",
            "/ui/\\evil",
            "/ui/a b",
            "",
        ] {
            assert_eq!(safe_next(Some(bad)), "/ui", "{bad}");
        }
        assert_eq!(safe_next(None), "/ui");
    }

    #[test]
    fn printed_values_are_escaped_and_bytes_shown_safely() {
        let page = layout(
            None,
            "<script>alert(1)</script>",
            Nav::None,
            shown(b"<b>&\"x\"</b>", 100),
        )
        .into_string();
        assert!(!page.contains("<script>alert"), "{page}");
        assert!(page.contains("&lt;script&gt;"));
        assert!(page.contains("&lt;b&gt;&amp;&quot;x&quot;&lt;/b&gt;"));
        let bin = shown(&[0, 1, 0xff], 2).into_string();
        assert!(
            bin.contains("0001") && bin.contains("first 2 of 3"),
            "{bin}"
        );
        assert_eq!(encode_query("/ui/runs?a=b&c"), "/ui/runs%3Fa%3Db%26c");
        assert_eq!(printable("a\u{202e}b\0c"), "a\\u{202e}b\\u{0}c");
        assert_eq!(printable("plain"), "plain");
        assert!(shown("evil\u{202e}txt".as_bytes(), 100)
            .into_string()
            .contains("hex"));
        // Every unit's arm, at both of its edges.
        for (secs, shown) in [
            (0, "0s"),
            (59, "59s"),
            (60, "1m 0s"),
            (4 * 60 + 10, "4m 10s"),
            (3599, "59m 59s"),
            (3600, "1h 0m"),
            (2 * 3600 + 5 * 60 + 59, "2h 5m"),
            (86_399, "23h 59m"),
            (86_400, "1d 0h"),
            (3 * 86_400 + 4 * 3600 + 59 * 60, "3d 4h"),
        ] {
            assert_eq!(age(Duration::from_secs(secs)), shown, "{secs} s");
        }
        assert_eq!(
            when(cairn::spool::Timestamp::from_unix_micros(0)),
            "1970-01-01 00:00:00 UTC"
        );
    }

    #[test]
    fn bytes_are_shown_as_text_or_hex_within_their_cap() {
        // Keys and ids: lossy UTF-8, control characters escaped.
        assert_eq!(printable_bytes(b"key-1"), "key-1");
        assert_eq!(printable_bytes(&[b'a', 0xff, 0]), "a\u{fffd}\\u{0}");
        // Exactly the cap: all of it, and no note; one byte more: the cap, and the note.
        let whole = shown(b"abcd", 4).into_string();
        assert!(
            whole.contains(">abcd<") && !whole.contains("Showing"),
            "{whole}"
        );
        let cut = shown(b"abcde", 4).into_string();
        assert!(cut.contains(">abcd<"), "{cut}");
        assert!(cut.contains("Showing the first 4 of 5 bytes."), "{cut}");
        // Newlines and tabs are text; any other control character turns it into hex.
        let text = shown(b"line\nnext\ttab", 100).into_string();
        assert!(
            !text.contains("hex") && text.contains("line\nnext\ttab"),
            "{text}"
        );
        let bell = shown(b"bell\x07", 100).into_string();
        assert!(
            bell.contains("hex") && bell.contains("62656c6c07"),
            "{bell}"
        );
        // Every reordering character is escaped, in text and in names alike.
        for c in [
            '\u{200e}', '\u{200f}', '\u{202a}', '\u{202e}', '\u{2066}', '\u{2069}',
        ] {
            let name = format!("a{c}b");
            assert_eq!(printable(&name), format!("a\\u{{{:x}}}b", c as u32));
            assert!(
                shown(name.as_bytes(), 100).into_string().contains("hex"),
                "{c:?}"
            );
        }
        // Invisible characters too, so "a\u{200b}b" does not pass for "ab" (payloads keep
        // them: a zero-width joiner is part of many emoji).
        for c in [
            '\u{200b}', '\u{200c}', '\u{200d}', '\u{2060}', '\u{feff}', '\u{2028}', '\u{2029}',
            '\u{00ad}',
        ] {
            let name = format!("a{c}b");
            assert_eq!(printable(&name), format!("a\\u{{{:x}}}b", c as u32));
        }
        for fine in ['\u{206a}', 'é'] {
            let name = format!("a{fine}b");
            assert_eq!(printable(&name), name, "{fine:?}");
        }
    }

    /// Kills `trusted` → `Default::default()`: the DAG's SVG, already escaped by its renderer,
    /// goes into the page as markup, whole and not escaped again.
    #[test]
    fn trusted_markup_is_kept_as_is() {
        let svg = r#"<svg xmlns="http://www.w3.org/2000/svg"><text>a &amp; b</text></svg>"#;
        assert_eq!(trusted(svg.to_owned()).into_string(), svg);
    }

    /// The state `cairn serve` builds, over a SQLite store in `dir`, with the dashboard on
    /// when `ui` is.
    async fn app_state(dir: &std::path::Path, ui: bool) -> AppState {
        let url = cairn::DatabaseUrl::Sqlite(dir.join("store.db"));
        let store = crate::open::open_with(
            &url,
            crate::open::IfMissing::Create,
            cairn::spool::SpoolConfig::default(),
        )
        .await
        .unwrap();
        let tokens = Arc::new(crate::serve::auth::Tokens::for_tests(
            &["full-a-0123456789"],
            &[],
        ));
        let settings = UiSettings {
            enabled: true,
            secure_cookie: false,
            session: Duration::from_secs(3600),
        };
        AppState {
            store: store.clone(),
            epochs: store.epochs(),
            spool: store.spool(),
            diagnostics: store.diagnostics(),
            metrics: Arc::new(crate::serve::metrics::Metrics::new().unwrap()),
            doctor: Arc::new(Target {
                url,
                retention_max_bytes: 0,
                parked_threshold: None,
                store: store.store_diagnostics(),
                migrations: cairn::migrate::Migrations::of(&store),
                storage: Default::default(),
            }),
            ui: ui.then(|| Arc::new(Ui::new(tokens, &settings, Arc::default()))),
            page_bytes: 1 << 20,
            sync: Arc::new(crate::serve::wake::SyncHub::new(
                Duration::from_secs(30),
                1 << 20,
            )),
        }
    }

    /// Kills `read_permit` → `Ok(None)`: the dashboard's page reads take turns on one permit.
    /// While one page holds it the next waits, gets it once it is released, and a stopping
    /// server (the semaphore closed) answers 503 instead of reading. Without the dashboard
    /// there is nothing to wait for.
    #[tokio::test]
    async fn page_reads_take_turns_on_one_permit() {
        use std::future::Future as _;
        use std::task::{Context, Waker};

        let dir = tempfile::tempdir().unwrap();
        let state = app_state(dir.path(), true).await;
        let ui = state.ui.clone().unwrap();
        let first = read_permit(&state).await.unwrap();
        assert!(first.is_some(), "the dashboard's reads hold a permit");
        let mut second = Box::pin(read_permit(&state));
        assert!(
            second
                .as_mut()
                .poll(&mut Context::from_waker(Waker::noop()))
                .is_pending(),
            "a second page read went ahead while the first held the permit"
        );
        drop(first);
        let second = second.await.unwrap();
        assert!(second.is_some());
        drop(second);

        ui.reads.close();
        let stopping = read_permit(&state).await.unwrap_err();
        assert_eq!(
            stopping.into_response().status(),
            StatusCode::SERVICE_UNAVAILABLE
        );

        let dir = tempfile::tempdir().unwrap();
        let without = app_state(dir.path(), false).await;
        assert!(read_permit(&without).await.unwrap().is_none());
    }
}
