//! libFuzzer entry for the `dedup_key` target (`cairn_fuzz::targets`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let target = cairn_fuzz::targets::by_name("dedup_key").expect("a known target");
    (target.run)(data);
});
