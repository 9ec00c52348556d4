//! `cargo xtask mutants`'s command line.

use std::path::PathBuf;

/// `cargo xtask mutants` arguments.
#[derive(clap::Args, Clone, Debug)]
pub(crate) struct MutantsArgs {
    /// Run only this scope (repeatable); default: every scope in mutants/scopes.toml.
    #[arg(long = "scope", value_name = "NAME")]
    pub(super) scopes: Vec<String>,
    /// Run one shard of each scope's mutants, `K/N` with K from 0 (cargo-mutants `--shard`);
    /// the floor is then judged on that shard.
    #[arg(long, value_name = "K/N", value_parser = parse_shard)]
    pub(super) shard: Option<(u32, u32)>,
    /// List each scope's mutants (cargo-mutants `--list`) and the command that would test
    /// them, without building or testing anything.
    #[arg(long)]
    pub(super) list: bool,
    /// Mutate a clean export of this commit (`git archive REV`) instead of the working tree,
    /// so that uncommitted edits (yours or anyone's) are not part of the run.
    #[arg(long, value_name = "REV")]
    pub(super) commit: Option<String>,
    /// Where each scope's `mutants.out` goes: `DIR/<scope>/mutants.out`.
    #[arg(long, value_name = "DIR", default_value = "target/mutants")]
    pub(super) out: PathBuf,
    /// One target directory for the scopes of this run (`CARGO_TARGET_DIR`), so dependencies
    /// build once. Never give the same one to two runs at the same time: the copies would
    /// link each other's mutated crates. Default: each copy builds in its own.
    #[arg(long, value_name = "DIR")]
    pub(super) target_dir: Option<PathBuf>,
    /// Parallel cargo-mutants jobs (`-j`); each job builds a copy of the tree.
    #[arg(long, default_value_t = 1)]
    pub(super) jobs: u32,
    /// Do not run cargo-mutants: judge the `outcomes.json` a previous run left under `--out`
    /// (e.g. after adding an entry to mutants/equivalent.toml).
    #[arg(long, conflicts_with = "list")]
    pub(super) report_only: bool,
    /// Re-test only the mutants the last run under `--out` did not catch (cargo-mutants
    /// `--iterate`: caught and unviable ones are skipped), then judge each scope on the merged
    /// outcomes — this run's fate for the mutants it tested, the earlier run's for the others,
    /// over the mutants the tree has now. For confirming the tests written for survivors.
    #[arg(long, conflicts_with_all = ["list", "report_only", "shard"])]
    pub(super) iterate: bool,
}

pub(super) fn parse_shard(s: &str) -> Result<(u32, u32), String> {
    let (k, n) = s.split_once('/').ok_or("expected K/N, e.g. 0/4")?;
    let k: u32 = k.parse().map_err(|_| format!("bad shard index {k:?}"))?;
    let n: u32 = n.parse().map_err(|_| format!("bad shard count {n:?}"))?;
    if n == 0 || k >= n {
        return Err(format!("shard {k}/{n}: need 0 <= K < N"));
    }
    Ok((k, n))
}
