//! The command line.

use clap::{Parser, Subcommand};

use crate::open::DATABASE_ENV;

/// Default number of events per feed page.
pub(crate) const DEFAULT_FEED_LIMIT: usize = 100;
/// Default number of epochs `cairn graph` draws.
pub(crate) const DEFAULT_GRAPH_LAST: usize = 50;

/// cairn: an epoch log (causal event histories per space), a spool of runs for many workers and
/// lineage-aware schema migrations, on SQLite or PostgreSQL.
#[derive(Parser)]
#[command(name = "cairn", version)]
pub(crate) struct Cli {
    /// Store to use: `sqlite:///abs/path.db`, `sqlite://relative.db`, a file path, or
    /// `postgres://…` (add `?cairn_schema=NAME` to use a schema other than `public`).
    /// Defaults to `cairn.db` under the platform data directory.
    #[arg(long, global = true, env = DATABASE_ENV, hide_env_values = true, value_name = "URL")]
    pub(crate) database: Option<String>,

    #[command(subcommand)]
    pub(crate) command: Command,
}

/// What to do.
#[derive(Subcommand)]
pub(crate) enum Command {
    /// Append one epoch holding one event to a space; prints `<seq> <epoch id>`.
    Append {
        /// The space (created by its first epoch).
        #[arg(long)]
        space: String,
        /// The event's kind, e.g. `kv.put`.
        #[arg(long)]
        kind: String,
        /// The event's payload, stored as the argument's UTF-8 bytes.
        #[arg(long)]
        payload: String,
        /// The event's optional key.
        #[arg(long)]
        key: Option<String>,
    },
    /// Print the space's heads, one `<seq> <epoch id>` line each.
    Heads {
        /// The space.
        #[arg(long)]
        space: String,
    },
    /// Print the space's events after a cursor, then `next <cursor>` to resume from.
    Feed {
        /// The space.
        #[arg(long)]
        space: String,
        /// Where to resume: the `next` cursor a previous `cairn feed` printed.
        #[arg(long)]
        cursor: Option<String>,
        /// Most events to print (whole epochs only; at least one epoch when one is available).
        #[arg(long, default_value_t = DEFAULT_FEED_LIMIT)]
        limit: usize,
    },
    /// Draw a window of the space's epoch DAG: its newest epochs (or those before `--before`),
    /// one row each, newest at the top, with an edge from each epoch to each parent. Heads are
    /// marked on the newest page; a parent older than the window is a short dashed stub. Prints
    /// a standalone SVG (the dashboard's picture) or Graphviz DOT (`| dot -Tpng`) on stdout.
    /// To page back, pass the seq of the oldest epoch shown as the next `--before` (the SVG's
    /// `data-older` attribute holds it).
    Graph {
        /// The space.
        #[arg(long)]
        space: String,
        /// What to print.
        #[arg(long, value_enum, default_value_t = GraphFormat::Svg)]
        format: GraphFormat,
        /// Most epochs to draw, 1 to 1000.
        #[arg(long, value_name = "N", default_value_t = DEFAULT_GRAPH_LAST)]
        last: usize,
        /// Only epochs with a seq below this one (default: the newest).
        #[arg(long, value_name = "SEQ")]
        before: Option<u64>,
    },
    /// Recompute the space's head cache from its history; writes nothing when it is exact.
    Repair {
        /// The space.
        #[arg(long)]
        space: String,
    },
    /// Enqueue a run on the spool; prints `<run id> created`, or `<run id> existing` when the
    /// queue already holds a run with this dedup key (from any process). With `--from-file`,
    /// many runs at once, atomically: one such line per item, then
    /// `items=N created=N existing=N`.
    Enqueue {
        /// The queue, e.g. `gate`.
        #[arg(long)]
        queue: String,
        /// The dedup key's first part (e.g. `gate`); the key is built from this part and every
        /// `--key-part`, each length-prefixed, so no two part lists collide.
        #[arg(long, required_unless_present = "from_file")]
        key: Option<String>,
        /// Further parts of the dedup key, in order (e.g. a git ref, then an input hash).
        #[arg(long = "key-part", value_name = "PART")]
        key_parts: Vec<String>,
        /// The run's payload, stored as the argument's UTF-8 bytes.
        #[arg(long, required_unless_present = "from_file")]
        payload: Option<String>,
        /// Enqueue every item of FILE (`-`: stdin) instead, in one atomic batch: JSON lines,
        /// one item a line in the shape of the HTTP enqueue body (`key_parts` or `key`,
        /// `payload` or `payload_b64`, `supersede_group`, `priority`, `max_attempts`,
        /// `not_before_us`, `partition_key`); blank lines are skipped. At most 10000 items, 64 MiB of payloads
        /// and 8 MiB a line; a line that does not read refuses the whole file (`line N: …`)
        /// and nothing is written.
        #[arg(
            long,
            value_name = "FILE",
            conflicts_with_all = ["key", "key_parts", "payload", "supersede", "priority", "max_attempts", "partition"]
        )]
        from_file: Option<std::path::PathBuf>,
        /// Supersede group: older queued runs of the group become `superseded`.
        #[arg(long, value_name = "GROUP")]
        supersede: Option<String>,
        /// Higher runs are claimed first (default 0).
        #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
        priority: i32,
        /// Attempts before the run is parked (default: the spool's).
        #[arg(long)]
        max_attempts: Option<u32>,
        /// The run's partition key: a queue's per-partition limit (`cairn queue limits
        /// --per-partition`) caps how many runs sharing it are claimed at once.
        #[arg(long, value_name = "KEY")]
        partition: Option<String>,
        /// A running `cairn serve` to enqueue through (e.g. `http://127.0.0.1:7878`), with the
        /// bearer token from `CAIRN_TOKEN`. When no server answers there, the run is written
        /// straight to the store `--database` (or `CAIRN_DATABASE`) names, if it exists;
        /// without one the command fails and writes nothing. Either way the same key gives
        /// the same run id.
        #[arg(long, env = "CAIRN_URL", hide_env_values = true, value_name = "URL")]
        url: Option<String>,
    },
    /// List runs, one `<run id> <queue> <state> attempts=<n>` line each, in run-id order
    /// (which is enqueue-time order); or act on many runs (`cairn runs retry`).
    #[command(args_conflicts_with_subcommands = true)]
    Runs {
        /// What to do with many runs (default: list them).
        #[command(subcommand)]
        action: Option<RunsAction>,
        /// Only this queue.
        #[arg(long)]
        queue: Option<String>,
        /// Only this state: queued, claimed, succeeded, failed, canceled, superseded, parked.
        #[arg(long)]
        state: Option<String>,
        /// Most runs to print.
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// Inspect one run, close its event stream, or retry or discard it when it is parked.
    Run {
        /// What to do.
        #[command(subcommand)]
        action: RunAction,
    },
    /// Pause, resume and limit a queue, in every process that uses the store.
    Queue {
        /// What to do.
        #[command(subcommand)]
        action: super::flow::QueueAction,
    },
    /// Store, list and remove cron schedules: each tick enqueues one run, exactly once across
    /// every process running a scheduler (`cairn serve` runs one).
    Schedule {
        /// What to do.
        #[command(subcommand)]
        action: super::flow::ScheduleAction,
    },
    /// Import the runs of the system cairn replaces (docs/LEGACY_FORMAT.md) into the spool,
    /// once: the files are validated first (a corrupt record changes nothing), copied to
    /// `<DIR>.cairn-backup-<fingerprint>` (never through a symbolic link; an existing backup is
    /// verified, not rewritten), then imported in one transaction; a second run of the same
    /// files is a no-op.
    Import {
        /// The legacy state directory (checkpoint, runs.wal, gate.spool).
        #[arg(long, value_name = "DIR")]
        legacy: std::path::PathBuf,
        /// The queue the runs go to (default `gate`).
        #[arg(long)]
        queue: Option<String>,
        /// Import every valid record and leave out each damaged or contradictory one,
        /// keeping it verbatim in the backup's `quarantine/` folder beside `report.txt`
        /// (file, line, reason); the import is recorded as partial. Without it, any such
        /// record refuses the whole import. A record missing from the log or out of order is
        /// refused either way.
        #[arg(long)]
        quarantine: bool,
    },
    /// Repair stale head caches: one paced pass over every space in id order, in the
    /// foreground (a progress bar on a terminal); prints `visited=N repaired=N current=N`.
    /// Ctrl-C stops it between spaces.
    Backfill(super::backfill::BackfillArgs),
    /// Check the store (read-only): integrity, migration state per set, spool counts,
    /// retention usage and a head-cache sample; each problem with the command that repairs
    /// it. Exit 1 when a problem is found.
    Doctor {
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// Also report on an application's migration set.
        #[command(flatten)]
        set: SetArgs,
    },
    /// Replicate spaces from SOURCE to DEST (and back with `--both-ways`): each side a store
    /// URL (`sqlite://…`, a path, `postgres://…`) or a running `cairn serve` (`http(s)://…`,
    /// with `--source-token`/`--dest-token` or `CAIRN_SOURCE_TOKEN`/`CAIRN_DEST_TOKEN`). Only
    /// what the receiver lacks is sent, parents first, in batches that each commit with the
    /// receiver's cursor, so an interrupted sync resumes where it stopped. Prints one line per
    /// space and direction, then `total …`. `--database` is not used.
    Sync(Box<super::sync::SyncArgs>),
    /// Serve the store over HTTP: the JSON API under `/v1` (OpenAPI document at
    /// `/v1/openapi.json`), `/healthz` and `/readyz`; bearer-token auth; stops gracefully on
    /// SIGINT/SIGTERM.
    Serve(Box<crate::serve::ServeArgs>),
    /// Inspect and apply schema migrations (lineage-aware): cairn's own set, or an
    /// application's with `--set NAME --source DIR`.
    Migrate {
        /// Which migration set.
        #[command(flatten)]
        set: SetArgs,
        /// What to do.
        #[command(subcommand)]
        action: MigrateAction,
    },
}

