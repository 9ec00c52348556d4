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
mod pages;
mod rates;
pub(crate) mod session;
mod spaces;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Router;
use maud::{html, Markup, PreEscaped, DOCTYPE};

pub(crate) use self::rates::Rates;
use self::session::{Sessions, Viewer};
use super::routes::AppState;

/// The stylesheet, embedded in the binary.
const STYLE: &str = include_str!("style.css");

/// The dashboard's settings (`[ui]`).
#[derive(Clone, Debug)]
pub(crate) struct UiSettings {
    /// Whether `/ui` is served.
    pub(crate) enabled: bool,
    /// Whether cookies carry `Secure`.
    pub(crate) secure_cookie: bool,
    /// The longest a sign-in lasts.
    pub(crate) session: Duration,
}

/// What the dashboard's handlers share: the sessions, the rate samples, and the one permit
/// its page reads take turns on.
#[derive(Debug)]
pub(crate) struct Ui {
    pub(crate) sessions: Sessions,
    pub(crate) rates: Arc<Rates>,
    /// One page's store reads at a time: a filter over a large store can read many rows (and
    /// the fleet page runs doctor), so however many pages browsers ask for at once, the
    /// dashboard keeps at most one core busy and the API's writes their share.
    reads: tokio::sync::Semaphore,
}

/// Waits for the dashboard's read permit.
pub(crate) async fn read_permit(
    state: &AppState,
) -> Result<Option<tokio::sync::SemaphorePermit<'_>>, UiError> {
    match &state.ui {
        Some(ui) => {
            ui.reads.acquire().await.map(Some).map_err(|_| {
                UiError::new(StatusCode::SERVICE_UNAVAILABLE, "The server is stopping.")
            })
        }
        None => Ok(None),
    }
}

impl Ui {
    /// The dashboard's state over `tokens`.
    pub(crate) fn new(
        tokens: Arc<super::auth::Tokens>,
        settings: &UiSettings,
        rates: Arc<Rates>,
    ) -> Self {
        Self {
            sessions: Sessions::new(tokens, settings.session, settings.secure_cookie),
            rates,
            reads: tokio::sync::Semaphore::new(1),
        }
    }
}

/// The dashboard's routes, for [`super::routes::router`] to merge.
pub(crate) fn router(state: AppState) -> Router<AppState> {
    Router::new()
        .route("/ui", get(pages::overview))
        .route("/ui/", get(|| async { Redirect::to("/ui") }))
        .route("/ui/login", get(login_form).post(login))
        .route("/ui/logout", post(logout))
        .route("/ui/assets/style.css", get(style))
        .route("/ui/runs", get(pages::runs))
        .route("/ui/runs/{id}", get(pages::run))
        .route("/ui/runs/{id}/{action}", post(pages::act))
        .route("/ui/spaces", get(spaces::list))
        .route("/ui/spaces/{space}", get(spaces::space))
        .route("/ui/spaces/{space}/graph.svg", get(spaces::graph_svg))
        .route("/ui/fleet", get(fleet::fleet))
        .route_layer(middleware::from_fn_with_state(state, gate))
        .layer(middleware::from_fn(headers))
}

/// Security headers on every dashboard answer.
async fn headers(req: Request, next: Next) -> Response {
    let mut res = next.run(req).await;
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; \
             frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    // `same-origin`, not `no-referrer`: under `no-referrer` a browser sends `Origin: null` with
    // the page's own form posts, which the cross-site check must refuse.
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    res
}

/// Whether a path is one the gate lets through without a session.
fn public(path: &str) -> bool {
    path == "/ui/login" || path == "/ui/assets/style.css"
}

