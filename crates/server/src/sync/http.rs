//! [`HttpEndpoint`]: a `cairn serve` reached over HTTP as a side of a sync.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use cairn::sync::{StoreId, SyncCursor, SyncEndpoint, SyncPeer, MAX_MISSING_IDS};
use cairn::{Epoch, EpochId, EpochSummary, Error, ForeignEpoch, Head, ImportOutcome, Result, Seq};
use cairn::{SpaceId, MAX_RECENT_EPOCHS};
use reqwest::{Method, StatusCode, Url};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::value::RawValue;

use super::wire::{self, bad_answer};

/// How long a connection may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a request may take, its answer read whole (a long poll gets its wait on top).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);
/// Most bytes of an answer read.
const MAX_ANSWER_BYTES: usize = 1 << 30;
/// Most ids one `sync/epochs` request asks for (the server's bound).
const MAX_EPOCHS_ASKED: usize = 1000;
/// Room left in a body for the cursor and the brackets around the epochs.
const BODY_MARGIN: usize = 1024;
/// The longest wait one long poll asks for.
const LONGEST_POLL: Duration = Duration::from_secs(25);

/// A `cairn serve` as a side of a sync, over its `/v1/sync/…` routes: one HTTP request per
/// [`SyncEndpoint`] call, except where the server's bounds split one (a page of epochs cut at
/// its page budget is asked again for the rest; an import batch over its body limit goes in
/// several requests, each in its own transaction, the batch's cursor with the last, the
/// receiver's kept cursor with the others so that they count in the peer's counters).
///
/// Errors map back from the API's codes to [`cairn::Error`]'s kinds (a refused epoch of an
/// import is [`Error::InvalidBatchItem`] with its position and the store's reason, so a sync
/// reports [`Error::EpochRefused`] with the epoch's id). The token is never printed: `Debug`
/// and [`SyncEndpoint::label`] show the URL without it.
pub struct HttpEndpoint {
    base: Url,
    label: String,
    token: Option<String>,
    client: reqwest::Client,
    wire: AtomicU64,
    /// The server's body limit, once read from `GET /v1/sync/id` (0: not yet).
    max_body: AtomicUsize,
}

impl std::fmt::Debug for HttpEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpEndpoint")
            .field("url", &self.label)
            .field("token", &self.token.as_ref().map(|_| "…"))
            .finish_non_exhaustive()
    }
}

/// An HTTP error without the URL (which could hold a secret in another form).
fn transport(label: &str, e: reqwest::Error) -> Error {
    let what = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "cannot connect"
    } else {
        "request failed"
    };
    Error::unavailable(format!("{label}: {what}")).with_source(e.without_url())
}

impl HttpEndpoint {
    /// The server at `url` (`http://` or `https://`, with an optional path prefix), with the
    /// bearer `token` when it needs one.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a URL that does not parse, is not HTTP, or holds a user
    /// name, password, query or fragment (give the token as `token`).
    pub fn new(url: &str, token: Option<String>) -> Result<Self> {
        let base =
            Url::parse(url).map_err(|_| Error::invalid("server URL", "does not parse as a URL"))?;
        if !matches!(base.scheme(), "http" | "https") {
            return Err(Error::invalid("server URL", "must be http:// or https://"));
        }
        if !base.username().is_empty() || base.password().is_some() {
            return Err(Error::invalid(
                "server URL",
                "must not hold a user name or password; give the token separately",
            ));
        }
        if base.query().is_some() || base.fragment().is_some() || base.cannot_be_a_base() {
            return Err(Error::invalid(
                "server URL",
                "must not hold a query or a fragment",
            ));
        }
        if token
            .as_deref()
            .is_some_and(|t| t.is_empty() || !t.bytes().all(|b| b.is_ascii_graphic()))
        {
            return Err(Error::invalid(
                "server token",
                "must be printable ASCII without spaces",
            ));
        }
        let client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(REQUEST_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| Error::invalid("server URL", format!("cannot set up HTTP: {e}")))?;
        let label = base.as_str().trim_end_matches('/').to_owned();
        Ok(Self {
            base,
            label,
            token,
            client,
            wire: AtomicU64::new(0),
            max_body: AtomicUsize::new(0),
        })
    }

