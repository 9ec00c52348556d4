//! The OpenAPI 3 document, generated from the handlers' annotations and the JSON types.

use std::sync::OnceLock;

use axum::Json;
use cairn::spool::{
    MAX_CONSUMER_LEN, MAX_CRON_LEN, MAX_DEDUP_KEY, MAX_FACT_NAME, MAX_FACT_VALUE,
    MAX_PARTITION_KEY, MAX_QUEUE_LEN, MAX_RUN_EVENT_ID, MAX_RUN_EVENT_PAYLOAD, MAX_RUN_PAYLOAD,
    MAX_SCHEDULE_NAME, MAX_SUPERSEDE_GROUP,
};
use cairn::{MAX_EVENT_PAYLOAD, MAX_KEY_LEN, MAX_KIND_LEN, MAX_SPACE_LEN};
use serde_json::{json, Value};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::responses::NoToken;
use super::{batch, doctor, epochs, flow, health, json, runs, scrape, sync};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "cairn",
        description = "The epoch log and the spool over HTTP. Bytes: a field `x` travels as UTF-8 \
                       text in `x` or as standard base64 in `x_b64` (requests: either, never \
                       both; responses: `x` when the bytes are UTF-8). Times are microseconds \
                       since the Unix epoch (`*_us`). Every route but /healthz and /readyz needs \
                       `Authorization: Bearer <token>`; read-only tokens may only GET (they \
                       suffice for /metrics and /v1/doctor), and POST the two sync reads \
                       (`sync/epochs`, `sync/missing`). Every rule the server checks is \
                       stated here: a request valid under this document is never answered 400 \
                       `invalid_input` or `invalid_batch_item` (but for what is stated in \
                       words: the payload bytes of a batch enqueue together, run event ids \
                       starting with `cairn:`, which a batch refuses as `invalid_batch_item`, \
                       and dedup keys whose first part is `cairn:schedule`, the schedules' \
                       own: 400 `reserved`, in a batch `invalid_batch_item`). \
                       Batches are all or nothing: \
                       an error names the refused item's `index`, and nothing of the batch is \
                       written. Text limits are in bytes of UTF-8: `maxLength` (which \
                       counts characters) is the byte limit, exact for ASCII, and `x-max-bytes` \
                       states the limit in bytes (for a `_b64` field: of the decoded bytes). \
                       Dedup keys and supersede groups are limited encoded \
                       (`x-max-encoded-bytes`: each part costs its byte length, the decimal \
                       digits of that length, and 2)."
    ),
    paths(
        health::healthz,
        health::readyz,
        scrape::scrape,
        doctor::doctor,
        document,
        epochs::append,
        epochs::heads,
        epochs::feed,
        epochs::import,
        sync::store_id,
        sync::spaces,
        sync::summaries,
        sync::epochs,
        sync::missing,
        sync::peers,
        sync::import,
        sync::wait,
        runs::enqueue,
        batch::handlers::enqueue_batch,
        batch::handlers::batch,
        runs::run,
        runs::append_event,
        runs::events,
        runs::set_fact,
        runs::facts,
        runs::claim,
        runs::heartbeat,
        runs::ack,
        runs::nack,
        runs::cancel,
        runs::close,
        runs::retry,
        runs::discard,
        runs::retry_parked,
        flow::queues,
        flow::flow,
        flow::pause,
        flow::resume,
        flow::limits,
        flow::schedules,
        flow::schedule,
        flow::put_schedule,
        flow::remove_schedule,
    ),
    components(schemas(json::ErrorBody, json::ErrorDetail)),
    modifiers(&BearerAuth)
)]
struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The document as the annotations give it (without [`rules`]).
pub(crate) fn spec() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}

/// The served document: [`spec`] with the rules the annotations cannot state added.
pub(crate) fn served() -> &'static Value {
    static DOC: OnceLock<Value> = OnceLock::new();
    DOC.get_or_init(|| {
        let mut doc = serde_json::to_value(spec()).expect("the OpenAPI document serializes");
        rules(&mut doc);
        batch_ops(&mut doc);
        doc
    })
}

