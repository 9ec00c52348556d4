//! Bearer-token auth: full-access tokens may do everything, read-only tokens only `GET` (and
//! the two sync reads sent as `POST`, [`READING_POSTS`]).
//!
//! Tokens come from the configuration: `[auth] tokens` (`CAIRN_AUTH__TOKENS`, comma-separated),
//! `token_file` (`--token-file`, one token a line, `#` comments and blank lines ignored) and
//! `read_tokens` (`CAIRN_AUTH__READ_TOKENS`, read-only). They are
//! compared in constant time and never logged, echoed or put in an error message.

use std::sync::Arc;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use super::error::ApiError;

/// Full-access tokens, comma-separated.
pub(crate) const TOKENS_ENV: &str = "CAIRN_AUTH__TOKENS";
/// Read-only tokens, comma-separated.
pub(crate) const READ_TOKENS_ENV: &str = "CAIRN_AUTH__READ_TOKENS";

/// What a request's token allows.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Access {
    /// May do everything.
    Full,
    /// May read only.
    Read,
}

/// The configured tokens. `Debug` prints counts only.
#[derive(Default)]
pub(crate) struct Tokens {
    full: Vec<Vec<u8>>,
    read: Vec<Vec<u8>>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Tokens {{ full: {}, read: {} }}",
            self.full.len(),
            self.read.len()
        )
    }
}

impl Tokens {
    /// The tokens of `[auth]` (`tokens`, `read_tokens`, `token_file`), checked: one line per
    /// problem, naming the key and the token's position, never the token.
    pub(crate) fn from_config(auth: &crate::config::Auth) -> Result<Self, Vec<String>> {
        let mut problems = Vec::new();
        let mut list = |key: &str, tokens: &[String]| -> Vec<Vec<u8>> {
            tokens
                .iter()
                .enumerate()
                .filter_map(|(n, t)| match check(t) {
                    Ok(()) => Some(t.as_bytes().to_vec()),
                    Err(why) => {
                        problems.push(format!("{key}: token {} {why}", n + 1));
                        None
                    }
                })
                .collect()
        };
        let mut tokens = Self {
            full: list("auth.tokens", &auth.tokens.0),
            read: list("auth.read_tokens", &auth.read_tokens.0),
        };
        if let Some(path) = &auth.token_file {
            match crate::small_file::read(path, MAX_TOKEN_FILE_BYTES) {
                Ok(text) => {
                    for (n, line) in text.lines().enumerate() {
                        let line = line.trim();
                        if line.is_empty() || line.starts_with('#') {
                            continue;
                        }
                        match check(line) {
                            Ok(()) => tokens.full.push(line.as_bytes().to_vec()),
                            Err(why) => problems.push(format!(
                                "auth.token_file: the token on line {} of {} {why}",
                                n + 1,
                                path.display()
                            )),
                        }
                    }
                }
                Err(e) => problems.push(format!(
                    "auth.token_file: cannot read {}: {e}",
                    path.display()
                )),
            }
        }
        if problems.is_empty() {
            Ok(tokens)
        } else {
            Err(problems)
        }
    }

    /// How many full-access and read-only tokens (for `crate::fuzzing`).
    #[cfg(feature = "fuzzing")]
    pub(crate) fn counts(&self) -> (usize, usize) {
        (self.full.len(), self.read.len())
    }

    /// Tokens for unit tests, unchecked.
    #[cfg(test)]
    pub(crate) fn for_tests(full: &[&str], read: &[&str]) -> Self {
        let bytes = |l: &[&str]| l.iter().map(|t| t.as_bytes().to_vec()).collect();
        Self {
            full: bytes(full),
            read: bytes(read),
        }
    }

    /// Whether no token of either class is configured.
    pub(crate) fn is_empty(&self) -> bool {
        self.full.is_empty() && self.read.is_empty()
    }

    /// Every configured token is compared, so the time taken does not tell which (or whether
    /// an early one) matched.
    pub(crate) fn access(&self, presented: &[u8]) -> Option<Access> {
        self.identify(presented).map(|(a, _)| a)
    }

