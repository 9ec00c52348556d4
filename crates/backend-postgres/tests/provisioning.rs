//! The testcontainers step of test-server provisioning, where no Docker engine answers: it
//! fails promptly with a reason instead of hanging or passing. (Its success path needs a Docker
//! engine, which this project's CI machine does not have.)

#[tokio::test]
async fn testcontainers_step_fails_with_a_reason_when_no_docker_engine_answers() {
    let dir = tempfile::tempdir().unwrap();
    // A socket path where nothing listens: the step must report that, whatever the machine has.
    std::env::set_var(
        "DOCKER_HOST",
        format!("unix://{}", dir.path().join("no-docker.sock").display()),
    );
    let outcome = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        cairn_postgres::testkit::start_docker_postgres(),
    )
    .await
    .expect("the step gives up within a minute");
    let err = outcome.expect_err("no Docker engine, so no server");
    assert!(err.contains("Docker"), "{err}");
}
