//! The server's outside input: HTTP request bodies and the config file, through
//! `cairn_server::fuzzing` (the server's own decoding, conversion and checks).

use std::net::SocketAddr;
use std::time::Duration;

use arbitrary::Unstructured;
use base64::Engine as _;
use cairn::{DedupKey, LeaseToken, NackKind};
use cairn_server::fuzzing::{
    check_config, decode_body, AcceptedConfig, Decoded, Refusal, BODY_ROUTES, IMPORT_SPACE,
};
use serde_json::{Map, Value};

use super::signature::{mix, shape};
use super::target::Target;
use crate::hash::fnv;

const BODY_DICT: &[&[u8]] = &[
    b"{",
    b"}",
    b"[",
    b"]",
    b"\"",
    b":",
    b",",
    b"null",
    b"true",
    b"\"events\"",
    b"\"kind\"",
    b"\"key\"",
    b"\"key_b64\"",
    b"\"payload\"",
    b"\"payload_b64\"",
    b"\"id\"",
    b"\"parents\"",
    b"\"key_parts\"",
    b"\"supersede_group\"",
    b"\"priority\"",
    b"\"max_attempts\"",
    b"\"not_before_us\"",
    b"\"event_id\"",
    b"\"event_id_b64\"",
    b"\"value\"",
    b"\"value_b64\"",
    b"\"consumer\"",
    b"\"lease_ms\"",
    b"\"limit\"",
    b"\"token\"",
    b"\"reason\"",
    b"\"retryable\"",
    b"\"permanent\"",
    b"\"failed\"",
    b"\"/wA=\"",
    b"\"0123456789abcdef0123456789abcdef\"",
    b"18446744073709551616",
    b"-9223372036854775808",
    b"append\n",
    b"import\n",
    b"enqueue\n",
    b"claim\n",
    b"append_event\n",
    b"set_fact\n",
    b"heartbeat\n",
    b"ack\n",
    b"nack\n",
];

pub(super) const HTTP_BODY: Target = Target {
    name: "http_body",
    about: "a route name line, then a request body, to the server's body decoding and conversion (cairn_server::fuzzing::decode_body): refusals are 400 invalid_input and never echo the lease token; accepted bodies carry exactly the JSON's values (bytes rule, defaults)",
    run: http_body,
    dictionary: BODY_DICT,
    max_len: 4096,
};

/// The route the first line names, else one picked by the line's hash; and the body after it.
fn split_route(data: &[u8]) -> (&'static str, &[u8]) {
    let (line, body) = match data.iter().position(|b| *b == b'\n') {
        Some(n) => (&data[..n], &data[n + 1..]),
        None => (&data[..0], data),
    };
    let route = BODY_ROUTES
        .iter()
        .find(|(name, _)| name.as_bytes() == line)
        .unwrap_or(&BODY_ROUTES[(fnv(line) % BODY_ROUTES.len() as u64) as usize]);
    (route.0, body)
}

/// The bytes rule, computed here: `name` as UTF-8 text or `name_b64` as standard base64.
fn bytes_field(obj: &Map<String, Value>, name: &str) -> Option<Vec<u8>> {
    match (obj.get(name), obj.get(&format!("{name}_b64"))) {
        (Some(Value::String(t)), None | Some(Value::Null)) => Some(t.as_bytes().to_vec()),
        (None | Some(Value::Null), Some(Value::String(b))) => {
            base64::engine::general_purpose::STANDARD.decode(b).ok()
        }
        _ => None,
    }
}

fn text<'a>(obj: &'a Map<String, Value>, name: &str) -> Option<&'a str> {
    obj.get(name).and_then(Value::as_str)
}

fn lease_of(obj: &Map<String, Value>) -> Duration {
    obj.get("lease_ms")
        .and_then(Value::as_u64)
        .map_or(Duration::from_secs(30), Duration::from_millis)
}

fn token_of(obj: &Map<String, Value>) -> LeaseToken {
    LeaseToken::parse(text(obj, "token").expect("an accepted body has a token"))
        .expect("an accepted token parses")
}

