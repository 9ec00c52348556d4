//! `cairn`: the operator CLI for a cairn store (the command lives in the `cairn_server`
//! library).

#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    cairn_server::main()
}
