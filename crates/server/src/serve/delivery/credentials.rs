//! The collector's bearer token: from the config or a token file, re-read when the collector
//! refuses it.

use std::path::PathBuf;
use std::sync::Mutex;

/// The collector's bearer token: from a file that is re-read on 401, or from the environment.
pub(super) struct Credentials {
    pub(super) file: Option<PathBuf>,
    pub(super) current: Mutex<Option<String>>,
}

impl Credentials {
    pub(super) fn load(file: Option<PathBuf>, token: Option<String>) -> Result<Self, String> {
        let current = match &file {
            Some(path) => Some(read_token_file(path)?),
            None => token.filter(|t| !t.trim().is_empty()),
        };
        if let Some(t) = &current {
            check_token(t)?;
        }
        Ok(Self {
            file,
            current: Mutex::new(current.map(|t| t.trim().to_owned())),
        })
    }

    pub(super) fn current(&self) -> Option<String> {
        self.current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Re-reads the token file; true when it now holds a different, usable token than `used`.
    /// A file that cannot be read or holds no usable token (a device, an oversized file, a
    /// line with spaces) changes nothing: the refusal stands, and the run it came from is
    /// given back without spending an attempt.
    pub(super) fn refresh(&self, used: Option<&str>) -> bool {
        let Some(path) = &self.file else { return false };
        let fresh = match read_token_file(path).and_then(|t| check_token(&t).map(|()| t)) {
            Ok(t) => t,
            Err(why) => {
                tracing::warn!(
                    target: "cairn::delivery",
                    "{why}; the token in use stays until the file holds a usable one"
                );
                return false;
            }
        };
        if Some(fresh.as_str()) == used {
            return false;
        }
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = Some(fresh);
        true
    }
}

/// Most bytes the delivery token file may hold; a larger one (or a device, a FIFO) is refused
/// unread, at start and at every re-read.
pub(super) const MAX_DELIVERY_TOKEN_FILE_BYTES: u64 = 64 * 1024;

/// Most bytes of a delivery token: it travels in the `Authorization` header, and collectors
/// commonly refuse request headers past 8 KiB.
pub(super) const MAX_DELIVERY_TOKEN_BYTES: usize = 4096;

pub(super) fn read_token_file(path: &std::path::Path) -> Result<String, String> {
    let text = crate::small_file::read(path, MAX_DELIVERY_TOKEN_FILE_BYTES)
        .map_err(|e| format!("delivery.token_file: cannot read {}: {e}", path.display()))?;
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(str::to_owned)
        .ok_or_else(|| format!("delivery.token_file: {} is empty", path.display()))
}

pub(super) fn check_token(token: &str) -> Result<(), String> {
    let t = token.trim();
    if t.chars().any(|c| c.is_whitespace() || c.is_control()) || !t.is_ascii() {
        return Err("delivery.token: must be one line of printable ASCII without spaces".into());
    }
    if t.len() > MAX_DELIVERY_TOKEN_BYTES {
        return Err(format!(
            "delivery.token: longer than {MAX_DELIVERY_TOKEN_BYTES} bytes (it is sent as a \
             request header)"
        ));
    }
    Ok(())
}
