//! libFuzzer entry for the `config` target (`cairn_fuzz::targets`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let target = cairn_fuzz::targets::by_name("config").expect("a known target");
    (target.run)(data);
});
