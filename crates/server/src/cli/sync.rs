//! `cairn sync SOURCE DEST`: replicates spaces from one store to another (and back with
//! `--both-ways`), once or following the source until SIGINT/SIGTERM. Each side is a store URL
//! (`sqlite://…`, a file path, `postgres://…`) or a running `cairn serve` (`http(s)://…`).
//!
//! The engine is `cairn::sync` ([`Sync`]); this file reads the command line, opens the sides
//! ([`crate::sync::endpoint_for`]) and prints the report. A side is only ever named by its
//! label ([`crate::sync::label_for`]: no password, no query but the schema), never a token.

use crate::signals::shutdown_signal;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cairn::sync::{SpaceReport, Sync, SyncEndpoint, SyncOptions, SyncPath, SyncReport};
use cairn::{DatabaseUrl, SpaceId};

use crate::error::CliError;
use crate::open::refuse_empty_location;

/// Environment variable with the bearer token for an `http(s)://` source.
const SOURCE_TOKEN_ENV: &str = "CAIRN_SOURCE_TOKEN";
/// Environment variable with the bearer token for an `http(s)://` destination.
const DEST_TOKEN_ENV: &str = "CAIRN_DEST_TOKEN";
/// Longest a follow waits for a change before it looks again (for `--all-spaces`, the time
/// between two passes).
const FOLLOW_IDLE: Duration = Duration::from_secs(1);

/// `cairn sync`'s command line.
#[derive(clap::Args)]
#[command(group(
    clap::ArgGroup::new("which_spaces")
        .args(["spaces", "all_spaces"])
        .required(true)
        .multiple(false)
))]
pub(crate) struct SyncArgs {
    /// The sending side: a store URL (`sqlite://…`, a file path, `postgres://…`) or a running
    /// `cairn serve` (`http://…`, `https://…`). A store must exist.
    #[arg(value_name = "SOURCE")]
    source: String,
    /// The receiving side, as SOURCE; a store URL that names no store yet creates it.
    #[arg(value_name = "DEST")]
    dest: String,
    /// A space to sync (repeat for several). Exactly one of --space and --all-spaces.
    #[arg(long = "space", value_name = "SPACE")]
    spaces: Vec<String>,
    /// Every non-reserved space of the sending side (of both sides with --both-ways), listed
    /// again on each pass of --follow.
    #[arg(long)]
    all_spaces: bool,
    /// Keep syncing as the source changes, until SIGINT or SIGTERM (exit 0); prints each pass
    /// that moved an epoch.
    #[arg(long)]
    follow: bool,
    /// Also sync DEST back into SOURCE, after each forward pass: both end with the union, with
    /// the same heads.
    #[arg(long)]
    both_ways: bool,
    /// Most epochs per imported batch (each batch is one transaction with its cursor).
    #[arg(long, value_name = "N", default_value_t = 500,
          value_parser = clap::value_parser!(u64).range(1..=cairn::sync::MAX_IMPORT_BATCH as u64))]
    batch: u64,
    /// Print the report as JSON (one document per pass with --follow).
    #[arg(long)]
    json: bool,
    /// Bearer token for an http(s):// SOURCE (default CAIRN_SOURCE_TOKEN).
    #[arg(long, value_name = "TOKEN")]
    source_token: Option<String>,
    /// Bearer token for an http(s):// DEST (default CAIRN_DEST_TOKEN).
    #[arg(long, value_name = "TOKEN")]
    dest_token: Option<String>,
}

/// Opens one side ([`crate::sync::endpoint_for`]). A store side that must exist (the source)
/// is looked for first, read-only, so that a mistyped source gets the missing store's own
/// message, and is then opened without creating anything: a database or schema that holds no
/// cairn store is refused, not turned into one.
async fn open_side(
    url: &str,
    token: Option<String>,
    must_exist: bool,
) -> Result<Arc<dyn SyncEndpoint>, CliError> {
    if must_exist && !is_http(url) {
        refuse_empty_location(&DatabaseUrl::parse(url)?).await?;
    }
    Ok(crate::sync::endpoint_for(url, token, !must_exist).await?)
}

/// A side's token: the one given on the command line (refused for a store side, which takes
/// none), else the environment's for a `cairn serve` side. An environment token is ignored for
/// a store side, so one exported for another sync does not break a sync between files.
fn token(url: &str, given: Option<String>, env: &str) -> Option<String> {
    given.or_else(|| {
        is_http(url)
            .then(|| std::env::var(env).ok())
            .flatten()
            .filter(|t| !t.is_empty())
    })
}

