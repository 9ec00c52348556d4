//! The OpenAPI 3 document, generated from the handlers' annotations and the JSON types.

use axum::Json;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::{doctor, epochs, json, metrics, routes, runs};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "cairn",
        description = "The epoch log and the spool over HTTP. Bytes: a field `x` travels as UTF-8 \
                       text in `x` or as standard base64 in `x_b64` (requests: either, never \
                       both; responses: `x` when the bytes are UTF-8). Times are microseconds \
                       since the Unix epoch (`*_us`). Every route but /healthz and /readyz needs \
                       `Authorization: Bearer <token>`; read-only tokens may only GET (they \
                       suffice for /metrics and /v1/doctor)."
    ),
    paths(
        routes::healthz,
        routes::readyz,
        metrics::scrape,
        doctor::doctor,
        document,
        epochs::append,
        epochs::heads,
        epochs::feed,
        epochs::import,
        runs::enqueue,
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

/// The document as a value.
pub(crate) fn spec() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}

/// This API's OpenAPI 3 document.
#[utoipa::path(
    get, path = "/v1/openapi.json", tag = "meta",
    responses(
        (status = 200, description = "The OpenAPI 3 document", content_type = "application/json"),
        (status = 401, description = "No valid token", body = json::ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn document() -> Json<utoipa::openapi::OpenApi> {
    Json(spec())
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_route_is_documented() {
        let doc = super::spec();
        let paths: Vec<&String> = doc.paths.paths.keys().collect();
        assert_eq!(paths.len(), 19, "{paths:?}");
    }
}
