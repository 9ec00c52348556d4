//! `cargo xtask test`: run `cargo xtask lint`, provision what the suite needs (the system
//! packages of [`NEEDS`], then Postgres), then run the whole suite — every step and every test
//! binary, even when one fails — and list what failed.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, IsTerminal, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// The conventional local server the suite probes after `CAIRN_TEST_POSTGRES_URL`.
const LOCAL_PG: ([u8; 4], u16) = ([127, 0, 0, 1], 5432);
/// How long a cluster we started may take to accept connections.
const START_DEADLINE: Duration = Duration::from_secs(60);

/// A program some tests run, and the Debian packages that provide it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Need {
    /// Where the tests look for it.
    pub(crate) binary: &'static str,
    /// A variable that points the tests at another copy; when it names an existing file, the
    /// packages are not needed.
    pub(crate) env: Option<&'static str>,
    /// The Debian packages to install when it is missing.
    pub(crate) packages: &'static [&'static str],
    /// The tests that need it, for the messages.
    pub(crate) why: &'static str,
}

/// The system packages the suite needs. Adding one is adding a line; the tests that use it
/// fail (never skip) without it, so `cargo xtask test` installs it or stops before building.
pub(crate) const NEEDS: &[Need] = &[
    Need {
        binary: "/usr/bin/chromium",
        env: Some("CAIRN_CHROMIUM"),
        packages: &["chromium", "chromium-driver"],
        why: "the dashboard's browser test (crates/server/tests/browser.rs)",
    },
    Need {
        binary: "/usr/sbin/pgbouncer",
        env: None,
        packages: &["pgbouncer"],
        why: "the PgBouncer tests (crates/backend-postgres)",
    },
];

/// What provisioning the system packages comes to.
#[derive(Debug, PartialEq, Eq)]
enum Provision {
    /// Everything is there.
    Ready,
    /// Install these packages (as root, with apt-get).
    Install(Vec<&'static str>),
    /// Missing and not installable from here: the one line to print.
    Refuse(String),
}

/// Decides from what is missing and whether this process can install it (pure).
fn provision(needs: &[Need], missing: impl Fn(&Need) -> bool, root: bool, apt: bool) -> Provision {
    let missing: Vec<&Need> = needs.iter().filter(|n| missing(n)).collect();
    if missing.is_empty() {
        return Provision::Ready;
    }
    let mut packages: Vec<&'static str> = Vec::new();
    for p in missing.iter().flat_map(|n| n.packages) {
        if !packages.contains(p) {
            packages.push(p);
        }
    }
    if root && apt {
        return Provision::Install(packages);
    }
    let what = missing
        .iter()
        .map(|n| match n.env {
            Some(var) => format!("{} (or ${var}) for {}", n.binary, n.why),
            None => format!("{} for {}", n.binary, n.why),
        })
        .collect::<Vec<_>>()
        .join(", ");
    let list = packages.join(" ");
    let command = if apt {
        format!("`sudo apt-get install -y {list}`")
    } else {
        format!("your package manager's equivalent of `apt-get install -y {list}`")
    };
    Provision::Refuse(format!(
        "the suite needs {what}: run {command} (or run `cargo xtask test` as root where \
         apt-get is), then `cargo xtask test` again"
    ))
}

/// Whether `need` is missing on this machine (its variable, when set, names the copy used).
fn missing_here(need: &Need) -> bool {
    missing_with(need, |var| std::env::var_os(var))
}

/// As [`missing_here`], with the environment read through `var`.
fn missing_with(need: &Need, var: impl Fn(&str) -> Option<OsString>) -> bool {
    let path = need
        .env
        .and_then(var)
        .map_or_else(|| PathBuf::from(need.binary), PathBuf::from);
    !path.is_file()
}

/// Whether this process runs as root (`id -u`; false when that cannot be told).
fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.status.success() && o.stdout.trim_ascii() == b"0")
}

/// Whether apt-get is on this machine.
fn has_apt() -> bool {
    Path::new("/usr/bin/apt-get").is_file()
}