    /// The class of the token and its position (from 1) in its class's list (`auth.tokens`
    /// then the token file; `auth.read_tokens`), found in constant time like [`Tokens::access`]:
    /// what the dashboard records as who acted, without anything derived from the token.
    pub(crate) fn identify(&self, presented: &[u8]) -> Option<(Access, usize)> {
        use subtle::ConditionallySelectable;
        let find = |set: &[Vec<u8>]| {
            set.iter()
                .enumerate()
                .fold((subtle::Choice::from(0), 0u64), |(any, at), (i, t)| {
                    let hit = t.ct_eq(presented);
                    (
                        any | hit,
                        u64::conditional_select(&at, &(i as u64 + 1), hit),
                    )
                })
        };
        let (full, full_at) = find(&self.full);
        let (read, read_at) = find(&self.read);
        if bool::from(full) {
            Some((Access::Full, full_at as usize))
        } else if bool::from(read) {
            Some((Access::Read, read_at as usize))
        } else {
            None
        }
    }
}

fn check(token: &str) -> Result<(), &'static str> {
    if token.len() < 16 {
        return Err("is shorter than 16 characters; use a long random token");
    }
    if token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("holds whitespace or a control character");
    }
    // A client sends it in a header, as ASCII: a byte-order mark or a zero-width space an
    // editor left in a file would make a token no client can present.
    if !token.is_ascii() {
        return Err("holds a character outside printable ASCII (a byte-order mark?)");
    }
    Ok(())
}

/// Whether a request changes the store (everything but `GET` and `HEAD`).
fn mutates(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD)
}

/// The `POST` routes that only read, whose bodies are id lists too long for a URL: a sync's
/// sender answers them, so a read-only token may send them.
const READING_POSTS: [&str; 2] = [
    "/v1/spaces/{space}/sync/epochs",
    "/v1/spaces/{space}/sync/missing",
];

/// Whether a request may change the store: [`mutates`], but for the [`READING_POSTS`].
fn changes_store(req: &Request) -> bool {
    mutates(req.method())
        && !(req.method() == Method::POST
            && req
                .extensions()
                .get::<MatchedPath>()
                .is_some_and(|m| READING_POSTS.contains(&m.as_str())))
}

/// The token of an `Authorization: Bearer <token>` header (the scheme is case-insensitive).
fn bearer(header: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = header.split_at_checked(7)?;
    scheme
        .eq_ignore_ascii_case(b"bearer ")
        .then(|| rest.trim_ascii())
        .filter(|t| !t.is_empty())
}

/// The middleware: 401 without a known token, 403 for a read-only token on a mutating request.
/// With no token configured (`--insecure-no-auth`), every request passes.
pub(crate) async fn require_token(
    State(tokens): State<Arc<Tokens>>,
    req: Request,
    next: Next,
) -> Response {
    if tokens.is_empty() {
        return next.run(req).await;
    }
    let presented = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| bearer(v.as_bytes()));
    match presented.and_then(|t| tokens.access(t)) {
        None => ApiError::unauthorized().into_response(),
        Some(Access::Read) if changes_store(&req) => ApiError::forbidden().into_response(),
        Some(_) => next.run(req).await,
    }
}

/// Most bytes a file of tokens may hold.
pub(crate) const MAX_TOKEN_FILE_BYTES: u64 = 1024 * 1024;

#[cfg(test)]
mod tests {
    use super::*;

    fn from_file(path: &std::path::Path) -> Result<Tokens, Vec<String>> {
        Tokens::from_config(&crate::config::Auth {
            token_file: Some(path.to_owned()),
            ..Default::default()
        })
    }

    #[test]
    fn a_token_file_is_a_small_regular_file_or_refused_unread() {
        let dir = tempfile::tempdir().unwrap();
        let ok = dir.path().join("tokens");
        std::fs::write(&ok, "# ops\nfile-token-0123456789\n").unwrap();
        assert_eq!(from_file(&ok).unwrap().full.len(), 1);
        // Exactly the limit is read; one byte more is refused.
        let big = dir.path().join("big");
        let mut text = "file-token-0123456789\n".to_owned();
        text.push_str(&"#".repeat(MAX_TOKEN_FILE_BYTES as usize - text.len()));
        std::fs::write(&big, &text).unwrap();
        assert_eq!(from_file(&big).unwrap().full.len(), 1);
        text.push('#');
        std::fs::write(&big, &text).unwrap();
        let problems = from_file(&big).unwrap_err();
        assert!(
            problems[0].contains("more than 1048576 bytes"),
            "{problems:?}"
        );
        // A device and a FIFO are refused without reading (a FIFO with no writer would block
        // forever, /dev/zero would never end).
        let problems = from_file(std::path::Path::new("/dev/zero")).unwrap_err();
        assert!(problems[0].contains("not a regular file"), "{problems:?}");
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let problems = from_file(&fifo).unwrap_err();
        assert!(problems[0].contains("not a regular file"), "{problems:?}");
        assert!(
            problems[0].starts_with("auth.token_file: cannot read "),
            "{problems:?}"
        );
        // A byte-order mark, or a zero-width space inside a token, is refused, not kept.
        for text in [
            "\u{feff}file-token-0123456789\n",
            "file-token-\u{200b}0123456789\n",
        ] {
            std::fs::write(&ok, text).unwrap();
            let problems = from_file(&ok).unwrap_err();
            assert!(
                problems[0].contains("outside printable ASCII"),
                "{problems:?}"
            );
        }
    }

