//! The sides of `cairn sync`: a `cairn serve` over HTTP ([`HttpEndpoint`]) or a store this
//! process opens ([`endpoint_for`] picks by the URL's scheme).

mod http;
mod local;
mod wire;

pub use self::http::HttpEndpoint;
pub use self::local::{endpoint_for, label_for};