/// Installs what [`NEEDS`] lists and the machine lacks, or says in one line what to run.
pub(crate) fn ensure_packages() -> Result<(), String> {
    let packages = match provision(NEEDS, missing_here, is_root(), has_apt()) {
        Provision::Ready => {
            let present: Vec<&str> = NEEDS.iter().map(|n| n.binary).collect();
            eprintln!("xtask: present: {}", present.join(", "));
            return Ok(());
        }
        Provision::Refuse(line) => return Err(line),
        Provision::Install(packages) => packages,
    };
    eprintln!("xtask: installing {} (apt-get)", packages.join(" "));
    let started = Instant::now();
    install(&packages, apt_get)?;
    eprintln!(
        "xtask: installed {} in {:.0} s",
        packages.join(" "),
        started.elapsed().as_secs_f64()
    );
    match NEEDS.iter().find(|n| missing_here(n)) {
        Some(n) => Err(format!(
            "{} is still missing after installing {}",
            n.binary,
            n.packages.join(" ")
        )),
        None => Ok(()),
    }
}

/// Installs `packages` through `apt` (`apt(ARGS, PACKAGES)` runs `apt-get ARGS PACKAGES`),
/// refreshing the package lists only when the install fails: a fresh container has none, and
/// old ones name files the mirror no longer has.
fn install(
    packages: &[&str],
    mut apt: impl FnMut(&[&str], &[&str]) -> Result<(), String>,
) -> Result<(), String> {
    let Err(first) = apt(&["install", "-y"], packages) else {
        return Ok(());
    };
    eprintln!("xtask: the install failed ({first}); running apt-get update and trying again");
    apt(&["update"], &[])?;
    apt(&["install", "-y"], packages)
}

/// Runs `apt-get -q ARGS PACKAGES` quietly: its output is shown only when it fails.
fn apt_get(args: &[&str], packages: &[&str]) -> Result<(), String> {
    let out = Command::new("apt-get")
        // Another apt-get (another session's provisioning) holds the lock for a while.
        .args(["-q", "-o", "DPkg::Lock::Timeout=300"])
        .args(args)
        .args(packages)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run apt-get: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    let _ = std::io::stderr().write_all(&out.stdout);
    let _ = std::io::stderr().write_all(&out.stderr);
    Err(format!("`apt-get {}` exited with {}", args[0], out.status))
}

/// Runs the suite and returns its exit status: every step runs even when an earlier one
/// failed, and the exit status is non-zero when any did.
pub(crate) fn run(args: &[String]) -> Result<ExitCode, String> {
    let mut failures: Vec<String> = Vec::new();
    // The lint first: it builds nothing and takes a second.
    match crate::lint::check(&workspace_root()) {
        Ok(lint) => {
            eprint!("{lint}");
            if !lint.passed() {
                failures.push(format!("lint (`cargo xtask lint`): {}", lint.summary()));
            }
        }
        Err(e) => {
            eprintln!("xtask: lint: {e}");
            failures.push(format!("lint (`cargo xtask lint`): {e}"));
        }
    }
    // Before anything is built: a missing program must not cost a build and a half-run suite.
    ensure_packages()?;
    ensure_postgres();
    let args = without_no_fail_fast(args);
    // Unit, integration and conformance tests first: their output lists every test by name.
    let steps: [(&str, &[&str]); 2] = [
        (
            "tests",
            &["test", "--workspace", "--all-targets", "--no-fail-fast"],
        ),
        (
            "doc tests",
            &["test", "--workspace", "--doc", "--no-fail-fast"],
        ),
    ];
    for (name, step) in steps {
        let mut cmd = crate::cargo::plain_cargo();
        cmd.args(step).args(&args);
        let outcome = run_step(cmd, &mut std::io::stderr())?;
        if !outcome.success {
            failures.push(describe_failure(name, &outcome.failed_targets));
        }
    }
    // The API docs, every feature on (what docs.rs renders), must build without a warning:
    // a broken or private intra-doc link fails the suite.
    let mut doc = crate::cargo::plain_cargo();
    doc.args(DOC_STEP).env("RUSTDOCFLAGS", "-D warnings");
    if !run_step(doc, &mut std::io::stderr())?.success {
        failures.push("the docs build (`RUSTDOCFLAGS=\"-D warnings\" cargo doc …`)".into());
    }
    if failures.is_empty() {
        eprintln!("xtask: every step passed");
        return Ok(ExitCode::SUCCESS);
    }
    eprintln!("xtask: {} step(s) failed:", failures.len());
    for f in &failures {
        eprintln!("xtask:   {f}");
    }
    Ok(ExitCode::FAILURE)
}

/// The workspace this xtask belongs to.
fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_owned()
}

