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
    if let Some(root) = &root {
        check_pem(root, "sslrootcert", Pem::Certificates)?;
    }
    if let (Some(cert), Some(key)) = (&cert, &key) {
        check_pem(cert, "sslcert", Pem::Certificates)?;
        check_pem(key, "sslkey", Pem::Key)?;
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

/// Checks that `value` (a file path, or PEM text the driver takes inline) holds PEM of kind
/// `kind`. The messages name `param`, never the file's contents.
fn check_pem(value: &str, param: &str, kind: Pem) -> Result<()> {
    let trimmed = value.trim();
    // The driver's rule for inline PEM (`CertificateInput::from`).
    let data = if trimmed.starts_with("-----BEGIN") && trimmed.ends_with("-----") {
        value.as_bytes().to_vec()
    } else {
        std::fs::read(value).map_err(|e| {
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
        return Ok(());
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

/// The error for a driver error that comes from setting up TLS, or `None` for any other.
/// The caller keeps the driver error as the source (its text holds no secret).
pub(crate) fn classify(e: &sqlx::Error) -> Option<Error> {
    match e {
        // The handshake runs inside the driver's socket I/O, so its failures arrive as I/O
        // errors that wrap rustls's.
        sqlx::Error::Io(io) => {
            let inner = io.get_ref()?;
            inner.downcast_ref::<rustls::Error>().map(from_rustls)
        }
        sqlx::Error::Tls(inner) => Some(from_tls(inner.as_ref())),
        _ => None,
    }
}

/// The error for the driver's TLS error `inner`.
fn from_tls(inner: &(dyn std::error::Error + Send + Sync + 'static)) -> Error {
    if let Some(tls) = inner.downcast_ref::<rustls::Error>() {
        return from_rustls(tls);
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

/// The error for a rustls failure.
fn from_rustls(e: &rustls::Error) -> Error {
    const NAME_HOW: &str = "connect by a name the certificate names (this build checks the name \
                            under sslmode=verify-ca too)";
    const VERIFY_HOW: &str = "give sslrootcert=<PEM file of the CA that signed it>, or use \
                              sslmode=require to encrypt without verifying the server";
    Error::unavailable(match e {
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