/// What an accepted body must be: the values of its JSON, read independently.
fn check_accepted(route: &str, body: &[u8], decoded: &Decoded) {
    let json: Value = serde_json::from_slice(body).expect("an accepted body is JSON");
    let obj = json.as_object().expect("an accepted body is an object");
    let events_match = |events: &[cairn::Event], list: &Value| {
        let list = list.as_array().expect("events are a list");
        assert_eq!(events.len(), list.len(), "{route}: events lost or added");
        for (e, j) in events.iter().zip(list) {
            let j = j.as_object().expect("an event is an object");
            assert_eq!(Some(e.kind.as_str()), text(j, "kind"), "{route}: kind");
            assert_eq!(Some(&e.payload), bytes_field(j, "payload").as_ref());
            assert_eq!(e.key, bytes_field(j, "key"), "{route}: key");
        }
    };
    match decoded {
        Decoded::Append(events) => {
            assert_eq!(route, "append");
            assert!(!events.is_empty(), "an epoch without events was accepted");
            events_match(events, &obj["events"]);
        }
        Decoded::Import(epoch) => {
            assert_eq!(route, "import");
            assert_eq!(epoch.space.as_bytes(), IMPORT_SPACE.as_bytes());
            assert_eq!(
                Some(epoch.id.to_string()),
                text(obj, "id").map(str::to_ascii_lowercase),
                "import: the claimed id changed"
            );
            let parents = obj["parents"].as_array().expect("parents are a list");
            assert_eq!(epoch.parents.len(), parents.len());
            for (p, j) in epoch.parents.iter().zip(parents) {
                assert_eq!(Some(p.to_string()), j.as_str().map(str::to_ascii_lowercase));
            }
            events_match(&epoch.events, &obj["events"]);
        }
        Decoded::Enqueue {
            key,
            payload,
            options,
        } => {
            assert_eq!(route, "enqueue");
            let parts: Vec<Vec<u8>> = match (obj.get("key_parts"), obj.get("key")) {
                (Some(Value::Array(p)), None | Some(Value::Null)) => p
                    .iter()
                    .map(|s| s.as_str().expect("a part is text").as_bytes().to_vec())
                    .collect(),
                (None | Some(Value::Null), Some(Value::String(k))) => vec![k.as_bytes().to_vec()],
                _ => panic!("enqueue accepted without exactly one of key and key_parts"),
            };
            assert_eq!(key.parts(), Some(parts.clone()), "enqueue: the key's parts");
            assert_eq!(
                *key,
                DedupKey::from_parts(parts).expect("accepted parts encode")
            );
            assert_eq!(Some(payload), bytes_field(obj, "payload").as_ref());
            assert_eq!(
                i64::from(options.priority),
                obj.get("priority").and_then(Value::as_i64).unwrap_or(0)
            );
            assert_eq!(
                options.max_attempts.map(u64::from),
                obj.get("max_attempts").and_then(Value::as_u64)
            );
            assert_eq!(
                options.not_before.map(|t| t.as_unix_micros()),
                obj.get("not_before_us").and_then(Value::as_i64)
            );
            assert_eq!(
                options.supersede_group.is_some(),
                obj.get("supersede_group").is_some_and(|g| !g.is_null())
            );
        }
        Decoded::Claim {
            consumer,
            lease,
            limit,
        } => {
            assert_eq!(route, "claim");
            assert_eq!(Some(consumer.as_str()), text(obj, "consumer"));
            assert_eq!(*lease, lease_of(obj));
            assert!((1..=1000).contains(limit), "claim limit {limit} accepted");
            assert_eq!(
                *limit as u64,
                obj.get("limit").and_then(Value::as_u64).unwrap_or(1)
            );
        }
        Decoded::RunEvent { event_id, payload } => {
            assert_eq!(route, "append_event");
            assert_eq!(
                Some(event_id.as_bytes()),
                bytes_field(obj, "event_id").as_deref()
            );
            assert_eq!(Some(payload), bytes_field(obj, "payload").as_ref());
        }
        Decoded::Fact(value) => {
            assert_eq!(route, "set_fact");
            assert_eq!(Some(value), bytes_field(obj, "value").as_ref());
        }
        Decoded::Heartbeat { token, lease } => {
            assert_eq!(route, "heartbeat");
            assert_eq!(*token, token_of(obj));
            assert_eq!(*lease, lease_of(obj));
        }
        Decoded::Ack(token) => {
            assert_eq!(route, "ack");
            assert_eq!(*token, token_of(obj));
        }
        Decoded::Nack {
            token,
            kind,
            reason,
        } => {
            assert_eq!(route, "nack");
            assert_eq!(*token, token_of(obj));
            let expected = match text(obj, "kind").unwrap_or("retryable") {
                "retryable" => NackKind::Retryable,
                "permanent" => NackKind::Permanent,
                "failed" => NackKind::Failed,
                other => panic!("nack kind {other:?} accepted"),
            };
            assert_eq!(*kind, expected);
            assert_eq!(reason.as_str(), text(obj, "reason").unwrap_or(""));
        }
    }
}