/// The ops of `POST /v1/batch` (`BatchOp`), one object schema per op, made from what the
/// document already states (after [`rules`]): each op is the body of its own route — the
/// enqueue item, the epoch append, the run event, the fact; nothing for a cancel or a close —
/// with `op` and the route's path parameters (`queue`, `space`, `run_id`, a fact's `name`) as
/// fields under the path parameters' own rules. An op on a run takes exactly one of `run_id`
/// and `run` (`{"op": N}`, the run enqueue op N of the batch answered). The handler reads an
/// op exactly so (`batch::Op::from_json`).
fn batch_ops(doc: &mut Value) {
    let param_of = |method: &str, path: &str, name: &str| -> Value {
        doc["paths"][path][method]["parameters"]
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["name"] == name))
            .map(|p| p["schema"].clone())
            .unwrap_or_else(|| panic!("{method} {path} has the parameter {name}"))
    };
    let param = |path: &str, name: &str| param_of("post", path, name);
    let queue = param("/v1/queues/{queue}/runs", "queue");
    let space = param("/v1/spaces/{space}/epochs", "space");
    let run_id = param("/v1/runs/{id}/cancel", "id");
    let fact_name = param_of("put", "/v1/runs/{id}/facts/{name}", "name");
    let body = |name: &str| -> Value {
        let s = doc["components"]["schemas"][name].clone();
        assert!(s.is_object(), "{name} is in the document");
        s
    };
    let op = |name: &str, mut schema: Value, field: &str, field_schema: Value, about: &str| {
        schema["description"] = json!(about);
        schema["properties"]["op"] = json!({"type": "string", "enum": [name]});
        schema["properties"][field] = field_schema;
        let mut required = schema["required"].as_array().cloned().unwrap_or_default();
        required.extend([json!("op"), json!(field)]);
        schema["required"] = Value::Array(required);
        schema
    };
    // An op on a run: `op`, then exactly one of `run_id` and `run`.
    let on_run = |name: &str, mut schema: Value, about: &str| {
        schema["description"] = json!(about);
        schema["properties"]["op"] = json!({"type": "string", "enum": [name]});
        schema["properties"]["run_id"] = run_id.clone();
        schema["properties"]["run"] = json!({
            "type": "object",
            "description": "The run an earlier enqueue op of the batch answered (created or \
                            found): `{\"op\": N}`, N its index from 0. Anything but an earlier \
                            enqueue op is refused with 422 `invalid_reference`.",
            "additionalProperties": false,
            "required": ["op"],
            "properties": {"op": {
                "type": "integer",
                "minimum": 0,
                "maximum": super::batch::MAX_BATCH_OPS - 1,
            }},
        });
        let mut required = schema["required"].as_array().cloned().unwrap_or_default();
        required.push(json!("op"));
        schema["required"] = Value::Array(required);
        let mut groups = schema["allOf"].as_array().cloned().unwrap_or_default();
        groups.push(json!({"oneOf": [
            {"type": "object", "required": ["run_id"],
             "properties": {"run_id": {"type": "string"}}},
            {"type": "object", "required": ["run"], "properties": {"run": {"type": "object"}}},
        ]}));
        schema["allOf"] = Value::Array(groups);
        schema
    };
    let no_body = || json!({"type": "object", "additionalProperties": false, "properties": {}});
    let mut fact = body("FactIn");
    fact["properties"]["name"] = fact_name;
    let mut fact_required = fact["required"].as_array().cloned().unwrap_or_default();
    fact_required.push(json!("name"));
    fact["required"] = Value::Array(fact_required);
    let ops = json!({
        "description": "One op of `POST /v1/batch`, by its `op`.",
        "oneOf": [
            op("enqueue", body("EnqueueRequest"), "queue", queue,
               "`POST /v1/queues/{queue}/runs` inside the batch: the queue, then the fields of \
                an enqueue body."),
            op("append", body("AppendRequest"), "space", space,
               "`POST /v1/spaces/{space}/epochs` inside the batch: the space, then the epoch's \
                events (the space's write lock is held until the batch commits)."),
            on_run("append_event", body("RunEventIn"),
               "`POST /v1/runs/{id}/events` inside the batch: the run, then the fields of a run \
                event body."),
            on_run("cancel", no_body(),
               "`POST /v1/runs/{id}/cancel` inside the batch: the run only."),
            on_run("close_run", no_body(),
               "`POST /v1/runs/{id}/close` inside the batch: the run only."),
            on_run("set_fact", fact,
               "`PUT /v1/runs/{id}/facts/{name}` inside the batch: the run, the fact's `name`, \
                then the fields of a fact body."),
        ],
    });
    let schemas = &mut doc["components"]["schemas"];
    schemas["BatchOp"] = ops;
    let items = &mut schemas["BatchRequest"]["properties"]["ops"]["items"];
    assert!(items.is_object(), "BatchRequest.ops is in the document");
    *items = json!({"$ref": "#/components/schemas/BatchOp"});
}

