//! `cairn sync --follow` between two processes: an edge SQLite store written by the test with
//! the library, a central `cairn serve` on Postgres (token auth) reached over HTTP, and the
//! follower as a child process. After each burst of appends the central store comes to hold the
//! same heads (a condition with a deadline); SIGTERM then ends the follower with status 0.

mod common;
mod sync_common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sync_common::{append, assert_same, head_ids, open, runtime, space};

const TOKEN: &str = "sync-follow-token-7c2e9a41";
/// How long the central store may take to catch up with a burst, or a process to start or stop.
const DEADLINE: Duration = Duration::from_secs(10);

#[test]
fn sync_follow() {
    common::on_postgres("sync_follow", |pg| {
        let dir = tempfile::tempdir().unwrap();
        let edge_url = dir.path().join("edge.db").display().to_string();
        let rt = runtime();
        let s = space("follow");
        let edge = rt.block_on(open(&edge_url));
        let central = rt.block_on(open(pg));
        let (e, c) = (edge.diagnostics(), central.diagnostics());
        rt.block_on(append(e.as_ref(), &s, "before", 3));

        let server = common::ApiServer::start(pg, TOKEN, DEADLINE);
        // A wrong token: one line, without the token.
        let out = sync_common::cairn()
            .args(["sync", &edge_url, &server.base, "--space", "follow"])
            .env("CAIRN_DEST_TOKEN", "wrong-token-0d9f")
            .output()
            .unwrap();
        let msg = sync_common::fails(out);
        assert!(!msg.contains("wrong-token"), "{msg}");
        let mut follower = sync_common::cairn()
            .args([
                "sync",
                &edge_url,
                &server.base,
                "--space",
                "follow",
                "--follow",
            ])
            .env("CAIRN_DEST_TOKEN", TOKEN)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn cairn sync --follow");
        let printed = Arc::new(Mutex::new(String::new()));
        let stdout = follower.stdout.take().unwrap();
        let sink = printed.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let mut all = sink.lock().unwrap();
                all.push_str(&line);
                all.push('\n');
            }
        });

        for (burst, n) in [1usize, 17, 4, 60, 2].into_iter().enumerate() {
            rt.block_on(append(e.as_ref(), &s, &format!("burst{burst}"), n));
            let want = rt.block_on(head_ids(e.as_ref(), &s));
            let deadline = Instant::now() + DEADLINE;
            loop {
                let got = match rt.block_on(c.heads(&s)) {
                    Ok(h) => {
                        let mut ids: Vec<_> = h.iter().map(|h| h.id).collect();
                        ids.sort();
                        ids
                    }
                    Err(_) => Vec::new(),
                };
                if got == want {
                    break;
                }
                if let Some(status) = follower.try_wait().unwrap() {
                    panic!("the follower exited ({status:?}) during burst {burst}");
                }
                assert!(
                    Instant::now() < deadline,
                    "the central store caught up with burst {burst} in time"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
            rt.block_on(assert_same(&e, &c, &s));
        }

        let status = Command::new("kill")
            .args(["-TERM", &follower.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let deadline = Instant::now() + DEADLINE;
        let status = loop {
            if let Some(status) = follower.try_wait().unwrap() {
                break status;
            }
            assert!(Instant::now() < deadline, "the follower stops in time");
            std::thread::sleep(Duration::from_millis(20));
        };
        reader.join().unwrap();
        let mut err = String::new();
        std::io::Read::read_to_string(&mut follower.stderr.take().unwrap(), &mut err).unwrap();
        assert!(
            status.success(),
            "SIGTERM ends the follow with 0: {status:?} {err}"
        );
        assert_eq!(err, "", "nothing on stderr");
        let printed = printed.lock().unwrap().clone();
        assert!(
            printed.lines().any(|l| l.starts_with("total ")),
            "{printed}"
        );
        assert!(!printed.contains(TOKEN), "{printed}");
        let moved: u64 = printed
            .lines()
            .filter(|l| l.starts_with("total "))
            .map(|l| sync_common::words(l)["epochs"].parse::<u64>().unwrap())
            .sum();
        assert_eq!(moved, 3 + 1 + 17 + 4 + 60 + 2, "{printed}");
        drop(server);
        rt.block_on(central.close()).unwrap();
    });
}