    /// Bytes of request and answer bodies sent and read so far.
    pub fn wire_bytes(&self) -> u64 {
        self.wire.load(Ordering::Relaxed)
    }

    /// The URL of `segments` under the base.
    fn url(&self, segments: &[&str], query: &[(&str, String)]) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty();
            path.extend(segments);
        }
        if !query.is_empty() {
            url.query_pairs_mut()
                .extend_pairs(query.iter().map(|(k, v)| (*k, v.as_str())));
        }
        url
    }

    /// The segments of a space route: `/v1/spaces/{space}/…`.
    fn space_path<'a>(space: &'a SpaceId, rest: &[&'a str]) -> Result<Vec<&'a str>> {
        if space.is_reserved() {
            return Err(Error::Reserved {
                what: "space id",
                name: space.to_string(),
            });
        }
        let text = std::str::from_utf8(space.as_bytes()).map_err(|_| {
            Error::invalid(
                "space id",
                format!("{space} is not UTF-8, and the HTTP API names spaces by UTF-8 text"),
            )
        })?;
        let mut out = vec!["v1", "spaces", text];
        out.extend_from_slice(rest);
        Ok(out)
    }

    /// Sends a request and reads the whole answer: its status and body, counted on the wire.
    async fn send(
        &self,
        method: Method,
        url: Url,
        body: Option<Vec<u8>>,
        timeout: Option<Duration>,
    ) -> Result<(StatusCode, Vec<u8>)> {
        let mut req = self.client.request(method, url);
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        if let Some(t) = timeout {
            req = req.timeout(t);
        }
        if let Some(b) = body {
            self.wire.fetch_add(b.len() as u64, Ordering::Relaxed);
            req = req
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(b);
        }
        let mut resp = req.send().await.map_err(|e| transport(&self.label, e))?;
        let status = resp.status();
        let mut out = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| transport(&self.label, e))? {
            self.wire.fetch_add(chunk.len() as u64, Ordering::Relaxed);
            if out.len() + chunk.len() > MAX_ANSWER_BYTES {
                return Err(bad_answer("it is over 1 GiB"));
            }
            out.extend_from_slice(&chunk);
        }
        Ok((status, out))
    }

    /// A request whose success is JSON `T`; any other answer as the error it stands for.
    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        url: Url,
        body: Option<Vec<u8>>,
        timeout: Option<Duration>,
    ) -> Result<T> {
        let (status, bytes) = self.send(method, url, body, timeout).await?;
        if !status.is_success() {
            return Err(self.refusal(status, &bytes).1);
        }
        serde_json::from_slice(&bytes).map_err(|_| bad_answer("not the JSON expected"))
    }

    async fn get<T: DeserializeOwned>(
        &self,
        segments: &[&str],
        query: &[(&str, String)],
    ) -> Result<T> {
        self.call(Method::GET, self.url(segments, query), None, None)
            .await
    }

    async fn post<B: Serialize, T: DeserializeOwned>(
        &self,
        segments: &[&str],
        body: &B,
    ) -> Result<T> {
        let body = serde_json::to_vec(body).map_err(|_| bad_answer("a request body"))?;
        self.call(Method::POST, self.url(segments, &[]), Some(body), None)
            .await
    }

    /// An error answer as [`Error`], with the item index it names.
    fn refusal(&self, status: StatusCode, body: &[u8]) -> (Option<usize>, Error) {
        let Ok(wire::ErrorOut { error: e }) = serde_json::from_slice::<wire::ErrorOut>(body) else {
            return (
                None,
                Error::backend(
                    "cairn serve",
                    format!("{} answered {status} without an error body", self.label),
                ),
            );
        };
        let said = format!("{} answered: {}", self.label, e.message);
        let err = match (status.as_u16(), e.code.as_str()) {
            (_, "invalid_input" | "invalid_batch_item" | "bad_cursor" | "body_too_large") => {
                Error::invalid("sync request", said)
            }
            (_, "reserved") => Error::invalid("space id", said),
            (_, "not_found") => Error::NotFound { what: said },
            (_, "unauthorized") => Error::invalid(
                "server token",
                format!("{} refused it (401): give a valid token", self.label),
            ),
            (_, "forbidden") => Error::invalid(
                "server token",
                format!(
                    "{} refused it (403): the token is read-only; writing needs a full-access token",
                    self.label
                ),
            ),
            (_, "conflict") => Error::conflict(said),
            (_, "retryable" | "timeout" | "too_many_waiters") => Error::retryable(said),
            (_, "storage_full") => Error::storage_full(said),
            (_, "unavailable" | "store_replaced") => Error::unavailable(said),
            _ => Error::backend("cairn serve", format!("{said} ({status}, {})", e.code)),
        };
        (e.index, err)
    }

    /// The server's body limit, read once.
    async fn max_body(&self) -> Result<usize> {
        match self.max_body.load(Ordering::Relaxed) {
            0 => {
                let info: wire::StoreIdOut = self.get(&["v1", "sync", "id"], &[]).await?;
                let limit = usize::try_from(info.max_body_bytes)
                    .unwrap_or(usize::MAX)
                    .max(1);
                self.max_body.store(limit, Ordering::Relaxed);
                Ok(limit)
            }
            n => Ok(n),
        }
    }

    /// One import request: `epochs` (serialized) with `cursor`; a refused epoch's index is
    /// `offset` plus the server's.
    async fn import_part(
        &self,
        segments: &[&str],
        all: &[ForeignEpoch],
        offset: usize,
        epochs: &[Box<RawValue>],
        cursor: Option<&SyncCursor>,
    ) -> std::result::Result<Vec<ImportOutcome>, (StatusCode, Error)> {
        let body = wire::ImportIn {
            epochs: epochs.iter().map(AsRef::as_ref).collect(),
            cursor: cursor.map(wire::CursorIn::from_cursor),
        };
        let body = serde_json::to_vec(&body)
            .map_err(|_| (StatusCode::OK, bad_answer("a request body")))?;
        let url = self.url(segments, &[]);
        let (status, bytes) = self
            .send(Method::POST, url, Some(body), None)
            .await
            .map_err(|e| (StatusCode::OK, e))?;
        if status.is_success() {
            let out: wire::ImportOut = serde_json::from_slice(&bytes)
                .map_err(|_| (status, bad_answer("not the JSON expected")))?;
            if out.outcomes.len() != epochs.len() {
                return Err((status, bad_answer("not one outcome per epoch")));
            }
            return out
                .outcomes
                .iter()
                .map(wire::OutcomeOut::outcome)
                .collect::<Result<_>>()
                .map_err(|e| (status, e));
        }
        let (index, err) = self.refusal(status, &bytes);
        let Some(index) = index.filter(|i| *i < epochs.len()) else {
            return Err((status, err));
        };
        let at = offset + index;
        let why = match status.as_u16() {
            422 => self.why_refused(segments, all, at).await.unwrap_or(err),
            _ => err,
        };
        Err((
            status,
            Error::InvalidBatchItem {
                index: at,
                error: Box::new(why),
            },
        ))
    }

    /// The store's reason for refusing epoch `at` of `all` (422), as the store would give it:
    /// the id recomputed here, or the parent the receiving space lacks.
    async fn why_refused(
        &self,
        segments: &[&str],
        all: &[ForeignEpoch],
        at: usize,
    ) -> Option<Error> {
        let epoch = all.get(at)?;
        if let Err(e) = cairn::verify_epoch(epoch) {
            return Some(e);
        }
        let earlier: Vec<EpochId> = all[..at].iter().map(|e| e.id).collect();
        let unknown: Vec<EpochId> = epoch
            .parents
            .iter()
            .filter(|p| !earlier.contains(p))
            .copied()
            .collect();
        let mut path: Vec<&str> = segments[..segments.len() - 1].to_vec();
        path.push("missing");
        let body = wire::IdsIn {
            ids: unknown.iter().map(ToString::to_string).collect(),
        };
        let lacking: wire::MissingOut = self.post(&path, &body).await.ok()?;
        let parent = *lacking.ids().ok()?.first()?;
        Some(Error::UnknownParent { parent })
    }
}