/// The longest single part whose netstring encoding (`<digits>:<bytes>,`) fits `max` bytes.
fn longest_part(max: usize) -> usize {
    (0..=max)
        .rev()
        .find(|n| n.to_string().len() + n + 2 <= max)
        .unwrap_or(0)
}

/// Base64 characters of `n` bytes.
fn b64_len(n: usize) -> usize {
    n.div_ceil(3) * 4
}

/// A text field's byte limit: `maxLength` (characters; exact for ASCII) and `x-max-bytes`.
fn text_limit(schema: &mut Value, bytes: usize) {
    schema["maxLength"] = json!(bytes);
    schema["x-max-bytes"] = json!(bytes);
}

/// A `_b64` field's limit on its decoded bytes.
fn b64_limit(schema: &mut Value, bytes: usize) {
    schema["maxLength"] = json!(b64_len(bytes));
    schema["x-max-bytes"] = json!(bytes);
}

/// `a` or `b`, exactly one of them, as a string (JSON `null` counts as absent).
fn exactly_one(a: &str, b: &str) -> Value {
    let given =
        |f: &str| json!({"type": "object", "required": [f], "properties": {f: {"type": "string"}}});
    json!({"oneOf": [given(a), given(b)]})
}

/// Not both `a` and `b` as strings.
fn at_most_one(a: &str, b: &str) -> Value {
    json!({"not": {
        "type": "object",
        "required": [a, b],
        "properties": {a: {"type": "string"}, b: {"type": "string"}},
    }})
}