/// The gate in front of every dashboard route: refuses cross-site mutating requests, finds
/// the session (or, without tokens, makes one), sends a browser without one to the sign-in
/// form, and refuses mutating requests from read-only sessions.
async fn gate(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    let Some(ui) = state.ui.clone() else {
        return UiError::not_found().into_response();
    };
    let mutating = !matches!(*req.method(), Method::GET | Method::HEAD);
    if mutating && session::cross_site(req.headers()) {
        return UiError::new(
            StatusCode::FORBIDDEN,
            "This request came from another site; the dashboard accepts changes from its own pages only.",
        )
        .into_response();
    }
    if public(req.uri().path()) {
        return next.run(req).await;
    }
    let mut set_cookie = None;
    let viewer = match ui.sessions.viewer(req.headers()) {
        Some(v) => v,
        None if ui.sessions.open() => {
            let (cookie, v) = ui.sessions.sign_in_open();
            set_cookie = Some(cookie);
            v
        }
        None if mutating => {
            return UiError::new(
                StatusCode::UNAUTHORIZED,
                "Your sign-in has ended; sign in again and repeat the action.",
            )
            .into_response()
        }
        None => {
            let next_path = req
                .uri()
                .path_and_query()
                .map(|p| p.as_str())
                .unwrap_or("/ui");
            let to = format!("/ui/login?next={}", encode_query(next_path));
            return Redirect::to(&to).into_response();
        }
    };
    // Signing out changes nothing in the store: a read-only session may end itself.
    if mutating && !viewer.can_write() && req.uri().path() != "/ui/logout" {
        return UiError::new(
            StatusCode::FORBIDDEN,
            "You are signed in with a read-only token; changing the store needs a full-access token.",
        )
        .into_response();
    }
    req.extensions_mut().insert(viewer);
    let mut res = next.run(req).await;
    if let Some(c) = set_cookie {
        res.headers_mut().append(header::SET_COOKIE, c);
    }
    res
}

/// `GET /ui/assets/style.css`.
async fn style() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "public, max-age=3600"),
        ],
        STYLE,
    )
        .into_response()
}

/// The query of the sign-in form.
#[derive(serde::Deserialize, Default)]
pub(crate) struct LoginQuery {
    next: Option<String>,
}

/// Where a sign-in goes next: a dashboard path only (never another site).
fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(n)
            if (n == "/ui" || n.starts_with("/ui/") || n.starts_with("/ui?"))
                && !n.contains("//")
                && !n.contains('\\')
                && n.len() <= 2048
                && n.bytes().all(|b| b.is_ascii_graphic()) =>
        {
            n.to_owned()
        }
        _ => "/ui".to_owned(),
    }
}

/// `GET /ui/login`: the sign-in form (or, when already signed in, the overview).
async fn login_form(
    State(state): State<AppState>,
    axum::extract::Query(q): axum::extract::Query<LoginQuery>,
    headers: axum::http::HeaderMap,
) -> Response {
    let Some(ui) = state.ui.clone() else {
        return UiError::not_found().into_response();
    };
    let next = safe_next(q.next.as_deref());
    if ui.sessions.open() {
        return Redirect::to(&next).into_response();
    }
    // Shown to a signed-in browser too: signing in with another token replaces the session
    // (a read-only viewer switching to a full-access token, say).
    let current = ui.sessions.viewer(&headers);
    login_page(&ui, &headers, current.as_ref(), &next, None, StatusCode::OK)
}

fn login_page(
    ui: &Ui,
    headers: &axum::http::HeaderMap,
    current: Option<&Viewer>,
    next: &str,
    problem: Option<&str>,
    status: StatusCode,
) -> Response {
    let (nonce, cookie) = ui.sessions.login_nonce(headers);
    let body = html! {
        section.signin {
            h1 { "Sign in to cairn" }
            p { "Paste a bearer token this server accepts (" code { "auth.tokens" } " for full access, "
                code { "auth.read_tokens" } " to look only). The browser keeps a session cookie; the token itself is not stored in it." }
            @if let Some(v) = current {
                p.note { "This browser is signed in "
                    @if v.can_write() { "with full access" } @else { "read-only" }
                    "; signing in again replaces that session. " a href="/ui" { "Back to the dashboard" } }
            }
            @if let Some(p) = problem { p.problem role="alert" { (p) } }
            form method="post" action="/ui/login" {
                input type="hidden" name="csrf" value=(nonce);
                input type="hidden" name="next" value=(next);
                label for="token" { "Token" }
                input #token type="password" name="token" autocomplete="current-password" required autofocus;
                button type="submit" { "Sign in" }
            }
        }
    };
    let mut res = (status, layout(None, "Sign in", Nav::None, body)).into_response();
    if let Some(cookie) = cookie {
        res.headers_mut().append(header::SET_COOKIE, cookie);
    }
    res
}

