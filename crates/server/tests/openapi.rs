//! The OpenAPI document states every rule the handlers enforce (issue 21, item 11).
//!
//! The test reads the document a running `cairn serve` serves, walks every operation it lists
//! (whatever routes the build has), and generates requests from the document's own rules:
//! valid ones (every path and query parameter and body as the schemas say) and invalid ones (a
//! valid request with one stated rule broken). Every valid request must be answered without
//! 400 `invalid_input` or `invalid_batch_item` (other answers — 404 for a run that does not exist, 422 for an import
//! whose id does not recompute — are the store speaking, not the input check), and no request
//! may be answered 5xx.
//!
//! The schema subset the walk understands is what the document uses: `$ref`, `type` (with
//! `null`), `enum`, `minLength` / `maxLength` (characters), `x-max-bytes` (UTF-8 bytes, or
//! decoded bytes of a `contentEncoding: base64` string), `pattern`, `not`, `minimum` /
//! `maximum` / `format`, `minItems` / `maxItems` / `items` / `x-max-encoded-bytes`,
//! `properties` / `required` / `additionalProperties`, and `allOf` / `oneOf` (of an object's
//! field groups, or of whole schemas: the ops of a batch). A keyword it does
//! not know fails the test, so a new rule cannot slip past it unread.
//!
//! Cases per operation: `CAIRN_PROPTEST_CASES` when set (deep runs), else 24.

mod common;

use std::cell::Cell;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use proptest::prelude::*;
use proptest::strategy::{BoxedStrategy, Just, Strategy};
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use regex::Regex;
use serde_json::{json, Map, Value};

const DEADLINE: Duration = Duration::from_secs(60);
/// The server's handler timeout here (`limits.request_timeout_secs`), which also caps a sync
/// long poll (`GET /v1/spaces/{space}/sync/wait`) one second below it. Generated waits ask for
/// up to 30 s on spaces where nothing arrives; at the default timeout (30 s, a 25 s default
/// wait) they were most of this test's seven minutes. Every other request answers well within
/// it even in a debug build; one that did not would be a 503 and fail the test.
const REQUEST_TIMEOUT_SECS: &str = "3";
const TOKEN: &str = "openapi-proptest-token-3e7a1c";
/// Longest generated text of a field whose limit is larger (payloads of MiBs).
const LONGEST_GENERATED: usize = 48;
/// Byte limits up to this are also generated exactly at the limit.
const BOUNDARY_UP_TO: usize = 4096;
/// Most items generated in an array whose limit is larger (the 10,000 events of an epoch).
const MOST_ITEMS: usize = 4;