/// `cairn run …`.
#[derive(Subcommand)]
pub(crate) enum RunAction {
    /// Print a run's state, attempts, lease, facts and events.
    Show {
        /// The run id `cairn enqueue` printed.
        id: String,
    },
    /// Close a run's event stream: its producer has appended its last event. Later appends
    /// are refused, and the delivery worker finishes the run once every event is delivered.
    /// Also the operator's way to finish a run whose producer never closes it.
    Close {
        /// The run id `cairn enqueue` printed.
        id: String,
    },
    /// Send a parked run back to its queue: due at once, with a fresh attempt budget (its
    /// reason stays). Recorded as an event of the run (who asked, why it was parked);
    /// prints `retried <id> event <seq>`. A run that is not parked is refused with its state.
    Retry {
        /// The run id.
        id: String,
        /// Who asks, as the run's event records it (default `cli:$USER`).
        #[arg(long, value_name = "NAME")]
        by: Option<String>,
    },
    /// Give up on a parked run for good: it ends `canceled` (its reason stays). Recorded as an
    /// event of the run; prints `discarded <id> event <seq>`. A run that is not parked is
    /// refused with its state.
    Discard {
        /// The run id.
        id: String,
        /// Who asks, as the run's event records it (default `cli:$USER`).
        #[arg(long, value_name = "NAME")]
        by: Option<String>,
    },
}

