//! `kubectl flotilla`'s command line, as a user meets it before any cluster answers.

use std::process::{Command, Output};

fn run(args: &[&str], dir: &std::path::Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kubectl-flotilla"))
        .args(args)
        // No hub anywhere: what these cases check must not need one.
        .env("KUBECONFIG", dir.join("no-hub"))
        .env_remove("HOME")
        .output()
        .expect("kubectl-flotilla runs")
}

#[test]
fn a_member_kubeconfig_with_an_exec_plugin_is_refused_before_the_hub_is_asked() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let member = dir.path().join("member.kubeconfig");
    std::fs::write(
        &member,
        "apiVersion: v1\nkind: Config\ncurrent-context: m\n\
         clusters: [{name: m, cluster: {server: 'https://m:6443', certificate-authority-data: QQ==}}]\n\
         users: [{name: sso, user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: login}}}]\n\
         contexts: [{name: m, context: {cluster: m, user: sso}}]\n",
    )
    .expect("written");
    let out = run(
        &[
            "join",
            "m",
            "--member-kubeconfig",
            member.to_str().expect("UTF-8"),
        ],
        dir.path(),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("users[sso].user.exec is not allowed"),
        "{stderr}"
    );
}

#[test]
fn a_label_that_is_not_key_value_and_a_timeout_without_wait_are_usage_errors() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    for (args, says) in [
        (
            vec!["join", "m", "--member-kubeconfig", "k", "--label", "region"],
            "\"region\" is not KEY=VALUE",
        ),
        (
            vec!["join", "m", "--member-kubeconfig", "k", "--timeout", "1m"],
            "--wait",
        ),
        (
            vec![
                "join",
                "m",
                "--member-kubeconfig",
                "k",
                "--read-writable",
                "--reader-namespace",
                "x",
            ],
            "cannot be used with",
        ),
    ] {
        let out = run(&args, dir.path());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}
