//! The dashboard's sign-in: a form takes a bearer token once and answers a session cookie.
//!
//! - The cookie (`cairn_ui`) holds 32 random bytes, never the token; the server keeps, per
//!   session, the BLAKE3 hash of that value, the token's access class (full or read-only), a
//!   CSRF token and the token's position in the configuration (who acted, as the store
//!   records it: `ui:token-2`; nothing derived from the token itself). A session
//!   ends at sign-out, after `ui.session_secs`, after an hour unused, or when the server
//!   restarts (sessions live in memory only, so a rotated token list ends every sign-in).
//! - Cookies are `HttpOnly`, `SameSite=Strict`, `Path=/ui`, and `Secure` when
//!   `ui.secure_cookie` is set (cairn serves plain HTTP; set it behind a TLS proxy).
//! - Every mutating form carries the session's CSRF token, compared in constant time; the
//!   sign-in form, before any session exists, carries a value the server issued (a timestamp
//!   and its keyed BLAKE3 MAC under a per-process key, valid for ten minutes) that must also
//!   equal the form's own cookie, so another site cannot sign a browser in under its own token. Requests that a browser marks as cross-site (`Sec-Fetch-Site: cross-site`, or an
//!   `Origin` that is not this server's) are refused before any of this.
//! - At most [`MAX_SESSIONS_PER_TOKEN`] sessions per token (past that the token's least
//!   recently used one ends) and [`MAX_SESSIONS`] in all (past that the least recently used
//!   read-only session ends first), so a holder of one token cannot sign others out.
//!   Failed sign-ins are not throttled, as the API's bearer checks are not: tokens are at least
//!   16 characters (make them long and random) and compared in constant time, and a
//!   server-wide limit would let anyone without a token lock operators out. Each failure is
//!   logged as a warning.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::{header, HeaderMap, HeaderValue};
use base64::Engine as _;
use rand::RngCore as _;
use subtle::ConstantTimeEq;

use crate::serve::auth::{Access, Tokens};

/// The session cookie's name.
pub(crate) const SESSION_COOKIE: &str = "cairn_ui";
/// The sign-in form's one-time cookie.
pub(crate) const LOGIN_COOKIE: &str = "cairn_ui_login";
/// Most sessions kept at once.
pub(crate) const MAX_SESSIONS: usize = 10_000;
/// Most sessions of one token.
pub(crate) const MAX_SESSIONS_PER_TOKEN: usize = 50;
/// How long an unused session lasts.
pub(crate) const IDLE: Duration = Duration::from_secs(3600);
/// How long the sign-in form's one-time value is accepted.
const LOGIN_TTL: Duration = Duration::from_secs(600);

/// Who is looking at a page: their access and the session's CSRF token.
#[derive(Clone, Debug)]
pub(crate) struct Viewer {
    /// Full access or read-only.
    pub(crate) access: Access,
    /// The token every mutating form must carry.
    pub(crate) csrf: String,
    /// Who acts, as recorded with an operator's action: `ui:token-N` for the Nth full-access
    /// token of the configuration (`ui:read-token-N` for read-only ones).
    pub(crate) who: String,
}

impl Viewer {
    /// Whether this viewer may change the store.
    pub(crate) fn can_write(&self) -> bool {
        self.access == Access::Full
    }
}

struct Session {
    viewer: Viewer,
    created: Instant,
    seen: Instant,
}

struct Inner {
    sessions: HashMap<[u8; 32], Session>,
}

/// Every live session, and the settings cookies are made with.
pub(crate) struct Sessions {
    tokens: Arc<Tokens>,
    inner: Mutex<Inner>,
    lifetime: Duration,
    secure: bool,
    /// The key of the sign-in form's values (random per process).
    key: [u8; 32],
    /// When this process started: sign-in values carry their age from it.
    epoch: Instant,
    /// Where a session's "now" comes from: `Instant::now`, or a test's clock moved by hand, so
    /// that the lifetime and idle limits can be checked at their exact edges.
    clock: Arc<dyn Fn() -> Instant + Send + Sync>,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sessions")
    }
}

/// Why a sign-in failed.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum SignInError {
    /// The token is not one the server knows.
    UnknownToken,
}

/// 32 random bytes as URL-safe base64 (43 characters).
pub(crate) fn random_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// Whether two secrets are equal, in time that does not depend on where they differ.
pub(crate) fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