/// Adds to the annotated document what the annotations cannot say: the byte limits (from the
/// core constants), the one-of rules of the bytes rule, the nack kinds, the epoch id pattern
/// of import parents and the reserved space ids.
fn rules(doc: &mut Value) {
    let field = |doc: &mut Value, schema: &str, field: &str| -> Value {
        doc["components"]["schemas"][schema]["properties"][field].take()
    };
    let put = |doc: &mut Value, schema: &str, field: &str, v: Value| {
        doc["components"]["schemas"][schema]["properties"][field] = v;
    };
    let limit = |doc: &mut Value, schema: &str, name: &str, bytes: usize, b64: bool| {
        let mut v = field(doc, schema, name);
        assert!(v.is_object(), "{schema}.{name} is in the document");
        if b64 {
            b64_limit(&mut v, bytes);
        } else {
            text_limit(&mut v, bytes);
        }
        put(doc, schema, name, v);
    };
    for (schema, name, bytes) in [
        ("EventIn", "kind", MAX_KIND_LEN),
        ("EventIn", "key", MAX_KEY_LEN),
        ("EventIn", "payload", MAX_EVENT_PAYLOAD),
        ("EnqueueRequest", "key", longest_part(MAX_DEDUP_KEY)),
        ("EnqueueRequest", "payload", MAX_RUN_PAYLOAD),
        ("RunEventIn", "event_id", MAX_RUN_EVENT_ID),
        ("RunEventIn", "payload", MAX_RUN_EVENT_PAYLOAD),
        ("FactIn", "value", MAX_FACT_VALUE),
        ("ClaimRequest", "consumer", MAX_CONSUMER_LEN),
        ("ScheduleIn", "cron", MAX_CRON_LEN),
        ("ScheduleIn", "time_zone", MAX_CRON_LEN),
        ("ScheduleIn", "queue", MAX_QUEUE_LEN),
        ("ScheduleIn", "payload", MAX_RUN_PAYLOAD),
        ("ScheduleIn", "partition_key", MAX_PARTITION_KEY),
        ("EnqueueRequest", "partition_key", MAX_PARTITION_KEY),
    ] {
        limit(doc, schema, name, bytes, false);
    }
    for (schema, name, bytes) in [
        ("EventIn", "key_b64", MAX_KEY_LEN),
        ("EventIn", "payload_b64", MAX_EVENT_PAYLOAD),
        ("EnqueueRequest", "payload_b64", MAX_RUN_PAYLOAD),
        ("RunEventIn", "event_id_b64", MAX_RUN_EVENT_ID),
        ("RunEventIn", "payload_b64", MAX_RUN_EVENT_PAYLOAD),
        ("FactIn", "value_b64", MAX_FACT_VALUE),
        ("ScheduleIn", "payload_b64", MAX_RUN_PAYLOAD),
    ] {
        limit(doc, schema, name, bytes, true);
    }
    for (schema, name, encoded) in [
        ("EnqueueRequest", "key_parts", MAX_DEDUP_KEY),
        ("EnqueueRequest", "supersede_group", MAX_SUPERSEDE_GROUP),
        ("ScheduleIn", "supersede_group", MAX_SUPERSEDE_GROUP),
    ] {
        let mut v = field(doc, schema, name);
        v["x-max-encoded-bytes"] = json!(encoded);
        text_limit(&mut v["items"], longest_part(encoded));
        put(doc, schema, name, v);
    }
    for (schema, name) in [
        ("ImportRequest", "parents"),
        ("EpochsRequest", "ids"),
        ("MissingRequest", "ids"),
    ] {
        let mut ids = field(doc, schema, name);
        ids["items"]["pattern"] = json!(r"^[0-9a-fA-F]{64}$");
        put(doc, schema, name, ids);
    }
    let mut kind = field(doc, "NackRequest", "kind");
    kind["enum"] = json!(["retryable", "permanent", "failed", null]);
    put(doc, "NackRequest", "kind", kind);

    for (schema, one_ofs) in [
        (
            "EventIn",
            vec![
                exactly_one("payload", "payload_b64"),
                at_most_one("key", "key_b64"),
            ],
        ),
        (
            "EnqueueRequest",
            vec![
                json!({"oneOf": [
                    {"type": "object", "required": ["key_parts"],
                     "properties": {"key_parts": {"type": "array"}}},
                    {"type": "object", "required": ["key"],
                     "properties": {"key": {"type": "string"}}},
                ]}),
                exactly_one("payload", "payload_b64"),
            ],
        ),
        (
            "RunEventIn",
            vec![
                exactly_one("event_id", "event_id_b64"),
                exactly_one("payload", "payload_b64"),
            ],
        ),
        ("FactIn", vec![exactly_one("value", "value_b64")]),
        ("ScheduleIn", vec![at_most_one("payload", "payload_b64")]),
    ] {
        let s = &mut doc["components"]["schemas"][schema];
        assert!(s.is_object(), "{schema} is in the document");
        s["allOf"] = Value::Array(one_ofs);
    }

    // Path parameters: byte limits and the reserved space ids.
    let reserved = format!(
        "^{}",
        cairn::RESERVED_SPACE_PREFIX
            .iter()
            .map(|b| match b {
                0 => r"\u0000".to_owned(),
                b'/' => "/".to_owned(),
                b => (*b as char).to_string(),
            })
            .collect::<String>()
    );
    let Some(paths) = doc["paths"].as_object_mut() else {
        return;
    };
    for (path, item) in paths.iter_mut() {
        let Some(ops) = item.as_object_mut() else {
            continue;
        };
        for (method, op) in ops.iter_mut() {
            let Some(params) = op.get_mut("parameters").and_then(Value::as_array_mut) else {
                continue;
            };
            for param in params {
                if param["in"] == "header" && param["name"] == "traceparent" {
                    // Neither id may be all zeros (W3C trace context).
                    param["schema"]["not"] = json!({"pattern": "^00-(0{32}-|[0-9a-f]{32}-0{16}-)"});
                    continue;
                }
                if param["in"] != "path" {
                    continue;
                }
                let name = param["name"].as_str().unwrap_or_default().to_owned();
                let schema = &mut param["schema"];
                match name.as_str() {
                    "space" => {
                        text_limit(schema, MAX_SPACE_LEN);
                        schema["not"] = json!({"pattern": reserved});
                    }
                    "queue" => text_limit(schema, MAX_QUEUE_LEN),
                    "name" if path.starts_with("/v1/schedules/") => {
                        text_limit(schema, MAX_SCHEDULE_NAME);
                        // A new name is checked more than one read back (`ScheduleName::new`,
                        // `ScheduleName::from_stored`): an earlier build's can still be shown
                        // and removed.
                        if method == "put" {
                            schema["pattern"] = json!(NEW_SCHEDULE_NAME);
                        }
                    }
                    "name" => text_limit(schema, MAX_FACT_NAME),
                    _ => {}
                }
            }
        }
    }
}

