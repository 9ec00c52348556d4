//! The conformance cases. Each is `pub async fn name<H: Harness>(h: &H)` and panics on a
//! violation, naming the invariant.

mod additivity;
mod backfill;
mod downgrade;
mod epoch_log;
mod fleet;
mod migrations;
mod model;
mod multi_node;
mod online;
mod recent_epochs;
mod spool;
mod support;
mod sync;
mod sync_batch;
mod tx;

pub use additivity::*;
pub use backfill::*;
pub use downgrade::*;
pub use epoch_log::*;
pub use fleet::*;
pub use migrations::*;
pub use model::*;
pub use multi_node::*;
pub use online::*;
pub use recent_epochs::*;
pub use spool::*;
pub use sync::*;
pub use sync_batch::*;
pub use tx::*;