/// The sign-in form's fields.
#[derive(serde::Deserialize)]
pub(crate) struct LoginForm {
    csrf: String,
    token: String,
    #[serde(default)]
    next: Option<String>,
}

/// `POST /ui/login`.
async fn login(
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
    form: Result<axum::Form<LoginForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    let Some(ui) = state.ui.clone() else {
        return UiError::not_found().into_response();
    };
    let Ok(axum::Form(form)) = form else {
        return UiError::bad_request("The sign-in form was not filled in as expected.")
            .into_response();
    };
    let next = safe_next(form.next.as_deref());
    if !ui.sessions.login_nonce_ok(&headers, &form.csrf) {
        return login_page(
            &ui,
            &headers,
            None,
            &next,
            Some("The sign-in form expired or was not sent from this page; try again."),
            StatusCode::FORBIDDEN,
        );
    }
    match ui.sessions.sign_in(&form.token) {
        Ok(cookie) => {
            tracing::info!(target: "cairn::ui", "signed in");
            // The browser's previous session, if any, ends here.
            ui.sessions.sign_out(&headers);
            let mut res = Redirect::to(&next).into_response();
            res.headers_mut().append(header::SET_COOKIE, cookie);
            res.headers_mut()
                .append(header::SET_COOKIE, ui.sessions.clear_login_nonce());
            res
        }
        Err(session::SignInError::UnknownToken) => {
            tracing::warn!(target: "cairn::ui", "a sign-in with an unknown token was refused");
            login_page(
                &ui,
                &headers,
                None,
                &next,
                Some("That token is not one this server accepts."),
                StatusCode::UNAUTHORIZED,
            )
        }
    }
}

/// A form holding only the CSRF token.
#[derive(serde::Deserialize)]
pub(crate) struct CsrfForm {
    csrf: String,
}

/// Checks a mutating form's CSRF token against the session's.
pub(crate) fn check_csrf(
    viewer: &Viewer,
    form: Result<axum::Form<CsrfForm>, axum::extract::rejection::FormRejection>,
) -> Result<(), UiError> {
    match form {
        Ok(axum::Form(f)) if session::same_secret(&f.csrf, &viewer.csrf) => Ok(()),
        _ => Err(UiError::new(
            StatusCode::FORBIDDEN,
            "This form's security token is missing or stale; reload the page and try again.",
        )),
    }
}

/// `POST /ui/logout`.
async fn logout(
    State(state): State<AppState>,
    axum::Extension(viewer): axum::Extension<Viewer>,
    headers: axum::http::HeaderMap,
    form: Result<axum::Form<CsrfForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    let Some(ui) = state.ui.clone() else {
        return UiError::not_found().into_response();
    };
    if let Err(e) = check_csrf(&viewer, form) {
        return e.into_response();
    }
    let cookie = ui.sessions.sign_out(&headers);
    let mut res = Redirect::to("/ui/login").into_response();
    res.headers_mut().append(header::SET_COOKIE, cookie);
    res
}

/// Which navigation entry a page belongs to.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Nav {
    None,
    Overview,
    Runs,
    Spaces,
    Fleet,
}

/// The page around `body`: header, navigation, the viewer's access and the sign-out button.
pub(crate) fn layout(viewer: Option<&Viewer>, title: &str, nav: Nav, body: Markup) -> Markup {
    let item = |n: Nav, href: &str, label: &str| {
        html! { a href=(href) class=[(n == nav).then_some("current")] { (label) } }
    };
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · cairn" }
                link rel="icon" href="data:,";
                link rel="stylesheet" href="/ui/assets/style.css";
            }
            body {
                header.top {
                    span.brand { "cairn" }
                    @if nav != Nav::None {
                        nav {
                            (item(Nav::Overview, "/ui", "Overview"))
                            (item(Nav::Runs, "/ui/runs", "Runs"))
                            (item(Nav::Spaces, "/ui/spaces", "Spaces"))
                            (item(Nav::Fleet, "/ui/fleet", "Fleet & migrations"))
                        }
                    }
                    @if let Some(v) = viewer {
                        span.who {
                            @if v.can_write() { span.badge.full { "full access" } }
                            @else { span.badge.read { "read-only" } }
                            form.inline method="post" action="/ui/logout" {
                                input type="hidden" name="csrf" value=(v.csrf);
                                button.link type="submit" { "Sign out" }
                            }
                        }
                    }
                }
                main { (body) }
            }
        }
    }
}

