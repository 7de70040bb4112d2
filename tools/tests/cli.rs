//! The command-line tools explain themselves and refuse bad input clearly
//! (no root needed: input is checked before anything is touched).

use std::process::Command;

#[test]
fn the_cli_explains_itself_and_reports_errors_clearly() {
    let vcluster = env!("CARGO_BIN_EXE_mcd-vcluster");
    let help = Command::new(vcluster).arg("--help").output().unwrap();
    let text = String::from_utf8_lossy(&help.stdout);
    for word in ["up", "down", "run", "exec", "status"] {
        assert!(text.contains(word), "--help mentions {word}: {text}");
    }
    let bad = Command::new(vcluster).args(["up", "BadName"]).output().unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("lowercase"));
}

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
