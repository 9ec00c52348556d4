//! The cargo that xtask starts: the shell's environment, not the one `cargo run` gave xtask.
//!
//! This module uses nothing else of the crate, so every task can use it without an import
//! cycle (`cargo xtask lint`).

/// A `cargo` command (the `CARGO` that runs this xtask, else `cargo` on the path) with the
/// caller's environment minus the per-package variables cargo set for this binary
/// ([`set_by_cargo_run`]): the environment a plain `cargo …` typed in a shell sees.
///
/// Every cargo that xtask starts is one of these. Build scripts ask cargo to rerun when some
/// of those variables change (ring's asks for `CARGO_MANIFEST_DIR` and `CARGO_PKG_NAME`), so
/// a nested cargo that inherited `cargo xtask`'s values rebuilt ring and everything above it
/// (rustls, sqlx, reqwest, the cairn crates) once for the shell's builds and once for
/// xtask's: in `cargo xtask test`, the doc-test step rebuilt them after the tests had.
pub(crate) fn plain_cargo() -> std::process::Command {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = std::process::Command::new(cargo);
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(set_by_cargo_run) {
            cmd.env_remove(name);
        }
    }
    cmd
}

/// Whether `name` is one of the variables cargo sets for the package of the binary it runs
/// (`cargo run`, and so `cargo xtask`) or of a test: the manifest's directory and path, the
/// `CARGO_PKG_*` metadata, the crate and binary names, the test's scratch directory. The
/// user's own variables (`CARGO_HOME`, `CARGO_TARGET_DIR`, `CARGO_BUILD_*`, `RUSTFLAGS`, …)
/// are not among them: they are what a plain `cargo build` sees too.
pub(crate) fn set_by_cargo_run(name: &str) -> bool {
    name.starts_with("CARGO_PKG_")
        || matches!(
            name,
            "CARGO_MANIFEST_DIR"
                | "CARGO_MANIFEST_PATH"
                | "CARGO_MANIFEST_LINKS"
                | "CARGO_CRATE_NAME"
                | "CARGO_BIN_NAME"
                | "CARGO_PRIMARY_PACKAGE"
                | "CARGO_TARGET_TMPDIR"
                | "CARGO_RUSTC_CURRENT_DIR"
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_per_package_variables_are_dropped() {
        for dropped in [
            "CARGO_MANIFEST_DIR",
            "CARGO_MANIFEST_PATH",
            "CARGO_PKG_NAME",
            "CARGO_PKG_VERSION_MAJOR",
            "CARGO_CRATE_NAME",
            "CARGO_BIN_NAME",
        ] {
            assert!(set_by_cargo_run(dropped), "{dropped} is kept");
        }
        for kept in [
            "CARGO",
            "CARGO_HOME",
            "CARGO_TARGET_DIR",
            "CARGO_BUILD_JOBS",
            "RUSTFLAGS",
            "CAIRN_DATABASE",
        ] {
            assert!(!set_by_cargo_run(kept), "{kept} is dropped");
        }
    }

    /// Every cargo xtask starts (the test steps, `migrate`, the benches, cargo-mutants) drops
    /// the variables cargo set for this process and keeps the rest: under `cargo test`, as
    /// under `cargo xtask`, `CARGO_PKG_NAME` and `CARGO_MANIFEST_DIR` are set here.
    #[test]
    fn a_nested_cargo_gets_the_shells_environment() {
        assert!(std::env::var_os("CARGO_PKG_NAME").is_some());
        let cmd = plain_cargo();
        let envs: Vec<(String, bool)> = cmd
            .get_envs()
            .map(|(k, v)| (k.to_string_lossy().into_owned(), v.is_some()))
            .collect();
        for dropped in ["CARGO_PKG_NAME", "CARGO_MANIFEST_DIR"] {
            assert!(
                envs.contains(&(dropped.to_string(), false)),
                "{dropped} is passed on: {envs:?}"
            );
        }
        assert!(
            envs.iter().all(|(k, _)| set_by_cargo_run(k)),
            "only per-package variables are touched: {envs:?}"
        );
    }
}
