//! What a fuzz target is: its name, the function that runs it, and what the mutator feeds it.

/// One fuzz target.
#[derive(Clone, Copy, Debug)]
pub struct Target {
    /// Its name (also its corpus directory's).
    pub name: &'static str,
    /// What it feeds and what it checks, in one line.
    pub about: &'static str,
    /// Feeds `data` to the API, panics when a property fails, and returns a signature of the
    /// behaviour it saw.
    pub run: fn(&[u8]) -> u64,
    /// Tokens the mutator splices in.
    pub dictionary: &'static [&'static [u8]],
    /// Largest input worth generating.
    pub max_len: usize,
}
