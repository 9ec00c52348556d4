//! The dashboard's routes and the layers in front of them: the security headers, the gate
//! (cross-site refusal, session lookup, read-only refusal) and the stylesheet.

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Router;

use super::login::{login, login_form, logout};
use super::page::UiError;
use super::text::encode_query;
use super::{fleet, pages, queues, session, spaces};
use crate::serve::state::AppState;

/// The stylesheet, embedded in the binary.
const STYLE: &str = include_str!("style.css");
/// The dashboard's routes, for [`crate::serve::routes::router`] to merge.
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
        .route("/ui/queues", get(queues::queues))
        .route("/ui/queues/{action}", post(queues::act))
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
