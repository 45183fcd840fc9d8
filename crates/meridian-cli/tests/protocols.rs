//! The protocol registry as a user meets it: `--protocol help` lists every protocol with its
//! guarantee and options, and every command refuses a bad protocol option when it parses
//! the options (exit 2, the option named), never with a panic while building nodes.

use std::io::Write;
use std::process::{Command, Output};

fn meridian(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_meridian"))
        .args(args)
        .output()
        .expect("meridian runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The protocols `meridian sim --protocol help` lists, by name.
fn registered() -> Vec<String> {
    let help = meridian(&["sim", "--protocol", "help"]);
    assert_eq!(help.status.code(), Some(0), "{}", text(&help.stderr));
    text(&help.stdout)
        .lines()
        .filter(|line| line.contains("options:"))
        .filter_map(|line| line.split_whitespace().next().map(str::to_string))
        .collect()
}

#[test]
fn protocol_help_lists_every_protocol_with_its_guarantee_and_options() {
    let expected = [
        ("2pl-2pc", "strict-serializable", "idle_timeout_ms"),
        ("clock-si", "snapshot-isolation", "delta_ms"),
        ("conventional-si", "snapshot-isolation", "gc_lag_ms"),
        ("tiga", "strict-serializable", "epsilon_ms"),
        ("k2", "strict-serializable", "ttl_us"),
        ("dast", "strong-partition-serializable", "heartbeat_ms"),
        ("aurogon", "serializable", "isolation"),
        ("dst-to", "serializable", "clock"),
        ("tapir", "strict-serializable", "strict"),
        ("janus", "strict-serializable", "keep_ms"),
        ("2pl-raft", "strict-serializable", "max_waiters_per_key"),
        ("occ-raft", "strict-serializable", "checkpoint_every"),
        ("p2pl-ttc", "strict-serializable", "commit_wait"),
        ("slog", "strict-serializable", "batch_ms"),
        ("2pl-pb", "strict-serializable", "max_inflight"),
        ("occ-pb", "strict-serializable", "max_inflight"),
        ("mvto-hlc", "strong-partition-serializable", "max_offset_ms"),
    ];
    assert_eq!(registered(), expected.map(|(name, _, _)| name));
    for command in [&["sim"][..], &["bench"], &["server", "--node", "coord0"]] {
        let help = meridian(&[command, &["--protocol", "help"]].concat());
        let listing = text(&help.stdout);
        assert_eq!(help.status.code(), Some(0), "{command:?}: {listing}");
        for (name, guarantee, option) in expected {
            let line = listing.lines().find(|l| l.trim_start().starts_with(name));
            let line = line.unwrap_or_else(|| panic!("{command:?}: no {name} in {listing}"));
            assert!(
                line.contains(guarantee) && line.contains(option),
                "{command:?}: {line}"
            );
        }
    }
    // An unknown name is an error that shows the same list.
    let unknown = meridian(&["sim", "--protocol", "paxos"]);
    assert_eq!(unknown.status.code(), Some(2));
    let stderr = text(&unknown.stderr);
    assert!(stderr.contains("unknown protocol `paxos`"), "{stderr}");
    assert!(expected.iter().all(|(name, ..)| stderr.contains(name)));
}

/// Every command that takes `--protocol-opts`, with a bad option, for `protocol`.
fn commands_with_options(protocol: &str, options: &str, run_dir: &str) -> Vec<Vec<String>> {
    let common = ["--protocol", protocol, "--protocol-opts", options];
    let with = |head: &[&str]| -> Vec<String> {
        head.iter().chain(&common).map(|s| s.to_string()).collect()
    };
    vec![
        with(&["sim", "--topology", "gcp-tiga", "--duration", "1s"]),
        with(&["sim", "swarm", "--seeds", "2", "--duration", "1s"]),
        with(&["bench", "--topology", "local", "--duration", "1s"]),
        with(&["server", "--topology", "local", "--node", "coord0"]),
        with(&["cluster", "up", "--topology", "local", "--run-dir", run_dir]),
    ]
}

fn assert_refused(args: &[String], named: &str) {
    let out = Command::new(env!("CARGO_BIN_EXE_meridian"))
        .args(args)
        .output()
        .expect("meridian runs");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    assert!(stderr.contains(named), "{args:?}: {stderr}");
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
}

#[test]
fn an_unknown_option_is_refused_at_parse_naming_it_for_every_protocol() {
    let run_dir = tempfile::tempdir().unwrap();
    let run_dir = run_dir.path().to_str().unwrap();
    for protocol in registered() {
        for args in commands_with_options(&protocol, "no_such_option=1", run_dir) {
            assert_refused(&args, "`no_such_option`");
        }
        for args in commands_with_options(&protocol, "retry_ms=soon", run_dir) {
            assert_refused(&args, "`retry_ms`");
        }
    }
    let started = std::fs::read_dir(run_dir).map_or(0, |d| d.count());
    assert_eq!(started, 0, "cluster up refused before starting anything");
}

#[test]
fn options_are_parsed_for_the_topology_so_no_node_build_can_refuse_them() {
    // 2PL's default `exec_timeout_ms` scales with the largest round trip (6,040 ms on
    // gcp-tiga, 2,000 ms at a nominal 100 ms): 3,000 ms of idle timeout is too short here.
    let run_dir = tempfile::tempdir().unwrap();
    let run_dir = run_dir.path().to_str().unwrap();
    let mut args = commands_with_options("2pl-2pc", "idle_timeout_ms=3000", run_dir);
    args.truncate(2); // `sim` and `sim swarm`, on gcp-tiga.
    for args in args {
        assert_refused(&args, "`idle_timeout_ms`");
    }
}

#[test]
fn the_clock_si_model_is_its_protocol_hook() {
    let dir = tempfile::tempdir().unwrap();
    let mut file = tempfile::NamedTempFile::new().unwrap();
    let experiment = r#"
name = "model"
[base]
topology = "local"
workload = "microbench"
load = "closed"
clients = 2
duration = "1s"
drain = "500ms"
workload_opts = { keys_per_shard = "1000" }
[sweep]
protocol = ["clock-si", "conventional-si"]
[[plot]]
name = "delay"
kind = "line"
x = "protocol"
y = "model.delay_probability"
"#;
    file.write_all(experiment.as_bytes()).unwrap();
    let out_dir = dir.path().to_str().unwrap();
    let file = file.path().to_str().unwrap();
    let run = meridian(&["experiment", "run", file, "--out", out_dir, "--quiet"]);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
    let results = std::fs::read_to_string(dir.path().join("results.json")).unwrap();
    let results: serde_json::Value = serde_json::from_str(&results).unwrap();
    let predicted = |i: usize| results["points"][i]["values"]["model.delay_probability"].as_f64();
    // Clock-SI predicts; conventional SI, with the same options type, has no model.
    assert!(
        predicted(0).is_some_and(|p| p > 0.0 && p < 1.0),
        "{results}"
    );
    assert_eq!(predicted(1), None);
}
