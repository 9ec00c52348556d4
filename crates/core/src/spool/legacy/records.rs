//! The records of the three legacy files, as serde reads them, and their field checks.
//!
//! Unknown fields and repeated fields are refused: a record that says more, or says a thing
//! twice, is ambiguous.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::error::RecordProblem;
use crate::spool::{
    DedupKey, FactName, RunEventId, RunId, SupersedeGroup, Timestamp, DEFAULT_MAX_ATTEMPTS,
    MAX_ATTEMPTS_LIMIT, MAX_FACT_VALUE, MAX_RUN_EVENT_PAYLOAD, MAX_RUN_PAYLOAD,
};

/// The checkpoint format this importer reads.
pub(super) const CHECKPOINT_FORMAT: u32 = 1;

/// A run's state in the legacy files.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum LegacyState {
    Queued,
    Running,
    Succeeded,
    Failed,
    Canceled,
    Superseded,
    Parked,
}

impl LegacyState {
    pub(super) fn is_terminal(self) -> bool {
        !matches!(self, LegacyState::Queued | LegacyState::Running)
    }
}

/// A run as the checkpoint and the log write it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RunRecord {
    run_id: String,
    gate: String,
    #[serde(rename = "ref")]
    git_ref: String,
    input_sha: String,
    payload: String,
    state: LegacyState,
    attempts: u32,
    #[serde(default)]
    max_attempts: Option<u32>,
    created_ms: i64,
    updated_ms: i64,
    #[serde(default)]
    not_before_ms: Option<i64>,
    #[serde(default)]
    finished_ms: Option<i64>,
    #[serde(default)]
    cancel_requested: bool,
    #[serde(default)]
    supersede: Option<Vec<String>>,
    #[serde(default)]
    last_error: Option<String>,
    #[serde(default)]
    stages: BTreeMap<String, String>,
    #[serde(default)]
    decision: Option<String>,
    #[serde(default)]
    merged_sha: Option<String>,
}

/// A line of `checkpoint`.
#[derive(Debug, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub(super) enum CheckpointRecord {
    Checkpoint {
        format: u32,
        generation: u64,
        runs: u64,
        events: u64,
        spool_drained: u64,
        written_ms: i64,
    },
    Run {
        run: Box<RunRecord>,
    },
    Event {
        run_id: String,
        event_id: String,
        payload: String,
        at_ms: i64,
    },
}

/// A line of `runs.wal`.
#[derive(Debug, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub(super) enum WalRecord {
    Run {
        gen: u64,
        seq: u64,
        run: Box<RunRecord>,
    },
    Event {
        gen: u64,
        seq: u64,
        run_id: String,
        event_id: String,
        payload: String,
        at_ms: i64,
    },
    Ack {
        gen: u64,
        seq: u64,
        run_id: String,
        event_ids: Vec<String>,
    },
    Drop {
        gen: u64,
        seq: u64,
        run_id: String,
    },
    Drain {
        gen: u64,
        seq: u64,
        through: u64,
    },
}

impl WalRecord {
    pub(super) fn position(&self) -> (u64, u64) {
        match self {
            WalRecord::Run { gen, seq, .. }
            | WalRecord::Event { gen, seq, .. }
            | WalRecord::Ack { gen, seq, .. }
            | WalRecord::Drop { gen, seq, .. }
            | WalRecord::Drain { gen, seq, .. } => (*gen, *seq),
        }
    }
}

/// A line of `gate.spool`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SubmissionRecord {
    run_id: String,
    gate: String,
    #[serde(rename = "ref")]
    git_ref: String,
    input_sha: String,
    payload: String,
    submitted_ms: i64,
    #[serde(default)]
    supersede: Option<Vec<String>>,
}

/// Parses a record body as `T`, after checking that no object in it, at any depth, gives a
/// member twice (a map such as `stages` would otherwise keep the last silently).
pub(super) fn parse<'a, T: Deserialize<'a>>(body: &'a str) -> Result<T, RecordProblem> {
    serde_json::from_str::<NoDuplicates>(body)
        .and_then(|_| serde_json::from_str(body))
        .map_err(|e| RecordProblem::Malformed(e.to_string()))
}

