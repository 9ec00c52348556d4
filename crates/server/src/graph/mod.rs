//! A picture of a window of a space's epoch DAG: `cairn graph` prints it, the dashboard embeds
//! it.
//!
//! [`load`] reads a window of the space's epochs, newest first ([`cairn::EpochDiagnostics`]'s
//! `recent_epochs`), into a [`Dag`]. [`svg`] draws it as a standalone SVG made on the server
//! (no script, no external font or stylesheet, colours as presentation attributes only, so it
//! can be inlined in a page under a `style-src 'self'` policy); [`dot`] writes it as Graphviz
//! DOT.
//!
//! The drawing has one row per epoch, newest at the top, and an edge from each epoch to each of
//! its parents. Lanes (columns) are assigned greedily from the top ([`layout`]): an epoch takes
//! the leftmost lane an already drawn child reserved for it (or the first free lane), its
//! oldest parent continues in its lane and each other parent gets a lane of its own, so a
//! linear chain is one straight column, a fork is two lanes and a merge joins them. A parent
//! outside the window (older than its oldest epoch) is a short dashed stub ending in a small
//! "older" mark.

mod dag;
mod dot;
mod layout;
mod svg;
#[cfg(test)]
mod tests;

pub(crate) use self::dag::{load, Dag, MAX_LAST};
pub(crate) use self::dot::dot;
pub(crate) use self::svg::svg;