/// What a refusal must be: the handler's 400 `invalid_input`, on one line.
fn check_refusal(route: &str, refusal: &Refusal) {
    assert_eq!(
        (refusal.status, refusal.code),
        (400, "invalid_input"),
        "{route}: {refusal:?}"
    );
    assert!(
        !refusal.message.contains(['\n', '\r']),
        "{route}: a message of more than one line"
    );
}

fn decode(route: &str, body: &[u8]) -> u64 {
    let result = decode_body(route, body).expect("a route of BODY_ROUTES");
    match &result {
        Ok(decoded) => {
            check_accepted(route, body, decoded);
            1
        }
        Err(refusal) => {
            check_refusal(route, refusal);
            fnv(shape(&refusal.message).as_bytes())
        }
    }
}

fn http_body(data: &[u8]) -> u64 {
    let (route, body) = split_route(data);
    let tag = fnv(route.as_bytes());
    let mut signature = mix(tag, decode(route, body));
    // The token check: the same body, its token (wherever a JSON object holds one) replaced by
    // text no fixed message holds. Refused or not, no message may contain it.
    if let Ok(Value::Object(mut obj)) = serde_json::from_slice::<Value>(body) {
        if obj.contains_key("token") {
            let secret = format!("{:032x}", u128::from(fnv(body)) << 64 | 0xfeed_5eed);
            obj.insert("token".into(), Value::String(secret.clone()));
            let body = serde_json::to_vec(&obj).expect("a JSON value serialises");
            if let Some(Err(refusal)) = decode_body(route, &body) {
                check_refusal(route, &refusal);
                assert!(
                    !refusal.message.contains(&secret),
                    "{route}: a refusal echoes the lease token: {}",
                    refusal.message
                );
                signature = mix(signature, 2);
            }
        }
    }
    signature
}

const CONFIG_DICT: &[&[u8]] = &[
    b"\n",
    b"[auth]\n",
    b"[delivery]\n",
    b"[backfill]\n",
    b"[spool]\n",
    b"[limits]\n",
    b"[log]\n",
    b"database = ",
    b"listen = ",
    b"tokens = ",
    b"read_tokens = ",
    b"token_file = ",
    b"insecure_no_auth = true\n",
    b"url = ",
    b"token = ",
    b"queue = ",
    b"batch = ",
    b"enabled = ",
    b"spaces_per_second = ",
    b"retention_max_bytes = ",
    b"max_body_bytes = ",
    b"request_timeout_secs = ",
    b"level = ",
    b"format = ",
    b"\"0123456789abcdef0123\"",
    b"\"127.0.0.1:0\"",
    b"\"sqlite://x.db\"",
    b"\"postgres://u:pw@h/db\"",
    b"\"http://127.0.0.1:9/collect\"",
    b"\"json\"",
    b"[\"",
    b"\"]",
    b"= 0\n",
    b"= -1\n",
    b"= 1e309\n",
    b"18446744073709551616",
    b"'''",
    b"\"\"\"",
    b"[[",
    b"]]",
    b"{ ",
    b" }",
];

