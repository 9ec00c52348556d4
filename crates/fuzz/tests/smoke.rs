//! The CI smoke run: every committed corpus input of every target, then a short seeded fuzz
//! run of each target. Any panic fails the test with the input that raised it.

use cairn_fuzz::engine::{fuzz, load_corpus, Options};
use cairn_fuzz::{crate_dir, run_once, TARGETS};

/// Generated inputs per target; small, so the whole smoke stays within seconds in debug builds.
/// `CAIRN_FUZZ_SMOKE_EXECS` raises it for a longer local run.
fn execs() -> u64 {
    std::env::var("CAIRN_FUZZ_SMOKE_EXECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}

#[test]
fn every_committed_corpus_input_runs_clean() {
    let mut total = 0;
    for target in TARGETS {
        let corpus = load_corpus(&crate_dir().join("corpus").join(target.name)).unwrap();
        assert!(
            !corpus.is_empty(),
            "{} has no committed corpus",
            target.name
        );
        for (path, data) in corpus {
            if let Err(message) = run_once(target, &data) {
                panic!("{} panicked on {}: {message}", target.name, path.display());
            }
            total += 1;
        }
    }
    assert!(total >= TARGETS.len());
}

#[test]
fn every_target_survives_a_short_fuzz_run() {
    let mut failures = Vec::new();
    for target in TARGETS {
        let report = fuzz(
            target,
            &Options {
                execs: Some(execs()),
                corpus_dir: Some(crate_dir().join("corpus")),
                ..Options::default()
            },
        )
        .unwrap();
        assert_eq!(report.execs, execs().max(report.corpus as u64));
        assert!(
            report.signatures > 1,
            "{} saw one behaviour only",
            target.name
        );
        for crash in report.crashes {
            failures.push(format!(
                "{}: {} on input {:?}",
                target.name,
                crash.message,
                String::from_utf8_lossy(&crash.input)
            ));
        }
    }
    assert!(failures.is_empty(), "panics:\n{}", failures.join("\n"));
}
