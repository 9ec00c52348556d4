//! Bearer-token auth: full-access tokens may do everything, read-only tokens only `GET`.
//!
//! Tokens come from `CAIRN_AUTH__TOKENS` (comma-separated), a `--token-file` (one token a line,
//! `#` comments and blank lines ignored) and `CAIRN_AUTH__READ_TOKENS` (read-only). They are
//! compared in constant time and never logged, echoed or put in an error message.

use std::path::Path;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use super::error::ApiError;
use crate::error::CliError;

/// Full-access tokens, comma-separated.
pub(crate) const TOKENS_ENV: &str = "CAIRN_AUTH__TOKENS";
/// Read-only tokens, comma-separated.
pub(crate) const READ_TOKENS_ENV: &str = "CAIRN_AUTH__READ_TOKENS";

/// What a request's token allows.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Access {
    Full,
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
    /// Reads the environment and the token file.
    pub(crate) fn load(token_file: Option<&Path>) -> Result<Self, CliError> {
        let mut tokens = Self {
            full: from_env(TOKENS_ENV)?,
            read: from_env(READ_TOKENS_ENV)?,
        };
        if let Some(path) = token_file {
            let text = std::fs::read_to_string(path).map_err(|e| {
                CliError::Config(format!(
                    "cannot read the token file {}: {e}",
                    path.display()
                ))
            })?;
            for (n, line) in text.lines().enumerate() {
                let line = line.trim();
                if line.is_empty() || line.starts_with('#') {
                    continue;
                }
                check(line).map_err(|why| {
                    CliError::Config(format!(
                        "the token on line {} of {} {why}",
                        n + 1,
                        path.display()
                    ))
                })?;
                tokens.full.push(line.as_bytes().to_vec());
            }
        }
        Ok(tokens)
    }

    /// Whether no token of either class is configured.
    pub(crate) fn is_empty(&self) -> bool {
        self.full.is_empty() && self.read.is_empty()
    }

    /// Every configured token is compared, so the time taken does not tell which (or whether
    /// an early one) matched.
    fn access(&self, presented: &[u8]) -> Option<Access> {
        let matches = |set: &[Vec<u8>]| {
            set.iter()
                .fold(subtle::Choice::from(0), |acc, t| acc | t.ct_eq(presented))
        };
        let full = matches(&self.full);
        let read = matches(&self.read);
        if bool::from(full) {
            Some(Access::Full)
        } else if bool::from(read) {
            Some(Access::Read)
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
    Ok(())
}

fn from_env(var: &'static str) -> Result<Vec<Vec<u8>>, CliError> {
    let Some(value) = std::env::var_os(var) else {
        return Ok(Vec::new());
    };
    let value = value
        .into_string()
        .map_err(|_| CliError::Config(format!("{var} is not valid UTF-8")))?;
    value
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .enumerate()
        .map(|(n, t)| {
            check(t)
                .map(|()| t.as_bytes().to_vec())
                .map_err(|why| CliError::Config(format!("token {} in {var} {why}", n + 1)))
        })
        .collect()
}

/// Whether a request changes the store (everything but `GET` and `HEAD`).
fn mutates(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD)
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
        Some(Access::Read) if mutates(req.method()) => ApiError::forbidden().into_response(),
        Some(_) => next.run(req).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(!format!("{tokens:?}").contains("token-0"));
        assert!(check("short").is_err());
        assert!(check("has a space in it, long enough").is_err());
        assert_eq!(bearer(b"Bearer abc"), Some(&b"abc"[..]));
        assert_eq!(bearer(b"bearer  abc "), Some(&b"abc"[..]));
        assert_eq!(bearer(b"Basic abc"), None);
        assert_eq!(bearer(b"Bearer "), None);
        assert_eq!(bearer(b"Bear"), None);
        assert!(mutates(&Method::POST) && mutates(&Method::PUT) && !mutates(&Method::GET));
    }
}
