//! A full disk is told as one (issue 44, item 4.4): on a SQLite store on a 5 MiB tmpfs, a write
//! that does not fit is answered 503 `storage_full` (with `Retry-After`), `/readyz` stops being
//! ready, `/v1/doctor` and `cairn doctor` report the `storage` problem, and once space is freed
//! a write stores again and all of them turn back.
//!
//! The tmpfs is mounted in a private user and mount namespace (`unshare -r -m`, which needs no
//! root where unprivileged user namespaces are allowed), so nothing is mounted on the machine
//! itself; `cairn doctor` and the cleanup enter the server's namespace with `nsenter`. Where
//! namespaces are refused the test fails, saying so.

mod common;

use std::process::Command;
use std::time::Duration;

use serde_json::Value;

const TOKEN: &str = "storage-full-test-token-81c2e4";

struct Server {
    serving: common::Serving,
    vol: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.serving.child.kill();
        let _ = self.serving.child.wait();
    }
}

impl Server {
    /// A command run inside the server's namespaces.
    fn inside(&self, program: &str) -> Command {
        let mut cmd = Command::new("nsenter");
        cmd.args(["-t", &self.serving.child.id().to_string()])
            .args(["-U", "-m", "--preserve-credentials", program]);
        for (var, _) in std::env::vars_os() {
            if var.to_string_lossy().starts_with("CAIRN_") {
                cmd.env_remove(var);
            }
        }
        cmd
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.serving.addr)
    }
}

fn start(dir: &tempfile::TempDir) -> Server {
    let vol = dir.path().join("vol");
    std::fs::create_dir(&vol).unwrap();
    let vol = vol.to_str().unwrap().to_owned();
    let db = format!("{vol}/store.db");
    let mut cmd = Command::new("unshare");
    for (var, _) in std::env::vars_os() {
        if var.to_string_lossy().starts_with("CAIRN_") {
            cmd.env_remove(var);
        }
    }
    // The filler is what the test frees later to make room.
    let script = r#"mount -t tmpfs -o size=5m tmpfs "$1" \
        && head -c 2000000 /dev/zero > "$1/filler" && shift && exec "$@""#;
    cmd.env("CAIRN_AUTH__TOKENS", TOKEN)
        .args(["-r", "-m", "sh", "-c", script, "sh", &vol])
        .arg(env!("CARGO_BIN_EXE_cairn"))
        .args(["--database", &db, "serve", "--listen", "127.0.0.1:0"])
        .args([
            "--retention-enabled",
            "false",
            "--backfill-enabled",
            "false",
        ]);
    Server {
        serving: common::serve(&mut cmd, Duration::from_secs(30)),
        vol,
    }
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into()
}

/// Status, `Retry-After` and JSON body of an answer.
fn answer(res: ureq::http::Response<ureq::Body>) -> (u16, Option<String>, Value) {
    let status = res.status().as_u16();
    let retry = res
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let text = res.into_body().read_to_string().unwrap();
    (
        status,
        retry,
        serde_json::from_str(&text).unwrap_or(Value::Null),
    )
}

fn append(agent: &ureq::Agent, s: &Server, n: usize) -> (u16, Option<String>, Value) {
    let body = serde_json::json!({"events": [{"kind": "fill", "payload": format!("{n:08}{}", "x".repeat(64 * 1024))}]});
    answer(
        agent
            .post(&s.url("/v1/spaces/fill/epochs"))
            .header("Authorization", &format!("Bearer {TOKEN}"))
            .content_type("application/json")
            .send(body.to_string().as_bytes())
            .unwrap(),
    )
}

fn get(agent: &ureq::Agent, s: &Server, path: &str) -> (u16, Value) {
    let (status, _, body) = answer(
        agent
            .get(&s.url(path))
            .header("Authorization", &format!("Bearer {TOKEN}"))
            .call()
            .unwrap(),
    );
    (status, body)
}

fn storage_check(report: &Value) -> Value {
    report["checks"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == "storage"))
        .cloned()
        .unwrap_or_else(|| panic!("a storage check: {report}"))
}

#[test]
fn a_full_disk_is_answered_storage_full_and_reported_until_a_write_fits_again() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(&dir);
    let agent = agent();
    assert_eq!(get(&agent, &s, "/readyz").0, 200);
    // Fill the volume: 64 KiB epochs until one does not fit (5 MiB holds fewer than 80).
    let mut refused = None;
    for n in 0..200 {
        let (status, retry, body) = append(&agent, &s, n);
        match status {
            201 => continue,
            503 if body["error"]["code"] == "storage_full" => {
                refused = Some((retry, body));
                break;
            }
            other => panic!("append {n} answered {other}: {body}"),
        }
    }
    let (retry, body) = refused.expect("the volume fills within 200 appends");
    assert_eq!(retry.as_deref(), Some("1"), "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("SQLITE_FULL"), "{message}");

    let (status, ready) = get(&agent, &s, "/readyz");
    assert_eq!(
        (status, &ready["error"]["code"]),
        (503, &Value::from("storage_full")),
        "{ready}"
    );
    let (status, report) = get(&agent, &s, "/v1/doctor");
    assert_eq!(
        (status, &report["healthy"]),
        (503, &Value::from(false)),
        "{report}"
    );
    let check = storage_check(&report);
    assert_eq!(check["level"], "problem", "{check}");
    assert!(
        check["detail"].as_str().unwrap().contains("SQLITE_FULL"),
        "{check}"
    );

    // `cairn doctor`, another process, sees the file system with no room left.
    let out = s
        .inside(env!("CARGO_BIN_EXE_cairn"))
        .args([
            "--database",
            &format!("{}/store.db", s.vol),
            "doctor",
            "--json",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cli: Value = serde_json::from_str(&stdout).unwrap();
    let check = storage_check(&cli);
    assert_eq!(check["level"], "problem", "{check}");
    assert!(
        check["detail"].as_str().unwrap().contains("bytes free"),
        "{check}"
    );

    // Room again: the next write stores, and everything turns back.
    let freed = s
        .inside("rm")
        .arg(format!("{}/filler", s.vol))
        .status()
        .unwrap();
    assert!(freed.success());
    let (status, _, body) = append(&agent, &s, 1000);
    assert_eq!(status, 201, "{body}");
    assert_eq!(get(&agent, &s, "/readyz").0, 200);
    let (status, report) = get(&agent, &s, "/v1/doctor");
    assert_eq!(storage_check(&report)["level"], "ok", "{report}");
    assert_eq!(status, 200, "{report}");
}
