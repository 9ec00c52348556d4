//! The side log: one line per operation the store acknowledged, written and fsynced by the child
//! only *after* the call returned `Ok`, so the log never claims more than the store promised.
//!
//! A line is tab-separated: a one-letter tag, then the fields below. A final line without its
//! newline is a write the kill interrupted; the reader drops it.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;

use cairn::{EpochId, RunId, RunState};

/// One acknowledged operation.
#[derive(Clone, PartialEq, Eq, Debug)]
pub(crate) enum Entry {
    /// `S session revisions`: a child opened the store with this many application revisions.
    Session { session: u64, revisions: usize },
    /// `A space seq id`: an append returned this epoch.
    Append {
        space: String,
        seq: u64,
        id: EpochId,
    },
    /// `I space seq id`: an import stored this epoch (possibly a fork).
    Import {
        space: String,
        seq: u64,
        id: EpochId,
    },
    /// `E queue key run created`: an enqueue of `key` returned `run`.
    Enqueue {
        queue: String,
        key: String,
        run: RunId,
    },
    /// `C run attempt`: a claim handed out `run` for its `attempt`-th time.
    Claim { run: RunId, attempt: u32 },
    /// `K run`: an ack succeeded.
    Ack { run: RunId },
    /// `N run state`: a nack left the run in `state`.
    Nack { run: RunId, state: RunState },
    /// `X run`: a cancel of a queued run made it `canceled`.
    Cancel { run: RunId },
    /// `V run seq event`: a run event was appended with this seq.
    Event { run: RunId, seq: u64, event: String },
    /// `F run name value`: a fact is stored with this value (hex).
    Fact {
        run: RunId,
        name: String,
        value: Vec<u8>,
    },
    /// `R`: a retention pass finished.
    Retention,
}

impl Entry {
    fn line(&self) -> String {
        match self {
            Entry::Session { session, revisions } => format!("S\t{session}\t{revisions}"),
            Entry::Append { space, seq, id } => format!("A\t{space}\t{seq}\t{id}"),
            Entry::Import { space, seq, id } => format!("I\t{space}\t{seq}\t{id}"),
            Entry::Enqueue { queue, key, run } => format!("E\t{queue}\t{key}\t{run}"),
            Entry::Claim { run, attempt } => format!("C\t{run}\t{attempt}"),
            Entry::Ack { run } => format!("K\t{run}"),
            Entry::Nack { run, state } => format!("N\t{run}\t{}", state.as_str()),
            Entry::Cancel { run } => format!("X\t{run}"),
            Entry::Event { run, seq, event } => format!("V\t{run}\t{seq}\t{event}"),
            Entry::Fact { run, name, value } => {
                format!("F\t{run}\t{name}\t{}", hex(value))
            }
            Entry::Retention => "R".to_owned(),
        }
    }

    fn parse(line: &str) -> Result<Self, String> {
        let f: Vec<&str> = line.split('\t').collect();
        let bad = || format!("unreadable side-log line {line:?}");
        let num = |s: &str| s.parse::<u64>().map_err(|_| bad());
        let run = |s: &str| RunId::parse(s).map_err(|_| bad());
        let epoch = |s: &str| EpochId::from_hex(s).map_err(|_| bad());
        let entry = match f.as_slice() {
            ["S", s, r] => Entry::Session {
                session: num(s)?,
                revisions: usize::try_from(num(r)?).map_err(|_| bad())?,
            },
            ["A", sp, seq, id] => Entry::Append {
                space: (*sp).to_owned(),
                seq: num(seq)?,
                id: epoch(id)?,
            },
            ["I", sp, seq, id] => Entry::Import {
                space: (*sp).to_owned(),
                seq: num(seq)?,
                id: epoch(id)?,
            },
            ["E", q, k, r] => Entry::Enqueue {
                queue: (*q).to_owned(),
                key: (*k).to_owned(),
                run: run(r)?,
            },
            ["C", r, a] => Entry::Claim {
                run: run(r)?,
                attempt: u32::try_from(num(a)?).map_err(|_| bad())?,
            },
            ["K", r] => Entry::Ack { run: run(r)? },
            ["N", r, s] => Entry::Nack {
                run: run(r)?,
                state: state(s).ok_or_else(bad)?,
            },
            ["X", r] => Entry::Cancel { run: run(r)? },
            ["V", r, seq, e] => Entry::Event {
                run: run(r)?,
                seq: num(seq)?,
                event: (*e).to_owned(),
            },
            ["F", r, n, v] => Entry::Fact {
                run: run(r)?,
                name: (*n).to_owned(),
                value: unhex(v).ok_or_else(bad)?,
            },
            ["R"] => Entry::Retention,
            _ => return Err(bad()),
        };
        Ok(entry)
    }
}

/// The state named `s` (as [`RunState::as_str`] prints it).
pub(crate) fn state(s: &str) -> Option<RunState> {
    RunState::ALL.into_iter().find(|st| st.as_str() == s)
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The child's writer: appends a line and fsyncs before the next operation starts.
pub(crate) struct SideLog {
    file: File,
}

impl SideLog {
    /// Opens (creating) the log for appending.
    pub(crate) fn open(path: &Path) -> std::io::Result<Self> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Self { file })
    }

    /// Records one acknowledged operation durably.
    pub(crate) fn record(&mut self, entry: &Entry) -> std::io::Result<()> {
        let mut line = entry.line();
        line.push('\n');
        self.file.write_all(line.as_bytes())?;
        self.file.sync_data()
    }
}

/// Reads every complete line of the log; a torn final line (no newline) is dropped.
pub(crate) fn read(path: &Path) -> Result<Vec<Entry>, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("cannot read the side log: {e}")),
    };
    let complete = match text.rfind('\n') {
        Some(end) => &text[..end],
        None => return Ok(Vec::new()),
    };
    complete
        .split('\n')
        .filter(|l| !l.is_empty())
        .map(Entry::parse)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip_and_a_torn_tail_is_dropped() {
        let run = RunId::parse("0190a3b2-0000-7000-8000-000000000001").unwrap();
        let entries = vec![
            Entry::Session {
                session: 3,
                revisions: 4,
            },
            Entry::Append {
                space: "s1".into(),
                seq: 7,
                id: EpochId([7; 32]),
            },
            Entry::Enqueue {
                queue: "q0".into(),
                key: "k1".into(),
                run,
            },
            Entry::Nack {
                run,
                state: RunState::Parked,
            },
            Entry::Fact {
                run,
                name: "f0".into(),
                value: vec![0, 255],
            },
            Entry::Retention,
        ];
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let mut log = SideLog::open(&path).unwrap();
        for e in &entries {
            log.record(e).unwrap();
        }
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"K\t0190")
            .unwrap();
        assert_eq!(read(&path).unwrap(), entries);
    }
}
