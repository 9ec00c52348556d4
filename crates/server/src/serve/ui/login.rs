//! The sign-in and sign-out forms, where a sign-in goes next, and the CSRF check every
//! mutating form passes.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;

use super::page::{layout, Nav, UiError};
use super::session::{self, Viewer};
use super::state::Ui;
use crate::serve::state::AppState;

/// The query of the sign-in form.
#[derive(serde::Deserialize, Default)]
pub(crate) struct LoginQuery {
    next: Option<String>,
}

/// Where a sign-in goes next: a dashboard path only (never another site).
pub(super) fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(n)
            if (n == "/ui" || n.starts_with("/ui/") || n.starts_with("/ui?"))
                && !n.contains("//")
                && !n.contains('\\')
                && n.len() <= 2048
                && n.bytes().all(|b| b.is_ascii_graphic()) =>
        {
            n.to_owned()
        }
        _ => "/ui".to_owned(),
    }
}

/// `GET /ui/login`: the sign-in form (or, when already signed in, the overview).
pub(super) async fn login_form(
    State(state): State<AppState>,
    axum::extract::Query(q): axum::extract::Query<LoginQuery>,
    headers: axum::http::HeaderMap,
) -> Response {
    let Some(ui) = state.ui.clone() else {
        return UiError::not_found().into_response();
    };
    let next = safe_next(q.next.as_deref());
    if ui.sessions.open() {
        return Redirect::to(&next).into_response();
    }
    // Shown to a signed-in browser too: signing in with another token replaces the session
    // (a read-only viewer switching to a full-access token, say).
    let current = ui.sessions.viewer(&headers);
    login_page(&ui, &headers, current.as_ref(), &next, None, StatusCode::OK)
}

fn login_page(
    ui: &Ui,
    headers: &axum::http::HeaderMap,
    current: Option<&Viewer>,
    next: &str,
    problem: Option<&str>,
    status: StatusCode,
) -> Response {
    let (nonce, cookie) = ui.sessions.login_nonce(headers);
    let body = html! {
        section.signin {
            h1 { "Sign in to cairn" }
            p { "Paste a bearer token this server accepts (" code { "auth.tokens" } " for full access, "
                code { "auth.read_tokens" } " to look only). The browser keeps a session cookie; the token itself is not stored in it." }
            @if let Some(v) = current {
                p.note { "This browser is signed in "
                    @if v.can_write() { "with full access" } @else { "read-only" }
                    "; signing in again replaces that session. " a href="/ui" { "Back to the dashboard" } }
            }
            @if let Some(p) = problem { p.problem role="alert" { (p) } }
            form method="post" action="/ui/login" {
                input type="hidden" name="csrf" value=(nonce);
                input type="hidden" name="next" value=(next);
                label for="token" { "Token" }
                input #token type="password" name="token" autocomplete="current-password" required autofocus;
                button type="submit" { "Sign in" }
            }
        }
    };
    let mut res = (status, layout(None, "Sign in", Nav::None, body)).into_response();
    if let Some(cookie) = cookie {
        res.headers_mut().append(header::SET_COOKIE, cookie);
    }
    res
}

/// The sign-in form's fields.
#[derive(serde::Deserialize)]
pub(crate) struct LoginForm {
    csrf: String,
    token: String,
    #[serde(default)]
    next: Option<String>,
}

/// `POST /ui/login`.
pub(super) async fn login(
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
    form: Result<axum::Form<LoginForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    let Some(ui) = state.ui.clone() else {
        return UiError::not_found().into_response();
    };
    let Ok(axum::Form(form)) = form else {
        return UiError::bad_request("The sign-in form was not filled in as expected.")
            .into_response();
    };
    let next = safe_next(form.next.as_deref());
    if !ui.sessions.login_nonce_ok(&headers, &form.csrf) {
        return login_page(
            &ui,
            &headers,
            None,
            &next,
            Some("The sign-in form expired or was not sent from this page; try again."),
            StatusCode::FORBIDDEN,
        );
    }
    match ui.sessions.sign_in(&form.token) {
        Ok(cookie) => {
            tracing::info!(target: "cairn::ui", "signed in");
            // The browser's previous session, if any, ends here.
            ui.sessions.sign_out(&headers);
            let mut res = Redirect::to(&next).into_response();
            res.headers_mut().append(header::SET_COOKIE, cookie);
            res.headers_mut()
                .append(header::SET_COOKIE, ui.sessions.clear_login_nonce());
            res
        }
        Err(session::SignInError::UnknownToken) => {
            tracing::warn!(target: "cairn::ui", "a sign-in with an unknown token was refused");
            login_page(
                &ui,
                &headers,
                None,
                &next,
                Some("That token is not one this server accepts."),
                StatusCode::UNAUTHORIZED,
            )
        }
    }
}

/// A form holding only the CSRF token.
#[derive(serde::Deserialize)]
pub(crate) struct CsrfForm {
    csrf: String,
}

/// Checks a mutating form's CSRF token against the session's.
pub(crate) fn check_csrf(
    viewer: &Viewer,
    form: Result<axum::Form<CsrfForm>, axum::extract::rejection::FormRejection>,
) -> Result<(), UiError> {
    match form {
        Ok(axum::Form(f)) if session::same_secret(&f.csrf, &viewer.csrf) => Ok(()),
        _ => Err(UiError::new(
            StatusCode::FORBIDDEN,
            "This form's security token is missing or stale; reload the page and try again.",
        )),
    }
}

/// `POST /ui/logout`.
pub(super) async fn logout(
    State(state): State<AppState>,
    axum::Extension(viewer): axum::Extension<Viewer>,
    headers: axum::http::HeaderMap,
    form: Result<axum::Form<CsrfForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    let Some(ui) = state.ui.clone() else {
        return UiError::not_found().into_response();
    };
    if let Err(e) = check_csrf(&viewer, form) {
        return e.into_response();
    }
    let cookie = ui.sessions.sign_out(&headers);
    let mut res = Redirect::to("/ui/login").into_response();
    res.headers_mut().append(header::SET_COOKIE, cookie);
    res
}
