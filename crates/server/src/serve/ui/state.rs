//! What the dashboard's handlers share ([`Ui`]) and its settings: the sessions, the rate
//! samples and the read permit.

use std::sync::Arc;
use std::time::Duration;

use super::rates::Rates;
use super::session::Sessions;
use crate::serve::auth::Tokens;

/// The dashboard's settings (`[ui]`).
#[derive(Clone, Debug)]
pub(crate) struct UiSettings {
    /// Whether `/ui` is served.
    pub(crate) enabled: bool,
    /// Whether cookies carry `Secure`.
    pub(crate) secure_cookie: bool,
    /// The longest a sign-in lasts.
    pub(crate) session: Duration,
}

/// What the dashboard's handlers share: the sessions, the rate samples, and the one permit
/// its page reads take turns on.
#[derive(Debug)]
pub(crate) struct Ui {
    pub(crate) sessions: Sessions,
    pub(crate) rates: Arc<Rates>,
    /// One page's store reads at a time: a filter over a large store can read many rows (and
    /// the fleet page runs doctor), so however many pages browsers ask for at once, the
    /// dashboard keeps at most one core busy and the API's writes their share.
    pub(super) reads: tokio::sync::Semaphore,
}

impl Ui {
    /// The dashboard's state over `tokens`.
    pub(crate) fn new(tokens: Arc<Tokens>, settings: &UiSettings, rates: Arc<Rates>) -> Self {
        Self {
            sessions: Sessions::new(tokens, settings.session, settings.secure_cookie),
            rates,
            reads: tokio::sync::Semaphore::new(1),
        }
    }
}
