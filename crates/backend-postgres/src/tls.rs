//! Postgres over TLS: the checks on a URL's TLS settings, and one-line errors for a failed
//! TLS setup.
//!
//! The driver does the TLS (sqlx with rustls, the platform's roots when no `sslrootcert` is
//! given). This module refuses, before any connection is tried, a setting the driver would not
//! honour or would quietly weaken: `sslmode=allow` (which the driver treats as `disable`), an
//! unknown `sslmode` (from the URL or `PGSSLMODE`, which the driver would replace by `prefer`), a
//! repeated TLS parameter, `sslcert` without `sslkey` or the reverse, and a certificate or key
//! file that cannot be read or holds no PEM of its kind (an encrypted key among them). As
//! libpq does, `sslmode=require` with an `sslrootcert` verifies the server's chain
//! (`verify-ca`).
//!
//! The files are read here, once, when the store's connect options are built, through a bounded
//! reader (a regular file of at most [`MAX_TLS_FILE_BYTES`], opened without waiting on a FIFO),
//! and the driver is handed their bytes: given paths, it would read them again, without a
//! limit, for every new connection.
//!
//! A failed handshake reaches cairn as a rustls error inside the driver's error; [`classify`]
//! turns it into [`Error::Unavailable`] whose detail says what failed and what to do, and keeps
//! the driver's error as the source: its text names the server's certificate and host, never a
//! password or a key.
//!
//! One setting is honoured more strictly than libpq does: the driver (sqlx 0.8.6, its issue
//! 3793, fixed in sqlx 0.9) checks the host name under `verify-ca` as well, because it lets only
//! rustls's older `NotValidForName` error through there. So `verify-ca` acts as `verify-full`,
//! and so does `require` with an `sslrootcert`; `tests/tls.rs` pins this.
//!
//! Tests: this module's unit tests, and `tests/tls.rs` against throwaway clusters with
//! `ssl = on` (`crate::testkit::TlsCluster`).

use cairn_core::{Error, Result};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{AlertDescription, CertificateError};
use sqlx::postgres::{PgConnectOptions, PgSslMode};

const WHAT: &str = "postgres TLS settings";

/// The `sslmode` values cairn honours, as the refusals list them.
const MODES: &str = "disable, prefer, require, verify-ca, verify-full";

/// The TLS settings one URL gave, by their libpq names (the driver's dashed aliases folded in).
#[derive(Default)]
pub(crate) struct UrlTls {
    mode: Option<String>,
    root_cert: Option<String>,
    cert: Option<String>,
    key: Option<String>,
}

impl UrlTls {
    /// Records `key=value` when `key` is a TLS setting.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for an `sslmode` cairn does not honour, and when the setting was
    /// given before (under any of its names): the driver would use the last one, so
    /// `sslmode=verify-full&sslmode=disable` would connect in plain text.
    pub(crate) fn note(&mut self, key: &str, value: &str) -> Result<()> {
        let (slot, name) = match key {
            "sslmode" | "ssl-mode" => (&mut self.mode, "sslmode"),
            "sslrootcert" | "ssl-root-cert" | "ssl-ca" => (&mut self.root_cert, "sslrootcert"),
            "sslcert" | "ssl-cert" => (&mut self.cert, "sslcert"),
            "sslkey" | "ssl-key" => (&mut self.key, "sslkey"),
            _ => return Ok(()),
        };
        if name == "sslmode" {
            check_mode(value, "the URL")?;
        }
        if slot.replace(value.to_owned()).is_some() {
            return Err(Error::invalid(
                WHAT,
                format!("`{name}` is given more than once (or under two names); give it once"),
            ));
        }
        Ok(())
    }
}