/// Every value of cookie `name` in the request's `Cookie` headers that has the shape the
/// server issues (43 URL-safe base64 characters); anything else is ignored. Several may come
/// (another service on the host can set a cookie of the same name with another path), so
/// callers try each.
pub(crate) fn cookies<'h>(
    headers: &'h HeaderMap,
    name: &'h str,
) -> impl Iterator<Item = &'h str> + 'h {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .filter(move |(k, _)| *k == name)
        .map(|(_, v)| v.trim())
        .filter(|v| {
            v.len() == 43
                && v.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

impl Sessions {
    /// A store of sessions checked against `tokens`, each lasting at most `lifetime`.
    pub(crate) fn new(tokens: Arc<Tokens>, lifetime: Duration, secure: bool) -> Self {
        Self {
            tokens,
            inner: Mutex::new(Inner {
                sessions: HashMap::new(),
            }),
            lifetime,
            secure,
            key: {
                let mut k = [0u8; 32];
                rand::rng().fill_bytes(&mut k);
                k
            },
            epoch: Instant::now(),
            clock: Arc::new(Instant::now),
        }
    }

    /// The same sessions with their time read from `clock`.
    #[cfg(test)]
    fn with_clock(mut self, clock: impl Fn() -> Instant + Send + Sync + 'static) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Whether the server runs without tokens (`--insecure-no-auth`): every browser gets a
    /// full-access session without signing in.
    pub(crate) fn open(&self) -> bool {
        self.tokens.is_empty()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The viewer of the session whose cookie `headers` carry, when it is live; its last use
    /// is now.
    pub(crate) fn viewer(&self, headers: &HeaderMap) -> Option<Viewer> {
        cookies(headers, SESSION_COOKIE).find_map(|id| self.viewer_of(id))
    }

    fn viewer_of(&self, id: &str) -> Option<Viewer> {
        let key = *blake3::hash(id.as_bytes()).as_bytes();
        let now = (self.clock)();
        let mut inner = self.lock();
        let live = inner.sessions.get(&key).is_some_and(|s| {
            now.duration_since(s.created) < self.lifetime && now.duration_since(s.seen) < IDLE
        });
        if !live {
            inner.sessions.remove(&key);
            return None;
        }
        let s = inner.sessions.get_mut(&key)?;
        s.seen = now;
        Some(s.viewer.clone())
    }

    /// Signs in with `token`: a new session and the `Set-Cookie` value that carries it.
    pub(crate) fn sign_in(&self, token: &str) -> Result<HeaderValue, SignInError> {
        let (access, position) = self
            .tokens
            .identify(token.trim().as_bytes())
            .ok_or(SignInError::UnknownToken)?;
        let class = match access {
            Access::Full => "token",
            Access::Read => "read-token",
        };
        Ok(self.create(Viewer {
            access,
            csrf: random_token(),
            who: format!("ui:{class}-{position}"),
        }))
    }

    /// A full-access session for a server without tokens.
    pub(crate) fn sign_in_open(&self) -> (HeaderValue, Viewer) {
        let viewer = Viewer {
            access: Access::Full,
            csrf: random_token(),
            who: "ui:no-auth".into(),
        };
        (self.create(viewer.clone()), viewer)
    }

    fn create(&self, viewer: Viewer) -> HeaderValue {
        let id = random_token();
        let key = *blake3::hash(id.as_bytes()).as_bytes();
        let now = (self.clock)();
        let mut inner = self.lock();
        let lifetime = self.lifetime;
        let mine = |s: &Session| s.viewer.who == viewer.who;
        let count = |inner: &Inner| inner.sessions.values().filter(|s| mine(s)).count();
        if count(&inner) >= MAX_SESSIONS_PER_TOKEN || inner.sessions.len() >= MAX_SESSIONS {
            inner.sessions.retain(|_, s| {
                now.duration_since(s.created) < lifetime && now.duration_since(s.seen) < IDLE
            });
        }
        // The token's own least recently used session; past the global cap, the least recently
        // used session, read-only ones before full-access ones.
        let evict = |inner: &Inner, only_mine: bool| {
            inner
                .sessions
                .iter()
                .filter(|(_, s)| !only_mine || mine(s))
                .min_by_key(|(_, s)| (s.viewer.access == Access::Full, s.seen))
                .map(|(k, _)| *k)
        };
        if count(&inner) >= MAX_SESSIONS_PER_TOKEN {
            if let Some(k) = evict(&inner, true) {
                inner.sessions.remove(&k);
            }
        }
        if inner.sessions.len() >= MAX_SESSIONS {
            if let Some(k) = evict(&inner, false) {
                inner.sessions.remove(&k);
            }
        }
        inner.sessions.insert(
            key,
            Session {
                viewer,
                created: now,
                seen: now,
            },
        );
        self.set_cookie(SESSION_COOKIE, &id, "/ui", self.lifetime)
    }

    /// Ends the session whose cookie `headers` carry; answers the `Set-Cookie` that clears it.
    pub(crate) fn sign_out(&self, headers: &HeaderMap) -> HeaderValue {
        for id in cookies(headers, SESSION_COOKIE) {
            let key = *blake3::hash(id.as_bytes()).as_bytes();
            self.lock().sessions.remove(&key);
        }
        self.set_cookie(SESSION_COOKIE, "", "/ui", Duration::ZERO)
    }

    /// The sign-in form's value and the cookie that must come back with it: the browser's
    /// current one while it is still valid (so two tabs' forms both work), else a new one.
    pub(crate) fn login_nonce(&self, headers: &HeaderMap) -> (String, Option<HeaderValue>) {
        if let Some(v) = cookies(headers, LOGIN_COOKIE).find(|v| self.nonce_valid(v)) {
            return (v.to_owned(), None);
        }
        let age = self.since_start().to_le_bytes();
        let mac = blake3::keyed_hash(&self.key, &age);
        let mut bytes = [0u8; 32];
        bytes[..8].copy_from_slice(&age);
        bytes[8..].copy_from_slice(&mac.as_bytes()[..24]);
        let nonce = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
        let cookie = self.set_cookie(LOGIN_COOKIE, &nonce, "/ui/login", LOGIN_TTL);
        (nonce, Some(cookie))
    }

    /// Whether `nonce` is a sign-in value this process issued less than ten minutes ago.
    pub(crate) fn nonce_valid(&self, nonce: &str) -> bool {
        let Ok(bytes) = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(nonce) else {
            return false;
        };
        let Ok(bytes) = <[u8; 32]>::try_from(bytes.as_slice()) else {
            return false;
        };
        let mut age = [0u8; 8];
        age.copy_from_slice(&bytes[..8]);
        let mac = blake3::keyed_hash(&self.key, &age);
        let issued = u64::from_le_bytes(age);
        let now = self.since_start();
        bool::from(mac.as_bytes()[..24].ct_eq(&bytes[8..]))
            && issued <= now
            && now - issued < LOGIN_TTL.as_secs()
    }

    /// Whole seconds since this process started, by the sessions' clock.
    fn since_start(&self) -> u64 {
        (self.clock)()
            .saturating_duration_since(self.epoch)
            .as_secs()
    }

    /// Whether a sign-in form's value is good: issued by this process, fresh, and equal to one
    /// of the request's sign-in cookies.
    pub(crate) fn login_nonce_ok(&self, headers: &HeaderMap, form: &str) -> bool {
        self.nonce_valid(form) && cookies(headers, LOGIN_COOKIE).any(|c| same_secret(c, form))
    }

    /// The `Set-Cookie` value that clears the sign-in form's cookie.
    pub(crate) fn clear_login_nonce(&self) -> HeaderValue {
        self.set_cookie(LOGIN_COOKIE, "", "/ui/login", Duration::ZERO)
    }

    fn set_cookie(&self, name: &str, value: &str, path: &str, max_age: Duration) -> HeaderValue {
        let secure = if self.secure { "; Secure" } else { "" };
        let text = format!(
            "{name}={value}; Path={path}; Max-Age={}; HttpOnly; SameSite=Strict{secure}",
            max_age.as_secs()
        );
        // Only base64 characters, digits and fixed text: always a valid header value.
        HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static(""))
    }

    /// How many sessions are kept (for tests).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().sessions.len()
    }
}

/// Whether a browser tells the request came from another site: `Sec-Fetch-Site: cross-site`
/// (or `same-site`: another origin on this site), or an `Origin` whose host is not the
/// request's `Host`.
pub(crate) fn cross_site(headers: &HeaderMap) -> bool {
    let fetch_site = headers
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok())
        .map(str::to_ascii_lowercase);
    if matches!(fetch_site.as_deref(), Some("cross-site" | "same-site")) {
        return true;
    }
    let Some(origin) = headers.get(header::ORIGIN) else {
        return false;
    };
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    let origin_host = origin
        .to_str()
        .ok()
        .and_then(|o| o.split_once("://"))
        .map(|(_, h)| h);
    match (origin_host, host) {
        (Some(o), Some(h)) => !o.eq_ignore_ascii_case(h),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens() -> Arc<Tokens> {
        Arc::new(Tokens::for_tests(
            &["full-token-0123456789"],
            &["read-token-0123456789"],
        ))
    }

    fn with_cookie(set_cookie: &HeaderValue) -> HeaderMap {
        let pair = set_cookie.to_str().unwrap().split(';').next().unwrap();
        let mut h = HeaderMap::new();
        h.insert(header::COOKIE, HeaderValue::from_str(pair).unwrap());
        h
    }

    #[test]
    fn a_sign_in_answers_a_cookie_without_the_token_that_finds_its_access() {
        let s = Sessions::new(tokens(), Duration::from_secs(60), false);
        let full = s.sign_in("full-token-0123456789").unwrap();
        let text = full.to_str().unwrap();
        assert!(!text.contains("full-token"), "{text}");
        for part in ["HttpOnly", "SameSite=Strict", "Path=/ui", "Max-Age=60"] {
            assert!(text.contains(part), "{text} lacks {part}");
        }
        assert!(!text.contains("Secure"), "{text}");
        let v = s.viewer(&with_cookie(&full)).unwrap();
        assert!(v.can_write());
        assert_eq!(v.who, "ui:token-1");
        let read = s.sign_in(" read-token-0123456789 ").unwrap();
        let v = s.viewer(&with_cookie(&read)).unwrap();
        assert!(!v.can_write());
        assert_eq!(
            s.sign_in("read-token-012345678"),
            Err(SignInError::UnknownToken)
        );
        let secure = Sessions::new(tokens(), Duration::from_secs(60), true);
        let c = secure.sign_in("full-token-0123456789").unwrap();
        assert!(c.to_str().unwrap().ends_with("; Secure"));
    }

    #[test]
    fn debug_output_shows_no_session_token_or_key() {
        let s = Sessions::new(tokens(), Duration::from_secs(60), false);
        s.sign_in("full-token-0123456789").unwrap();
        // What a `{:?}` of the server's state (a log line, a panic message) shows of it with a
        // session live: the type's name and nothing else, so neither session ids nor the key.
        assert_eq!(format!("{s:?}"), "Sessions");
    }

    #[test]
    fn sign_out_expiry_and_forged_cookies_end_nothing_else() {
        let s = Sessions::new(tokens(), Duration::from_secs(60), false);
        let a = s.sign_in("full-token-0123456789").unwrap();
        let b = s.sign_in("full-token-0123456789").unwrap();
        let clear = s.sign_out(&with_cookie(&a));
        assert!(clear.to_str().unwrap().contains("Max-Age=0"));
        assert!(s.viewer(&with_cookie(&a)).is_none());
        assert!(s.viewer(&with_cookie(&b)).is_some());
        let mut forged = HeaderMap::new();
        forged.insert(
            header::COOKIE,
            HeaderValue::from_static("cairn_ui=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"),
        );
        assert!(s.viewer(&forged).is_none());
        forged.insert(
            header::COOKIE,
            HeaderValue::from_static("cairn_ui=<script>"),
        );
        assert!(s.viewer(&forged).is_none());
        let expired = Sessions::new(tokens(), Duration::ZERO, false);
        let c = expired.sign_in("full-token-0123456789").unwrap();
        assert!(expired.viewer(&with_cookie(&c)).is_none());
        assert_eq!(expired.len(), 0, "an expired session is dropped when seen");
    }

    #[test]
    fn failed_sign_ins_lock_no_one_out_and_sessions_are_capped() {
        // A microsecond per reading: each sign-in is younger than the one before, and however
        // long the 10,000 sign-ins below take, none lives out its minute.
        let s = ticking(tokens(), Duration::from_secs(60));
        for _ in 0..1000 {
            assert_eq!(
                s.sign_in("wrong-token-0123456789"),
                Err(SignInError::UnknownToken)
            );
        }
        let first = s.sign_in("full-token-0123456789").unwrap();
        // One token's sign-ins end that token's own oldest sessions, nobody else's.
        let reads: Vec<_> = (0..MAX_SESSIONS_PER_TOKEN + 20)
            .map(|_| s.sign_in("read-token-0123456789").unwrap())
            .collect();
        assert_eq!(s.len(), MAX_SESSIONS_PER_TOKEN + 1);
        assert!(s.viewer(&with_cookie(&first)).is_some());
        assert!(
            s.viewer(&with_cookie(&reads[0])).is_none(),
            "the token's oldest ended"
        );
        assert!(s.viewer(&with_cookie(reads.last().unwrap())).is_some());
        // Past the global cap, read-only sessions end before full-access ones.
        let names: Vec<String> = (0..MAX_SESSIONS / MAX_SESSIONS_PER_TOKEN + 5)
            .map(|i| format!("read-token-{i:012}"))
            .collect();
        let read: Vec<&str> = names.iter().map(String::as_str).collect();
        let many = ticking(
            Arc::new(Tokens::for_tests(&["full-token-0123456789"], &read)),
            Duration::from_secs(60),
        );
        let admin = many.sign_in("full-token-0123456789").unwrap();
        for t in &read {
            for _ in 0..MAX_SESSIONS_PER_TOKEN {
                many.sign_in(t).unwrap();
            }
        }
        assert_eq!(many.len(), MAX_SESSIONS);
        assert!(
            many.viewer(&with_cookie(&admin)).is_some(),
            "the admin stays signed in"
        );
    }

    /// Sessions whose clock stands at their start until a test moves it.
    fn clocked(tokens: Arc<Tokens>, lifetime: Duration) -> (Sessions, Arc<Mutex<Instant>>) {
        let s = Sessions::new(tokens, lifetime, false);
        let now = Arc::new(Mutex::new(s.epoch));
        let clock = Arc::clone(&now);
        (s.with_clock(move || *clock.lock().unwrap()), now)
    }

    /// Sessions whose clock moves on a microsecond each time it is read.
    fn ticking(tokens: Arc<Tokens>, lifetime: Duration) -> Sessions {
        let s = Sessions::new(tokens, lifetime, false);
        let now = Mutex::new(s.epoch);
        s.with_clock(move || {
            let mut now = now.lock().unwrap();
            *now += Duration::from_micros(1);
            *now
        })
    }

    fn advance(clock: &Mutex<Instant>, by: Duration) {
        *clock.lock().unwrap() += by;
    }

    #[test]
    fn a_session_ends_exactly_at_its_lifetime_or_after_an_hour_unused() {
        const NS: Duration = Duration::from_nanos(1);
        // The lifetime binds first.
        let (s, clock) = clocked(tokens(), Duration::from_secs(60));
        let (a, b) = (
            s.sign_in("full-token-0123456789").unwrap(),
            s.sign_in("full-token-0123456789").unwrap(),
        );
        advance(&clock, Duration::from_secs(60) - NS);
        assert!(s.viewer(&with_cookie(&a)).is_some(), "a nanosecond short");
        advance(&clock, NS);
        assert!(s.viewer(&with_cookie(&b)).is_none(), "at the lifetime");
        assert!(
            s.viewer(&with_cookie(&a)).is_none(),
            "use does not extend it"
        );
        // Idleness binds first: use keeps the session, an hour unused ends it.
        let (s, clock) = clocked(tokens(), 3 * IDLE);
        let (a, b) = (
            s.sign_in("full-token-0123456789").unwrap(),
            s.sign_in("full-token-0123456789").unwrap(),
        );
        advance(&clock, IDLE - NS);
        assert!(s.viewer(&with_cookie(&a)).is_some(), "a nanosecond short");
        advance(&clock, NS);
        assert!(s.viewer(&with_cookie(&b)).is_none(), "an hour unused");
        advance(&clock, IDLE - 2 * NS);
        assert!(
            s.viewer(&with_cookie(&a)).is_some(),
            "used an hour ago less a nanosecond"
        );
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn at_a_cap_ended_sessions_go_before_any_live_one() {
        // One token at its cap, every session ended by its lifetime (exactly; one of them used
        // a second before, so still within the idle limit) or by an hour unused (exactly, well
        // within the lifetime): the next sign-in drops them all.
        for (lifetime, wait) in [
            (Duration::from_secs(60), Duration::from_secs(60)),
            (3 * IDLE, IDLE),
        ] {
            let (s, clock) = clocked(tokens(), lifetime);
            let old: Vec<_> = (0..MAX_SESSIONS_PER_TOKEN)
                .map(|_| s.sign_in("read-token-0123456789").unwrap())
                .collect();
            advance(&clock, wait - Duration::from_secs(1));
            if wait == lifetime {
                assert!(s.viewer(&with_cookie(&old[0])).is_some());
            }
            advance(&clock, Duration::from_secs(1));
            s.sign_in("read-token-0123456789").unwrap();
            assert_eq!(s.len(), 1, "lifetime {lifetime:?}, waited {wait:?}");
        }
        // Every session ended, the store at its global cap, a token far under its own: the
        // next sign-in drops them all too.
        let names: Vec<String> = (0..MAX_SESSIONS / MAX_SESSIONS_PER_TOKEN)
            .map(|i| format!("read-token-{i:012}"))
            .collect();
        let read: Vec<&str> = names.iter().map(String::as_str).collect();
        let tokens = Arc::new(Tokens::for_tests(&["full-token-0123456789"], &read));
        let (many, clock) = clocked(tokens, Duration::from_secs(60));
        for t in &read {
            for _ in 0..MAX_SESSIONS_PER_TOKEN {
                many.sign_in(t).unwrap();
            }
        }
        assert_eq!(many.len(), MAX_SESSIONS);
        advance(&clock, Duration::from_secs(60));
        let admin = many.sign_in("full-token-0123456789").unwrap();
        assert_eq!(many.len(), 1);
        assert!(many.viewer(&with_cookie(&admin)).is_some());
    }

    #[test]
    fn a_sign_in_value_lasts_ten_minutes_from_its_issue() {
        let (s, clock) = clocked(tokens(), Duration::from_secs(60));
        advance(&clock, Duration::from_secs(100));
        let (nonce, _) = s.login_nonce(&HeaderMap::new());
        advance(&clock, LOGIN_TTL - Duration::from_secs(1));
        assert!(
            s.nonce_valid(&nonce),
            "issued ten minutes ago less a second"
        );
        advance(&clock, Duration::from_secs(1));
        assert!(!s.nonce_valid(&nonce), "issued ten minutes ago");
    }

    #[test]
    fn the_sign_in_value_is_the_servers_own_and_fresh() {
        let s = Sessions::new(tokens(), Duration::from_secs(60), false);
        let (nonce, cookie) = s.login_nonce(&HeaderMap::new());
        let cookie = cookie.unwrap();
        assert!(cookie.to_str().unwrap().contains("Path=/ui/login"));
        assert!(s.nonce_valid(&nonce));
        let h = with_cookie(&cookie);
        assert!(s.login_nonce_ok(&h, &nonce));
        // A second form (another tab) reuses the browser's value, so both forms work.
        let (again, set) = s.login_nonce(&h);
        assert_eq!((again.as_str(), set.is_none()), (nonce.as_str(), true));
        // A value the attacker made up, even with the matching cookie, is refused.
        let made_up = "A".repeat(43);
        let mut forged = HeaderMap::new();
        forged.insert(
            header::COOKIE,
            HeaderValue::from_str(&format!("{LOGIN_COOKIE}={made_up}")).unwrap(),
        );
        assert!(!s.login_nonce_ok(&forged, &made_up));
        // Another process's value (another key) is refused; so is a form without the cookie.
        let other = Sessions::new(tokens(), Duration::from_secs(60), false);
        assert!(!other.nonce_valid(&nonce));
        assert!(!s.login_nonce_ok(&HeaderMap::new(), &nonce));
    }

    #[test]
    fn cookies_are_read_by_name_and_shape_only() {
        let mut h = HeaderMap::new();
        let v = "B".repeat(43);
        h.insert(
            header::COOKIE,
            HeaderValue::from_str(&format!("other=1; cairn_ui={v}; x=y")).unwrap(),
        );
        assert_eq!(cookies(&h, SESSION_COOKIE).next(), Some(v.as_str()));
        let mut two = HeaderMap::new();
        two.insert(
            header::COOKIE,
            HeaderValue::from_str(&format!("cairn_ui=bad; cairn_ui={v}")).unwrap(),
        );
        assert_eq!(
            cookies(&two, SESSION_COOKIE).collect::<Vec<_>>(),
            [v.as_str()]
        );
        assert_eq!(cookies(&h, LOGIN_COOKIE).next(), None);
        assert!(same_secret("abc", "abc") && !same_secret("abc", "abd") && !same_secret("a", "ab"));
    }

    #[test]
    fn cross_site_requests_are_recognised() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("127.0.0.1:7878"));
        assert!(!cross_site(&h), "no Origin: a same-origin form or a client");
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:7878"),
        );
        assert!(!cross_site(&h));
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://evil.example"),
        );
        assert!(cross_site(&h));
        h.insert(header::ORIGIN, HeaderValue::from_static("null"));
        assert!(cross_site(&h));
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:7878"),
        );
        h.insert("sec-fetch-site", HeaderValue::from_static("cross-site"));
        assert!(cross_site(&h));
        h.insert("sec-fetch-site", HeaderValue::from_static("same-origin"));
        assert!(!cross_site(&h));
    }
}