/// Any JSON value, accepted only when none of its objects names a member twice. Keys are
/// compared after unescaping, so `"build"` and `"bu\u0069ld"` are the same member.
struct NoDuplicates;

impl<'de> Deserialize<'de> for NoDuplicates {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NoDuplicatesVisitor)
    }
}

struct NoDuplicatesVisitor;

impl<'de> serde::de::Visitor<'de> for NoDuplicatesVisitor {
    type Value = NoDuplicates;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<NoDuplicates, E> {
        Ok(NoDuplicates)
    }
    fn visit_i64<E>(self, _: i64) -> Result<NoDuplicates, E> {
        Ok(NoDuplicates)
    }
    fn visit_u64<E>(self, _: u64) -> Result<NoDuplicates, E> {
        Ok(NoDuplicates)
    }
    fn visit_f64<E>(self, _: f64) -> Result<NoDuplicates, E> {
        Ok(NoDuplicates)
    }
    fn visit_str<E>(self, _: &str) -> Result<NoDuplicates, E> {
        Ok(NoDuplicates)
    }
    fn visit_unit<E>(self) -> Result<NoDuplicates, E> {
        Ok(NoDuplicates)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<NoDuplicates, A::Error> {
        while seq.next_element::<NoDuplicates>()?.is_some() {}
        Ok(NoDuplicates)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<NoDuplicates, A::Error> {
        let mut seen = std::collections::HashSet::new();
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if seen.contains(&key) {
                return Err(serde::de::Error::custom(format_args!(
                    "duplicate member {key:?}: a member given twice is ambiguous"
                )));
            }
            map.next_value::<NoDuplicates>()?;
            seen.insert(key);
        }
        Ok(NoDuplicates)
    }
}

fn field(field: &'static str, reason: impl Into<String>) -> RecordProblem {
    RecordProblem::Field {
        field,
        reason: reason.into(),
    }
}

/// Unix milliseconds as a [`Timestamp`].
/// A time in milliseconds, within the range every time given to the spool is checked against
/// ([`Timestamp::check`]), so a replayed plan is always an import the spool accepts.
pub(super) fn millis(name: &'static str, ms: i64) -> Result<Timestamp, RecordProblem> {
    ms.checked_mul(1000)
        .map(Timestamp::from_unix_micros)
        .filter(|t| t.check(name).is_ok())
        .ok_or_else(|| {
            field(
                name,
                format!(
                    "is out of range ({} to {})",
                    Timestamp::EARLIEST,
                    Timestamp::LATEST
                ),
            )
        })
}

pub(super) fn run_id(name: &'static str, s: &str) -> Result<RunId, RecordProblem> {
    RunId::parse(s).map_err(|_| field(name, "is not a UUID (32 hex digits, hyphens optional)"))
}

pub(super) fn event_id(s: &str) -> Result<RunEventId, RecordProblem> {
    RunEventId::new(s.as_bytes().to_vec()).map_err(|e| field("event_id", e.to_string()))
}

pub(super) fn event_payload(s: String) -> Result<Vec<u8>, RecordProblem> {
    if s.len() > MAX_RUN_EVENT_PAYLOAD {
        return Err(field(
            "payload",
            format!("is {} bytes; the limit is {MAX_RUN_EVENT_PAYLOAD}", s.len()),
        ));
    }
    Ok(s.into_bytes())
}

/// A submission's identity: its `(gate, ref, input_sha)` parts as a [`DedupKey`].
fn dedup_key(gate: &str, git_ref: &str, sha: &str) -> Result<DedupKey, RecordProblem> {
    if gate.is_empty() || sha.is_empty() {
        return Err(field("gate", "gate and input_sha must not be empty"));
    }
    DedupKey::from_parts([gate, git_ref, sha]).map_err(|e| field("gate", e.to_string()))
}

fn group(parts: Option<Vec<String>>) -> Result<Option<SupersedeGroup>, RecordProblem> {
    parts
        .map(|p| SupersedeGroup::from_parts(&p).map_err(|e| field("supersede", e.to_string())))
        .transpose()
}

fn payload(s: String) -> Result<Vec<u8>, RecordProblem> {
    if s.len() > MAX_RUN_PAYLOAD {
        return Err(field(
            "payload",
            format!("is {} bytes; the limit is {MAX_RUN_PAYLOAD}", s.len()),
        ));
    }
    Ok(s.into_bytes())
}

fn fact(name: String, value: String) -> Result<(FactName, Vec<u8>), RecordProblem> {
    let n = FactName::new(name).map_err(|e| field("stages", e.to_string()))?;
    if value.len() > MAX_FACT_VALUE {
        return Err(field(
            "stages",
            format!(
                "a value is {} bytes; the limit is {MAX_FACT_VALUE}",
                value.len()
            ),
        ));
    }
    Ok((n, value.into_bytes()))
}

/// A run record with every field checked and converted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Run {
    pub run_id: RunId,
    pub key: DedupKey,
    pub group: Option<SupersedeGroup>,
    pub payload: Vec<u8>,
    pub state: LegacyState,
    pub attempts: u32,
    pub max_attempts: u32,
    pub created: Timestamp,
    pub updated: Timestamp,
    pub not_before: Option<Timestamp>,
    pub finished: Option<Timestamp>,
    pub cancel_requested: bool,
    pub last_error: Option<String>,
    pub facts: BTreeMap<FactName, Vec<u8>>,
}