pub(super) const CONFIG: Target = Target {
    name: "config",
    about: "config file text, raw and built around random secrets, to the server's figment loading and serve checks (cairn_server::fuzzing::check_config): no problem line holds a token or URL password; accepted settings are checked and take the file's values",
    run: config,
    dictionary: CONFIG_DICT,
    max_len: 4096,
};

/// Whether `CAIRN_<VAR>` is set in this process (it would win over the file).
fn env_set(var: &str) -> bool {
    std::env::var_os(format!("CAIRN_{var}")).is_some()
}

fn toml_int(table: &toml::Table, section: &str, key: &str) -> Option<i64> {
    table.get(section)?.as_table()?.get(key)?.as_integer()
}

/// The documented checks and precedence (file over defaults) of accepted settings.
fn check_settings(text: &str, s: &AcceptedConfig) {
    assert!(s.max_body_bytes >= 1, "limits.max_body_bytes 0 accepted");
    assert!(
        s.request_timeout >= Duration::from_secs(1),
        "limits.request_timeout_secs 0 accepted"
    );
    if s.full_tokens + s.read_tokens == 0 {
        assert!(
            s.listen.ip().is_loopback(),
            "no token, and listening on {}",
            s.listen
        );
    }
    let Ok(table) = toml::from_str::<toml::Table>(text) else {
        panic!("a config that is not TOML was accepted");
    };
    if !env_set("LISTEN") {
        let expected = match table.get("listen") {
            Some(v) => v.as_str().expect("an accepted listen is text"),
            None => "127.0.0.1:7878",
        };
        assert_eq!(Some(s.listen), expected.parse::<SocketAddr>().ok());
    }
    if !env_set("DATABASE") {
        assert_eq!(
            s.database.as_deref(),
            table.get("database").and_then(toml::Value::as_str)
        );
    }
    for (key, env, value, default) in [
        (
            "max_body_bytes",
            "LIMITS__MAX_BODY_BYTES",
            s.max_body_bytes as u64,
            8 * 1024 * 1024,
        ),
        (
            "request_timeout_secs",
            "LIMITS__REQUEST_TIMEOUT_SECS",
            s.request_timeout.as_secs(),
            30,
        ),
        (
            "drain_timeout_secs",
            "LIMITS__DRAIN_TIMEOUT_SECS",
            s.drain.as_secs(),
            10,
        ),
    ] {
        if !env_set(env) {
            let expected = toml_int(&table, "limits", key).map_or(default, |v| v as u64);
            assert_eq!(value, expected, "limits.{key}: not the file's value");
        }
    }
    if !env_set("SPOOL__RETENTION_MAX_BYTES") {
        if let Some(v) = toml_int(&table, "spool", "retention_max_bytes") {
            assert_eq!(s.retention_max_bytes, v as u64);
        }
    }
    if !env_set("LOG__FORMAT") {
        let format = table
            .get("log")
            .and_then(|l| l.get("format"))
            .and_then(toml::Value::as_str)
            .unwrap_or("text");
        assert_eq!(s.log_format, format);
    }
}

/// What a problem line without `: ` starts with: a section's key.
const NAMED: [&str; 8] = [
    "database",
    "listen",
    "auth.",
    "delivery.",
    "backfill.",
    "spool.",
    "limits.",
    "log.",
];

fn load(text: &str, secret: Option<&str>) -> u64 {
    match check_config(text) {
        Ok(settings) => {
            check_settings(text, &settings);
            1
        }
        Err(problems) => {
            assert!(!problems.is_empty(), "refused without a problem");
            let mut signature = 0;
            for p in &problems {
                // `key: …`, or `key is …` (the backfill's own checks), or the file's path.
                assert!(
                    p.contains(": ") || NAMED.iter().any(|k| p.starts_with(k)),
                    "a problem line that names no key: {p:?}"
                );
                if let Some(secret) = secret {
                    assert!(!p.contains(secret), "a problem line holds a secret: {p:?}");
                }
                signature = mix(signature, fnv(shape(p).as_bytes()));
            }
            signature
        }
    }
}

