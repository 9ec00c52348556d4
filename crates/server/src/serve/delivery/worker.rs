//! The worker: the spool's consumer loop over the delivery queue, started with the server and
//! stopped with it.

use std::collections::HashSet;
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cairn::spool::{Consumer, ConsumerBuilder, ConsumerId, Job};

use super::config::Settings;
use super::deliverer::Deliverer;
use crate::error::CliError;
use crate::serve::metrics::Metrics;

/// A running delivery worker.
pub(crate) struct Worker {
    pub(super) consumer: Consumer,
}

impl Worker {
    /// Starts the worker on `spool`.
    pub(crate) async fn start(
        spool: Arc<dyn cairn::Spool>,
        settings: Settings,
        drain: Duration,
        metrics: Arc<Metrics>,
    ) -> Result<Self, CliError> {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(settings.connect_timeout)
            .timeout(settings.timeout)
            .no_proxy()
            .build()
            .map_err(|e| {
                CliError::Config(format!(
                    "cannot set up the delivery client: {}",
                    e.without_url()
                ))
            })?;
        let consumer_id = ConsumerId::new(format!("cairn-serve-delivery-{}", std::process::id()))?;
        let deliverer = Arc::new(Deliverer {
            http,
            settings,
            metrics,
            announced: Mutex::new(HashSet::new()),
            refusals: AtomicU32::new(0),
            paused_until: Mutex::new(None),
        });
        let queue = deliverer.settings.queue.clone();
        let consumer = ConsumerBuilder::new(spool, queue, consumer_id)
            .poll_interval(deliverer.settings.poll)
            .shutdown_timeout(drain)
            .spawn(move |job: Job| {
                let d = deliverer.clone();
                async move {
                    let outcome = d.deliver(&job).await;
                    d.record(&outcome);
                    outcome
                }
            })
            .await?;
        Ok(Self { consumer })
    }

    /// Stops claiming and waits for the runs in flight, at most the drain bound; a run still
    /// in flight then stays claimed until its lease expires, and is delivered later.
    pub(crate) async fn stop(self) {
        let report = self.consumer.shutdown().await;
        if !report.is_clean() {
            tracing::warn!(
                target: "cairn::delivery",
                abandoned = report.abandoned.len(),
                "delivery did not finish within the drain timeout; those runs are delivered \
                 after their lease expires"
            );
        }
    }
}
