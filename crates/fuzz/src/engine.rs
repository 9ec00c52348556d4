//! The in-process fuzz driver.
//!
//! One run of a target: every corpus input once, then, until the budget is spent, inputs that
//! are either random bytes (read by structured targets through `arbitrary`) or a pool input
//! with one to four mutations stacked. An input whose signature the run has not seen joins the
//! pool (and, with [`Options::grow_corpus`], the corpus directory). A panic is caught, its
//! input saved under the artifacts directory, and the run goes on.

use std::cell::RefCell;
use std::collections::HashSet;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Once;
use std::time::{Duration, Instant};

use crate::hash::fnv;
use crate::rng::Rng;
use crate::targets::Target;

/// Most inputs the in-memory pool keeps; past it new signatures are counted but not kept.
const MAX_POOL: usize = 8192;

/// Bytes mutations like to write: boundaries of signed and unsigned integers, separators of the
/// text formats cairn reads.
const INTERESTING_BYTES: &[u8] = &[
    0, 1, 0x7f, 0x80, 0xff, b'0', b'1', b'9', b':', b',', b'.', b'-', b'_', b'"', b'\\', b'\n',
    b'\r', b'{', b'}', b'[', b']', b';', b'\'', b'$', b'/', b'*', b'?', b'=', b'&', b'@', b' ',
];

/// Decimal numbers at the edges of the integer types the parsers convert to.
const INTERESTING_NUMBERS: &[&str] = &[
    "0",
    "1",
    "00",
    "01",
    "-1",
    "255",
    "256",
    "65536",
    "2147483647",
    "2147483648",
    "4294967295",
    "4294967296",
    "9223372036854775807",
    "9223372036854775808",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999999",
];

/// What a run may spend and where it keeps its files.
#[derive(Clone, Debug)]
pub struct Options {
    /// Stop after this many executions (corpus included).
    pub execs: Option<u64>,
    /// Stop after this long.
    pub time: Option<Duration>,
    /// Seed of the generator: the same seed, corpus and budget in executions replay a run.
    pub seed: u64,
    /// Directory of committed inputs (`corpus/<target>/` is read from it).
    pub corpus_dir: Option<PathBuf>,
    /// Where a panicking input is written (`<dir>/<target>/crash-<hash>`); `None` keeps it in
    /// memory only.
    pub artifacts_dir: Option<PathBuf>,
    /// Write inputs with a new signature into the corpus directory.
    pub grow_corpus: bool,
    /// Largest generated input, in bytes (a target may ask for less).
    pub max_len: usize,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            execs: Some(10_000),
            time: None,
            seed: 0xca1e_5eed,
            corpus_dir: None,
            artifacts_dir: None,
            grow_corpus: false,
            max_len: 4096,
        }
    }
}

/// One panic a target raised.
#[derive(Clone, Debug)]
pub struct Crash {
    /// The input.
    pub input: Vec<u8>,
    /// The panic message and location.
    pub message: String,
    /// Where the input was saved, if it was.
    pub saved: Option<PathBuf>,
}

/// What a run did.
#[derive(Clone, Debug)]
pub struct Report {
    /// The target's name.
    pub target: &'static str,
    /// Executions, corpus included.
    pub execs: u64,
    /// Corpus inputs run.
    pub corpus: usize,
    /// Wall time.
    pub elapsed: Duration,
    /// Distinct behaviour signatures seen.
    pub signatures: usize,
    /// Inputs written to the corpus directory (with [`Options::grow_corpus`]).
    pub grown: usize,
    /// Panics, one per distinct message (the first input that raised it).
    pub crashes: Vec<Crash>,
    /// Executions that panicked, duplicates included.
    pub panics: u64,
}

impl Report {
    /// Executions per second.
    pub fn execs_per_sec(&self) -> f64 {
        self.execs as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

thread_local! {
    /// Set while this thread runs a target: the panic hook records instead of printing.
    static CAPTURE: RefCell<Option<String>> = const { RefCell::new(None) };
}

static HOOK: Once = Once::new();

/// Installs (once) a panic hook that records a target's panic message for [`run_once`] and
/// leaves every other panic to the hook that was there before.
fn install_hook() {
    HOOK.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            let captured = CAPTURE.with(|c| {
                let mut c = c.borrow_mut();
                if let Some(slot) = c.as_mut() {
                    let payload = info
                        .payload()
                        .downcast_ref::<&str>()
                        .map(|s| (*s).to_owned())
                        .or_else(|| info.payload().downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "a panic with a non-text payload".into());
                    let location = info
                        .location()
                        .map(|l| format!(" at {}:{}", l.file(), l.line()))
                        .unwrap_or_default();
                    *slot = format!("{payload}{location}");
                    true
                } else {
                    false
                }
            });
            if !captured {
                previous(info);
            }
        }));
    });
}