/// `cairn runs …`.
#[derive(Subcommand)]
pub(crate) enum RunsAction {
    /// Retry the parked runs of a queue (those whose reason contains `--reason-like`, or all),
    /// each as `cairn run retry` does (one event per run); prints
    /// `retried=N unmatched=N skipped=N failed=N` (unmatched: left parked, their reason differs;
    /// skipped: no longer parked when reached; failed: left parked, their own retry refused,
    /// each then named on a `failed run ID` line).
    Retry {
        /// The queue.
        #[arg(long)]
        queue: String,
        /// Which runs: only `parked` runs can be retried (named so the command says what it
        /// acts on).
        #[arg(long, value_parser = ["parked"])]
        state: String,
        /// Only runs whose parked reason contains this text.
        #[arg(long, value_name = "TEXT")]
        reason_like: Option<String>,
        /// Who asks, as each run's event records it (default `cli:$USER`).
        #[arg(long, value_name = "NAME")]
        by: Option<String>,
    },
}

/// The migration set a `cairn migrate` command acts on.
#[derive(clap::Args)]
pub(crate) struct SetArgs {
    /// An application's migration set, by the name its stamp and lineage are stored under
    /// (default: cairn's own set). Needs `--source`.
    #[arg(long, global = true, value_name = "NAME", requires = "source")]
    pub(crate) set: Option<String>,
    /// The directory holding the application set's SQL files: `NNNN_name.sql`, optionally
    /// `NNNN_name.sqlite.sql` / `NNNN_name.postgres.sql` per engine. Needs `--set`.
    #[arg(long, global = true, value_name = "DIR", requires = "set")]
    pub(crate) source: Option<std::path::PathBuf>,
}

