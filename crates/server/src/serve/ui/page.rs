//! The frame of every dashboard page (header, navigation, sign-out), its error page, and the
//! read permit pages take turns on.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use maud::{html, Markup, DOCTYPE};

use super::session::Viewer;
use crate::serve::error::ApiError;
use crate::serve::state::AppState;

/// Waits for the dashboard's read permit.
pub(crate) async fn read_permit(
    state: &AppState,
) -> Result<Option<tokio::sync::SemaphorePermit<'_>>, UiError> {
    match &state.ui {
        Some(ui) => {
            ui.reads.acquire().await.map(Some).map_err(|_| {
                UiError::new(StatusCode::SERVICE_UNAVAILABLE, "The server is stopping.")
            })
        }
        None => Ok(None),
    }
}

/// Which navigation entry a page belongs to.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Nav {
    None,
    Overview,
    Runs,
    Spaces,
    Queues,
    Fleet,
}

/// The page around `body`: header, navigation, the viewer's access and the sign-out button.
pub(crate) fn layout(viewer: Option<&Viewer>, title: &str, nav: Nav, body: Markup) -> Markup {
    let item = |n: Nav, href: &str, label: &str| {
        html! { a href=(href) class=[(n == nav).then_some("current")] { (label) } }
    };
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · cairn" }
                link rel="icon" href="data:,";
                link rel="stylesheet" href="/ui/assets/style.css";
            }
            body {
                header.top {
                    span.brand { "cairn" }
                    @if nav != Nav::None {
                        nav {
                            (item(Nav::Overview, "/ui", "Overview"))
                            (item(Nav::Runs, "/ui/runs", "Runs"))
                            (item(Nav::Spaces, "/ui/spaces", "Spaces"))
                            (item(Nav::Queues, "/ui/queues", "Queues"))
                            (item(Nav::Fleet, "/ui/fleet", "Fleet & migrations"))
                        }
                    }
                    @if let Some(v) = viewer {
                        span.who {
                            @if v.can_write() { span.badge.full { "full access" } }
                            @else { span.badge.read { "read-only" } }
                            form.inline method="post" action="/ui/logout" {
                                input type="hidden" name="csrf" value=(v.csrf);
                                button.link type="submit" { "Sign out" }
                            }
                        }
                    }
                }
                main { (body) }
            }
        }
    }
}

/// An error page.
#[derive(Debug)]
pub(crate) struct UiError {
    pub(super) status: StatusCode,
    pub(super) message: String,
}

impl UiError {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    pub(crate) fn not_found() -> Self {
        Self::new(StatusCode::NOT_FOUND, "There is nothing at this address.")
    }
}

impl From<cairn::Error> for UiError {
    fn from(e: cairn::Error) -> Self {
        let api = ApiError::from(e);
        Self::new(api.status, api.message)
    }
}

impl IntoResponse for UiError {
    fn into_response(self) -> Response {
        let reason = self.status.canonical_reason().unwrap_or("Error");
        let body = html! {
            section.error {
                h1 { (self.status.as_u16()) " " (reason) }
                p { (self.message) }
                p { a href="/ui" { "Back to the overview" } }
            }
        };
        (self.status, layout(None, reason, Nav::None, body)).into_response()
    }
}
