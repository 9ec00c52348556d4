//! The bench's consumer processes (rows 5 and 9): started as this binary's hidden `bench`
//! subcommands and read line by line, the spool they open on their side, and the wall clock
//! both sides stamp with.

use std::io::BufRead;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cairn::spool::SpoolConfig;
use cairn::testkit::postgres::{PgOptions, PgSpool, PgStore};
use cairn::testkit::sqlite::{SqliteOptions, SqliteSpool};
use cairn::{Spool, SystemClock};

use super::super::setup::{store_err, Backend};
use super::fresh::{queue, Fresh};

/// A consumer in another OS process: this binary started as `bench <subcommand>` against
/// `fresh`'s store, read line by line from its stdout. Killed and reaped when dropped.
pub(super) struct ConsumerChild {
    pub(super) child: std::process::Child,
    pub(super) lines: tokio::sync::mpsc::UnboundedReceiver<String>,
    /// What the messages call it ("the wake consumer").
    pub(super) name: &'static str,
}

impl ConsumerChild {
    pub(super) fn spawn(
        subcommand: &str,
        name: &'static str,
        backend: Backend,
        fresh: &Fresh,
    ) -> Result<Self, String> {
        let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
        let mut child = Command::new(exe)
            .args([
                "bench",
                subcommand,
                "--backend",
                backend.name(),
                "--target",
                &fresh.target,
                "--schema",
                if fresh.schema.is_empty() {
                    "public"
                } else {
                    &fresh.schema
                },
                "--queue",
                queue().as_str(),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start {name}: {e}"))?;
        let Some(stdout) = child.stdout.take() else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("no stdout from {name}"));
        };
        let (tx, lines) = tokio::sync::mpsc::unbounded_channel::<String>();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Self { child, lines, name })
    }

    /// Waits for the child's `ready` line.
    pub(super) async fn ready(&mut self) -> Result<(), String> {
        if self.next().await? == "ready" {
            Ok(())
        } else {
            Err(format!("{} did not start", self.name))
        }
    }

    /// The child's next line, waited for at most 30 s.
    pub(super) async fn next(&mut self) -> Result<String, String> {
        let name = self.name;
        tokio::time::timeout(Duration::from_secs(30), self.lines.recv())
            .await
            .map_err(|_| format!("{name} did not answer within 30 s"))?
            .ok_or_else(|| format!("{name} exited"))
    }
}

impl Drop for ConsumerChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(super) fn now_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// The spool another process of the bench opened (`Fresh::target`, `Fresh::schema`).
pub(super) async fn open_spool(
    backend: Backend,
    target: &str,
    schema: &str,
) -> Result<Arc<dyn Spool>, String> {
    Ok(match backend {
        Backend::Sqlite => Arc::new(
            SqliteSpool::open(target, SqliteOptions::default(), Arc::new(SystemClock))
                .await
                .map_err(store_err)?,
        ),
        Backend::Postgres => {
            let store = PgStore::open_with(PgOptions::new(target.to_owned()).schema(schema))
                .await
                .map_err(store_err)?;
            Arc::new(
                PgSpool::from_store(&store, Arc::new(SystemClock), SpoolConfig::default())
                    .map_err(store_err)?,
            )
        }
    })
}