    #[test]
    fn tokens_grant_their_class_only() {
        let tokens = Tokens {
            full: vec![b"full-token-0123456789".to_vec()],
            read: vec![b"read-token-0123456789".to_vec()],
        };
        assert_eq!(tokens.access(b"full-token-0123456789"), Some(Access::Full));
        assert_eq!(tokens.access(b"read-token-0123456789"), Some(Access::Read));
        assert_eq!(tokens.access(b"full-token-012345678"), None);
        assert_eq!(tokens.access(b""), None);
        let two = Tokens::for_tests(
            &["full-a-0123456789", "full-b-0123456789"],
            &["read-a-0123456789"],
        );
        assert_eq!(two.identify(b"full-a-0123456789"), Some((Access::Full, 1)));
        assert_eq!(two.identify(b"full-b-0123456789"), Some((Access::Full, 2)));
        assert_eq!(two.identify(b"read-a-0123456789"), Some((Access::Read, 1)));
        assert_eq!(two.identify(b"full-c-0123456789"), None);
        assert!(!format!("{tokens:?}").contains("token-0"));
        assert!(check("short").is_err());
        assert!(check("has a space in it, long enough").is_err());
        assert_eq!(bearer(b"Bearer abc"), Some(&b"abc"[..]));
        assert_eq!(bearer(b"bearer  abc "), Some(&b"abc"[..]));
        assert_eq!(bearer(b"Basic abc"), None);
        assert_eq!(bearer(b"Bearer "), None);
        assert_eq!(bearer(b"Bear"), None);
        assert!(mutates(&Method::POST) && mutates(&Method::PUT) && !mutates(&Method::GET));
        assert!(!mutates(&Method::HEAD) && mutates(&Method::DELETE));
    }

    #[test]
    fn debug_prints_the_counts_and_nothing_of_the_tokens() {
        let tokens = Tokens::for_tests(&["full-a-0123456789", "full-b-0123456789"], &[]);
        assert_eq!(format!("{tokens:?}"), "Tokens { full: 2, read: 0 }");
    }

    #[test]
    fn a_token_of_exactly_sixteen_characters_is_long_enough_and_fifteen_is_not() {
        assert_eq!(check("0123456789abcdef"), Ok(()));
        assert!(check("0123456789abcde").is_err());
        assert!(
            check("0123456789abcdef\u{1}").is_err(),
            "a control character"
        );
        assert!(check("0123456789abcdef\t").is_err(), "a tab");
    }

    #[test]
    fn a_token_listed_twice_or_in_both_classes_still_grants_access() {
        // Listed twice in one class (a token file that repeats `auth.tokens`): the match of the
        // second copy must not cancel the first's.
        let twice = Tokens::for_tests(&["full-a-0123456789", "full-a-0123456789"], &[]);
        assert_eq!(twice.access(b"full-a-0123456789"), Some(Access::Full));
        let read_twice = Tokens::for_tests(&[], &["read-a-0123456789", "read-a-0123456789"]);
        assert_eq!(read_twice.access(b"read-a-0123456789"), Some(Access::Read));
        // In both classes: the larger grant wins.
        let both = Tokens::for_tests(&["same-0123456789ab"], &["same-0123456789ab"]);
        assert_eq!(both.identify(b"same-0123456789ab"), Some((Access::Full, 1)));
    }

    #[test]
    fn only_no_token_of_either_class_means_no_auth() {
        assert!(Tokens::for_tests(&[], &[]).is_empty());
        assert!(!Tokens::for_tests(&["full-a-0123456789"], &[]).is_empty());
        assert!(!Tokens::for_tests(&[], &["read-a-0123456789"]).is_empty());
    }
}
