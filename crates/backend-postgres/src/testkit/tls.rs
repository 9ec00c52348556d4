//! Throwaway clusters for the TLS tests: a private `initdb`/`pg_ctl` cluster (as the third
//! provisioning step starts one) with `ssl = on` and certificates made at test time with
//! rcgen, or one with `ssl = off`.
//!
//! The certificates: a CA; the server's certificate, signed by it, for DNS name `localhost`
//! only, so that `127.0.0.1` is "another host name" for `verify-full`; a client certificate
//! signed by the same CA; a client certificate from an unrelated CA (a stranger's). The
//! cluster's `pg_hba.conf` admits role [`CERT_USER`] only over TLS with a client certificate
//! its CA signed (`clientcert=verify-ca`), and every other role with trust, TLS or not.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::str::FromStr;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use sqlx::postgres::{PgConnectOptions, PgSslMode};
use sqlx::{Connection, PgConnection};
use tokio::sync::OnceCell;

use super::provision::{
    find_pg_bin, keep_watchdog_stdin, pg_command, run, running_as_root, spawn_watchdog,
};

/// The role the TLS cluster admits only with a client certificate signed by its CA.
pub const CERT_USER: &str = "cairn_cert_user";

/// A throwaway cluster on `127.0.0.1`, stopped and removed when the test process exits.
#[derive(Debug)]
pub struct TlsCluster {
    port: u16,
    certs: PathBuf,
}

static WITH_SSL: OnceCell<Result<TlsCluster, String>> = OnceCell::const_new();
static WITHOUT_SSL: OnceCell<Result<TlsCluster, String>> = OnceCell::const_new();

impl TlsCluster {
    /// The process's cluster with `ssl = on` (started on first use).
    ///
    /// # Errors
    /// Why no cluster could be had (no `initdb`/`pg_ctl`, a failed start): the tests fail with
    /// it, they do not skip.
    pub async fn with_ssl() -> Result<&'static Self, String> {
        Self::shared(&WITH_SSL, true).await
    }

    /// The process's cluster with `ssl = off` (started on first use).
    ///
    /// # Errors
    /// As [`TlsCluster::with_ssl`].
    pub async fn without_ssl() -> Result<&'static Self, String> {
        Self::shared(&WITHOUT_SSL, false).await
    }

    async fn shared(
        cell: &'static OnceCell<Result<Self, String>>,
        ssl: bool,
    ) -> Result<&'static Self, String> {
        cell.get_or_init(|| async move {
            let cluster = tokio::task::spawn_blocking(move || start(ssl))
                .await
                .map_err(|e| format!("the cluster's start panicked: {e}"))??;
            cluster.create_cert_user().await?;
            Ok(cluster)
        })
        .await
        .as_ref()
        .map_err(|e| format!("no throwaway TLS cluster for the TLS tests: {e}"))
    }

    /// `postgres://USER@HOST:PORT/postgres?PARAMS` for this cluster (`params` without `?`,
    /// may be empty).
    pub fn url(&self, user: &str, host: &str, params: &str) -> String {
        let query = if params.is_empty() {
            String::new()
        } else {
            format!("?{params}")
        };
        format!("postgres://{user}@{host}:{}/postgres{query}", self.port)
    }

    /// The PEM file of the CA that signed the server's and the client's certificates.
    pub fn ca_file(&self) -> PathBuf {
        self.certs.join("ca.crt")
    }

    /// The client certificate the cluster's CA signed (PEM).
    pub fn client_cert_file(&self) -> PathBuf {
        self.certs.join("client.crt")
    }

    /// The private key of [`TlsCluster::client_cert_file`] (PEM, PKCS#8).
    pub fn client_key_file(&self) -> PathBuf {
        self.certs.join("client.key")
    }

    /// A client certificate from a CA the cluster does not know (PEM).
    pub fn stranger_cert_file(&self) -> PathBuf {
        self.certs.join("stranger.crt")
    }

    /// The private key of [`TlsCluster::stranger_cert_file`] (PEM, PKCS#8).
    pub fn stranger_key_file(&self) -> PathBuf {
        self.certs.join("stranger.key")
    }

    async fn create_cert_user(&self) -> Result<(), String> {
        let opts = PgConnectOptions::from_str(&self.url("postgres", "127.0.0.1", ""))
            .map_err(|e| e.to_string())?
            .ssl_mode(PgSslMode::Disable);
        let mut conn = PgConnection::connect_with(&opts)
            .await
            .map_err(|e| format!("cannot connect to the new cluster: {e}"))?;
        sqlx::query(&format!("CREATE ROLE {CERT_USER} LOGIN SUPERUSER"))
            .execute(&mut conn)
            .await
            .map_err(|e| format!("cannot create role {CERT_USER}: {e}"))?;
        let _ = conn.close().await;
        Ok(())
    }
}

/// A certificate and its key, both PEM.
struct Issued {
    cert: String,
    key: String,
}

