//! `cairn backfill`: one pass of the paced head-cache backfill in the foreground, with a progress
//! bar on a terminal. The background pass of `cairn serve` is `serve::backfill` (tracing and
//! metrics).
//!
//! The pass itself is `cairn::backfill::run_pass` (backend-independent, in cairn-core). Its log
//! lines carry counts and error codes only: never a payload, a space id or a URL.

use std::io::{IsTerminal, Write};

use cairn::backfill::{
    run_pass, BackfillConfig, BackfillObserver, BackfillOutcome, BackfillProgress, TokioPacer,
};
use cairn::DatabaseUrl;

use crate::error::CliError;
use crate::open::{open, IfMissing};

/// The backfill's settings on the command line and in the environment.
#[derive(clap::Args, Clone, Debug)]
pub(crate) struct BackfillArgs {
    /// Whether `cairn serve` runs the backfill in the background (`false` switches it off).
    #[arg(
        long = "backfill-enabled",
        env = "CAIRN_BACKFILL__ENABLED",
        default_value_t = true,
        action = clap::ArgAction::Set,
        value_name = "BOOL"
    )]
    pub(crate) enabled: bool,
    /// The most spaces the backfill visits per second.
    #[arg(
        long = "backfill-spaces-per-second",
        env = "CAIRN_BACKFILL__SPACES_PER_SECOND",
        default_value_t = 2.0,
        value_name = "RATE"
    )]
    pub(crate) spaces_per_second: f64,
    /// How many spaces between two progress lines.
    #[arg(
        long = "backfill-progress-every",
        env = "CAIRN_BACKFILL__PROGRESS_EVERY",
        default_value_t = 500,
        value_name = "N"
    )]
    pub(crate) progress_every: u64,
}

impl BackfillArgs {
    /// The pass's configuration, validated (pacing only when enabled): one line per problem.
    pub(crate) fn config(&self) -> Result<BackfillConfig, CliError> {
        let config = BackfillConfig {
            enabled: self.enabled,
            spaces_per_second: self.spaces_per_second,
            progress_every: self.progress_every,
            ..BackfillConfig::default()
        };
        config
            .validate()
            .map_err(|problems| CliError::Config(problems.join("\n")))?;
        Ok(config)
    }
}

/// Writes the pass's progress to stderr as `cairn backfill: …` lines (when stderr is not a
/// terminal). An error is reported once, by the command's own error line.
struct LogObserver;

impl BackfillObserver for LogObserver {
    fn checkpoint(&self, p: &BackfillProgress) {
        log_line(&format!(
            "progress: visited={} repaired={} current={}",
            p.visited, p.repaired, p.current
        ));
    }
}

fn log_line(msg: &str) {
    let _ = writeln!(std::io::stderr().lock(), "cairn backfill: {msg}");
}

/// Draws a progress bar (spinner and counts: the number of spaces is not known in advance).
struct BarObserver(indicatif::ProgressBar);

impl BackfillObserver for BarObserver {
    fn space_done(&self, p: &BackfillProgress) {
        self.0.set_position(p.visited);
        self.0
            .set_message(format!("repaired {} current {}", p.repaired, p.current));
    }
    fn failed(&self, _code: &'static str, _p: &BackfillProgress) {
        self.0.abandon();
    }
}

/// `cairn backfill`: one pass in the foreground, ignoring the completion marker, at the
/// configured pace; prints `visited=N repaired=N current=N` when done. Ctrl-C stops it between
/// spaces.
pub(crate) async fn run_foreground(
    target: &DatabaseUrl,
    args: &BackfillArgs,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let config = BackfillConfig {
        enabled: true,
        ..args.config()?
    };
    let store = open(target, IfMissing::Refuse).await?;
    let diagnostics = store.diagnostics();
    let bar = std::io::stderr().is_terminal().then(|| {
        let bar = indicatif::ProgressBar::new_spinner();
        bar.set_style(
            indicatif::ProgressStyle::with_template("{spinner} {pos} spaces  {msg}  {elapsed}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
        );
        bar
    });
    let observer: Box<dyn BackfillObserver> = match &bar {
        Some(b) => Box::new(BarObserver(b.clone())),
        None => Box::new(LogObserver),
    };
    let shutdown = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    let outcome = run_pass(
        diagnostics.as_ref(),
        &config,
        &TokioPacer::default(),
        observer.as_ref(),
        false,
        shutdown,
    )
    .await;
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    store.close().await?;
    match outcome {
        BackfillOutcome::Completed(p) => {
            writeln!(
                out,
                "visited={} repaired={} current={}",
                p.visited, p.repaired, p.current
            )?;
            Ok(())
        }
        BackfillOutcome::Stopped(p) => Err(CliError::Config(format!(
            "interrupted after {} spaces ({} repaired); run `cairn backfill` again to finish",
            p.visited, p.repaired
        ))),
        BackfillOutcome::Failed { code, progress } => Err(CliError::Config(format!(
            "the backfill stopped at the first error (code {code}) after {} spaces; nothing is \
             lost (every append checks the cache it uses); run `cairn backfill` again",
            progress.visited
        ))),
        BackfillOutcome::Disabled | BackfillOutcome::AlreadyComplete => Ok(()),
    }
}
