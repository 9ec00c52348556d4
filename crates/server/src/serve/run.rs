//! `cairn serve`'s run: open the store, bind, print the address, serve with the background
//! tasks (head-cache backfill, retention, delivery, dashboard rates), and on SIGINT or SIGTERM
//! drain, stop the tasks and close the store.

use crate::signals::shutdown_signal;
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use cairn::DatabaseUrl;

use super::args::{prepare, ServeArgs};
use super::state::{AppState, Target};
use super::ui::{Rates, Ui};
use super::wake::SyncHub;
use super::{backfill, connections, delivery, metrics, retention, routes, storage};
use crate::error::CliError;
use crate::open::{open_with, IfMissing};

/// Runs the server until SIGINT or SIGTERM.
pub(crate) async fn run(target: &DatabaseUrl, mut args: Box<ServeArgs>) -> Result<(), CliError> {
    if args.prepared.is_none() {
        prepare(&mut args).map_err(|p| CliError::Config(p.0.join("; ")))?;
    }
    let Some(settings) = args.prepared.take() else {
        return Err(CliError::Config("the settings were not prepared".into()));
    };
    let telemetry = crate::logging::init(
        settings.log_filter.clone(),
        settings.log_format,
        settings.otel.as_ref(),
    );
    metrics::install_library_recorder();
    let metrics = Arc::new(
        metrics::Metrics::new()
            .map_err(|e| CliError::Config(format!("cannot set up the metrics: {e}")))?,
    );
    let store = open_with(target, IfMissing::Create, settings.spool).await?;
    log_migrations(&store);
    let signal = shutdown_signal();
    let listener = tokio::net::TcpListener::bind(settings.listen)
        .await
        .map_err(|e| CliError::Config(format!("cannot listen on {}: {e}", settings.listen)))?;
    let addr = listener
        .local_addr()
        .map_err(|e| CliError::Config(format!("cannot read the bound address: {e}")))?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "listening on {addr}")?;
        out.flush()?;
    }
    tracing::info!(target: "cairn::serve", %addr, "listening");
    let tokens = Arc::new(settings.tokens);
    let rates = Arc::new(Rates::default());
    let state = AppState {
        store: store.clone(),
        epochs: store.epochs(),
        spool: store.spool(),
        diagnostics: store.diagnostics(),
        metrics: metrics.clone(),
        doctor: Arc::new(Target {
            url: target.clone(),
            retention_max_bytes: settings.retention_max_bytes,
            parked_threshold: settings.parked_threshold,
            store: store.store_diagnostics(),
            migrations: cairn::migrate::Migrations::of(&store),
            storage: storage::Watch::default(),
        }),
        ui: settings
            .ui
            .enabled
            .then(|| Arc::new(Ui::new(tokens.clone(), &settings.ui, rates.clone()))),
        page_bytes: settings.page_bytes,
        sync: Arc::new(SyncHub::new(
            settings.limits.request_timeout,
            settings.limits.max_body_bytes,
        )),
    };
    let ui_enabled = state.ui.is_some();
    let app = routes::router(state, tokens, settings.limits);
    let conn_limits = settings.connections;
    let drain = settings.drain;
    let worker = match settings.delivery {
        Some(d) => Some(delivery::Worker::start(store.spool(), d, drain, metrics.clone()).await?),
        None => None,
    };
    let (stopping_tx, mut stopping) = tokio::sync::watch::channel(false);
    let backfill = backfill::spawn(
        store.diagnostics(),
        settings.backfill,
        metrics.clone(),
        stopping.clone(),
    );
    let sampler = ui_enabled.then(|| rates.spawn(metrics.clone(), stopping.clone()));
    let retention = retention::spawn(
        store.spool(),
        settings.retention,
        metrics.clone(),
        stopping.clone(),
    );
    let scheduler = settings.scheduler.then(|| {
        let mut signal = stopping.clone();
        let scheduler = cairn::spool::Scheduler::new(store.spool()).on_fire(|firing| {
            tracing::info!(
                target: "cairn::schedule",
                schedule = %firing.name,
                queue = %firing.queue,
                ticks = firing.runs.len(),
                caught_up = firing.missed,
                high_water = %firing.high_water,
                "schedule fired"
            );
        });
        tokio::spawn(async move {
            let stats = scheduler
                .run_until(async move {
                    let _ = signal.wait_for(|s| *s).await;
                })
                .await;
            tracing::info!(
                target: "cairn::schedule",
                rounds = stats.rounds,
                ticks = stats.ticks,
                errors = stats.errors,
                "scheduler stopped"
            );
        })
    });
    // The worker stops with the HTTP side (or when the server ends and drops the sender), so
    // both drains share the one drain bound.
    let worker = worker.map(|w| {
        let mut signal = stopping.clone();
        tokio::spawn(async move {
            let _ = signal.wait_for(|s| *s).await;
            w.stop().await;
        })
    });
    let server = connections::serve(listener, app, conn_limits, metrics.clone(), async move {
        signal.await;
        tracing::info!(target: "cairn::serve", "shutting down");
        let _ = stopping_tx.send(true);
    });
    let mut server = tokio::spawn(server);
    let served = tokio::select! {
        joined = &mut server => joined
            .map_err(|e| CliError::Config(format!("the server task failed: {e}"))),
        () = async {
            let _ = stopping.wait_for(|s| *s).await;
            tokio::time::sleep(drain).await;
        } => {
            server.abort();
            tracing::warn!(
                target: "cairn::serve",
                drain_secs = drain.as_secs_f64(),
                "in-flight requests did not finish within the drain timeout; closing the store \
                 anyway"
            );
            Ok(())
        }
    };
    if let Some(worker) = worker {
        let _ = worker.await;
    }
    if let Some(sampler) = sampler {
        let _ = sampler.await;
    }
    if let Some(scheduler) = scheduler {
        // It stops between rounds; a round in flight is a few short transactions.
        let _ = scheduler.await;
    }
    if let Some(retention) = retention {
        // It stops after the pass in flight, whose batches start within a short budget.
        let _ = retention.await;
    }
    if let Some(backfill) = backfill {
        // It stops between spaces once `stopping` is true; a repair in flight is one short
        // transaction.
        let _ = backfill.await;
    }
    // The spans of the runs handled above go out before the process ends (the exporter's
    // own timeout bounds it; off the runtime, since the exporter blocks).
    let _ = tokio::time::timeout(
        CLOSE_FLOOR,
        tokio::task::spawn_blocking(move || telemetry.flush()),
    )
    .await;
    // Closing waits for the connections in use (behind a transaction-mode pooler, for every
    // checkout to commit first); bounded, so that a connection that never comes back cannot
    // keep the process from exiting: what was still open is rolled back by the database when
    // the process's connections end.
    let bound = drain.max(CLOSE_FLOOR);
    match tokio::time::timeout(bound, store.close()).await {
        Ok(closed) => closed?,
        Err(_) => tracing::warn!(
            target: "cairn::serve",
            close_secs = bound.as_secs_f64(),
            "the store did not close in time (a connection was still in use); exiting anyway"
        ),
    }
    served
}