/// A schedule name a `PUT` stores (`ScheduleName::new`): no control character, no
/// bidirectional control ([`cairn::spool::is_bidi_control`]), no whitespace at either end.
const NEW_SCHEDULE_NAME: &str = r"^[^\s\u0000-\u001F\u007F-\u009F\u061C\u200E\u200F\u202A-\u202E\u2066-\u2069](?:[^\u0000-\u001F\u007F-\u009F\u061C\u200E\u200F\u202A-\u202E\u2066-\u2069]*[^\s\u0000-\u001F\u007F-\u009F\u061C\u200E\u200F\u202A-\u202E\u2066-\u2069])?$";

/// This API's OpenAPI 3 document.
#[utoipa::path(
    get, path = "/v1/openapi.json", tag = "meta",
    responses(
        (status = 200, description = "The OpenAPI 3 document", content_type = "application/json"),
        NoToken,
    ),
    security(("bearer" = []))
)]
pub(crate) async fn document() -> Json<&'static Value> {
    Json(served())
}

#[cfg(test)]
mod tests {
    use cairn::spool::{MAX_ATTEMPTS_LIMIT, MAX_BATCH, MAX_LEASE, MIN_LEASE};
    use serde_json::Value;

    /// The documented patterns of partition keys and schedule names refuse what the core
    /// refuses: every bidirectional control, and (a new schedule name) whitespace at either
    /// end; a schedule read or removed by name takes any name a store may hold.
    #[test]
    fn the_name_patterns_are_the_cores_checks() {
        use cairn::spool::{PartitionKey, ScheduleName};
        let doc = super::served();
        let re = |v: &Value| regex::Regex::new(v.as_str().expect("a pattern")).unwrap();
        let props = |name: &str| &doc["components"]["schemas"][name]["properties"];
        let name_param = |method: &str| {
            let params = doc["paths"]["/v1/schedules/{name}"][method]["parameters"]
                .as_array()
                .unwrap();
            let p = params.iter().find(|p| p["name"] == "name").unwrap();
            re(&p["schema"]["pattern"])
        };
        let keys = [
            re(&props("EnqueueRequest")["partition_key"]["pattern"]),
            re(&props("ScheduleIn")["partition_key"]["pattern"]),
        ];
        let put = name_param("put");
        let bidi: Vec<char> = (0..=0x10FFFF)
            .filter_map(char::from_u32)
            .filter(|c| cairn::spool::is_bidi_control(*c))
            .collect();
        assert_eq!(bidi.len(), 12);
        let mut samples: Vec<String> = bidi.iter().map(|c| format!("a{c}b")).collect();
        samples.extend(
            [
                " x",
                "x ",
                "\u{3000}x",
                "nightly report",
                "tenant-1",
                "é€𝄞",
                "a\u{1}b",
            ]
            .map(String::from),
        );
        for s in &samples {
            for key in &keys {
                assert_eq!(
                    key.is_match(s),
                    PartitionKey::new(s.as_str()).is_ok(),
                    "{s:?}"
                );
            }
            assert_eq!(
                put.is_match(s),
                ScheduleName::new(s.as_str()).is_ok(),
                "{s:?}"
            );
        }
        for method in ["get", "delete"] {
            let read = name_param(method);
            for s in &samples {
                assert_eq!(
                    read.is_match(s),
                    ScheduleName::from_stored(s.as_str()).is_ok(),
                    "{method} {s:?}"
                );
            }
        }
    }

