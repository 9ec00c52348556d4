//! Child processes for the spool's cross-process cases: a test re-runs its own binary as a
//! child (selected by environment variables), the child opens the spool on the shared store,
//! reports ready, waits for the parent's go on stdin and prints one report line per result.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::Arc;

use cairn_core::SystemClock;
use cairn_sqlite::{SqliteOptions, SqliteSpool};

/// Set in a child process: the store file it works on.
pub(crate) const CHILD_DB: &str = "CAIRN_SPOOL_CHILD_DB";
/// Set in a child process: its name (`a`, `b`) and any argument of its role.
pub(crate) const CHILD_NAME: &str = "CAIRN_SPOOL_CHILD_NAME";
pub(crate) const CHILD_ARG: &str = "CAIRN_SPOOL_CHILD_ARG";
/// A child prints this once its spool is open, then waits for a line on stdin.
pub(crate) const READY: &str = "cairn-spool-child-ready";
/// A child prefixes every report with this.
pub(crate) const REPORT: &str = "cairn-spool-report ";

/// The child's side of a test, when this process is a child: `(db, name, arg)`.
pub(crate) fn child_env() -> Option<(String, String, String)> {
    let db = std::env::var(CHILD_DB).ok()?;
    let name = std::env::var(CHILD_NAME).unwrap_or_default();
    let arg = std::env::var(CHILD_ARG).unwrap_or_default();
    Some((db, name, arg))
}

pub(crate) async fn child_spool(db: &str) -> SqliteSpool {
    SqliteSpool::open(db, SqliteOptions::default(), Arc::new(SystemClock))
        .await
        .unwrap_or_else(|e| panic!("child: cannot open the spool: {e}"))
}

/// Reports ready and blocks until the parent's go.
pub(crate) fn ready_and_wait() {
    println!("\n{READY}");
    let mut go = String::new();
    std::io::stdin().read_line(&mut go).unwrap();
}

pub(crate) fn report(line: impl std::fmt::Display) {
    println!("{REPORT}{line}");
}

/// Re-runs this test binary as a child running only `test`, on `db`.
pub(crate) fn spawn_child(test: &str, db: &Path, name: &str, arg: &str) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(CHILD_DB, db)
        .env(CHILD_NAME, name)
        .env(CHILD_ARG, arg)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Reads a child's stdout up to its ready line.
pub(crate) fn await_ready(child: &mut Child) -> BufReader<ChildStdout> {
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        let n = out.read_line(&mut line).unwrap();
        assert!(n > 0, "a child exited before it was ready");
        if line.contains(READY) {
            return out;
        }
    }
}

/// Waits until every child is ready, releases them together, and returns each child's
/// reports (the text after [`REPORT`] on each line), failing when a child failed.
pub(crate) fn run_together(mut children: Vec<Child>) -> Vec<Vec<String>> {
    let outs: Vec<BufReader<ChildStdout>> = children.iter_mut().map(await_ready).collect();
    for c in &mut children {
        c.stdin.take().unwrap().write_all(b"go\n").unwrap();
    }
    // One reader thread per child, so a full pipe never blocks a child.
    let readers: Vec<_> = outs
        .into_iter()
        .map(|out| {
            std::thread::spawn(move || {
                out.lines()
                    .map(Result::unwrap)
                    .filter_map(|l| l.find(REPORT).map(|at| l[at + REPORT.len()..].to_owned()))
                    .collect::<Vec<String>>()
            })
        })
        .collect();
    let reports: Vec<Vec<String>> = readers.into_iter().map(|r| r.join().unwrap()).collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "a child failed: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    reports
}