/// Runs `target` on `data` once.
///
/// # Errors
/// The panic message (with its location) when the target panicked.
pub fn run_once(target: &Target, data: &[u8]) -> Result<u64, String> {
    install_hook();
    CAPTURE.with(|c| *c.borrow_mut() = Some(String::new()));
    let result = panic::catch_unwind(AssertUnwindSafe(|| (target.run)(data)));
    let message = CAPTURE.with(|c| c.borrow_mut().take()).unwrap_or_default();
    result.map_err(|_| message)
}

/// Reads every file of `dir` (a missing directory is an empty corpus), in name order.
///
/// # Errors
/// An I/O error reading an existing directory or file.
pub fn load_corpus(dir: &Path) -> std::io::Result<Vec<(PathBuf, Vec<u8>)>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut paths = Vec::new();
    for entry in entries {
        let path = entry?.path();
        if path.is_file() {
            paths.push(path);
        }
    }
    paths.sort();
    paths
        .into_iter()
        .map(|p| std::fs::read(&p).map(|d| (p, d)))
        .collect()
}

/// A short content hash for file names.
fn content_name(prefix: &str, data: &[u8]) -> String {
    format!("{prefix}-{}", &blake3::hash(data).to_hex()[..16])
}

/// Fuzzes one target within `options`' budget.
///
/// # Errors
/// An I/O error reading the corpus or writing an artifact or corpus file.
pub fn fuzz(target: &Target, options: &Options) -> std::io::Result<Report> {
    let start = Instant::now();
    let mut rng = Rng::new(options.seed ^ fnv(target.name.as_bytes()));
    let max_len = options.max_len.min(target.max_len).max(1);
    let corpus_dir = options.corpus_dir.as_ref().map(|d| d.join(target.name));
    let artifacts_dir = options.artifacts_dir.as_ref().map(|d| d.join(target.name));
    let corpus = match &corpus_dir {
        Some(d) => load_corpus(d)?,
        None => Vec::new(),
    };
    let mut report = Report {
        target: target.name,
        execs: 0,
        corpus: corpus.len(),
        elapsed: Duration::ZERO,
        signatures: 0,
        grown: 0,
        crashes: Vec::new(),
        panics: 0,
    };
    let mut seen: HashSet<u64> = HashSet::new();
    let mut pool: Vec<Vec<u8>> = Vec::new();
    let mut messages: HashSet<String> = HashSet::new();

    let mut record = |input: Vec<u8>,
                      outcome: Result<u64, String>,
                      from_corpus: bool,
                      report: &mut Report,
                      pool: &mut Vec<Vec<u8>>|
     -> std::io::Result<()> {
        report.execs += 1;
        match outcome {
            Ok(sig) => {
                if seen.insert(sig) {
                    if !from_corpus {
                        if let (true, Some(dir)) = (options.grow_corpus, &corpus_dir) {
                            std::fs::create_dir_all(dir)?;
                            std::fs::write(dir.join(content_name("grown", &input)), &input)?;
                            report.grown += 1;
                        }
                    }
                    if pool.len() < MAX_POOL {
                        pool.push(input);
                    }
                } else if from_corpus && pool.len() < MAX_POOL {
                    // Committed inputs always seed the pool, even when they share a signature.
                    pool.push(input);
                }
            }
            Err(message) => {
                report.panics += 1;
                if messages.insert(message.clone()) {
                    let saved = match &artifacts_dir {
                        Some(dir) => {
                            std::fs::create_dir_all(dir)?;
                            let path = dir.join(content_name("crash", &input));
                            std::fs::write(&path, &input)?;
                            Some(path)
                        }
                        None => None,
                    };
                    report.crashes.push(Crash {
                        input,
                        message,
                        saved,
                    });
                }
            }
        }
        Ok(())
    };

    for (_, data) in &corpus {
        let outcome = run_once(target, data);
        record(data.clone(), outcome, true, &mut report, &mut pool)?;
    }
    let out_of_budget = |report: &Report| {
        options.execs.is_some_and(|n| report.execs >= n)
            || options.time.is_some_and(|t| start.elapsed() >= t)
    };
    while !out_of_budget(&report) {
        let input = if pool.is_empty() || rng.one_in(10) {
            let mut data = vec![0u8; rng.below(max_len.min(256)) + 1];
            rng.fill(&mut data);
            data
        } else {
            let base = pool[rng.below(pool.len())].clone();
            let mut data = base;
            for _ in 0..=rng.below(4) {
                mutate(&mut data, &pool, target.dictionary, &mut rng);
            }
            data.truncate(max_len);
            data
        };
        let outcome = run_once(target, &input);
        record(input, outcome, false, &mut report, &mut pool)?;
    }
    report.signatures = seen.len();
    report.elapsed = start.elapsed();
    Ok(report)
}