    /// The numbers written as literals in the annotations are the core's limits.
    #[test]
    fn the_served_document_states_the_core_limits() {
        let doc = super::served();
        let schema = |name: &str| &doc["components"]["schemas"][name]["properties"];
        let n = |v: &Value| v.as_u64().unwrap_or_else(|| panic!("a number: {v}"));
        let ms = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap();
        for s in ["ClaimRequest", "HeartbeatRequest"] {
            assert_eq!(n(&schema(s)["lease_ms"]["minimum"]), ms(MIN_LEASE), "{s}");
            assert_eq!(n(&schema(s)["lease_ms"]["maximum"]), ms(MAX_LEASE), "{s}");
        }
        assert_eq!(
            n(&schema("ClaimRequest")["limit"]["maximum"]),
            MAX_BATCH as u64
        );
        assert_eq!(
            n(&schema("EnqueueRequest")["max_attempts"]["maximum"]),
            u64::from(MAX_ATTEMPTS_LIMIT)
        );
        for s in ["AppendRequest", "ImportRequest"] {
            assert_eq!(
                n(&schema(s)["events"]["maxItems"]),
                cairn::MAX_EPOCH_EVENTS as u64
            );
        }
        assert_eq!(
            n(&schema("EventIn")["kind"]["x-max-bytes"]),
            cairn::MAX_KIND_LEN as u64
        );
        assert_eq!(
            n(&schema("EnqueueBatchRequest")["items"]["maxItems"]),
            cairn::spool::MAX_ENQUEUE_BATCH as u64
        );
        assert_eq!(
            n(&schema("BatchRequest")["ops"]["maxItems"]),
            super::super::batch::MAX_BATCH_OPS as u64
        );
        let ops = doc["components"]["schemas"]["BatchOp"]["oneOf"]
            .as_array()
            .unwrap();
        let names: Vec<&Value> = ops
            .iter()
            .map(|o| &o["properties"]["op"]["enum"][0])
            .collect();
        assert_eq!(
            names,
            [
                "enqueue",
                "append",
                "append_event",
                "cancel",
                "close_run",
                "set_fact"
            ]
        );
        // An op keeps its route's rules: the enqueue op's payload limit, the queue's.
        assert_eq!(
            n(&ops[0]["properties"]["payload"]["x-max-bytes"]),
            super::MAX_RUN_PAYLOAD as u64
        );
        assert_eq!(
            n(&ops[0]["properties"]["queue"]["x-max-bytes"]),
            super::MAX_QUEUE_LEN as u64
        );
        assert!(ops[1]["properties"]["space"]["not"]["pattern"].is_string());
        assert_eq!(super::longest_part(1024), 1018);
        assert_eq!(super::b64_len(256), 344);
        let query_limit = |path: &str| {
            let params = doc["paths"][path]["get"]["parameters"].as_array().unwrap();
            let limit = params.iter().find(|p| p["name"] == "limit").unwrap();
            (
                n(&limit["schema"]["minimum"]),
                n(&limit["schema"]["maximum"]),
            )
        };
        assert_eq!(query_limit("/v1/runs/{id}/events"), (1, MAX_BATCH as u64));
        assert_eq!(
            query_limit("/v1/spaces/{space}/events"),
            (1, super::super::epochs::MAX_FEED_LIMIT as u64)
        );
        if std::env::var_os("CAIRN_PRINT_OPENAPI").is_some() {
            println!("{}", serde_json::to_string_pretty(doc).unwrap());
        }
    }

    /// Every schema a request body is read with, and every part of one that names fields,
    /// says `type: object`: under JSON Schema, `required` and `properties` alone hold for a
    /// number, so without it a body of `0` would be valid where the handler needs an object.
    #[test]
    fn every_request_body_says_it_is_an_object() {
        fn walk(doc: &Value, schema: &Value, at: &str, seen: &mut Vec<String>) {
            let schema = match schema["$ref"].as_str() {
                Some(r) => {
                    let name = r.trim_start_matches("#/components/schemas/");
                    if seen.iter().any(|s| s == name) {
                        return;
                    }
                    seen.push(name.to_owned());
                    &doc["components"]["schemas"][name]
                }
                None => schema,
            };
            if schema.get("properties").is_some() || schema.get("required").is_some() {
                assert_eq!(schema["type"], "object", "{at}: {schema}");
            }
            for key in ["allOf", "oneOf", "anyOf"] {
                for (i, s) in schema[key].as_array().into_iter().flatten().enumerate() {
                    walk(doc, s, &format!("{at}/{key}/{i}"), seen);
                }
            }
            if let Some(not) = schema.get("not") {
                walk(doc, not, &format!("{at}/not"), seen);
            }
            if let Some(items) = schema.get("items") {
                walk(doc, items, &format!("{at}/items"), seen);
            }
            for (name, p) in schema["properties"].as_object().into_iter().flatten() {
                walk(doc, p, &format!("{at}/{name}"), seen);
            }
        }
        let doc = super::served();
        let mut bodies = 0;
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                let schema = &op["requestBody"]["content"]["application/json"]["schema"];
                if schema.is_object() {
                    bodies += 1;
                    let top = schema["$ref"].as_str().unwrap_or_default();
                    let top = top.trim_start_matches("#/components/schemas/");
                    assert_eq!(
                        doc["components"]["schemas"][top]["type"], "object",
                        "{method} {path}"
                    );
                    walk(doc, schema, &format!("{method} {path}"), &mut Vec::new());
                }
            }
        }
        assert!(bodies >= 11, "{bodies} request bodies");
    }

    #[test]
    fn every_route_is_documented() {
        let doc = super::spec();
        let paths: Vec<&String> = doc.paths.paths.keys().collect();
        assert_eq!(paths.len(), 40, "{paths:?}");
    }
}