/// The docs step: `RUSTDOCFLAGS="-D warnings" cargo doc` with these arguments.
const DOC_STEP: &[&str] = &["doc", "--workspace", "--all-features", "--no-deps"];

/// The caller's arguments without a `--no-fail-fast` of their own before `--` (the steps pass
/// it already; cargo refuses it twice).
fn without_no_fail_fast(args: &[String]) -> Vec<String> {
    let cut = args.iter().position(|a| a == "--").unwrap_or(args.len());
    args[..cut]
        .iter()
        .filter(|a| *a != "--no-fail-fast")
        .chain(&args[cut..])
        .cloned()
        .collect()
}

/// How one cargo step ended.
struct StepOutcome {
    success: bool,
    /// The test targets cargo reported failing, as it names them (`-p cairn-server --test browser`).
    failed_targets: Vec<String>,
}

/// Runs a cargo step with its stderr passed on to `out` as it comes (xtask's own stderr; a
/// test gives a sink, so that its stand-in's lines never reach an outer xtask reading the
/// suite's stderr for failed targets); the stderr is also read for the targets that failed.
fn run_step(mut cmd: Command, out: &mut dyn Write) -> Result<StepOutcome, String> {
    if std::io::stderr().is_terminal() && std::env::var_os("CARGO_TERM_COLOR").is_none() {
        cmd.env("CARGO_TERM_COLOR", "always");
    }
    let mut child = cmd
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    let mut failed_targets = Vec::new();
    if let Some(stderr) = child.stderr.take() {
        for line in BufReader::new(stderr).split(b'\n') {
            let Ok(line) = line else { break };
            let _ = out.write_all(&line);
            let _ = out.write_all(b"\n");
            if let Some(target) = failed_target(&String::from_utf8_lossy(&line)) {
                if !failed_targets.contains(&target) {
                    failed_targets.push(target);
                }
            }
        }
    }
    let status = child
        .wait()
        .map_err(|e| format!("cannot wait for cargo: {e}"))?;
    Ok(StepOutcome {
        success: status.success(),
        failed_targets,
    })
}

/// The target in cargo's `error: test failed, to rerun pass `-p x --test y`` line.
fn failed_target(line: &str) -> Option<String> {
    let (_, rest) = line.split_once("to rerun pass `")?;
    let (target, _) = rest.split_once('`')?;
    Some(target.to_owned())
}

/// One line of the summary for a failed test step.
fn describe_failure(step: &str, targets: &[String]) -> String {
    if targets.is_empty() {
        format!("{step}: cargo failed (see its output above; a build error stops a step)")
    } else {
        format!("{step}: {}", targets.join(", "))
    }
}