/// Makes the CA, the server's and the clients' certificates.
fn make_certificates() -> Result<(Issued, Issued, Issued, Issued), rcgen::Error> {
    let ca_of = |name: &str| -> Result<(rcgen::Certificate, KeyPair), rcgen::Error> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        Ok((params.self_signed(&key)?, key))
    };
    let leaf = |names: Vec<String>,
                cn: &str,
                usage: ExtendedKeyUsagePurpose,
                (ca, ca_key): &(rcgen::Certificate, KeyPair)|
     -> Result<Issued, rcgen::Error> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(names)?;
        params.distinguished_name.push(DnType::CommonName, cn);
        params.extended_key_usages = vec![usage];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let cert = params.signed_by(&key, ca, ca_key)?;
        Ok(Issued {
            cert: cert.pem(),
            key: key.serialize_pem(),
        })
    };
    let ca = ca_of("cairn test CA")?;
    let stranger_ca = ca_of("cairn test stranger CA")?;
    let server = leaf(
        vec!["localhost".into()],
        "localhost",
        ExtendedKeyUsagePurpose::ServerAuth,
        &ca,
    )?;
    let client = leaf(vec![], CERT_USER, ExtendedKeyUsagePurpose::ClientAuth, &ca)?;
    let stranger = leaf(
        vec![],
        CERT_USER,
        ExtendedKeyUsagePurpose::ClientAuth,
        &stranger_ca,
    )?;
    let ca = Issued {
        cert: ca.0.pem(),
        key: ca.1.serialize_pem(),
    };
    Ok((ca, server, client, stranger))
}

/// What `pg_hba.conf` starts with: [`CERT_USER`] only over TLS with a client certificate the
/// cluster's CA signed. initdb's trust lines follow for everyone else.
fn hba_prefix() -> String {
    format!(
        "hostssl all {CERT_USER} 127.0.0.1/32 trust clientcert=verify-ca\n\
         host all {CERT_USER} 127.0.0.1/32 reject\n"
    )
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// Starts a cluster (blocking: initdb and pg_ctl); `ssl` turns TLS on.
fn start(ssl: bool) -> Result<TlsCluster, String> {
    use std::os::unix::fs::PermissionsExt;

    let bin = find_pg_bin()
        .ok_or("initdb/pg_ctl not found on PATH or under /usr/lib/postgresql/*/bin")?;
    let as_postgres = running_as_root();
    let dir = tempfile::Builder::new()
        .prefix("cairn-pg-tls-")
        .tempdir()
        .map_err(|e| format!("cannot create a temp dir: {e}"))?
        .keep();
    let cleanup = |e: String| {
        let _ = std::fs::remove_dir_all(&dir);
        e
    };
    let data = dir.join("data");
    let certs = dir.join("certs");
    std::fs::create_dir(&certs).map_err(|e| cleanup(format!("cannot create a dir: {e}")))?;

    let (ca, server, client, stranger) =
        make_certificates().map_err(|e| cleanup(format!("cannot make certificates: {e}")))?;
    for (name, text) in [
        ("ca.crt", &ca.cert),
        ("server.crt", &server.cert),
        ("server.key", &server.key),
        ("client.crt", &client.cert),
        ("client.key", &client.key),
        ("stranger.crt", &stranger.cert),
        ("stranger.key", &stranger.key),
    ] {
        write(&certs.join(name), text).map_err(cleanup)?;
    }
    // The server refuses a key file that others can read.
    std::fs::set_permissions(
        certs.join("server.key"),
        std::fs::Permissions::from_mode(0o600),
    )
    .map_err(|e| cleanup(format!("cannot chmod the server key: {e}")))?;
    if as_postgres {
        let mut chown = Command::new("chown");
        chown.arg("-R").arg("postgres:").arg(&dir);
        run(chown, "chown").map_err(cleanup)?;
    }

    let mut initdb = pg_command(as_postgres, &bin.join("initdb"));
    initdb
        .arg("-D")
        .arg(&data)
        .args(["-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync"])
        .arg("--no-locale");
    run(initdb, "initdb").map_err(cleanup)?;
    let hba = data.join("pg_hba.conf");
    let initdb_lines =
        std::fs::read_to_string(&hba).map_err(|e| cleanup(format!("cannot read pg_hba: {e}")))?;
    write(&hba, &format!("{}{initdb_lines}", hba_prefix())).map_err(cleanup)?;

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| cleanup(format!("no free port: {e}")))?
        .port();
    let mut server_opts = format!(
        "-p {port} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=50",
        dir.display()
    );
    if ssl {
        server_opts.push_str(&format!(
            " -c ssl=on -c ssl_cert_file={} -c ssl_key_file={} -c ssl_ca_file={}",
            certs.join("server.crt").display(),
            certs.join("server.key").display(),
            certs.join("ca.crt").display(),
        ));
    } else {
        server_opts.push_str(" -c ssl=off");
    }
    let mut start = pg_command(as_postgres, &bin.join("pg_ctl"));
    start
        .arg("-D")
        .arg(&data)
        .arg("-l")
        .arg(dir.join("server.log"))
        .args(["-w", "-t", "60", "-o"])
        .arg(server_opts)
        .arg("start");
    run(start, "pg_ctl start").map_err(cleanup)?;

    let watchdog =
        spawn_watchdog("cairn-pg-tls-watchdog", as_postgres, &bin, &data, &dir).map_err(cleanup)?;
    keep_watchdog_stdin(watchdog);
    Ok(TlsCluster { port, certs })
}
