//! Spool cases (S1–S18, in-process parts; Q1–Q4, queue flow control; Q5–Q7, schedules; Q8,
//! trace context) and the spool model property test. Cases are
//! `pub async fn name<H: SpoolHarness>(h: &H)` against `Arc<dyn Spool>`; time moves only when
//! a case advances the harness's [`cairn_core::ManualClock`].

mod bad_input;
mod bulk;
mod close;
mod events;
mod flow;
mod flow_processes;
mod identity;
mod leases;
mod legacy_import;
mod lifecycle;
mod model;
mod operator;
mod payload;
mod schedule;
mod shutdown;
mod stats;
pub(super) mod support;
mod trace;
mod versions;

pub use bad_input::*;
pub use bulk::*;
pub use close::*;
pub use events::*;
pub use flow::*;
pub use flow_processes::*;
pub use identity::*;
pub use leases::*;
pub use legacy_import::*;
pub use lifecycle::*;
pub use model::*;
pub use operator::*;
pub use payload::*;
pub use schedule::*;
pub use shutdown::*;
pub use stats::*;
pub use trace::*;
pub use versions::*;