/// Makes a Postgres server reachable when that is cheap: a configured URL is trusted as is; a
/// local Debian cluster that is installed but down gets started. Otherwise the suite's own
/// provisioning (a throwaway `initdb` cluster, then testcontainers) takes over, and its
/// Postgres tests fail with instructions when nothing works: Postgres is never skipped.
fn ensure_postgres() {
    if std::env::var_os("CAIRN_TEST_POSTGRES_URL").is_some() {
        eprintln!("xtask: Postgres: using CAIRN_TEST_POSTGRES_URL");
        return;
    }
    if local_pg_answers() {
        eprintln!("xtask: Postgres: server found on 127.0.0.1:5432");
        return;
    }
    let Some(version) = debian_cluster() else {
        eprintln!(
            "xtask: Postgres: nothing on 127.0.0.1:5432 and no local cluster in /etc/postgresql; \
             the suite will try initdb or Docker itself"
        );
        return;
    };
    eprintln!("xtask: Postgres: starting the local cluster {version}/main");
    let started = Command::new("pg_ctlcluster")
        .args(["--skip-systemctl-redirect", &version, "main", "start"])
        .status();
    match started {
        Ok(status) if status.success() => {}
        Ok(status) => eprintln!("xtask: Postgres: pg_ctlcluster exited with {status}"),
        Err(e) => eprintln!("xtask: Postgres: cannot run pg_ctlcluster: {e}"),
    }
    let deadline = Instant::now() + START_DEADLINE;
    while Instant::now() < deadline {
        if local_pg_answers() {
            eprintln!("xtask: Postgres: the local cluster accepts connections");
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!(
        "xtask: Postgres: the local cluster did not answer within {}s; the suite will try initdb or Docker itself",
        START_DEADLINE.as_secs()
    );
}

fn local_pg_answers() -> bool {
    let addr = SocketAddr::from(LOCAL_PG);
    TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok()
}

/// The newest Debian-style cluster named `main` (`/etc/postgresql/<version>/main`).
fn debian_cluster() -> Option<String> {
    let entries = std::fs::read_dir("/etc/postgresql").ok()?;
    entries
        .filter_map(Result::ok)
        .filter(|e| Path::new(&e.path()).join("main").is_dir())
        .filter_map(|e| e.file_name().into_string().ok())
        .max_by(|a, b| version_key(a).cmp(&version_key(b)))
}

/// Orders `9.6` < `16` < `17` numerically.
fn version_key(v: &str) -> Vec<u64> {
    v.split('.').map(|p| p.parse().unwrap_or(0)).collect()
}

/// `cargo xtask provision`: what `cargo xtask test` does before it builds anything.
pub(crate) fn provision_only() -> Result<ExitCode, String> {
    ensure_packages()?;
    ensure_postgres();
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_versions_order_numerically() {
        let newest = ["9.6", "16", "15", "10"]
            .into_iter()
            .max_by(|a, b| version_key(a).cmp(&version_key(b)));
        assert_eq!(newest, Some("16"));
    }

    fn missing(binaries: &'static [&'static str]) -> impl Fn(&Need) -> bool {
        move |n| binaries.contains(&n.binary)
    }

    #[test]
    fn nothing_is_installed_when_nothing_is_missing() {
        for (root, apt) in [(true, true), (false, false), (false, true)] {
            assert_eq!(provision(NEEDS, missing(&[]), root, apt), Provision::Ready);
        }
    }

    #[test]
    fn root_with_apt_installs_the_packages_of_what_is_missing_only() {
        assert_eq!(
            provision(NEEDS, missing(&["/usr/bin/chromium"]), true, true),
            Provision::Install(vec!["chromium", "chromium-driver"])
        );
        assert_eq!(
            provision(NEEDS, missing(&["/usr/sbin/pgbouncer"]), true, true),
            Provision::Install(vec!["pgbouncer"])
        );
        assert_eq!(
            provision(
                NEEDS,
                missing(&["/usr/sbin/pgbouncer", "/usr/bin/chromium"]),
                true,
                true
            ),
            Provision::Install(vec!["chromium", "chromium-driver", "pgbouncer"])
        );
    }

    #[test]
    fn a_package_two_needs_share_is_installed_once() {
        const SHARED: &[Need] = &[
            Need {
                binary: "/a",
                env: None,
                packages: &["x", "y"],
                why: "a",
            },
            Need {
                binary: "/b",
                env: None,
                packages: &["y", "z"],
                why: "b",
            },
        ];
        assert_eq!(
            provision(SHARED, |_| true, true, true),
            Provision::Install(vec!["x", "y", "z"])
        );
    }

    #[test]
    fn without_root_one_line_names_what_is_missing_and_the_command() {
        let Provision::Refuse(line) = provision(NEEDS, |_| true, false, true) else {
            panic!("not root: refused");
        };
        assert!(!line.contains('\n'), "one line: {line}");
        assert!(
            line.contains("`sudo apt-get install -y chromium chromium-driver pgbouncer`"),
            "{line}"
        );
        assert!(
            line.contains(
                "/usr/bin/chromium (or $CAIRN_CHROMIUM) for the dashboard's browser test"
            ),
            "{line}"
        );
        assert!(line.contains("/usr/sbin/pgbouncer for the PgBouncer tests"));
        // Only what is missing is named.
        let Provision::Refuse(line) =
            provision(NEEDS, missing(&["/usr/sbin/pgbouncer"]), false, true)
        else {
            panic!("not root: refused");
        };
        assert!(
            line.contains("`sudo apt-get install -y pgbouncer`"),
            "{line}"
        );
        assert!(!line.contains("chromium"), "{line}");
    }

    #[test]
    fn without_apt_the_line_names_the_packages_for_another_manager() {
        // Root, but no apt-get: nothing to install with.
        let Provision::Refuse(line) = provision(NEEDS, |_| true, true, false) else {
            panic!("no apt-get: refused");
        };
        assert!(!line.contains('\n'), "one line: {line}");
        assert!(!line.contains("sudo"), "{line}");
        assert!(
            line.contains("`apt-get install -y chromium chromium-driver pgbouncer`"),
            "{line}"
        );
    }

    #[test]
    fn a_variable_naming_an_existing_copy_stands_in_for_the_package() {
        let dir = tempfile::tempdir().unwrap();
        let copy = dir.path().join("chrome");
        std::fs::write(&copy, b"").unwrap();
        let need = Need {
            binary: "/nonexistent/xtask-test/chromium",
            env: Some("CAIRN_CHROMIUM"),
            packages: &["chromium"],
            why: "a test",
        };
        let set = |value: PathBuf| {
            move |var: &str| (var == "CAIRN_CHROMIUM").then(|| value.clone().into_os_string())
        };
        assert!(missing_with(&need, |_| None));
        assert!(!missing_with(&need, set(copy)));
        assert!(missing_with(&need, set(dir.path().join("absent"))));
        // A directory is not a program.
        assert!(missing_with(&need, set(dir.path().to_owned())));
    }

    /// What `install` asked apt-get to do, given the answers of successive calls.
    fn apt_calls(answers: &[bool]) -> (Result<(), String>, Vec<String>) {
        let mut calls = Vec::new();
        let mut answers = answers.iter();
        let result = install(&["chromium", "pgbouncer"], |args, packages| {
            calls.push([args, packages].concat().join(" "));
            match answers.next() {
                Some(true) => Ok(()),
                _ => Err("exit status: 100".into()),
            }
        });
        (result, calls)
    }

    #[test]
    fn the_package_lists_are_refreshed_only_after_a_failed_install() {
        let (result, calls) = apt_calls(&[true]);
        assert_eq!(result, Ok(()));
        assert_eq!(calls, ["install -y chromium pgbouncer"]);
        let (result, calls) = apt_calls(&[false, true, true]);
        assert_eq!(result, Ok(()));
        assert_eq!(
            calls,
            [
                "install -y chromium pgbouncer",
                "update",
                "install -y chromium pgbouncer"
            ]
        );
        // One refresh only: a second failure is the answer.
        let (result, calls) = apt_calls(&[false, true, false]);
        assert!(result.is_err());
        assert_eq!(calls.len(), 3);
        let (result, calls) = apt_calls(&[false, false]);
        assert!(result.is_err());
        assert_eq!(calls, ["install -y chromium pgbouncer", "update"]);
    }

    #[test]
    fn the_failed_targets_are_read_from_cargos_lines() {
        let stderr = "\
   Compiling xtask v0.1.0
error: test failed, to rerun pass `-p cairn-server --test browser`
error: test failed, to rerun pass `-p cairn-core --lib`
error: 2 targets failed:
    `-p cairn-server --test browser`
    `-p cairn-core --lib`";
        let targets: Vec<String> = stderr.lines().filter_map(failed_target).collect();
        assert_eq!(
            targets,
            ["-p cairn-server --test browser", "-p cairn-core --lib"]
        );
        assert_eq!(
            describe_failure("tests", &targets),
            "tests: -p cairn-server --test browser, -p cairn-core --lib"
        );
        assert!(describe_failure("doc tests", &[]).starts_with("doc tests: cargo failed"));
    }

    #[test]
    fn a_step_reports_its_status_and_the_targets_cargo_named() {
        let mut failing = Command::new("sh");
        failing.args([
            "-c",
            "echo 'error: test failed, to rerun pass `-p a --lib`' >&2; \
             echo 'error: test failed, to rerun pass `-p b --test c`' >&2; exit 101",
        ]);
        let outcome = run_step(failing, &mut std::io::sink()).unwrap();
        assert!(!outcome.success);
        assert_eq!(outcome.failed_targets, ["-p a --lib", "-p b --test c"]);
        let mut passing = Command::new("sh");
        passing.args(["-c", "echo fine >&2"]);
        let outcome = run_step(passing, &mut std::io::sink()).unwrap();
        assert!(outcome.success);
        assert!(outcome.failed_targets.is_empty());
    }

    #[test]
    fn a_callers_no_fail_fast_is_not_passed_twice() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            without_no_fail_fast(&args(&[
                "-p",
                "x",
                "--no-fail-fast",
                "--",
                "--no-fail-fast"
            ])),
            args(&["-p", "x", "--", "--no-fail-fast"])
        );
        assert_eq!(without_no_fail_fast(&args(&[])), args(&[]));
    }
}