/// `opts`, parsed by the driver from the URL whose TLS settings are `url`, with those settings
/// checked (see the module documentation); the environment's `PGSSLMODE`, `PGSSLROOTCERT`,
/// `PGSSLCERT` and `PGSSLKEY` stand in for a setting the URL does not give, as in the driver.
///
/// # Errors
/// [`Error::InvalidInput`] naming the setting and what to do; never a value, a path's
/// contents or the URL.
pub(crate) fn checked(mut opts: PgConnectOptions, url: &UrlTls) -> Result<PgConnectOptions> {
    let env = |name: &str| std::env::var(name).ok();
    // The URL's sslmode was checked when it was noted.
    if let (None, Some(mode)) = (&url.mode, env("PGSSLMODE")) {
        check_mode(&mode, "the PGSSLMODE environment variable")?;
    }
    let mode = opts.get_ssl_mode();
    let root = url.root_cert.clone().or_else(|| env("PGSSLROOTCERT"));
    let cert = url.cert.clone().or_else(|| env("PGSSLCERT"));
    let key = url.key.clone().or_else(|| env("PGSSLKEY"));
    if cert.is_some() != key.is_some() {
        return Err(Error::invalid(
            WHAT,
            "a client certificate needs both sslcert (the certificate's PEM file) and sslkey \
             (its private key's PEM file); give both or neither",
        ));
    }
    if matches!(mode, PgSslMode::Disable) {
        return Ok(opts);
    }
    // Each file is read once, here, and the driver is given its bytes: it would otherwise read
    // the path again (unbounded) for every new connection.
    if let Some(root) = &root {
        opts = opts.ssl_root_cert_from_pem(read_pem(root, "sslrootcert", Pem::Certificates)?);
    }
    if let (Some(cert), Some(key)) = (&cert, &key) {
        let cert = read_pem(cert, "sslcert", Pem::Certificates)?;
        let key = read_pem(key, "sslkey", Pem::Key)?;
        opts = opts
            .ssl_client_cert_from_pem(cert)
            .ssl_client_key_from_pem(key);
    }
    // libpq: "if a root CA file exists, the behavior of sslmode=require will be the same as
    // that of verify-ca"; the driver would ignore the file under `require`.
    if matches!(mode, PgSslMode::Require) && root.is_some() {
        opts = opts.ssl_mode(PgSslMode::VerifyCa);
    }
    Ok(opts)
}

/// Refuses an `sslmode` the driver would not honour as libpq does.
fn check_mode(mode: &str, from: &str) -> Result<()> {
    match mode.to_ascii_lowercase().as_str() {
        "disable" | "prefer" | "require" | "verify-ca" | "verify-full" => Ok(()),
        "allow" => Err(Error::invalid(
            WHAT,
            format!(
                "sslmode `allow` (from {from}) is not supported: the driver would never try TLS; \
                 use prefer (TLS when the server offers it) or disable"
            ),
        )),
        // The value is not shown: it could be anything pasted into the wrong place.
        _ => Err(Error::invalid(
            WHAT,
            format!("the sslmode {from} gives is not one of {MODES}; use one of them"),
        )),
    }
}

/// What a PEM setting must hold.
#[derive(Clone, Copy)]
enum Pem {
    /// At least one certificate (`sslrootcert`, `sslcert`).
    Certificates,
    /// One unencrypted private key (`sslkey`).
    Key,
}

/// The most bytes a file named by `sslrootcert`, `sslcert` or `sslkey` may hold (1 MiB): a
/// PEM certificate, chain or key is a few KiB, a bundle of every public root about 250 KiB.
pub(crate) const MAX_TLS_FILE_BYTES: u64 = 1024 * 1024;

