//! [`endpoint_for`]: a side of a sync from a string, and the name a report gives it.

use std::sync::Arc;

use cairn::sync::SyncEndpoint;
use cairn::{Error, Result, Store};
use reqwest::Url;

use super::http::HttpEndpoint;

/// Whether `url` names a `cairn serve` (`http://` or `https://`).
fn is_http(url: &str) -> bool {
    let lower = url.get(..8).unwrap_or(url).to_ascii_lowercase();
    lower.starts_with("http://") || lower.starts_with("https://")
}

/// `url` as a report may print it: without a password, and of a Postgres URL's query only
/// `cairn_schema` (a query may hold `password=` or a key file's path); a file path as given.
pub fn label_for(url: &str) -> String {
    let Some((scheme, _)) = url.split_once("://") else {
        return url.to_owned();
    };
    if scheme.eq_ignore_ascii_case("sqlite") {
        return url.to_owned();
    }
    let Ok(mut parsed) = Url::parse(url) else {
        return format!("{scheme}://…");
    };
    let _ = parsed.set_password(None);
    let schema: Vec<(String, String)> = parsed
        .query_pairs()
        .filter(|(k, _)| k == cairn::SCHEMA_PARAM)
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    parsed.set_query(None);
    parsed.set_fragment(None);
    if !schema.is_empty() {
        parsed.query_pairs_mut().extend_pairs(schema);
    }
    parsed.to_string()
}

/// A side of a sync from a string: an `http://` or `https://` URL is a `cairn serve`
/// ([`HttpEndpoint`], with the bearer `token`); anything else is a store URL or file path,
/// opened here (created at head when missing, when `create_if_missing`; otherwise a location
/// without a cairn store, an empty database or schema included, is refused and nothing is
/// created) and kept open while the side lives
/// ([`Store::sync_endpoint`]). It is opened as every one-shot command opens a store: a store
/// behind this build is refused, not upgraded (`cairn migrate up`, or a service's open,
/// upgrades it), and the open does not register in the fleet registry (a sync's process ends
/// without closing the store, and its entry would otherwise hold contract revisions back until
/// it expired). Reports name the side by [`label_for`].
///
/// # Errors
/// [`Error::InvalidInput`] for a bad URL, or a token given for a store opened here;
/// [`Error::Incompatible`] for a store behind this build; [`Error::NotFound`] for no store
/// when `create_if_missing` is off; the open's other errors.
pub async fn endpoint_for(
    url: &str,
    token: Option<String>,
    create_if_missing: bool,
) -> Result<Arc<dyn SyncEndpoint>> {
    if is_http(url) {
        return Ok(Arc::new(HttpEndpoint::new(url, token)?));
    }
    if token.is_some() {
        return Err(Error::invalid(
            "sync token",
            "a token is for a side reached over http:// or https://; a store opened here takes none",
        ));
    }
    let store = Store::builder(url)
        .create_if_missing(create_if_missing)
        .upgrade(false)
        .register_in_fleet(false)
        .open()
        .await?;
    // The side keeps a handle of the store: it stays open as long as the side.
    Ok(store.sync_endpoint(Some(&label_for(url))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_hold_no_secret() {
        assert_eq!(
            label_for("postgres://u:pw@db:5432/app?password=x&cairn_schema=s1&sslkey=/k"),
            "postgres://u@db:5432/app?cairn_schema=s1"
        );
        assert_eq!(label_for("/var/lib/edge.db"), "/var/lib/edge.db");
        assert_eq!(label_for("sqlite:///var/x.db"), "sqlite:///var/x.db");
        assert!(is_http("HTTPS://x") && is_http("http://x") && !is_http("h"));
    }
}