/// `cairn migrate …`: exit 0 when fine, 1 when the store is refused or incompatible, 2 for
/// usage errors.
#[derive(Subcommand)]
pub(crate) enum MigrateAction {
    /// Print the stamp, the lineage, the classification, this build's head and the pending
    /// revisions. Takes no lock and writes nothing.
    Status,
    /// Apply pending revisions (with the lineage, in one transaction; a revision marked
    /// `-- cairn:no-transaction` commits what ran before it and runs alone, outside it). A
    /// contract revision (first line `-- cairn:contract`) is refused while a live build in the
    /// fleet registry lacks it, naming those builds.
    Up {
        /// Apply contract revisions even though live builds lack them; the store records the
        /// revision as forced with the builds it was forced past.
        #[arg(long)]
        force: bool,
        /// Print the revisions and the exact statements `up` would run, in order, in the
        /// store's dialect, and change nothing.
        #[arg(long)]
        dry_run: bool,
        /// How long (milliseconds) a revision's statement may wait for a table lock before the
        /// upgrade is rolled back, letting the queries queued behind it run, and tried again.
        #[arg(long, value_name = "MS", default_value_t = 3000,
              value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
        lock_timeout_ms: u64,
        /// How many times the upgrade runs in all when a statement gives up waiting.
        #[arg(long, value_name = "N", default_value_t = 5,
              value_parser = clap::value_parser!(u32).range(1..=1000))]
        tries: u32,
    },
    /// Adopt a store whose schema already is what revision REV makes, without running its
    /// SQL on it: the set up to REV is built on a throwaway store of the same engine (on
    /// Postgres, on the scratch server --postgres-url names) and compared with the store;
    /// only when they agree is the store stamped at REV with the lineage. Refused, listing the
    /// differences, when they do not; refused on a store that already has a stamp of the set.
    Baseline {
        /// The revision the store's schema is at.
        #[arg(long, value_name = "REV")]
        at: String,
        /// For a Postgres store: the scratch server the set's SQL runs on to learn what it
        /// makes (a throwaway schema there, removed afterwards). Never the store's own
        /// database: name a server whose databases hold no production data. Default:
        /// `CAIRN_CHECK_POSTGRES_URL`.
        #[arg(long, value_name = "URL")]
        postgres_url: Option<String>,
    },
    /// List the live builds in the store's fleet registry: build id, host, pid, last seen and
    /// the newest revision each knows per set. Takes no lock and writes nothing.
    Fleet {
        /// Print JSON instead of one line per build.
        #[arg(long)]
        json: bool,
        /// Entries not refreshed for this many seconds are not live.
        #[arg(long, value_name = "SECS", default_value_t = 300)]
        expiry_secs: u64,
    },
    /// Print this build's revision chain with checksums, marking the applied ones.
    History,
    /// Record this build's lineage on a store at this build's head whose lineage is missing or
    /// another history's.
    Repair,
    /// Roll the store back to revision REV: run the down SQL stored when each later revision
    /// was applied, newest first, and rewrite the stamp and lineage, in one transaction under
    /// the migration lock. Any build may run it, one that never had those revisions included;
    /// a revision applied without down SQL is refused by name and nothing changes.
    Down {
        /// The revision to roll back to (it stays applied).
        #[arg(long, value_name = "REV")]
        to: String,
    },
    /// Run the executed additivity check over every revision after the set's first, on
    /// throwaway stores; one line per revision and backend (ok, or each violation with its
    /// reason). On Postgres, also the executed lock check: the locks each revision takes on
    /// existing tables, what they block, and findings (an index built, a table rewritten or
    /// read in full while its writes are blocked) with the way around each. Exit 0 with no
    /// violation and no finding, 1 with any (a finding accepted by a revision's
    /// `-- cairn:accept-lock NAME` line does not count), 2 on a usage error.
    Check {
        /// Which engines to run.
        #[arg(long, value_enum, default_value_t = CheckBackend::All)]
        backend: CheckBackend,
        /// A scratch Postgres server the check builds its throwaway schemas on (never the
        /// store's own database: a revision runs there, inside a transaction that is rolled
        /// back). Default `CAIRN_CHECK_POSTGRES_URL`; without either, the Postgres engine
        /// refuses to run.
        #[arg(long, value_name = "URL", hide_env_values = true)]
        postgres_url: Option<String>,
        /// Also check the revision in FILE (SQL statements separated by `;`), as the revision
        /// after the set's head, named after the file.
        #[arg(long, value_name = "FILE")]
        with_revision: Option<std::path::PathBuf>,
        /// Print one JSON document (each engine's revisions with their additivity violations,
        /// and on Postgres the locks each takes and the lock findings) instead of lines.
        #[arg(long)]
        json: bool,
    },
}

/// What `cairn graph` prints.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum GraphFormat {
    /// A standalone SVG document.
    Svg,
    /// Graphviz DOT.
    Dot,
}

/// Which additivity engines `cairn migrate check` runs.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum CheckBackend {
    /// SQLite only.
    Sqlite,
    /// Postgres only.
    Postgres,
    /// Both.
    All,
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::Cli;

    /// `cairn enqueue --help` names every field an item of `--from-file` may hold: the HTTP
    /// enqueue body's.
    #[test]
    fn the_from_file_help_names_every_field_of_an_item() {
        use utoipa::openapi::schema::Schema;
        use utoipa::openapi::RefOr;
        let mut cmd = Cli::command();
        let help = cmd
            .find_subcommand_mut("enqueue")
            .expect("cairn enqueue")
            .render_long_help()
            .to_string();
        let RefOr::T(Schema::Object(body)) =
            <crate::serve::json::EnqueueRequest as utoipa::PartialSchema>::schema()
        else {
            panic!("the enqueue body is an object schema");
        };
        assert!(!body.properties.is_empty());
        for field in body.properties.keys() {
            assert!(help.contains(&format!("`{field}`")), "{field}: {help}");
        }
    }
}
