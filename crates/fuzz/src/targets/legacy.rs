//! Targets for the legacy import files (`checkpoint`, `runs.wal`, `gate.spool`), read by
//! `cairn_core::spool::legacy::plan`.
//!
//! An input is text in sections: a line `#checkpoint`, `#wal` or `#spool` starts that file
//! (a file without a section is absent); the lines after it are the file's. `legacy_raw` writes
//! them as they are, so it exercises the framing (lines, torn tails, sizes, checksums);
//! `legacy_sealed` seals every complete line's body with `seal_record` first, so mutations reach
//! the JSON records and the replay rules behind the checksum.

use cairn_core::spool::check_import;
use cairn_core::spool::legacy::{
    plan, seal_record, ImportPlan, LegacyError, LegacyFiles, LegacyOptions, CHECKPOINT_FILE,
    SPOOL_FILE, WAL_FILE,
};

use super::signature::{mix, sig};
use super::target::Target;

const LEGACY_DICT: &[&[u8]] = &[
    b"#checkpoint\n",
    b"#wal\n",
    b"#spool\n",
    b"\"kind\":\"checkpoint\"",
    b"\"kind\":\"run\"",
    b"\"kind\":\"event\"",
    b"\"format\":1",
    b"\"generation\":",
    b"\"runs\":",
    b"\"events\":",
    b"\"spool_drained\":",
    b"\"written_ms\":",
    b"\"gen\":",
    b"\"seq\":",
    b"\"op\":\"run\"",
    b"\"op\":\"event\"",
    b"\"op\":\"ack\"",
    b"\"op\":\"drop\"",
    b"\"op\":\"drain\"",
    b"\"through\":",
    b"\"run_id\":\"0190a5c0-0000-7000-8000-000000000001\"",
    b"\"run_id\":\"0190a5c0-0000-7000-8000-000000000002\"",
    b"\"event_id\":\"e1\"",
    b"\"event_ids\":[\"e1\"]",
    b"\"gate\":\"ci\"",
    b"\"ref\":\"refs/heads/main\"",
    b"\"input_sha\":\"3f2a\"",
    b"\"payload\":\"{}\"",
    b"\"state\":\"queued\"",
    b"\"state\":\"running\"",
    b"\"state\":\"succeeded\"",
    b"\"state\":\"parked\"",
    b"\"attempts\":1",
    b"\"max_attempts\":3",
    b"\"cancel_requested\":true",
    b"\"created_ms\":1700000000000",
    b"\"updated_ms\":1700000100000",
    b"\"finished_ms\":1700000200000",
    b"\"not_before_ms\":1700000000000",
    b"\"submitted_ms\":1700000400000",
    b"\"at_ms\":1700000050000",
    b"\"last_error\":\"boom\"",
    b"\"stages\":{\"build\":\"passed\"}",
    b"\"decision\":\"merge\"",
    b"\"merged_sha\":\"abc\"",
    b"\"supersede\":[\"ci\",\"main\"]",
    b",\"sum\":\"",
    b"\\u0000",
    b"\\\"",
];

pub(super) const LEGACY_RAW: Target = Target {
    name: "legacy_raw",
    about: "legacy::plan on three files as given (framing, torn tails, sizes, checksums); a plan always passes check_import",
    run: legacy_raw,
    dictionary: LEGACY_DICT,
    max_len: 16 * 1024,
};

pub(super) const LEGACY_SEALED: Target = Target {
    name: "legacy_sealed",
    about: "legacy::plan on three files whose lines are sealed first (records and replay rules); plans pass check_import, are deterministic, and ignore what follows a torn tail",
    run: legacy_sealed,
    dictionary: LEGACY_DICT,
    max_len: 16 * 1024,
};

/// Splits the input into the three files; `seal` seals each complete line's body.
fn files(data: &[u8], seal: bool) -> LegacyFiles {
    let mut sections: [Option<Vec<u8>>; 3] = [None, None, None];
    let mut current: Option<usize> = None;
    let mut rest = data;
    while !rest.is_empty() {
        let (line, complete, next) = match rest.iter().position(|b| *b == b'\n') {
            Some(n) => (&rest[..n], true, &rest[n + 1..]),
            None => (rest, false, &rest[rest.len()..]),
        };
        rest = next;
        let section = match line {
            b"#checkpoint" => Some(0),
            b"#wal" => Some(1),
            b"#spool" => Some(2),
            _ => None,
        };
        if let (Some(i), true) = (section, complete) {
            sections[i].get_or_insert_with(Vec::new);
            current = Some(i);
            continue;
        }
        let Some(file) = current.and_then(|i| sections[i].as_mut()) else {
            continue;
        };
        let sealed = if seal && complete {
            std::str::from_utf8(line)
                .ok()
                .and_then(|body| seal_record(body).ok())
        } else {
            None
        };
        match sealed {
            Some(s) => file.extend_from_slice(s.as_bytes()),
            None => file.extend_from_slice(line),
        }
        if complete {
            file.push(b'\n');
        }
    }
    let [checkpoint, wal, spool] = sections;
    LegacyFiles {
        label: "fuzz".into(),
        checkpoint,
        wal,
        spool,
    }
}

fn newline_count(data: &Option<Vec<u8>>) -> u64 {
    data.as_ref()
        .map_or(0, |d| d.iter().filter(|b| **b == b'\n').count() as u64)
}

fn check(files: &LegacyFiles, deep: bool) -> u64 {
    let options = LegacyOptions::default();
    let result = plan(files, &options);
    match &result {
        Ok(p) => {
            check_import(&p.source, &p.runs).expect("a legacy plan is an import the spool accepts");
            if deep {
                check_plan(files, &options, p);
            }
        }
        Err(LegacyError::Record { file, line, .. }) => {
            let lines = match *file {
                CHECKPOINT_FILE => newline_count(&files.checkpoint),
                WAL_FILE => newline_count(&files.wal),
                SPOOL_FILE => newline_count(&files.spool),
                other => panic!("an error names an unknown file {other}"),
            };
            // The named line exists (the checkpoint's unterminated last line is lines + 1).
            assert!(*line >= 1 && *line <= lines + 1, "line {line} of {lines}");
        }
        Err(other) => panic!("plan returned a non-record error: {other}"),
    }
    mix(
        sig(30, &result),
        result.as_ref().map_or(0, |p| p.runs.len().min(4) as u64),
    )
}

/// Properties of an accepted plan.
fn check_plan(files: &LegacyFiles, options: &LegacyOptions, p: &ImportPlan) {
    assert_eq!(
        &plan(files, options).unwrap(),
        p,
        "planning is deterministic"
    );
    // Bytes after the last newline of the log or the spool are a torn tail: more of them
    // change neither the runs nor the fingerprint.
    for which in [1, 2] {
        let mut torn = files.clone();
        let slot = if which == 1 {
            &mut torn.wal
        } else {
            &mut torn.spool
        };
        let Some(data) = slot.as_mut() else { continue };
        data.extend_from_slice(b"{\"torn");
        let again = plan(&torn, options).expect("a longer torn tail is still left out");
        assert_eq!(again.runs, p.runs);
        assert_eq!(again.source.fingerprint, p.source.fingerprint);
        assert!(!again.report.torn.is_empty());
    }
}

fn legacy_raw(data: &[u8]) -> u64 {
    check(&files(data, false), false)
}

fn legacy_sealed(data: &[u8]) -> u64 {
    check(&files(data, true), true)
}