impl RunRecord {
    /// Checks every field and converts it.
    pub(super) fn check(self) -> Result<Run, RecordProblem> {
        let max_attempts = self.max_attempts.unwrap_or(DEFAULT_MAX_ATTEMPTS);
        if !(1..=MAX_ATTEMPTS_LIMIT).contains(&max_attempts) {
            return Err(field(
                "max_attempts",
                format!("is {max_attempts}; it must be 1 to {MAX_ATTEMPTS_LIMIT}"),
            ));
        }
        if self.attempts > max_attempts {
            return Err(field(
                "attempts",
                format!("is {}, above max_attempts {max_attempts}", self.attempts),
            ));
        }
        if self.finished_ms.is_some() != self.state.is_terminal() {
            return Err(field(
                "finished_ms",
                "is set exactly when the state is terminal",
            ));
        }
        let mut facts = BTreeMap::new();
        for (stage, result) in self.stages {
            let (n, v) = fact(format!("stage.{stage}"), result)?;
            facts.insert(n, v);
        }
        if let Some(d) = self.decision {
            let (n, v) = fact("decision".into(), d)?;
            facts.insert(n, v);
        }
        if let Some(m) = self.merged_sha {
            let (n, v) = fact("merged".into(), m)?;
            facts.insert(n, v);
        }
        Ok(Run {
            run_id: run_id("run_id", &self.run_id)?,
            key: dedup_key(&self.gate, &self.git_ref, &self.input_sha)?,
            group: group(self.supersede)?,
            payload: payload(self.payload)?,
            state: self.state,
            attempts: self.attempts,
            max_attempts,
            created: millis("created_ms", self.created_ms)?,
            updated: millis("updated_ms", self.updated_ms)?,
            not_before: self
                .not_before_ms
                .map(|t| millis("not_before_ms", t))
                .transpose()?,
            finished: self
                .finished_ms
                .map(|t| millis("finished_ms", t))
                .transpose()?,
            cancel_requested: self.cancel_requested,
            last_error: self.last_error,
            facts,
        })
    }
}

impl SubmissionRecord {
    /// Checks every field and converts the submission into the queued run it asks for.
    pub(super) fn check(self) -> Result<Run, RecordProblem> {
        let at = millis("submitted_ms", self.submitted_ms)?;
        Ok(Run {
            run_id: run_id("run_id", &self.run_id)?,
            key: dedup_key(&self.gate, &self.git_ref, &self.input_sha)?,
            group: group(self.supersede)?,
            payload: payload(self.payload)?,
            state: LegacyState::Queued,
            attempts: 0,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            created: at,
            updated: at,
            not_before: None,
            finished: None,
            cancel_requested: false,
            last_error: None,
            facts: BTreeMap::new(),
        })
    }
}