/// A TOML basic string literal for `s`: quotes and backslashes escaped, control characters as
/// `\uXXXX`. Written here rather than with `toml`'s serializer, whose run-of-quotes counter
/// (toml_write 0.1.2) overflows on 256 `"` in a row when overflow checks are on — a panic the
/// `config` target hit in this helper, not in cairn, which only parses TOML.
fn quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c < ' ' || c == '\u{7f}' => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A config file built from arbitrary choices, every secret key holding `secret`, and whether
/// the arbitrary text put into it holds `secret` itself (then the check proves nothing).
fn built(u: &mut Unstructured<'_>, secret: &str) -> arbitrary::Result<(String, bool)> {
    let mut free = Vec::new();
    let mut any = |u: &mut Unstructured<'_>| -> arbitrary::Result<String> {
        let s: String = u.arbitrary()?;
        free.push(s.clone());
        Ok(s)
    };
    let mut lines = Vec::new();
    let token = |u: &mut Unstructured<'_>| -> arbitrary::Result<String> {
        Ok(match u.int_in_range(0..=3)? {
            0 => format!("tok-{secret}"),
            1 => secret[..12].to_owned(),
            2 => format!("tok {secret}"),
            _ => format!("{secret}\u{7}"),
        })
    };
    if u.arbitrary()? {
        let db = match u.int_in_range(0..=2)? {
            0 => format!("postgres://user:{secret}@localhost/db"),
            1 => format!("{}://user:{secret}@h/db", any(u)?),
            _ => format!("postgres://user:{secret}@h/db?{}", any(u)?),
        };
        lines.push(format!("database = {}", quoted(&db)));
    }
    if u.arbitrary()? {
        lines.push(format!("listen = {}", quoted(&any(u)?)));
    }
    lines.push("[auth]".into());
    if u.arbitrary()? {
        let n = u.int_in_range(0..=3)?;
        let tokens = (0..n)
            .map(|_| token(u).map(|t| quoted(&t)))
            .collect::<arbitrary::Result<Vec<_>>>()?;
        lines.push(format!("tokens = [{}]", tokens.join(", ")));
    } else {
        lines.push(format!("tokens = {}", quoted(&token(u)?)));
    }
    if u.arbitrary()? {
        lines.push(format!("read_tokens = {}", quoted(&token(u)?)));
    }
    if u.arbitrary()? {
        lines.push(format!("insecure_no_auth = {}", u.arbitrary::<bool>()?));
    }
    if u.arbitrary()? {
        lines.push("[delivery]".into());
        lines.push(format!(
            "url = {}",
            quoted(&match u.int_in_range(0..=2)? {
                0 => format!("https://user:{secret}@collector.example/v1"),
                1 => format!("{}://u:{secret}@h", any(u)?),
                _ => format!("http://u:{secret}@{}", any(u)?),
            })
        ));
        if u.arbitrary()? {
            lines.push(format!("token = {}", quoted(&token(u)?)));
        }
        if u.arbitrary()? {
            lines.push(format!("batch = {}", u.arbitrary::<i64>()?));
        }
    }
    if u.arbitrary()? {
        lines.push("[limits]".into());
        lines.push(format!("max_body_bytes = {}", u.arbitrary::<i64>()?));
    }
    if u.arbitrary()? {
        lines.push("[log]".into());
        lines.push(format!("level = {}", quoted(&any(u)?)));
    }
    // Raw text anywhere: a line the TOML parser may refuse next to the secrets.
    if u.arbitrary()? {
        let at = u.choose_index(lines.len() + 1)?;
        let raw = any(u)?;
        lines.insert(at, raw);
    }
    let leaks = free.iter().any(|f| f.contains(secret));
    Ok((lines.join("\n"), leaks))
}

fn config(data: &[u8]) -> u64 {
    let text = String::from_utf8_lossy(data);
    let plain = load(&text, None);
    let mut u = Unstructured::new(data);
    let secret = format!("s3cr{:016x}{:012x}", fnv(data), data.len());
    let Ok((text, leaks)) = built(&mut u, &secret) else {
        return plain;
    };
    mix(plain, load(&text, (!leaks).then_some(secret.as_str())))
}
