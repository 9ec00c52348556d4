//! The fuzz targets: one per parser or decoder of outside input, each through public APIs only.

mod core_types;
mod legacy;
mod migrate;
mod server;
mod signature;
mod target;
mod url;

pub use target::Target;

/// Every target, in the order the driver runs them.
pub const TARGETS: &[Target] = &[
    core_types::FEED_CURSOR,
    core_types::DEDUP_KEY,
    core_types::FOREIGN_EPOCH,
    core_types::IDS,
    legacy::LEGACY_RAW,
    legacy::LEGACY_SEALED,
    migrate::SQL_SPLIT,
    migrate::MIGRATION_FILES,
    migrate::CHECKSUM_HEX,
    url::DATABASE_URL,
    server::HTTP_BODY,
    server::CONFIG,
];

/// The target called `name`.
pub fn by_name(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}