fn cases() -> u32 {
    std::env::var("CAIRN_PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(24)
}

/// The keywords the walk knows; any other keyword in a request schema fails the test.
const KNOWN: [&str; 27] = [
    "$ref",
    "type",
    "enum",
    "minLength",
    "maxLength",
    "x-max-bytes",
    "contentEncoding",
    "pattern",
    "not",
    "minimum",
    "maximum",
    "format",
    "minItems",
    "maxItems",
    "items",
    "x-max-encoded-bytes",
    "properties",
    "required",
    "additionalProperties",
    "allOf",
    "oneOf",
    "description",
    "title",
    "default",
    "example",
    "examples",
    "deprecated",
];

/// The served document, with `$ref`s resolved on demand.
struct Doc {
    root: Value,
}

impl Doc {
    fn resolve<'a>(&'a self, schema: &'a Value) -> &'a Value {
        match schema.get("$ref").and_then(Value::as_str) {
            Some(r) => {
                let name = r
                    .strip_prefix("#/components/schemas/")
                    .unwrap_or_else(|| panic!("unexpected $ref {r}"));
                self.resolve(&self.root["components"]["schemas"][name])
            }
            None => schema,
        }
    }

    /// Fails on a keyword the walk does not know (anywhere in a request schema).
    fn check_known(&self, schema: &Value, seen: &mut BTreeSet<String>) {
        let Some(obj) = schema.as_object() else {
            return;
        };
        if let Some(r) = obj.get("$ref").and_then(Value::as_str) {
            if seen.insert(r.to_owned()) {
                self.check_known(self.resolve(schema), seen);
            }
            return;
        }
        for (k, v) in obj {
            assert!(
                KNOWN.contains(&k.as_str()),
                "the request schema keyword `{k}` is not understood by this test: {schema}"
            );
            match k.as_str() {
                "properties" => {
                    for p in v.as_object().unwrap().values() {
                        self.check_known(p, seen);
                    }
                }
                "items" | "not" => self.check_known(v, seen),
                "allOf" | "oneOf" => {
                    for s in v.as_array().unwrap() {
                        self.check_known(s, seen);
                    }
                }
                _ => {}
            }
        }
    }
}

// ---- reading a schema ----

fn types(schema: &Value) -> Vec<&str> {
    match &schema["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

fn base_type(schema: &Value) -> &str {
    let ts = types(schema);
    if ts == ["null"] {
        return "null";
    }
    ts.into_iter().find(|t| *t != "null").unwrap_or_else(|| {
        if schema.get("properties").is_some() {
            "object"
        } else {
            "any"
        }
    })
}

fn usize_of(schema: &Value, key: &str) -> Option<usize> {
    schema.get(key).and_then(Value::as_u64).map(|n| n as usize)
}

fn anchored(pattern: &str) -> Regex {
    Regex::new(pattern).unwrap_or_else(|e| panic!("pattern {pattern}: {e}"))
}

/// The pattern without its anchors, for proptest's generator (which takes none).
fn unanchored(pattern: &str) -> &str {
    let p = pattern.strip_prefix('^').unwrap_or(pattern);
    p.strip_suffix('$').unwrap_or(p)
}

/// `^[...]*$`, a class of allowed characters repeated: generated character by character.
fn class_pattern(pattern: &str) -> Option<Regex> {
    let inner = pattern.strip_prefix("^[")?.strip_suffix("]*$")?;
    Some(anchored(&format!("^[{inner}]$")))
}

fn netstring_len(parts: &[Value]) -> usize {
    parts
        .iter()
        .map(|p| {
            let n = p.as_str().map_or(0, str::len);
            n.to_string().len() + n + 2
        })
        .sum()
}

fn int_bounds(schema: &Value) -> (i128, i128) {
    let (mut lo, mut hi) = match schema["format"].as_str() {
        Some("int32") => (i128::from(i32::MIN), i128::from(i32::MAX)),
        _ => (i128::from(i64::MIN), i128::from(i64::MAX)),
    };
    // Read as integers when they are (an f64 rounds 253402300799999999 up by one).
    if let Some(m) = schema.get("minimum").and_then(whole) {
        lo = lo.max(m);
    }
    if let Some(m) = schema.get("maximum").and_then(whole) {
        hi = hi.min(m);
    }
    (lo, hi)
}

/// The integer a JSON number stands for, when it is one: written as an integer, or with a
/// zero fraction (`373.0`, as JSON Schema counts it) below 2^53, where an f64 names one
/// integer only (the server refuses a larger one written as a float: it cannot tell which
/// integer was meant).
fn whole(v: &Value) -> Option<i128> {
    v.as_i64()
        .map(i128::from)
        .or_else(|| v.as_u64().map(i128::from))
        .or_else(|| {
            v.as_f64()
                .filter(|f| f.is_finite() && f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0)
                .map(|f| f as i128)
        })
}

/// `n` written with a zero fraction (`373.0`), when it is below 2^53 in magnitude (where an
/// f64 holds it and no other integer).
fn int_as_float(n: i128) -> Value {
    const EXACT: i128 = 1 << 53;
    if (-EXACT + 1..EXACT).contains(&n) {
        serde_json::Number::from_f64(n as f64).map_or_else(|| int_value(n), Value::Number)
    } else {
        int_value(n)
    }
}

fn int_value(n: i128) -> Value {
    if let Ok(v) = i64::try_from(n) {
        json!(v)
    } else if let Ok(v) = u64::try_from(n) {
        json!(v)
    } else {
        json!(n.to_string())
    }
}

// ---- the validator: is a value valid under a schema ----

fn valid(doc: &Doc, schema: &Value, v: &Value) -> bool {
    let schema = doc.resolve(schema);
    if let Some(all) = schema.get("allOf").and_then(Value::as_array) {
        if !all.iter().all(|s| valid(doc, s, v)) {
            return false;
        }
    }
    if let Some(one) = schema.get("oneOf").and_then(Value::as_array) {
        if one.iter().filter(|s| valid(doc, s, v)).count() != 1 {
            return false;
        }
    }
    if let Some(not) = schema.get("not") {
        if valid(doc, not, v) {
            return false;
        }
    }
    if let Some(e) = schema.get("enum").and_then(Value::as_array) {
        if !e.contains(v) {
            return false;
        }
    }
    let ts = types(schema);
    let type_ok = ts.is_empty()
        || ts.iter().any(|t| match *t {
            "null" => v.is_null(),
            "string" => v.is_string(),
            // JSON Schema counts a number with a zero fraction (`373.0`) as an integer.
            "integer" => whole(v).is_some(),
            "number" => v.is_number(),
            "boolean" => v.is_boolean(),
            "array" => v.is_array(),
            "object" => v.is_object(),
            _ => false,
        });
    if !type_ok {
        return false;
    }
    match v {
        Value::String(s) => {
            let chars = s.chars().count();
            if usize_of(schema, "minLength").is_some_and(|m| chars < m)
                || usize_of(schema, "maxLength").is_some_and(|m| chars > m)
            {
                return false;
            }
            if let Some(p) = schema["pattern"].as_str() {
                if !anchored(p).is_match(s) {
                    return false;
                }
            }
            if let Some(max) = usize_of(schema, "x-max-bytes") {
                let bytes = if schema["contentEncoding"] == "base64" {
                    match base64::engine::general_purpose::STANDARD.decode(s) {
                        Ok(b) => b.len(),
                        Err(_) => return false,
                    }
                } else {
                    s.len()
                };
                if bytes > max {
                    return false;
                }
            }
            true
        }
        Value::Number(_) => match whole(v) {
            Some(n) if ts.contains(&"integer") => {
                let (lo, hi) = int_bounds(schema);
                (lo..=hi).contains(&n)
            }
            _ => !ts.contains(&"integer"),
        },
        Value::Array(items) => {
            if usize_of(schema, "minItems").is_some_and(|m| items.len() < m)
                || usize_of(schema, "maxItems").is_some_and(|m| items.len() > m)
                || usize_of(schema, "x-max-encoded-bytes").is_some_and(|m| netstring_len(items) > m)
            {
                return false;
            }
            match schema.get("items") {
                Some(is) => items.iter().all(|i| valid(doc, is, i)),
                None => true,
            }
        }
        Value::Object(map) => {
            if let Some(req) = schema.get("required").and_then(Value::as_array) {
                if !req
                    .iter()
                    .all(|r| map.contains_key(r.as_str().unwrap_or_default()))
                {
                    return false;
                }
            }
            let props = schema.get("properties").and_then(Value::as_object);
            for (k, val) in map {
                match props.and_then(|p| p.get(k)) {
                    Some(ps) if !valid(doc, ps, val) => return false,
                    None if schema["additionalProperties"] == false => return false,
                    _ => {}
                }
            }
            true
        }
        _ => true,
    }
}

// ---- the generator of valid values ----

fn string_strategy(doc: &Arc<Doc>, schema: &Value) -> BoxedStrategy<String> {
    let schema = schema.clone();
    let max_bytes = usize_of(&schema, "x-max-bytes");
    let min_len = usize_of(&schema, "minLength").unwrap_or(0);
    let max_len = usize_of(&schema, "maxLength");
    if schema["contentEncoding"] == "base64" {
        // A base64 minimum length (4) is a minimum of one byte.
        let min = usize::from(min_len > 0);
        let max = max_bytes.unwrap_or(LONGEST_GENERATED);
        let small = prop::collection::vec(any::<u8>(), min..=max.min(LONGEST_GENERATED).max(min));
        let bytes = if max <= BOUNDARY_UP_TO {
            prop_oneof![
                4 => small,
                1 => prop::collection::vec(any::<u8>(), max..=max),
            ]
            .boxed()
        } else {
            small.boxed()
        };
        return bytes
            .prop_map(|b| base64::engine::general_purpose::STANDARD.encode(b))
            .boxed();
    }
    let pattern = schema["pattern"].as_str().map(str::to_owned);
    let class = pattern.as_deref().map(class_pattern);
    let check = {
        let schema = schema.clone();
        let doc = doc.clone();
        move |s: &String| valid(&doc, &schema, &Value::String(s.clone()))
    };
    match (pattern, class) {
        // A structured pattern (ids, cursors): generated from the pattern itself.
        (Some(p), Some(None)) => proptest::string::string_regex(unanchored(&p))
            .unwrap_or_else(|e| panic!("pattern {p}: {e}"))
            .prop_filter("valid under its schema", check)
            .boxed(),
        // Free text, or text from a class of characters.
        (_, class) => {
            let class = class.flatten();
            let char_ok = move |c: &char| {
                class
                    .as_ref()
                    .is_none_or(|re| re.is_match(c.encode_utf8(&mut [0; 4])))
            };
            let limit = max_bytes.or(max_len).unwrap_or(LONGEST_GENERATED);
            let most = limit.min(LONGEST_GENERATED).max(min_len);
            let ch = prop_oneof![
                3 => proptest::char::range('a', 'z'),
                1 => any::<char>(),
                1 => proptest::sample::select(vec!['é', '€', '𝄞', ' ', '/', '%', '.']),
            ]
            .prop_filter("allowed character", char_ok.clone());
            let small = prop::collection::vec(ch.clone(), min_len..=most)
                .prop_map(|cs| cs.into_iter().collect::<String>());
            let strategy = if limit <= BOUNDARY_UP_TO {
                // Exactly at the byte limit, with characters of 1 to 4 bytes.
                let boundary = ch.prop_map(move |c| {
                    let mut s = String::new();
                    while s.len() + c.len_utf8() <= limit {
                        s.push(c);
                    }
                    while s.len() < limit {
                        s.push('a');
                    }
                    s
                });
                prop_oneof![4 => small, 1 => boundary].boxed()
            } else {
                small.boxed()
            };
            strategy
                .prop_filter("valid under its schema", check)
                .boxed()
        }
    }
}

fn value_strategy(doc: &Arc<Doc>, schema: &Value) -> BoxedStrategy<Value> {
    let schema = doc.resolve(schema).clone();
    if let Some(e) = schema.get("enum").and_then(Value::as_array) {
        return proptest::sample::select(e.clone()).boxed();
    }
    // A union of whole schemas (the ops of `POST /v1/batch`), as opposed to an object's
    // `oneOf` groups of fields under `allOf`: a value of one of them, valid under the union.
    if let Some(variants) = schema
        .get("oneOf")
        .and_then(Value::as_array)
        .filter(|_| schema.get("properties").is_none())
    {
        let doc = doc.clone();
        let union = schema.clone();
        return proptest::strategy::Union::new(variants.iter().map(|v| value_strategy(&doc, v)))
            .prop_filter("valid under the union", move |v| valid(&doc, &union, v))
            .boxed();
    }
    match base_type(&schema) {
        "string" => string_strategy(doc, &schema)
            .prop_map(Value::String)
            .boxed(),
        "integer" => {
            let (lo, hi) = int_bounds(&schema);
            let n = prop_oneof![
                Just(lo),
                Just(hi),
                (lo..=hi),
                (lo..=hi.min(lo.saturating_add(10))),
            ];
            // Now and then with a zero fraction (`373.0`): the document says `integer`, and
            // JSON Schema counts such a number as one, so the server must take it.
            (n, proptest::bool::weighted(0.25))
                .prop_map(|(n, float)| if float { int_as_float(n) } else { int_value(n) })
                .boxed()
        }
        "boolean" => any::<bool>().prop_map(Value::Bool).boxed(),
        // An optional object's absent form (`oneOf: [{type: null}, {$ref: …}]`).
        "null" => Just(Value::Null).boxed(),
        "array" => {
            let min = usize_of(&schema, "minItems").unwrap_or(0);
            let max = usize_of(&schema, "maxItems").unwrap_or(MOST_ITEMS);
            let items = value_strategy(doc, &schema["items"]);
            let encoded = usize_of(&schema, "x-max-encoded-bytes");
            prop::collection::vec(items, min..=max.min(MOST_ITEMS).max(min))
                .prop_filter("within the encoded limit", move |v| {
                    encoded.is_none_or(|m| netstring_len(v) <= m)
                })
                .prop_map(Value::Array)
                .boxed()
        }
        "object" => object_strategy(doc, &schema),
        other => panic!("no generator for type {other}: {schema}"),
    }
}

/// The field groups of an object's `allOf`: each `oneOf` names fields of which exactly one is
/// given, each `not` of `required` fields of which not all are.
fn groups(schema: &Value) -> (Vec<Vec<String>>, Vec<Vec<String>>) {
    let mut exactly_one = Vec::new();
    let mut at_most_one = Vec::new();
    let names = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect()
    };
    for s in schema["allOf"].as_array().into_iter().flatten() {
        if let Some(one) = s["oneOf"].as_array() {
            exactly_one.push(one.iter().flat_map(|b| names(&b["required"])).collect());
        }
        if s.get("not").is_some() {
            at_most_one.push(names(&s["not"]["required"]));
        }
    }
    (exactly_one, at_most_one)
}

fn object_strategy(doc: &Arc<Doc>, schema: &Value) -> BoxedStrategy<Value> {
    let props: Vec<(String, Value)> = schema["properties"]
        .as_object()
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    let required: BTreeSet<String> = schema["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect();
    let (exactly_one, at_most_one) = groups(schema);
    let grouped: BTreeSet<String> = exactly_one
        .iter()
        .chain(&at_most_one)
        .flatten()
        .cloned()
        .collect();
    // Which member of each group is given: an index per group (for `at_most_one`, one past
    // the end gives none).
    let picks: Vec<BoxedStrategy<usize>> = exactly_one
        .iter()
        .map(|g| (0..g.len()).boxed())
        .chain(at_most_one.iter().map(|g| (0..=g.len()).boxed()))
        .collect();
    let fields: Vec<BoxedStrategy<(String, Option<Value>)>> = props
        .iter()
        .map(|(name, ps)| {
            let name = name.clone();
            let value = value_strategy(doc, ps);
            let nullable = types(doc.resolve(ps)).contains(&"null");
            if required.contains(&name) || grouped.contains(&name) {
                value.prop_map(move |v| (name.clone(), Some(v))).boxed()
            } else {
                let choices = if nullable {
                    prop_oneof![
                        3 => value.prop_map(Some),
                        2 => Just(None),
                        1 => Just(Some(Value::Null)),
                    ]
                    .boxed()
                } else {
                    prop_oneof![value.prop_map(Some), Just(None)].boxed()
                };
                choices.prop_map(move |v| (name.clone(), v)).boxed()
            }
        })
        .collect();
    let schema = schema.clone();
    let doc = doc.clone();
    (fields, picks)
        .prop_map(move |(fields, picks)| {
            let mut given: BTreeSet<String> = fields
                .iter()
                .filter(|(n, v)| v.is_some() && !grouped.contains(n))
                .map(|(n, _)| n.clone())
                .collect();
            for (group, pick) in exactly_one.iter().chain(&at_most_one).zip(&picks) {
                if let Some(n) = group.get(*pick) {
                    given.insert(n.clone());
                }
            }
            let mut map = Map::new();
            for (n, v) in fields {
                if let (true, Some(v)) = (given.contains(&n), v) {
                    map.insert(n, v);
                }
            }
            Value::Object(map)
        })
        .prop_filter("valid under its schema", move |v| valid(&doc, &schema, v))
        .boxed()
}

// ---- operations and requests ----

#[derive(Clone, Debug)]
struct Param {
    name: String,
    path: bool,
    /// A request header (`traceparent`), not a query parameter.
    header: bool,
    required: bool,
    schema: Value,
}

#[derive(Clone, Debug)]
struct Operation {
    method: String,
    path: String,
    params: Vec<Param>,
    body: Option<Value>,
}

#[derive(Clone, Debug)]
struct Request {
    params: Vec<Option<Value>>,
    body: Option<Body>,
}

#[derive(Clone, Debug)]
enum Body {
    Json(Value),
    Raw(&'static str),
}

fn operations(doc: &Doc) -> Vec<Operation> {
    let mut ops = Vec::new();
    for (path, item) in doc.root["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            if !["get", "post", "put", "delete", "patch"].contains(&method.as_str()) {
                continue;
            }
            let params = op["parameters"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| Param {
                    name: p["name"].as_str().unwrap().to_owned(),
                    path: p["in"] == "path",
                    header: p["in"] == "header",
                    required: p["required"] == true,
                    schema: p["schema"].clone(),
                })
                .collect();
            let body = op["requestBody"]["content"]["application/json"]["schema"].clone();
            ops.push(Operation {
                method: method.to_uppercase(),
                path: path.clone(),
                params,
                body: (!body.is_null()).then_some(body),
            });
        }
    }
    ops
}

fn valid_request(doc: &Arc<Doc>, op: &Operation) -> BoxedStrategy<Request> {
    let params: Vec<BoxedStrategy<Option<Value>>> = op
        .params
        .iter()
        .map(|p| {
            // Zero-fraction integers are a JSON matter: a query or path parameter is text.
            let v = value_strategy(doc, &p.schema).prop_map(|v| match whole(&v) {
                Some(n) if v.is_f64() => int_value(n),
                _ => v,
            });
            // A long poll waits its whole `timeout_ms` on a space nobody writes: the walk asks
            // for short waits (within the document's range), so it does not take minutes.
            let v = if p.name == "timeout_ms" {
                (0u64..=40).prop_map(|ms| json!(ms)).boxed()
            } else {
                v.boxed()
            };
            if p.required {
                v.prop_map(Some).boxed()
            } else {
                prop_oneof![v.prop_map(Some), Just(None)].boxed()
            }
        })
        .collect();
    let body = match &op.body {
        Some(b) => value_strategy(doc, b)
            .prop_map(|v| Some(Body::Json(v)))
            .boxed(),
        None => Just(None).boxed(),
    };
    (params, body)
        .prop_map(|(params, body)| Request { params, body })
        .boxed()
}

/// Values that break `schema`, one rule each (empty when it states none this test can break).
fn breakers(doc: &Doc, schema: &Value) -> Vec<Value> {
    let schema = doc.resolve(schema);
    let mut out = Vec::new();
    let keep = |out: &mut Vec<Value>, v: Value| {
        if !valid(doc, schema, &v) {
            out.push(v);
        }
    };
    match base_type(schema) {
        "string" => {
            keep(&mut out, json!(12));
            keep(&mut out, json!(""));
            for bad in [
                "\u{1}",
                "g",
                "-",
                "!!",
                "\u{7f}x",
                "c1.zz.1",
                "\u{202e}x",
                " x",
            ] {
                keep(&mut out, json!(bad));
            }
            if let Some(m) = usize_of(schema, "maxLength").filter(|m| *m <= 70_000) {
                keep(&mut out, json!("a".repeat(m + 1)));
            }
            if let Some(m) = usize_of(schema, "x-max-bytes").filter(|m| *m <= 70_000) {
                if schema["contentEncoding"] == "base64" {
                    let b = vec![7u8; m + 1];
                    keep(
                        &mut out,
                        json!(base64::engine::general_purpose::STANDARD.encode(b)),
                    );
                } else {
                    keep(&mut out, json!("é".repeat(m / 2 + 1)));
                }
            }
            if let Some(p) = schema["not"]["pattern"].as_str() {
                let hit = format!("{}x", unanchored(p).replace(r"\u0000", "\u{0}"));
                keep(&mut out, json!(hit));
            }
            if schema["contentEncoding"] == "base64" {
                keep(&mut out, json!("YR=="));
                keep(&mut out, json!("not base64"));
            }
        }
        "integer" => {
            let (lo, hi) = int_bounds(schema);
            keep(&mut out, int_value(lo - 1));
            keep(&mut out, int_value(hi + 1));
            keep(&mut out, int_as_float(hi + 1));
            keep(&mut out, json!(1.5));
            keep(&mut out, json!("1"));
        }
        "array" => {
            keep(&mut out, json!({}));
            keep(&mut out, json!([]));
            if let Some(m) = usize_of(schema, "maxItems").filter(|m| *m <= 10_000) {
                let item = json!({"kind": "k", "payload": ""});
                keep(&mut out, Value::Array(vec![item; m + 1]));
            }
            if let Some(m) = usize_of(schema, "x-max-encoded-bytes") {
                keep(&mut out, json!(vec!["p".repeat(100); m / 100 + 1]));
            }
            for item in breakers(doc, &schema["items"]).into_iter().take(3) {
                keep(&mut out, json!([item]));
            }
        }
        "object" => {
            keep(&mut out, json!([]));
            keep(&mut out, json!(null));
        }
        _ => {}
    }
    out
}

/// One rule of a request broken: which part, which way.
#[derive(Clone, Debug)]
enum Break {
    Param(usize, Value),
    BodyField(String, Option<Value>),
    BodyWhole(Body),
    BodyBoth(Vec<String>),
}

fn all_breaks(doc: &Doc, op: &Operation) -> Vec<Break> {
    let mut out = Vec::new();
    for (i, p) in op.params.iter().enumerate() {
        for v in breakers(doc, &p.schema) {
            out.push(Break::Param(i, v));
        }
    }
    if let Some(body) = &op.body {
        let schema = doc.resolve(body);
        out.push(Break::BodyWhole(Body::Raw("{not json")));
        out.push(Break::BodyWhole(Body::Raw("")));
        out.push(Break::BodyField("unknown_field".into(), Some(json!(1))));
        for r in schema["required"].as_array().into_iter().flatten() {
            out.push(Break::BodyField(r.as_str().unwrap().to_owned(), None));
        }
        let (exactly_one, at_most_one) = groups(schema);
        for g in exactly_one.iter().chain(&at_most_one) {
            out.push(Break::BodyBoth(g.clone()));
        }
        for g in &exactly_one {
            for n in g {
                out.push(Break::BodyField(n.clone(), None));
            }
        }
        for (name, ps) in schema["properties"].as_object().into_iter().flatten() {
            for v in breakers(doc, ps) {
                out.push(Break::BodyField(name.clone(), Some(v)));
            }
        }
    }
    out
}

fn apply(doc: &Doc, op: &Operation, mut req: Request, b: &Break) -> Request {
    match b {
        Break::Param(i, v) => req.params[*i] = Some(v.clone()),
        Break::BodyWhole(body) => req.body = Some(body.clone()),
        Break::BodyField(name, v) => {
            if let Some(Body::Json(Value::Object(map))) = &mut req.body {
                match v {
                    Some(v) => {
                        map.insert(name.clone(), v.clone());
                    }
                    None => {
                        map.remove(name);
                    }
                }
            }
        }
        Break::BodyBoth(names) => {
            let schema = doc.resolve(op.body.as_ref().unwrap());
            if let Some(Body::Json(Value::Object(map))) = &mut req.body {
                for n in names {
                    if !map.contains_key(n) {
                        let ps = &schema["properties"][n];
                        let v = match base_type(doc.resolve(ps)) {
                            "array" => json!(["part"]),
                            _ if doc.resolve(ps)["contentEncoding"] == "base64" => json!("YQ=="),
                            _ => json!("a"),
                        };
                        map.insert(n.clone(), v);
                    }
                }
            }
        }
    }
    req
}

fn invalid_request(doc: &Arc<Doc>, op: &Operation) -> Option<BoxedStrategy<(Request, Break)>> {
    let breaks = all_breaks(doc, op);
    if breaks.is_empty() {
        return None;
    }
    let doc = doc.clone();
    let op = op.clone();
    Some(
        (valid_request(&doc, &op), proptest::sample::select(breaks))
            .prop_map(move |(req, b)| (apply(&doc, &op, req, &b), b))
            .boxed(),
    )
}

// ---- sending ----

fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

struct Answer {
    status: u16,
    code: String,
    text: String,
}

fn send(agent: &ureq::Agent, addr: &str, op: &Operation, req: &Request) -> (String, Answer) {
    let mut path = op.path.clone();
    let mut query = Vec::new();
    let mut headers = Vec::new();
    for (p, v) in op.params.iter().zip(&req.params) {
        match (p.path, v) {
            (true, Some(v)) => {
                path = path.replace(&format!("{{{}}}", p.name), &encode(&text_of(v)))
            }
            // A value no header can carry (a control character, say) cannot be sent at all:
            // the request goes without it.
            (false, Some(v)) if p.header => {
                if let Ok(value) = ureq::http::HeaderValue::from_str(&text_of(v)) {
                    headers.push((p.name.clone(), value));
                }
            }
            (false, Some(v)) => query.push(format!("{}={}", encode(&p.name), encode(&text_of(v)))),
            (_, None) => {}
        }
    }
    if !query.is_empty() {
        path = format!("{path}?{}", query.join("&"));
    }
    let body = match &req.body {
        Some(Body::Json(v)) => serde_json::to_vec(v).unwrap(),
        Some(Body::Raw(s)) => s.as_bytes().to_vec(),
        None => Vec::new(),
    };
    let mut request = ureq::http::Request::builder()
        .method(op.method.as_str())
        .uri(format!("http://{addr}{path}"))
        .header("Authorization", format!("Bearer {TOKEN}"))
        .header("Content-Type", "application/json");
    for (name, value) in headers {
        request = request.header(name.as_str(), value);
    }
    let request = request.body(body).unwrap();
    let mut resp = agent
        .run(request)
        .unwrap_or_else(|e| panic!("{} {path}: {e}", op.method));
    let status = resp.status().as_u16();
    let text = resp.body_mut().read_to_string().unwrap_or_default();
    let code = serde_json::from_str::<Value>(&text)
        .ok()
        .and_then(|v| v["error"]["code"].as_str().map(str::to_owned))
        .unwrap_or_default();
    (
        format!("{} {path}", op.method),
        Answer { status, code, text },
    )
}

/// `/v1/doctor` answers 503 with its report when a check finds a problem: a documented answer,
/// not a failure.
fn server_error(op: &Operation, a: &Answer) -> bool {
    a.status >= 500
        && !(op.path == "/v1/doctor"
            && a.status == 503
            && serde_json::from_str::<Value>(&a.text).is_ok_and(|v| v["healthy"] == false))
}

#[test]
fn requests_generated_from_the_served_document_are_never_refused_as_invalid_when_valid_and_never_5xx(
) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("store.db");
    document_rules_hold(db.to_str().unwrap());
}

/// The same on Postgres, whose columns refuse what SQLite stores (a NUL in a TEXT column): a
/// request valid under the document must not turn into a 5xx there either.
#[test]
fn requests_generated_from_the_served_document_on_postgres_are_never_refused_as_invalid_when_valid_and_never_5xx(
) {
    common::on_postgres("cairn_openapi", document_rules_hold);
}

/// Walks every operation of the document a server on `db` serves, with requests valid and
/// invalid by the document's own rules.
fn document_rules_hold(db: &str) {
    let mut cmd = common::cairn(db);
    cmd.args(["serve", "--listen", "127.0.0.1:0"])
        .env("CAIRN_AUTH__TOKENS", TOKEN)
        .env("CAIRN_BACKFILL__ENABLED", "false")
        .env("CAIRN_LIMITS__REQUEST_TIMEOUT_SECS", REQUEST_TIMEOUT_SECS);
    let mut server = common::serve(&mut cmd, DEADLINE);
    let addr = server.addr.clone();
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(DEADLINE))
        .http_status_as_error(false)
        .build()
        .into();

    let root: Value = {
        let mut resp = agent
            .get(format!("http://{addr}/v1/openapi.json"))
            .header("Authorization", format!("Bearer {TOKEN}"))
            .call()
            .unwrap();
        serde_json::from_str(&resp.body_mut().read_to_string().unwrap()).unwrap()
    };
    let doc = Arc::new(Doc { root });
    let ops = operations(&doc);
    assert!(ops.len() >= 19, "every route is walked: {}", ops.len());
    for op in &ops {
        let mut seen = BTreeSet::new();
        for p in &op.params {
            doc.check_known(&p.schema, &mut seen);
        }
        if let Some(b) = &op.body {
            doc.check_known(b, &mut seen);
        }
    }

    let config = Config {
        cases: cases(),
        failure_persistence: None,
        max_shrink_iters: 64,
        ..Config::default()
    };
    let refused = Cell::new(0u64);
    for op in &ops {
        let mut runner = TestRunner::new(config.clone());
        runner
            .run(&valid_request(&doc, op), |req| {
                let (what, a) = send(&agent, &addr, op, &req);
                if a.status == 400
                    && ["invalid_input", "invalid_batch_item"].contains(&a.code.as_str())
                {
                    return Err(TestCaseError::fail(format!(
                        "a request valid under the document was refused as invalid: {what} \
                         {req:?} -> {}",
                        a.text
                    )));
                }
                if server_error(op, &a) {
                    return Err(TestCaseError::fail(format!(
                        "{what} {req:?} -> {} {}",
                        a.status, a.text
                    )));
                }
                Ok(())
            })
            .unwrap_or_else(|e| panic!("{} {}: {e}", op.method, op.path));
        let Some(invalid) = invalid_request(&doc, op) else {
            continue;
        };
        let mut runner = TestRunner::new(config.clone());
        runner
            .run(&invalid, |(req, b)| {
                let (what, a) = send(&agent, &addr, op, &req);
                if server_error(op, &a) {
                    return Err(TestCaseError::fail(format!(
                        "{what} ({b:?}) {req:?} -> {} {}",
                        a.status, a.text
                    )));
                }
                if (400..500).contains(&a.status) {
                    refused.set(refused.get() + 1);
                }
                Ok(())
            })
            .unwrap_or_else(|e| panic!("{} {} (invalid): {e}", op.method, op.path));
    }
    assert!(refused.get() > 0, "the broken requests were refused");
    let _ = server.child.kill();
    let _ = server.child.wait();
}
