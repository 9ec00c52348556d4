//! `cairn migrate up --dry-run` and `cairn migrate baseline`: what an upgrade would run,
//! printed and not run; and adopting a store whose schema is already at a revision.

use std::io::Write;

use cairn::migrate::{InvalidIndex, MigrationSet, Migrations, Plan};
use cairn::DatabaseUrl;

use crate::error::CliError;
use cairn::migrate::escape_control as esc;

/// Prints what `up` would run on the store now, in order, in the store's dialect; writes
/// nothing to the store.
pub(super) async fn dry_run(
    target: &DatabaseUrl,
    m: &Migrations,
    set: &MigrationSet,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let head = &set.head().id;
    // A location without a store gets the verdict `status` gives it (nothing is created).
    let state = m.state(set.name()).await.map_err(CliError::from)?;
    if state.stamp.is_none() && state.lineage.is_none() {
        crate::open::refuse_empty_location(target).await?;
    }
    // What an interrupted build left, which `up` drops before building again.
    let invalid = cairn::migrate::diagnostics(target)?
        .invalid_indexes()
        .await
        .unwrap_or_default();
    let engine = match m.dialect() {
        cairn::migrate::Dialect::Postgres => "postgres",
        cairn::migrate::Dialect::Sqlite => "sqlite",
    };
    match m.plan(set).await.map_err(CliError::from)? {
        Plan::AtHead => writeln!(out, "dry run: at head {head}; nothing to do")?,
        Plan::RecordLineage => writeln!(
            out,
            "dry run: at head {head}; up would record the lineage and run nothing"
        )?,
        Plan::Ahead { stamp } => writeln!(
            out,
            "dry run: store is ahead at {} (its lineage holds {head}); nothing to do",
            esc(&stamp)
        )?,
        Plan::Upgrade { from, revisions } => {
            writeln!(
                out,
                "dry run: up would upgrade {} -> {head} on {engine}, running in order:",
                esc(from.as_deref().unwrap_or("(empty)"))
            )?;
            for rev in &revisions {
                let how = if rev.outside_transaction {
                    "no-transaction: after a commit, each statement alone, outside any transaction"
                } else {
                    "in the upgrade transaction"
                };
                let contract = if rev.contract {
                    "; contract: applied only once no live build lacks it"
                } else {
                    ""
                };
                writeln!(out, "-- revision {} ({how}{contract})", rev.id)?;
                for statement in &rev.statements {
                    if rev.outside_transaction {
                        for index in leftovers(statement, &invalid) {
                            writeln!(
                                out,
                                "DROP INDEX CONCURRENTLY IF EXISTS {};  -- an interrupted build's invalid index",
                                esc(&index.name)
                            )?;
                        }
                    }
                    writeln!(out, "{};", statement.trim_end().trim_end_matches(';'))?;
                }
            }
            writeln!(
                out,
                "-- then: stamp {head} and record the lineage; nothing was changed"
            )?;
        }
    }
    Ok(())
}

/// The invalid indexes `up` drops before running `statement`: the one a concurrent build of
/// the same name left, and the `…_ccnew`/`…_ccold` ones a concurrent reindex of that index left.
fn leftovers<'a>(statement: &str, invalid: &'a [InvalidIndex]) -> Vec<&'a InvalidIndex> {
    use cairn::migrate::outside::{concurrent_index_name, concurrent_reindex_target};
    let bare = |qualified: &str| -> String {
        let name = qualified.rsplit_once('.').map_or(qualified, |(_, n)| n);
        match name.strip_prefix('"').and_then(|n| n.strip_suffix('"')) {
            Some(quoted) => quoted.replace("\"\"", "\""),
            None => name.to_owned(),
        }
    };
    if let Some((_, name)) = concurrent_index_name(statement) {
        return invalid.iter().filter(|i| bare(&i.name) == name).collect();
    }
    if let Some((false, _, name)) = concurrent_reindex_target(statement) {
        let prefix = format!("{name}_cc");
        return invalid
            .iter()
            .filter(|i| bare(&i.name).starts_with(&prefix))
            .collect();
    }
    Vec::new()
}

/// Environment variable naming the scratch Postgres server (as for `migrate check`).
const SCRATCH_POSTGRES_ENV: &str = "CAIRN_CHECK_POSTGRES_URL";

/// Adopts the store at revision `at` without running its SQL on the store; for a Postgres
/// store the set runs on a scratch server (`--postgres-url` or `CAIRN_CHECK_POSTGRES_URL`),
/// which must be named (a usage error otherwise) and must not be the store's database.
pub(super) async fn baseline(
    target: &DatabaseUrl,
    m: &Migrations,
    set: &MigrationSet,
    at: &str,
    postgres_url: Option<String>,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let scratch = match target {
        DatabaseUrl::Postgres { .. } => {
            let Some(url) = postgres_url.or_else(|| std::env::var(SCRATCH_POSTGRES_ENV).ok())
            else {
                clap::Error::raw(
                    clap::error::ErrorKind::MissingRequiredArgument,
                    format!(
                        "a Postgres baseline runs the set's SQL on a scratch server to learn what \
                         it makes: pass --postgres-url URL (or set {SCRATCH_POSTGRES_ENV}) naming \
                         a server whose databases hold no production data\n"
                    ),
                )
                .exit()
            };
            // `Migrations::baseline` refuses the store's own database, however spelled.
            let url = DatabaseUrl::parse(&url)?;
            Some(url)
        }
        DatabaseUrl::Sqlite(_) => None,
    };
    let done = m
        .baseline(set, at, scratch.as_ref())
        .await
        .map_err(CliError::from)?;
    writeln!(
        out,
        "baselined at {}: the store's tables ({}) are what {} makes; nothing of it was run",
        esc(&done.at),
        done.tables.join(", "),
        esc(&done.at)
    )?;
    Ok(())
}
