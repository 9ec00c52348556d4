//! [`SqliteEngine`]: one SQLite store location (a file path), before anything is opened —
//! what `cairn::Store` asks for a `sqlite://` URL or a bare path.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use cairn_core::Result;
use cairn_migrate::additivity::AdditivityEngine;
use cairn_migrate::backend::{Backend, Engine, EngineOptions};
use cairn_migrate::{Diagnostics, MigrationBackend, OpenOptions};

use crate::additivity::SqliteAdditivity;
use crate::backend::SqliteBackend;
use crate::config::SqliteOptions;
use crate::diagnostics::SqliteDiagnostics;
use crate::files;
use crate::migrate::SqliteMigrator;

/// One SQLite store location: the file at a path. Constructing it touches nothing.
#[derive(Clone, Debug)]
pub struct SqliteEngine {
    path: PathBuf,
}

impl SqliteEngine {
    /// The store file at `path`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    /// The store file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[async_trait]
impl Engine for SqliteEngine {
    fn name(&self) -> &'static str {
        "sqlite"
    }

    /// [`SqliteBackend::open`] with `engine`'s busy timeout, read connections, creation and
    /// file sharing.
    async fn open(&self, engine: &EngineOptions, open: OpenOptions) -> Result<Arc<dyn Backend>> {
        let mut opts = SqliteOptions::default()
            .create_if_missing(engine.create_if_missing)
            .share_file_with_application(engine.share_sqlite_file);
        if let Some(t) = engine.busy_timeout {
            opts = opts.busy_timeout(t);
        }
        if let Some(n) = engine.read_connections {
            opts = opts.read_connections(n);
        }
        Ok(Arc::new(SqliteBackend::open(&self.path, opts, open).await?))
    }

    /// A [`SqliteMigrator`] of the file; with `create_if_missing` off a missing file is
    /// refused here, before any connection could create it.
    fn migrator(&self, create_if_missing: bool) -> Result<Arc<dyn MigrationBackend>> {
        if !create_if_missing && !files::exists(&self.path)? {
            return Err(files::no_store(&self.path));
        }
        let opts = SqliteOptions::default().create_if_missing(create_if_missing);
        Ok(Arc::new(SqliteMigrator::new(&self.path, opts)))
    }

    /// Whether anything (a file, or a symlink, dangling or not) sits at the path.
    async fn location_exists(&self) -> Result<bool> {
        files::exists(&self.path)
    }

    fn diagnostics(&self) -> Result<Arc<dyn Diagnostics>> {
        Ok(Arc::new(SqliteDiagnostics::new(&self.path)))
    }

    /// The in-memory check; it never touches the file.
    fn additivity(&self) -> Result<Arc<dyn AdditivityEngine>> {
        Ok(Arc::new(SqliteAdditivity::new()))
    }
}