/// The PEM `value` gives (a file path, or PEM text the driver takes inline), checked to hold PEM
/// of kind `kind`. A file is read through [`read_tls_file`]. The messages name `param`, never
/// the file's contents.
fn read_pem(value: &str, param: &str, kind: Pem) -> Result<Vec<u8>> {
    let trimmed = value.trim();
    // The driver's rule for inline PEM (`CertificateInput::from`).
    let data = if trimmed.starts_with("-----BEGIN") && trimmed.ends_with("-----") {
        value.as_bytes().to_vec()
    } else {
        read_tls_file(std::path::Path::new(value), MAX_TLS_FILE_BYTES).map_err(|e| {
            Error::invalid(
                WHAT,
                format!("cannot read the file {param} names ({e}); give the path of a PEM file"),
            )
        })?
    };
    let usable = match kind {
        Pem::Certificates => {
            let mut certs = CertificateDer::pem_slice_iter(&data);
            matches!(certs.next(), Some(Ok(_))) && certs.all(|c| c.is_ok())
        }
        Pem::Key => PrivateKeyDer::from_pem_slice(&data).is_ok(),
    };
    if usable {
        return Ok(data);
    }
    Err(Error::invalid(
        WHAT,
        match kind {
            Pem::Certificates => format!(
                "the file {param} names holds no PEM certificate (-----BEGIN CERTIFICATE-----); \
                 give a PEM file"
            ),
            Pem::Key => format!(
                "the file {param} names holds no unencrypted PEM private key (PKCS#8, PKCS#1 or \
                 SEC1); an encrypted key is not supported: give the key decrypted"
            ),
        },
    ))
}

/// Reads `path`, a regular file of at most `max` bytes, without waiting on it: the file is
/// opened non-blocking (a FIFO does not hang the open) and the opened file's own metadata must
/// say it is a regular file, so a path swapped for a device, FIFO or directory between a look
/// and the open is refused too. At most `max + 1` bytes are read, so a file that grows while it
/// is read cannot fill memory.
///
/// # Errors
/// [`std::io::ErrorKind::InvalidInput`] ("it is not a regular file …"),
/// [`std::io::ErrorKind::InvalidData`] ("it holds more than … bytes"), and the errors of
/// opening and reading it; each reads as the end of a one-line message and holds nothing the
/// file holds.
fn read_tls_file(path: &std::path::Path, max: u64) -> std::io::Result<Vec<u8>> {
    use std::io::{Error as IoError, ErrorKind, Read};
    let too_big = || {
        IoError::new(
            ErrorKind::InvalidData,
            format!("it holds more than {max} bytes; a certificate or key file is far smaller"),
        )
    };
    #[cfg(unix)]
    let file = {
        use rustix::fs::{Mode, OFlags};
        let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC;
        std::fs::File::from(rustix::fs::open(path, flags, Mode::empty())?)
    };
    #[cfg(not(unix))]
    let file = std::fs::File::open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(IoError::new(
            ErrorKind::InvalidInput,
            "it is not a regular file (a device, FIFO or directory)",
        ));
    }
    if meta.len() > max {
        return Err(too_big());
    }
    let mut bytes = Vec::new();
    file.take(max.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(too_big());
    }
    Ok(bytes)
}

/// The error for a driver error that comes from setting up TLS, or `None` for any other.
/// The caller keeps the driver error as the source (its text holds no secret).
pub(crate) fn classify(e: &sqlx::Error) -> Option<Error> {
    match e {
        // The handshake runs inside the driver's socket I/O, so its failures arrive as I/O
        // errors that wrap rustls's.
        sqlx::Error::Io(io) => {
            let inner = io.get_ref()?;
            inner
                .downcast_ref::<rustls::Error>()
                .map(|e| from_rustls(e, Stage::Handshake))
        }
        sqlx::Error::Tls(inner) => Some(from_tls(inner.as_ref())),
        _ => None,
    }
}

/// The error for the driver's TLS error `inner`.
fn from_tls(inner: &(dyn std::error::Error + Send + Sync + 'static)) -> Error {
    if let Some(tls) = inner.downcast_ref::<rustls::Error>() {
        // The driver's own rustls errors come from building the client's TLS configuration:
        // the root store from sslrootcert and the client certificate and key.
        return from_rustls(tls, Stage::Setup);
    }
    if inner
        .downcast_ref::<rustls::client::VerifierBuilderError>()
        .is_some()
    {
        return Error::unavailable(
            "no trusted root certificate to verify the server with (this machine has none and \
             no sslrootcert was given); give sslrootcert=<the CA's PEM file>, or use \
             sslmode=require to encrypt without verifying the server",
        );
    }
    if inner
        .downcast_ref::<rustls::pki_types::InvalidDnsNameError>()
        .is_some()
    {
        return Error::unavailable(
            "the host is not a valid DNS name or IP address to verify the server's certificate \
             against; connect by a name the certificate names",
        );
    }
    // What is left is the driver's own refusal: the server answered the TLS request with "no"
    // (the file settings that could also end here are checked before connecting).
    Error::unavailable(
        "the server does not accept TLS connections, and sslmode require, verify-ca and \
         verify-full need TLS; turn `ssl` on at the server, or use sslmode=prefer or disable \
         only on a network you trust",
    )
}

/// Where a rustls error arose.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Building the client's configuration from sslrootcert, sslcert and sslkey, before any
    /// handshake: a certificate error here is about one of those files.
    Setup,
    /// The handshake: a certificate error here is about the server's certificate.
    Handshake,
}

