//! libFuzzer entry for the `sql_split` target (`cairn_fuzz::targets`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let target = cairn_fuzz::targets::by_name("sql_split").expect("a known target");
    (target.run)(data);
});
