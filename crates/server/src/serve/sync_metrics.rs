//! The sync import's counters in `/metrics`: epochs and stored bytes this server imported
//! through `POST /v1/spaces/{space}/sync/import`, per sending store (`peer`, its store id).
//!
//! A peer id is the client's to choose, so the label set is bounded: the first
//! [`MAX_PEER_LABELS`] peers seen get a series each, every later one counts under
//! `peer="other"`.

use std::collections::HashSet;
use std::sync::Mutex;

use prometheus::{IntCounterVec, Opts, Registry};

/// Most peers with series of their own.
pub(crate) const MAX_PEER_LABELS: usize = 64;

/// The label of the peers past [`MAX_PEER_LABELS`].
pub(crate) const OTHER_PEER: &str = "other";

/// `cairn_sync_epochs_total` and `cairn_sync_bytes_total`.
pub(crate) struct SyncCounters {
    epochs: IntCounterVec,
    bytes: IntCounterVec,
    peers: Mutex<HashSet<String>>,
}

impl SyncCounters {
    /// The counters, registered in `registry`.
    pub(crate) fn new(registry: &Registry) -> Result<Self, prometheus::Error> {
        let epochs = IntCounterVec::new(
            Opts::new(
                "cairn_sync_epochs_total",
                "Epochs imported through the sync import route, by sending store (at most 64 peers, the rest as other)",
            ),
            &["peer"],
        )?;
        let bytes = IntCounterVec::new(
            Opts::new(
                "cairn_sync_bytes_total",
                "Stored bytes of the epochs imported through the sync import route, by sending store (at most 64 peers, the rest as other)",
            ),
            &["peer"],
        )?;
        registry.register(Box::new(epochs.clone()))?;
        registry.register(Box::new(bytes.clone()))?;
        Ok(Self {
            epochs,
            bytes,
            peers: Mutex::new(HashSet::new()),
        })
    }

    /// Counts `epochs` imported epochs of `bytes` stored bytes from `peer`.
    pub(crate) fn imported(&self, peer: &str, epochs: u64, bytes: u64) {
        let label = {
            let mut peers = self
                .peers
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if peers.contains(peer) {
                peer.to_owned()
            } else if peers.len() < MAX_PEER_LABELS {
                peers.insert(peer.to_owned());
                peer.to_owned()
            } else {
                OTHER_PEER.to_owned()
            }
        };
        self.epochs
            .with_label_values(&[label.as_str()])
            .inc_by(epochs);
        self.bytes
            .with_label_values(&[label.as_str()])
            .inc_by(bytes);
    }
}

#[cfg(test)]
mod tests {
    use prometheus::Encoder as _;

    use super::*;

    #[test]
    fn peers_past_the_cap_count_as_other() {
        let registry = Registry::new();
        let c = SyncCounters::new(&registry).unwrap();
        for n in 0..MAX_PEER_LABELS + 10 {
            c.imported(&format!("{n:032x}"), 1, 10);
        }
        c.imported(&format!("{:032x}", 3), 2, 5);
        let mut out = Vec::new();
        prometheus::TextEncoder::new()
            .encode(&registry.gather(), &mut out)
            .unwrap();
        let text = String::from_utf8(out).unwrap();
        let series = text
            .lines()
            .filter(|l| l.starts_with("cairn_sync_epochs_total{"))
            .count();
        assert_eq!(series, MAX_PEER_LABELS + 1, "{text}");
        assert!(
            text.contains(r#"cairn_sync_epochs_total{peer="other"} 10"#),
            "{text}"
        );
        let third = format!(r#"cairn_sync_epochs_total{{peer="{:032x}"}} 3"#, 3);
        assert!(text.contains(&third), "{text}");
    }
}
