//! Every file cairn reads by path — the config file, token files, a revision's SQL — is read
//! through [`read`]: a regular file of at most a stated size, or refused before it is read, so
//! that a path naming a FIFO (which would block), a device such as `/dev/zero` (which never
//! ends) or a huge file neither hangs a start nor fills memory. Re-reads (the delivery token
//! file after a refusal) go through it too. The limits are the callers' constants:
//! `MAX_CONFIG_FILE_BYTES` (config), `MAX_TOKEN_FILE_BYTES` (`auth.token_file`),
//! `MAX_DELIVERY_TOKEN_FILE_BYTES` (the delivery worker) and `MAX_REVISION_FILE_BYTES`
//! (`migrate check --with-revision`). `cairn enqueue --from-file` streams its file under its own per-line and per-batch
//! bounds (it also reads a pipe, `-`).

use std::io::{Error, ErrorKind, Read};
use std::path::Path;

/// Reads the text of `path`, a regular file of at most `max` bytes.
///
/// # Errors
/// [`ErrorKind::InvalidInput`] ("it is not a regular file") for anything else that is there,
/// [`ErrorKind::InvalidData`] ("it holds more than `max` bytes", or not UTF-8), and the
/// errors of opening and reading it. Each reads as the end of a one-line message.
pub(crate) fn read(path: &Path, max: u64) -> std::io::Result<String> {
    let not_regular = || Error::new(ErrorKind::InvalidInput, "it is not a regular file");
    let too_big = || {
        Error::new(
            ErrorKind::InvalidData,
            format!("it holds more than {max} bytes"),
        )
    };
    let seen = std::fs::metadata(path)?;
    if !seen.is_file() {
        return Err(not_regular());
    }
    if seen.len() > max {
        return Err(too_big());
    }
    let file = std::fs::File::open(path)?;
    // The name may have moved on between the two looks; the file opened is what counts, and
    // it may grow while it is read: at most one byte past the limit is read.
    if !file.metadata()?.is_file() {
        return Err(not_regular());
    }
    let mut bytes = Vec::new();
    file.take(max.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(too_big());
    }
    String::from_utf8(bytes)
        .map_err(|_| Error::new(ErrorKind::InvalidData, "it is not valid UTF-8 text"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_regular_file_is_read_and_anything_else_refused_unread() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, "abcd").unwrap();
        assert_eq!(read(&path, 4).unwrap(), "abcd");
        let e = read(&path, 3).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidData);
        assert_eq!(e.to_string(), "it holds more than 3 bytes");
        std::fs::write(&path, b"\xff\xfe").unwrap();
        assert_eq!(read(&path, 4).unwrap_err().kind(), ErrorKind::InvalidData);
        // A device would never end; a directory is no file either.
        for other in [Path::new("/dev/zero"), dir.path()] {
            let e = read(other, u64::MAX).unwrap_err();
            assert_eq!(e.to_string(), "it is not a regular file", "{other:?}");
        }
        let e = read(&dir.path().join("absent"), 4).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NotFound);
    }
}
