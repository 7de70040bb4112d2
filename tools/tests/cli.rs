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