#[async_trait]
impl SyncEndpoint for HttpEndpoint {
    fn label(&self) -> String {
        self.label.clone()
    }

    async fn store_id(&self) -> Result<StoreId> {
        let info: wire::StoreIdOut = self.get(&["v1", "sync", "id"], &[]).await?;
        if let Ok(limit) = usize::try_from(info.max_body_bytes) {
            self.max_body.store(limit.max(1), Ordering::Relaxed);
        }
        info.store_id()
    }

    async fn list_spaces(&self, after: Option<&SpaceId>, limit: usize) -> Result<Vec<SpaceId>> {
        let limit = limit.clamp(1, 1000);
        let mut query = vec![("limit", limit.to_string())];
        if let Some(a) = after {
            query.push(("after", hex::encode(a.as_bytes())));
        }
        let out: wire::SpacesOut = self.get(&["v1", "sync", "spaces"], &query).await?;
        out.spaces
            .iter()
            .map(|h| {
                let bytes = hex::decode(h).map_err(|_| bad_answer("a space id"))?;
                SpaceId::new(bytes).map_err(|_| bad_answer("a space id"))
            })
            .collect()
    }

    async fn heads(&self, space: &SpaceId) -> Result<Vec<Head>> {
        let path = Self::space_path(space, &["heads"])?;
        match self.get::<wire::HeadsOut>(&path, &[]).await {
            Ok(out) => out.heads.iter().map(wire::HeadOut::head).collect(),
            Err(Error::NotFound { .. }) => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }

    async fn summaries(
        &self,
        space: &SpaceId,
        before: Option<Seq>,
        limit: usize,
    ) -> Result<Vec<EpochSummary>> {
        if !(1..=MAX_RECENT_EPOCHS).contains(&limit) {
            return Err(Error::invalid(
                "summary limit",
                format!("is {limit}; it must be between 1 and {MAX_RECENT_EPOCHS}"),
            ));
        }
        if before == Some(Seq(0)) {
            return Ok(Vec::new());
        }
        let path = Self::space_path(space, &["sync", "summaries"])?;
        let mut query = vec![("limit", limit.to_string())];
        if let Some(b) = before {
            query.push(("before", b.0.to_string()));
        }
        let out: wire::SummariesOut = self.get(&path, &query).await?;
        out.epochs.iter().map(wire::SummaryOut::summary).collect()
    }

    async fn epochs(&self, space: &SpaceId, ids: &[EpochId]) -> Result<Vec<Epoch>> {
        let path = Self::space_path(space, &["sync", "epochs"])?;
        let mut out = Vec::with_capacity(ids.len());
        while out.len() < ids.len() {
            let rest = &ids[out.len()..];
            let ask = &rest[..rest.len().min(MAX_EPOCHS_ASKED)];
            let body = wire::IdsIn {
                ids: ask.iter().map(ToString::to_string).collect(),
            };
            let got: wire::EpochsOut = self.post(&path, &body).await?;
            if got.epochs.is_empty() || got.epochs.len() > ask.len() {
                return Err(bad_answer("not the epochs asked for"));
            }
            for (e, id) in got.epochs.into_iter().zip(ask) {
                let e = e.epoch(space)?;
                if e.id != *id {
                    return Err(bad_answer("not the epochs asked for"));
                }
                out.push(e);
            }
        }
        Ok(out)
    }

    async fn missing(&self, space: &SpaceId, ids: &[EpochId]) -> Result<Vec<EpochId>> {
        if ids.len() > MAX_MISSING_IDS {
            return Err(Error::invalid(
                "epoch ids",
                format!("{} asked; at most {MAX_MISSING_IDS} per call", ids.len()),
            ));
        }
        let path = Self::space_path(space, &["sync", "missing"])?;
        let mut out = Vec::new();
        for chunk in ids.chunks(MAX_MISSING_IDS) {
            let body = wire::IdsIn {
                ids: chunk.iter().map(ToString::to_string).collect(),
            };
            let got: wire::MissingOut = self.post(&path, &body).await?;
            out.extend(got.ids()?);
        }
        Ok(out)
    }

    async fn peers(&self, space: &SpaceId) -> Result<Vec<SyncPeer>> {
        let path = Self::space_path(space, &["sync", "peers"])?;
        let out: wire::PeersOut = self.get(&path, &[]).await?;
        out.peers.iter().map(wire::PeerOut::peer).collect()
    }

    async fn import_batch(
        &self,
        space: &SpaceId,
        epochs: Vec<ForeignEpoch>,
        cursor: Option<&SyncCursor>,
        _at_us: i64,
    ) -> Result<Vec<ImportOutcome>> {
        // The receiving server checks the batch and stamps the cursor with its own clock.
        let path = Self::space_path(space, &["sync", "import"])?;
        let encoded: Vec<Box<RawValue>> = epochs
            .iter()
            .map(|e| {
                serde_json::value::to_raw_value(&wire::EpochIn::from_epoch(e))
                    .map_err(|_| bad_answer("an epoch"))
            })
            .collect::<Result<_>>()?;
        let mut budget = self.max_body().await?.max(2 * BODY_MARGIN) - BODY_MARGIN;
        let mut out = Vec::with_capacity(epochs.len());
        let mut start = 0;
        // The cursor a part before the last carries: the one the receiver keeps for the peer
        // already (true before the batch, so true during it), which makes the part count in
        // the peer's counters; none on a first sync, whose earlier parts then go uncounted.
        let mut kept: Option<Option<SyncCursor>> = None;
        loop {
            // As many epochs as fit the body limit (one at least), the cursor with the last.
            let mut end = start;
            let mut size = 0;
            while end < encoded.len() && (end == start || size + encoded[end].get().len() < budget)
            {
                size += encoded[end].get().len() + 1;
                end += 1;
            }
            let last = end == encoded.len();
            let carried = match cursor {
                Some(c) if !last => {
                    if kept.is_none() {
                        let peers = self.peers(space).await?;
                        kept = Some(
                            peers
                                .into_iter()
                                .map(|p| p.cursor)
                                .find(|k| k.peer == c.peer),
                        );
                    }
                    kept.clone().flatten()
                }
                other => other.cloned(),
            };
            let part = self
                .import_part(
                    &path,
                    &epochs,
                    start,
                    &encoded[start..end],
                    carried.as_ref(),
                )
                .await;
            match part {
                Ok(o) => out.extend(o),
                Err((StatusCode::PAYLOAD_TOO_LARGE, _)) if end - start > 1 => {
                    // The server's limit is lower than it said (a proxy in front): halve.
                    budget = (size / 2).max(1);
                    continue;
                }
                Err((_, e)) => return Err(e),
            }
            start = end;
            if last {
                return Ok(out);
            }
        }
    }

    async fn wait_change(
        &self,
        space: &SpaceId,
        seen: Option<Seq>,
        timeout: Duration,
    ) -> Result<()> {
        let path = Self::space_path(space, &["sync", "wait"])?;
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return Ok(());
            }
            let wait = left.min(LONGEST_POLL);
            let mut query = vec![("timeout_ms", wait.as_millis().to_string())];
            if let Some(s) = seen {
                query.push(("seen", s.0.to_string()));
            }
            let url = self.url(&path, &query);
            match self
                .call::<wire::WaitOut>(Method::GET, url, None, Some(REQUEST_TIMEOUT + wait))
                .await
            {
                Ok(w) if w.changed => return Ok(()),
                // The server waited less than asked (its own cap): ask again.
                Ok(_) => {}
                // Too many waiters there: a change may come unseen, so look again after a
                // while (a spurious return is allowed).
                Err(Error::Retryable { .. }) => {
                    tokio::time::sleep(left.min(Duration::from_secs(1))).await;
                    return Ok(());
                }
                Err(e) => return Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_is_checked_and_the_token_never_printed() {
        for bad in [
            "ftp://host/",
            "http://user:pw@host/",
            "http://host/?token=x",
            "not a url",
        ] {
            assert!(HttpEndpoint::new(bad, None).is_err(), "{bad}");
        }
        let e = HttpEndpoint::new(
            "http://127.0.0.1:9/base/",
            Some("secret-token-123456".into()),
        )
        .unwrap();
        assert_eq!(e.label(), "http://127.0.0.1:9/base");
        assert!(!format!("{e:?}").contains("secret"));
        let space = SpaceId::new("a b/ü").unwrap();
        let path = HttpEndpoint::space_path(&space, &["sync", "peers"]).unwrap();
        assert_eq!(
            e.url(&path, &[("seen", "3".into())]).as_str(),
            "http://127.0.0.1:9/base/v1/spaces/a%20b%2F%C3%BC/sync/peers?seen=3"
        );
        assert!(HttpEndpoint::space_path(&SpaceId::new(vec![0xff]).unwrap(), &[]).is_err());
    }
}
