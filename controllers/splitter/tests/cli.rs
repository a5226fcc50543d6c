//! The splitter's command line, as an operator meets it.

use std::process::Command;

#[test]
fn a_cluster_selector_the_apiserver_would_refuse_stops_it_at_start_up_naming_the_flag() {
    let out = Command::new(env!("CARGO_BIN_EXE_flotilla-splitter"))
        .args(["--cluster-selector", "env in (prod"])
        .output()
        .expect("the splitter runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--cluster-selector") && stderr.contains("unbalanced '('"),
        "{stderr}"
    );
}
