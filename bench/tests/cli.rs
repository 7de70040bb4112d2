//! The command-line tools explain themselves and refuse bad input clearly
//! (no root needed: input is checked before anything is touched).

use std::process::Command;

#[test]
fn pingpong_and_logp_have_help_that_explains_the_method() {
    for (bin, needle) in [(env!("CARGO_BIN_EXE_mcd-pingpong"), "RTT/2"), (env!("CARGO_BIN_EXE_mcd-logp"), "o_r")] {
        let out = Command::new(bin).arg("--help").output().unwrap();
        assert!(out.status.success());
        assert!(String::from_utf8_lossy(&out.stdout).contains(needle), "{bin} --help");
    }
    let bad = Command::new(env!("CARGO_BIN_EXE_mcd-pingpong")).args(["--wait", "fast"]).output().unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("busy, yield, block or adaptive"));
}
