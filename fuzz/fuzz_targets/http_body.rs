//! libFuzzer entry for the `http_body` target (`cairn_fuzz::targets`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let target = cairn_fuzz::targets::by_name("http_body").expect("a known target");
    (target.run)(data);
});