/// An error page.
#[derive(Debug)]
pub(crate) struct UiError {
    status: StatusCode,
    message: String,
}

impl UiError {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    pub(crate) fn not_found() -> Self {
        Self::new(StatusCode::NOT_FOUND, "There is nothing at this address.")
    }
}

impl From<cairn::Error> for UiError {
    fn from(e: cairn::Error) -> Self {
        let api = super::error::ApiError::from(e);
        Self::new(api.status, api.message)
    }
}

impl IntoResponse for UiError {
    fn into_response(self) -> Response {
        let reason = self.status.canonical_reason().unwrap_or("Error");
        let body = html! {
            section.error {
                h1 { (self.status.as_u16()) " " (reason) }
                p { (self.message) }
                p { a href="/ui" { "Back to the overview" } }
            }
        };
        (self.status, layout(None, reason, Nav::None, body)).into_response()
    }
}

/// Percent-encodes `s` for a query value.
pub(crate) fn encode_query(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A timestamp as `2026-12-02 01:50:26 UTC`.
pub(crate) fn when(t: cairn::spool::Timestamp) -> String {
    jiff::Timestamp::from_microsecond(t.as_unix_micros())
        .map(|ts| ts.strftime("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_else(|_| t.to_string())
}

/// A duration as `3s`, `4m 10s`, `2h 5m`, `3d 4h`.
pub(crate) fn age(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m {}s", s / 60, s % 60),
        3600..86_400 => format!("{}h {}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d {}h", s / 86_400, s % 86_400 / 3600),
    }
}

/// Characters that change how text around them is displayed (bidirectional overrides,
/// isolates and marks): a name holding them could show as another name.
fn reorders(c: char) -> bool {
    matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// A name or id as text anyone can read: control and bidirectional-formatting characters are
/// shown as `\u{…}` escapes (maud then escapes the markup).
pub(crate) fn printable(s: &str) -> String {
    if !s.chars().any(|c| c.is_control() || reorders(c)) {
        return s.to_owned();
    }
    s.chars()
        .map(|c| {
            if c.is_control() || reorders(c) {
                format!("\\u{{{:x}}}", c as u32)
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// Bytes as [`printable`] text (invalid UTF-8 as U+FFFD).
pub(crate) fn printable_bytes(b: &[u8]) -> String {
    printable(&String::from_utf8_lossy(b))
}

/// Bytes shown as text when they are printable UTF-8, else as hex; at most `cap` bytes.
pub(crate) fn shown(bytes: &[u8], cap: usize) -> Markup {
    let cut = &bytes[..bytes.len().min(cap)];
    let more = bytes.len() > cap;
    let text = std::str::from_utf8(cut).ok().filter(|t| {
        t.chars()
            .all(|c| (!c.is_control() || c == '\n' || c == '\t') && !reorders(c))
    });
    html! {
        @if let Some(t) = text {
            pre.payload { (t) }
        } @else {
            pre.payload.hex title="not printable text: shown as hex" { (hex::encode(cut)) }
        }
        @if more { p.note { "Showing the first " (cap) " of " (bytes.len()) " bytes." } }
    }
}

/// Trusted markup made by cairn's own renderers (the DAG's SVG), which escape what they print.
pub(crate) fn trusted(svg: String) -> Markup {
    PreEscaped(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        for fine in ['\u{200d}', '\u{2029}', '\u{206a}', 'é'] {
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
        let tokens = Arc::new(super::super::auth::Tokens::for_tests(
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
            metrics: Arc::new(super::super::metrics::Metrics::new().unwrap()),
            doctor: Arc::new(super::super::doctor::Target {
                url,
                retention_max_bytes: 0,
                parked_threshold: None,
                store: store.store_diagnostics(),
                migrations: cairn::migrate::Migrations::of(&store),
                storage: Default::default(),
            }),
            ui: ui.then(|| Arc::new(Ui::new(tokens, &settings, Arc::default()))),
            page_bytes: 1 << 20,
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
