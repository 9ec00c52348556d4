//! The database URL a service or an operator hands to cairn (`DatabaseUrl::parse`).

use arbitrary::Unstructured;
use cairn::{DatabaseUrl, SCHEMA_PARAM};

use super::signature::{mix, sig};
use super::target::Target;

const URL_DICT: &[&[u8]] = &[
    b"sqlite://",
    b"SQLITE://",
    b"postgres://",
    b"postgresql://",
    b"mysql://",
    b"://",
    b"?",
    b"&",
    b"=",
    b"cairn_schema=",
    b"cairn_schema",
    b"u:pw@",
    b"/db",
];

pub(super) const DATABASE_URL: Target = Target {
    name: "database_url",
    about: "DatabaseUrl::parse on text and on URLs built around a random password: no error echoes the password; Postgres URLs lose exactly the cairn_schema parameter",
    run: database_url,
    dictionary: URL_DICT,
    max_len: 512,
};

fn check(text: &str, secret: Option<&str>) -> u64 {
    let parsed = DatabaseUrl::parse(text);
    match &parsed {
        Ok(DatabaseUrl::Postgres { url, schema }) => {
            let query = url.split_once('?').map_or("", |(_, q)| q);
            assert!(
                !query
                    .split('&')
                    .any(|p| p.split_once('=').is_some_and(|(k, _)| k == SCHEMA_PARAM)),
                "the schema parameter reaches the driver"
            );
            assert!(schema.as_ref().is_none_or(|s| !s.is_empty()));
        }
        Ok(_) => {}
        Err(e) => {
            if let Some(secret) = secret {
                let shown = format!("{e} {e:?}");
                assert!(!shown.contains(secret), "an error echoes the password");
            }
        }
    }
    sig(70, &parsed)
}

fn database_url(data: &[u8]) -> u64 {
    let text = String::from_utf8_lossy(data);
    let plain = check(&text, None);
    let mut u = Unstructured::new(data);
    let Ok((scheme, host, query, password)) = (|| -> arbitrary::Result<_> {
        Ok((
            u.arbitrary::<String>()?,
            u.arbitrary::<String>()?,
            u.arbitrary::<String>()?,
            u.arbitrary::<u64>()?,
        ))
    })() else {
        return plain;
    };
    // Sixteen hex digits after a marker: text no fixed message can hold.
    let secret = format!("pw{password:016x}");
    let url = format!("{scheme}://user:{secret}@{host}?{query}");
    // The scheme is echoed by design, lowercased (it cannot hold a secret): a scheme the fuzzer
    // made to contain the password text proves nothing.
    let watched = (!scheme.to_ascii_lowercase().contains(&secret)).then_some(secret.as_str());
    mix(plain, check(&url, watched))
}
