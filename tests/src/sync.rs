//! What the sync cases (`r1_…`–`r6_…`, [`crate::sync_suite!`]) need: two kinds of side, each
//! a way the driver reaches a store ([`SyncEndpoint`]) plus the store itself for the checks.

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use cairn_core::sync::{LocalEndpoint, SyncEndpoint};
use cairn_core::EpochDiagnostics;

use crate::Harness;

/// One side of a sync under test.
#[derive(Clone)]
pub struct SyncSide {
    /// How the sync reaches it (a local store, or `cairn serve` over HTTP).
    pub endpoint: Arc<dyn SyncEndpoint>,
    /// The store behind it, read directly by the checks.
    pub store: Arc<dyn EpochDiagnostics>,
    /// What must live as long as the side (a harness owning a temporary file, a server).
    pub keep: Option<Arc<dyn Any + Send + Sync>>,
}

impl fmt::Debug for SyncSide {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SyncSide")
            .field("endpoint", &self.endpoint.label())
            .finish_non_exhaustive()
    }
}

impl SyncSide {
    /// A store reached directly.
    pub fn local(store: Arc<dyn EpochDiagnostics>, label: &str) -> Self {
        Self {
            endpoint: Arc::new(LocalEndpoint::new(store.clone(), label)),
            store,
            keep: None,
        }
    }

    /// A fresh store of a conformance harness, reached directly; the harness (its location)
    /// lives as long as the side.
    ///
    /// # Panics
    /// When the harness cannot open its store.
    pub async fn of_harness<H: Harness>(harness: H, label: &str) -> Self {
        let store = harness.open().await.expect("the harness opens its store");
        Self {
            keep: Some(Arc::new(harness)),
            ..Self::local(store, label)
        }
    }
}

/// Makes a fresh, empty side.
pub type OpenSide = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = SyncSide> + Send>> + Send + Sync>;

/// Two kinds of side: the cases sync from kind `a` to kind `b` and back, and open as many
/// fresh sides of each kind as they need.
#[derive(Clone)]
pub struct SyncPair {
    /// `sqlite→postgres`, say.
    pub name: String,
    a: OpenSide,
    b: OpenSide,
}

impl fmt::Debug for SyncPair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SyncPair")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl SyncPair {
    /// A pair from two side makers.
    pub fn new(name: impl Into<String>, a: OpenSide, b: OpenSide) -> Self {
        Self {
            name: name.into(),
            a,
            b,
        }
    }

    /// A fresh side of the first kind.
    pub async fn a(&self) -> SyncSide {
        (self.a)().await
    }

    /// A fresh side of the second kind.
    pub async fn b(&self) -> SyncSide {
        (self.b)().await
    }
}

/// A side maker over a harness maker: each side gets a fresh harness (its own location).
pub fn harness_sides<H, F, Fut>(label: &'static str, make: F) -> OpenSide
where
    H: Harness,
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = H> + Send + 'static,
{
    let make = Arc::new(make);
    Arc::new(move || {
        let make = make.clone();
        Box::pin(async move { SyncSide::of_harness(make().await, label).await })
    })
}

/// A side maker of fresh model stores.
pub fn memory_sides() -> OpenSide {
    Arc::new(|| {
        Box::pin(async { SyncSide::local(Arc::new(cairn_core::MemoryStore::new()), "memory") })
    })
}

/// The model on both sides.
pub fn memory_pair() -> SyncPair {
    SyncPair::new("memory→memory", memory_sides(), memory_sides())
}