/// The least time closing the store gets on shutdown, whatever `--drain-timeout` says (an
/// orderly close takes milliseconds).
const CLOSE_FLOOR: Duration = Duration::from_secs(5);

/// Logs what the open did to each migration set that changed or stayed behind: an upgrade, a
/// contract revision applied (forced or not), and a contract revision deferred because live
/// builds lack it — the store stays behind this build until they are gone (`cairn migrate
/// fleet` lists them; a later start or `cairn migrate up` applies it).
fn log_migrations(store: &cairn::Store) {
    for set in store.migrations() {
        if let cairn::migrate::Opened::Upgraded { from, applied } = &set.outcome {
            tracing::info!(
                target: "cairn::serve",
                set = %set.set,
                from = from.as_deref().unwrap_or("(empty)"),
                applied = %applied.join(" "),
                "migrated the store"
            );
        }
        for c in &set.contracts {
            tracing::warn!(
                target: "cairn::serve",
                set = %set.set,
                revision = %c.revision,
                forced = c.forced,
                "applied a contract revision"
            );
        }
        if let Some(d) = &set.deferred {
            let blockers: Vec<String> = d.blockers.iter().map(ToString::to_string).collect();
            tracing::warn!(
                target: "cairn::serve",
                set = %set.set,
                revision = %d.revision,
                blockers = %blockers.join("; "),
                "contract revision deferred: live builds lack it, so the store stays behind this \
                 build until they are gone (cairn migrate fleet lists them; the next start or \
                 cairn migrate up applies it)"
            );
        }
    }
}