/// Whether the side is a running `cairn serve`.
fn is_http(url: &str) -> bool {
    let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
    matches!(scheme.as_deref(), Some("http" | "https"))
}

/// Runs `cairn sync`.
pub(crate) async fn run(args: SyncArgs, out: &mut impl Write) -> Result<(), CliError> {
    let spaces = args
        .spaces
        .iter()
        .map(|s| SpaceId::new(s.as_str()))
        .collect::<Result<Vec<_>, _>>()?;
    let options = SyncOptions {
        batch_epochs: usize::try_from(args.batch).unwrap_or(cairn::sync::MAX_IMPORT_BATCH),
        ..SyncOptions::default()
    };
    options.check()?;
    // Registered before anything is opened, so a signal during the first pass is not lost to
    // the default action (which would end the process with a signal status).
    let stop = args.follow.then(shutdown_signal);
    let source_token = token(&args.source, args.source_token, SOURCE_TOKEN_ENV);
    let dest_token = token(&args.dest, args.dest_token, DEST_TOKEN_ENV);
    let source = open_side(&args.source, source_token, true).await?;
    let dest = open_side(&args.dest, dest_token, false).await?;
    let mut sync = Sync::new(source, dest)
        .both_ways(args.both_ways)
        .options(options);
    sync = if args.all_spaces {
        sync.all_spaces()
    } else {
        spaces.into_iter().fold(sync, Sync::space)
    };
    match stop {
        None => Ok(print(out, &sync.run().await?, args.json)?),
        Some(stop) => follow(&sync, stop, args.json, out).await,
    }
}

/// Runs passes until `stop` resolves (a pass under way is abandoned: each batch is one
/// transaction, so the destination keeps whole batches with their cursor), printing each
/// pass that imported an epoch.
async fn follow(
    sync: &Sync,
    stop: impl std::future::Future<Output = ()>,
    json: bool,
    out: &mut impl Write,
) -> Result<(), CliError> {
    // An output error (a reader gone) ends the follow with that error.
    let failed: Mutex<Option<std::io::Error>> = Mutex::new(None);
    let gone = tokio::sync::Notify::new();
    let on_pass = |report: &SyncReport| {
        if report.epochs() == 0 {
            return;
        }
        if let Err(e) = print(out, report, json).and_then(|()| out.flush()) {
            *failed
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(e);
            gone.notify_one();
        }
    };
    let followed = tokio::select! {
        r = sync.follow(FOLLOW_IDLE, gone.notified(), on_pass) => r,
        () = stop => Ok(()),
    };
    if let Some(e) = failed
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take()
    {
        return Err(e.into());
    }
    Ok(followed?)
}

fn path_name(path: SyncPath) -> &'static str {
    match path {
        SyncPath::Empty => "empty",
        SyncPath::UpToDate => "up-to-date",
        SyncPath::Cursor => "cursor",
        SyncPath::Negotiated => "negotiated",
        SyncPath::Initial => "initial",
    }
}

/// One line per space and direction, then the total; or the report as one JSON document.
fn print(out: &mut impl Write, report: &SyncReport, json: bool) -> std::io::Result<()> {
    let batches: u64 = report.spaces.iter().map(|s| s.batches).sum();
    let present: u64 = report.spaces.iter().map(|s| s.present).sum();
    if json {
        let doc = serde_json::json!({
            "spaces": report.spaces.iter().map(space_json).collect::<Vec<_>>(),
            "epochs": report.epochs(),
            "present": present,
            "bytes": report.bytes(),
            "batches": batches,
        });
        return writeln!(out, "{doc}");
    }
    for s in &report.spaces {
        write!(
            out,
            "space={} from={} to={} path={} epochs={} present={} bytes={} batches={}",
            crate::shown::word(&s.space.to_string()),
            crate::shown::word(&s.from),
            crate::shown::word(&s.to),
            path_name(s.path),
            s.epochs,
            s.present,
            s.bytes,
            s.batches
        )?;
        if s.cursor_reset {
            write!(out, " cursor-reset")?;
        }
        writeln!(out)?;
    }
    writeln!(
        out,
        "total epochs={} present={present} bytes={} batches={batches}",
        report.epochs(),
        report.bytes()
    )
}

fn space_json(s: &SpaceReport) -> serde_json::Value {
    serde_json::json!({
        "space": s.space.to_string(),
        "from": s.from,
        "to": s.to,
        "path": path_name(s.path),
        "cursor_reset": s.cursor_reset,
        "epochs": s.epochs,
        "present": s.present,
        "bytes": s.bytes,
        "batches": s.batches,
        "summaries": s.summaries,
        "ids_checked": s.ids_checked,
    })
}