/// Applies one random mutation to `data`.
fn mutate(data: &mut Vec<u8>, pool: &[Vec<u8>], dictionary: &[&[u8]], rng: &mut Rng) {
    let pos = |rng: &mut Rng, len: usize| rng.below(len + 1);
    match rng.below(12) {
        0 if !data.is_empty() => {
            let i = rng.below(data.len());
            data[i] ^= 1 << rng.below(8);
        }
        1 if !data.is_empty() => {
            let i = rng.below(data.len());
            data[i] = INTERESTING_BYTES[rng.below(INTERESTING_BYTES.len())];
        }
        2 if !data.is_empty() => {
            let at = rng.below(data.len());
            let len = 1 + rng.below((data.len() - at).min(16));
            data.drain(at..at + len);
        }
        3 => {
            let at = pos(rng, data.len());
            let mut bytes = vec![0u8; 1 + rng.below(8)];
            rng.fill(&mut bytes);
            data.splice(at..at, bytes);
        }
        4 if !data.is_empty() => {
            let from = rng.below(data.len());
            let len = 1 + rng.below((data.len() - from).min(64));
            let block = data[from..from + len].to_vec();
            let at = pos(rng, data.len());
            data.splice(at..at, block);
        }
        5 if !pool.is_empty() => {
            let other = &pool[rng.below(pool.len())];
            let keep = pos(rng, data.len());
            let from = pos(rng, other.len());
            data.truncate(keep);
            data.extend_from_slice(&other[from..]);
        }
        6 if !data.is_empty() => {
            let keep = rng.below(data.len());
            data.truncate(keep);
        }
        7 | 8 if !dictionary.is_empty() => {
            let token = dictionary[rng.below(dictionary.len())];
            let at = pos(rng, data.len());
            if rng.one_in(2) {
                data.splice(at..at, token.iter().copied());
            } else {
                let end = (at + token.len()).min(data.len());
                data.splice(at..end, token.iter().copied());
            }
        }
        9 => {
            // Replace a run of ASCII digits (or insert at a random place) with an edge number.
            let number = INTERESTING_NUMBERS[rng.below(INTERESTING_NUMBERS.len())].as_bytes();
            let starts: Vec<usize> = (0..data.len())
                .filter(|&i| data[i].is_ascii_digit() && (i == 0 || !data[i - 1].is_ascii_digit()))
                .collect();
            if starts.is_empty() {
                let at = pos(rng, data.len());
                data.splice(at..at, number.iter().copied());
            } else {
                let at = starts[rng.below(starts.len())];
                let end = at + data[at..].iter().take_while(|b| b.is_ascii_digit()).count();
                data.splice(at..end, number.iter().copied());
            }
        }
        10 if data.len() >= 2 => {
            let a = rng.below(data.len());
            let b = rng.below(data.len());
            data.swap(a, b);
        }
        _ => {
            let at = pos(rng, data.len());
            data.insert(at, INTERESTING_BYTES[rng.below(INTERESTING_BYTES.len())]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn panics_on_bang(data: &[u8]) -> u64 {
        assert!(!data.contains(&b'!'), "found a bang");
        data.len() as u64
    }

    const BANG: Target = Target {
        name: "bang",
        about: "panics on '!'",
        run: panics_on_bang,
        dictionary: &[b"!"],
        max_len: 64,
    };

    #[test]
    fn a_panic_is_caught_reported_and_the_run_goes_on() {
        let report = fuzz(
            &BANG,
            &Options {
                execs: Some(5_000),
                ..Options::default()
            },
        )
        .unwrap();
        assert_eq!(report.execs, 5_000);
        assert!(report.panics > 0);
        assert_eq!(report.crashes.len(), 1);
        assert!(report.crashes[0].input.contains(&b'!'));
        assert!(report.crashes[0].message.starts_with("found a bang at "));
        assert!(run_once(&BANG, b"fine").is_ok());
    }

    #[test]
    fn the_same_seed_replays_the_same_run() {
        let opts = Options {
            execs: Some(2_000),
            ..Options::default()
        };
        let a = fuzz(&BANG, &opts).unwrap();
        let b = fuzz(&BANG, &opts).unwrap();
        assert_eq!((a.panics, a.signatures), (b.panics, b.signatures));
        assert_eq!(a.crashes[0].input, b.crashes[0].input);
    }
}