/// Whether `c` is webpki's refusal of a certificate that is not X.509 v3 (rustls passes it on
/// as `CertificateError::Other`, whose only public face is its text).
fn is_unsupported_version(c: &CertificateError) -> bool {
    matches!(c, CertificateError::Other(other) if format!("{other:?}").contains("UnsupportedCertVersion"))
}

/// The error for a rustls failure at `stage`.
fn from_rustls(e: &rustls::Error, stage: Stage) -> Error {
    const NAME_HOW: &str = "connect by a name the certificate names (this build checks the name \
                            under sslmode=verify-ca too)";
    const VERIFY_HOW: &str = "give sslrootcert=<PEM file of the CA that signed it>, or use \
                              sslmode=require to encrypt without verifying the server";
    Error::unavailable(match e {
        // Only the client certificate is parsed as an end-entity certificate while the
        // configuration is built (rustls checks that sslkey is its key); a v1 root is accepted.
        rustls::Error::InvalidCertificate(c)
            if stage == Stage::Setup && is_unsupported_version(c) =>
        {
            "the client certificate in sslcert is an X.509 v1 certificate, which this build \
             cannot use; reissue it as X.509 v3 (with `openssl x509 -req`, give its extensions \
             with -extfile)"
                .to_owned()
        }
        rustls::Error::InvalidCertificate(c) if stage == Stage::Setup => format!(
            "a certificate in sslrootcert or sslcert cannot be used ({c:?}); give valid X.509 \
             v3 certificates"
        ),
        rustls::Error::InvalidCertificate(c) if is_unsupported_version(c) => {
            "the server's certificate (or one in its chain) is an X.509 v1 certificate, which \
             this build cannot verify; reissue it on the server as X.509 v3"
                .to_owned()
        }
        rustls::Error::InvalidCertificate(c) => match c {
            // Under verify-ca too: the driver (sqlx 0.8.6) lets only rustls's older
            // `NotValidForName` through there, and rustls reports `NotValidForNameContext`.
            CertificateError::NotValidForNameContext { expected, .. } => format!(
                "the server's certificate is not valid for host {}; {NAME_HOW}",
                expected.to_str()
            ),
            CertificateError::NotValidForName => format!(
                "the server's certificate is not valid for the host connected to; {NAME_HOW}"
            ),
            CertificateError::UnknownIssuer => format!(
                "cannot verify the server's certificate: no trusted root signed it; {VERIFY_HOW}"
            ),
            CertificateError::Expired
            | CertificateError::ExpiredContext { .. }
            | CertificateError::NotValidYet
            | CertificateError::NotValidYetContext { .. } => {
                "the server's certificate is outside its validity period; renew it on the server \
                 or check this machine's clock"
                    .to_owned()
            }
            _ => format!("cannot verify the server's certificate; {VERIFY_HOW}"),
        },
        rustls::Error::NoCertificatesPresented => {
            format!("the server presented no certificate to verify; {VERIFY_HOW}")
        }
        rustls::Error::InconsistentKeys(_) => {
            "sslkey is not the private key of the certificate in sslcert; give the matching pair"
                .to_owned()
        }
        rustls::Error::AlertReceived(AlertDescription::CertificateRequired) => {
            "the server requires a client certificate; give sslcert and sslkey".to_owned()
        }
        rustls::Error::AlertReceived(
            alert @ (AlertDescription::BadCertificate
            | AlertDescription::UnknownCA
            | AlertDescription::CertificateUnknown
            | AlertDescription::CertificateExpired
            | AlertDescription::CertificateRevoked
            | AlertDescription::UnsupportedCertificate
            | AlertDescription::AccessDenied),
        ) => format!(
            "the server refused the client certificate (TLS alert {alert:?}); give sslcert and \
             sslkey of a certificate signed by a CA in the server's ssl_ca_file"
        ),
        _ => "the TLS handshake with the server failed".to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A syntactically valid PEM certificate block (its DER is not checked here).
    const CERT_PEM: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
    const KEY_PEM: &str = "-----BEGIN PRIVATE KEY-----\nMIIB\n-----END PRIVATE KEY-----\n";
    const ENCRYPTED_KEY_PEM: &str =
        "-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIB\n-----END ENCRYPTED PRIVATE KEY-----\n";

    fn opts(url: &str) -> Result<PgConnectOptions> {
        crate::config::connect_options_from_url(url)
    }

    fn refusal(url: &str) -> String {
        match opts(url) {
            Err(e @ Error::InvalidInput { .. }) => e.to_string(),
            other => panic!("{url}: expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn allow_and_unknown_modes_are_refused_without_the_value() {
        assert!(refusal("postgres://u@h/db?sslmode=allow").contains("use prefer"));
        let text = refusal("postgres://u@h/db?sslmode=verify_full-hunter2");
        assert!(text.contains(MODES) && !text.contains("hunter2"), "{text}");
        for ok in ["disable", "prefer", "require", "verify-ca", "VERIFY-FULL"] {
            opts(&format!("postgres://u@h/db?sslmode={ok}")).unwrap();
        }
    }

    #[test]
    fn a_repeated_tls_setting_is_refused() {
        for url in [
            "postgres://u@h/db?sslmode=verify-full&sslmode=disable",
            "postgres://u@h/db?sslmode=verify-full&ssl-mode=disable",
            "postgres://u@h/db?sslrootcert=/a&ssl-ca=/b",
        ] {
            assert!(refusal(url).contains("more than once"), "{url}");
        }
    }

    #[test]
    fn a_client_certificate_needs_both_halves() {
        let dir = tempfile::tempdir().unwrap();
        let cert = dir.path().join("c.pem");
        std::fs::write(&cert, CERT_PEM).unwrap();
        let url = format!(
            "postgres://u@h/db?sslmode=require&sslcert={}",
            cert.display()
        );
        assert!(refusal(&url).contains("both sslcert"), "{url}");
        let url = format!(
            "postgres://u@h/db?sslmode=require&sslkey={}",
            cert.display()
        );
        assert!(refusal(&url).contains("both sslcert"), "{url}");
    }

    #[test]
    fn unreadable_or_wrong_pem_files_are_refused_naming_the_setting() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let text = refusal(&format!(
            "postgres://u@h/db?sslmode=verify-full&sslrootcert={}",
            missing.display()
        ));
        assert!(
            text.contains("cannot read the file sslrootcert names"),
            "{text}"
        );

        let not_pem = dir.path().join("ca.txt");
        std::fs::write(&not_pem, "hunter2").unwrap();
        let text = refusal(&format!(
            "postgres://u@h/db?sslmode=verify-ca&sslrootcert={}",
            not_pem.display()
        ));
        assert!(
            text.contains("no PEM certificate") && !text.contains("hunter2"),
            "{text}"
        );

        let cert = dir.path().join("c.pem");
        std::fs::write(&cert, CERT_PEM).unwrap();
        let key = dir.path().join("k.pem");
        std::fs::write(&key, ENCRYPTED_KEY_PEM).unwrap();
        let text = refusal(&format!(
            "postgres://u@h/db?sslmode=require&sslcert={}&sslkey={}",
            cert.display(),
            key.display()
        ));
        assert!(text.contains("encrypted key is not supported"), "{text}");
    }

    /// The refusal of `url`, which must come within a few seconds (a FIFO must not hang the
    /// open): the open runs on its own thread, and the test fails at the deadline.
    fn prompt_refusal(url: String) -> String {
        let (tx, rx) = std::sync::mpsc::channel();
        let started = std::time::Instant::now();
        std::thread::spawn(move || {
            let _ = tx.send(opts(&url).map(|_| ()));
        });
        let outcome = rx
            .recv_timeout(std::time::Duration::from_secs(5))
            .expect("the open did not return within 5 s");
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        match outcome {
            Err(e @ Error::InvalidInput { .. }) => e.to_string(),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn devices_fifos_directories_and_oversized_files_are_refused_at_once_for_each_setting() {
        let dir = tempfile::tempdir().unwrap();
        let cert = dir.path().join("c.pem");
        std::fs::write(&cert, CERT_PEM).unwrap();
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("mkfifo");
        assert!(made.success());
        let big = dir.path().join("big.pem");
        let file = std::fs::File::create(&big).unwrap();
        file.set_len(MAX_TLS_FILE_BYTES + 1).unwrap();
        drop(file);
        let not_regular = "(it is not a regular file (a device, FIFO or directory)); give the \
                           path of a PEM file";
        let too_big = format!("(it holds more than {MAX_TLS_FILE_BYTES} bytes;");
        let cases = [
            (std::path::Path::new("/dev/zero"), not_regular),
            (fifo.as_path(), not_regular),
            (dir.path(), not_regular),
            (big.as_path(), too_big.as_str()),
        ];
        for (bad, expected) in cases {
            let bad = bad.display();
            let cert = cert.display();
            for (param, query) in [
                (
                    "sslrootcert",
                    format!("sslmode=verify-full&sslrootcert={bad}"),
                ),
                (
                    "sslcert",
                    format!("sslmode=require&sslcert={bad}&sslkey={cert}"),
                ),
                (
                    "sslkey",
                    format!("sslmode=require&sslcert={cert}&sslkey={bad}"),
                ),
            ] {
                let text = prompt_refusal(format!("postgres://u@h/db?{query}"));
                assert!(
                    text.contains(&format!("cannot read the file {param} names "))
                        && text.contains(expected)
                        && !text.contains('\n'),
                    "{param}={bad}: {text}"
                );
            }
        }
    }

    #[test]
    fn the_files_are_read_once_and_the_driver_is_given_their_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, CERT_PEM).unwrap();
        let key = dir.path().join("key.pem");
        std::fs::write(&key, KEY_PEM).unwrap();
        let url = format!(
            "postgres://u@h/db?sslmode=verify-full&sslrootcert={0}&sslcert={0}&sslkey={1}",
            ca.display(),
            key.display()
        );
        let opts = opts(&url).unwrap();
        // The options carry the PEM itself, not the path the driver would read again.
        let shown = format!("{opts:?}");
        assert!(!shown.contains(&ca.display().to_string()), "{shown}");
        assert_eq!(shown.matches("Some(Inline(").count(), 3, "{shown}");
        assert!(!shown.contains("File("), "{shown}");
    }

    /// An X.509 v1 certificate (self-signed, what `openssl x509 -req` makes by default).
    const V1_CERT_PEM: &str = "-----BEGIN CERTIFICATE-----
MIIBMDCB1wIUdmO6vVhEKsyYBQgZnAgOEv9CXkAwCgYIKoZIzj0EAwIwGjEYMBYG
A1UEAwwPY2Fpcm5fY2VydF91c2VyMCAXDTI2MTIwNjA3MDMyNloYDzIxMjYxMTEy
MDcwMzI2WjAaMRgwFgYDVQQDDA9jYWlybl9jZXJ0X3VzZXIwWTATBgcqhkjOPQIB
BggqhkjOPQMBBwNCAAQA/PeXtDaWa/Pmu51XvyFFuFHgp0x6OykXbfQdJ2daKMXE
3lCVZ5DIy6BA07SAm9+bIYRaA50JRqgSi+c5TpMRMAoGCCqGSM49BAMCA0gAMEUC
IFWH7mBMJEVhA+8TsY1Bbt/0OFlauXm0eFJSBBB6Q5KAAiEA0uOO8ox4KJy+TvB8
PjsU1VZHpxr/cECkbFlcmOswTnE=
-----END CERTIFICATE-----
";

    #[test]
    fn a_v1_certificate_is_named_as_the_client_s_before_the_handshake_and_the_server_s_in_it() {
        // rustls's own refusal of the certificate, as it reaches the driver.
        let der = CertificateDer::from_pem_slice(V1_CERT_PEM.as_bytes()).unwrap();
        let Err(v1) = rustls::server::ParsedCertificate::try_from(&der) else {
            panic!("rustls accepted an X.509 v1 end-entity certificate");
        };
        // Building the client's configuration (the driver's `Error::Tls`): sslcert's.
        let setup = crate::error::map(sqlx::Error::Tls(Box::new(v1.clone())));
        assert!(
            setup
                .to_string()
                .contains("the client certificate in sslcert is an X.509 v1 certificate"),
            "{setup}"
        );
        // In the handshake (an I/O error that wraps rustls's): the server's.
        let handshake = crate::error::map(io_wrapping(v1));
        let text = handshake.to_string();
        assert!(
            text.contains("the server's certificate (or one in its chain) is an X.509 v1"),
            "{text}"
        );
        assert!(!text.contains("sslmode=require"), "{text}");
    }

    #[test]
    fn require_with_a_root_certificate_verifies_the_chain_as_libpq_does() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, CERT_PEM).unwrap();
        let with_root = opts(&format!(
            "postgres://u@h/db?sslmode=require&sslrootcert={}",
            ca.display()
        ))
        .unwrap();
        assert!(matches!(with_root.get_ssl_mode(), PgSslMode::VerifyCa));
        let without = opts("postgres://u@h/db?sslmode=require").unwrap();
        assert!(matches!(without.get_ssl_mode(), PgSslMode::Require));
        // With sslmode=disable the files are not used, so they are not checked.
        opts("postgres://u@h/db?sslmode=disable&sslrootcert=/nowhere").unwrap();
    }

    fn io_wrapping(e: rustls::Error) -> sqlx::Error {
        sqlx::Error::Io(std::io::Error::new(std::io::ErrorKind::InvalidData, e))
    }

    #[test]
    fn handshake_failures_say_what_to_do_in_one_line() {
        let name = rustls::pki_types::ServerName::try_from("db.example").unwrap();
        let cases = [
            (
                io_wrapping(rustls::Error::InvalidCertificate(
                    CertificateError::UnknownIssuer,
                )),
                "give sslrootcert=",
            ),
            (
                io_wrapping(rustls::Error::InvalidCertificate(
                    CertificateError::NotValidForNameContext {
                        expected: name.to_owned(),
                        presented: vec!["DnsName(\"other.example\")".into()],
                    },
                )),
                "not valid for host db.example",
            ),
            (
                io_wrapping(rustls::Error::AlertReceived(
                    AlertDescription::CertificateRequired,
                )),
                "requires a client certificate",
            ),
            (
                sqlx::Error::Tls("server does not support TLS".into()),
                "turn `ssl` on at the server",
            ),
        ];
        for (driver, advice) in cases {
            let words = driver.to_string();
            let e = crate::error::map(driver);
            assert!(matches!(e, Error::Unavailable { .. }), "{e:?}");
            let report = e.report().to_string();
            assert!(e.to_string().contains(advice), "{e}");
            // The driver's cause is kept, once, on the same line.
            assert_eq!(report.matches(&words).count(), 1, "{report}");
            assert!(!report.contains('\n'), "{report}");
        }
        // An I/O error that is not TLS's is left to the ordinary mapping.
        let plain = sqlx::Error::Io(std::io::Error::other("connection reset by peer"));
        assert!(classify(&plain).is_none());
    }
}
