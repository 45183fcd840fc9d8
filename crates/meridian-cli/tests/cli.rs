//! The `meridian` binary as a user meets it: exit codes, reports, replay commands, and clear
//! errors (exit 2, no panic) for bad input.

use std::io::Write;
use std::process::{Command, Output};

fn meridian(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_meridian"))
        .args(args)
        .output()
        .expect("meridian runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn file_with(text: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(text.as_bytes()).unwrap();
    f
}

const STALE_READ: &str = r#"{"index": 0, "process": 0, "type": "ok", "invoke_ns": 0, "complete_ns": 10, "ops": [["append", "x", 1]]}
{"index": 1, "process": 1, "type": "ok", "invoke_ns": 20, "complete_ns": 30, "ops": [["r", "x", []]]}
"#;

#[test]
fn check_exits_0_for_valid_1_for_anomalies_2_for_malformed() {
    let history = file_with(STALE_READ);
    let path = history.path().to_str().unwrap();
    let serializable = meridian(&["check", "--model", "serializable", path]);
    assert_eq!(
        serializable.status.code(),
        Some(0),
        "{}",
        stdout(&serializable)
    );
    let strict = meridian(&["check", "--model", "strict-serializable", path]);
    assert_eq!(strict.status.code(), Some(1));
    assert!(
        stdout(&strict).to_lowercase().contains("real"),
        "{}",
        stdout(&strict)
    );

    let broken = file_with(&format!("{STALE_READ}{{\"index\": 2, \"oops\n"));
    let malformed = meridian(&[
        "check",
        "--model",
        "serializable",
        broken.path().to_str().unwrap(),
    ]);
    assert_eq!(malformed.status.code(), Some(2));
    assert!(
        stderr(&malformed).contains("line 3"),
        "{}",
        stderr(&malformed)
    );

    let unknown_model = meridian(&["check", "--model", "linearish", path]);
    assert_eq!(unknown_model.status.code(), Some(2));
    assert!(stderr(&unknown_model).contains("strict-serializable"));
    let missing = meridian(&[
        "check",
        "--model",
        "serializable",
        "/nonexistent/history.jsonl",
    ]);
    assert_eq!(missing.status.code(), Some(2));
}

#[test]
fn sim_reports_json_with_per_region_latency_and_bound() {
    let out = meridian(&[
        "sim",
        "--protocol",
        "2pl-2pc",
        "--topology",
        "gcp-tiga",
        "--workload",
        "list-append",
        "--seed",
        "3",
        "--duration",
        "5s",
        "--report",
        "json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    for field in [
        "protocol",
        "topology",
        "seed",
        "committed",
        "aborted",
        "unknown",
        "anomalies",
        "regions",
    ] {
        assert!(report.get(field).is_some(), "missing {field}");
    }
    assert_eq!(report["protocol"], "2pl-2pc");
    assert_eq!(report["valid"], true);
    let regions = report["regions"].as_array().unwrap();
    assert_eq!(regions.len(), 4);
    let hk = regions.iter().find(|r| r["region"] == "HK").unwrap();
    for field in [
        "committed",
        "p50_ms",
        "p90_ms",
        "p99_ms",
        "bound_ms",
        "p50_wrtt",
        "fast_path_ratio",
    ] {
        assert!(hk.get(field).is_some(), "missing regions[].{field}");
    }
    // HK's coordinators reach every shard's single copy in SC: bound = HK-SC round trip.
    assert_eq!(hk["bound_ms"], 201.0);
    let wrtt = hk["p50_wrtt"].as_f64().unwrap();
    assert!((wrtt - hk["p50_ms"].as_f64().unwrap() / 201.0).abs() < 1e-3);
}

#[test]
fn sim_reports_the_protocols_own_counters() {
    let out = meridian(&[
        "sim",
        "--protocol",
        "clock-si",
        "--protocol-opts",
        "replicated=true",
        "--workload-opts",
        "interactive=true",
        "--duration",
        "3s",
        "--report",
        "json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let counters = &report["counters"];
    // Every transaction begun is counted by the coordinators — the clients' and the
    // end-of-run audit's read of every key (one per shard) —, every read by the
    // partitions; the three partitions' Raft groups each elected a leader.
    let txns = counters["txns"].as_u64().unwrap();
    let finished = ["committed", "aborted", "unknown"]
        .iter()
        .map(|k| report[k].as_u64().unwrap())
        .sum::<u64>();
    assert_eq!(txns, finished + 3);
    assert!(counters["reads"].as_u64().unwrap() > 0);
    assert_eq!(counters["partition_takeovers"], 3);
    assert_eq!(report["valid"], true);
}

#[test]
fn sim_is_reproducible_and_writes_a_checkable_history() {
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("h.jsonl");
    let run = |seed: &str| {
        let out = meridian(&[
            "sim",
            "--topology",
            "local",
            "--seed",
            seed,
            "--duration",
            "2s",
            "--faults",
            "random",
            "--report",
            "json",
            "--history",
            history.to_str().unwrap(),
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
        (
            report["trace_hash"].as_str().unwrap().to_string(),
            std::fs::read_to_string(&history).unwrap(),
        )
    };
    let (hash_a, history_a) = run("8");
    let (hash_b, history_b) = run("8");
    assert_eq!(hash_a, hash_b);
    assert_eq!(history_a, history_b);
    assert!(history_a.lines().count() > 100);
    let checked = meridian(&[
        "check",
        "--model",
        "strict-serializable",
        history.to_str().unwrap(),
    ]);
    assert_eq!(checked.status.code(), Some(0), "{}", stdout(&checked));
}

#[test]
fn swarm_prints_a_replay_command_for_every_failing_seed() {
    let out = meridian(&[
        "sim",
        "swarm",
        "--seeds",
        "3",
        "--topology",
        "local",
        "--duration",
        "3s",
        "--protocol-opts",
        "unsafe_early_release=true",
        "--batch-max",
        "64",
        "--timer-granularity",
        "1ms",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let text = stdout(&out);
    let replays: Vec<&str> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("replay: "))
        .collect();
    assert!(!replays.is_empty(), "{text}");
    assert!(
        replays[0].contains("--batch-max 64 --timer-granularity 1ms"),
        "{}",
        replays[0]
    );
    // The replay command reproduces the failure.
    let args: Vec<&str> = replays[0].split_whitespace().skip(1).collect();
    let replay = meridian(&args);
    assert_eq!(replay.status.code(), Some(1), "{}", stdout(&replay));

    let ok = meridian(&[
        "sim",
        "swarm",
        "--seeds",
        "2",
        "--topology",
        "local",
        "--duration",
        "2s",
        "--faults",
        "random",
    ]);
    assert_eq!(ok.status.code(), Some(0), "{}", stdout(&ok));
    assert!(stdout(&ok).contains("2 seeds, 0 failed"));
}

#[test]
fn bad_input_is_a_clear_error_with_exit_code_2() {
    let bad_topology =
        file_with("name = \"t\"\nregions = [\"A\"]\nintra_region_rtt_ms = \"fast\"\n");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["sim", "--protocol", "paxos-made-complex"],
            "unknown protocol",
        ),
        (vec!["sim", "--topology", "atlantis"], "atlantis"),
        (
            vec!["sim", "--topology", bad_topology.path().to_str().unwrap()],
            "intra_region_rtt_ms",
        ),
        (vec!["sim", "--workload", "tpc-z"], "tpc-z"),
        (vec!["sim", "--duration", "forever"], "--duration"),
        (vec!["sim", "--faults", "crash:nobody@1s"], "nobody"),
        (vec!["sim", "--clock", "sundial"], "sundial"),
        (vec!["sim", "--check", "vibes"], "--check"),
        (vec!["sim", "--protocol-opts", "warp=9"], "warp"),
        (vec!["sim", "--workload-opts", "keys"], "keys"),
        (vec!["sim", "--seed", "-1"], ""),
        (vec!["sim", "swarm", "--seeds", "0"], "--seeds"),
        (vec!["frobnicate"], ""),
    ];
    for (args, needle) in cases {
        let out = meridian(&args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}{}",
            stdout(&out),
            stderr(&out)
        );
        assert!(stderr(&out).contains(needle), "{args:?}: {}", stderr(&out));
        assert!(!stderr(&out).contains("panicked"), "{args:?}");
    }
}

#[test]
fn bank_runs_are_judged_by_their_invariant_not_the_dependency_checker() {
    let out = meridian(&[
        "sim",
        "--workload",
        "bank",
        "--topology",
        "local",
        "--duration",
        "2s",
        "--report",
        "json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(report["invariant"], serde_json::Value::Null);
    assert_eq!(report["model"], serde_json::Value::Null);
    assert!(report["committed"].as_u64().unwrap() > 100);
}

#[test]
fn tpcc_and_bank_runs_end_with_their_final_state_conditions_checked() {
    for (protocol, workload) in [("2pl-2pc", "tpcc"), ("clock-si", "bank")] {
        let out = meridian(&[
            "sim",
            "--protocol",
            protocol,
            "--topology",
            "local",
            "--workload",
            workload,
            "--duration",
            "300ms",
            "--drain",
            "2s",
        ]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}{}",
            stdout(&out),
            stderr(&out)
        );
        assert!(
            stdout(&out).contains(&format!(
                "workload `{workload}` conditions hold on the final state"
            )),
            "{}",
            stdout(&out)
        );
    }
    let json = meridian(&[
        "sim",
        "--protocol",
        "2pl-2pc",
        "--topology",
        "local",
        "--workload",
        "tpcc",
        "--workload-opts",
        "mix=payment",
        "--duration",
        "300ms",
        "--report",
        "json",
    ]);
    assert_eq!(json.status.code(), Some(0), "{}", stderr(&json));
}

#[test]
fn experiment_run_writes_results_and_plots_and_refuses_bad_files() {
    let dir = tempfile::tempdir().unwrap();
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/../../experiments/smoke.toml");
    let out = meridian(&[
        "experiment",
        "run",
        file,
        "--out",
        dir.path().to_str().unwrap(),
        "--quiet",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    for f in [
        "results.json",
        "results.csv",
        "latency-vs-rate.png",
        "latency-cdf.svg",
    ] {
        assert!(dir.path().join(f).exists(), "{f} missing: {}", stdout(&out));
    }
    let csv = std::fs::read_to_string(dir.path().join("results.csv")).unwrap();
    assert!(csv.lines().any(|l| l.starts_with("tiga,400,all,")), "{csv}");
    let bad = file_with("name = \"x\"\n[sweep]\nprotocol = [\"nope\"]\n");
    let refused = meridian(&[
        "experiment",
        "run",
        bad.path().to_str().unwrap(),
        "--out",
        dir.path().to_str().unwrap(),
        "--quiet",
    ]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        stderr(&refused).contains("unknown protocol `nope`"),
        "{}",
        stderr(&refused)
    );
}

/// `meridian experiment run FILE --out DIR --quiet`.
fn run_experiment(file: &std::path::Path, out: &std::path::Path) -> Output {
    meridian(&[
        "experiment",
        "run",
        file.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--quiet",
    ])
}

/// [`run_experiment`], which must succeed.
fn run_experiment_ok(file: &std::path::Path, out: &std::path::Path) -> Output {
    let run = run_experiment(file, out);
    assert_eq!(
        run.status.code(),
        Some(0),
        "{}{}",
        stdout(&run),
        stderr(&run)
    );
    run
}

#[test]
fn a_fault_experiment_writes_a_timeline_and_the_sim_report_carries_one() {
    let dir = tempfile::tempdir().unwrap();
    let file = file_with(
        r#"
name = "fault"
[base]
protocol = "2pl-2pc"
topology = "local"
load = "closed"
clients = 2
duration = "2s"
drain = "1s"
faults = "crash:shard0/replica0@1s"
timeline_bucket = "250ms"
workload_opts = { keys_per_shard = "1000" }
[[plot]]
name = "tput"
kind = "timeline"
y = "throughput_tps"
"#,
    );
    run_experiment_ok(file.path(), dir.path());
    let csv = std::fs::read_to_string(dir.path().join("timeline.csv")).unwrap();
    assert_eq!(csv.lines().count(), 1 + 12, "3 s in 250 ms buckets: {csv}");
    let svg = std::fs::read_to_string(dir.path().join("tput.svg")).unwrap();
    assert!(
        svg.contains("crash:shard0/replica0@1s"),
        "the fault is marked"
    );
    assert!(dir.path().join("tput.png").exists());
    std::fs::remove_file(dir.path().join("tput.png")).unwrap();
    let replot = meridian(&[
        "experiment",
        "plot",
        file.path().to_str().unwrap(),
        "--out",
        dir.path().to_str().unwrap(),
    ]);
    assert_eq!(replot.status.code(), Some(0), "{}", stderr(&replot));
    assert!(
        dir.path().join("tput.png").exists(),
        "drawn again from results.json"
    );

    let json = meridian(&[
        "sim",
        "--protocol",
        "2pl-2pc",
        "--topology",
        "local",
        "--workload",
        "microbench",
        "--faults",
        "crash:shard0/replica0@1s",
        "--duration",
        "2s",
        "--drain",
        "1s",
        "--timeline-bucket",
        "500ms",
        "--report",
        "json",
    ]);
    assert_eq!(json.status.code(), Some(0), "{}", stderr(&json));
    let report: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let buckets = report["timeline"]["buckets"].as_array().unwrap();
    assert_eq!(buckets.len(), 6);
    let committed: u64 = buckets
        .iter()
        .map(|b| b["committed"].as_u64().unwrap())
        .sum();
    assert_eq!(committed, report["committed"].as_u64().unwrap());
    let bad = meridian(&["sim", "--timeline-bucket", "0s"]);
    assert_eq!(bad.status.code(), Some(2));
}

#[test]
fn an_experiment_runs_on_the_in_process_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let file = file_with(
        r#"
name = "rt"
target = "runtime"
[base]
topology = "local"
load = "open"
rate = 100
outstanding = 16
duration = "1s"
warmup = "750ms"
timeline_bucket = "250ms"
workload_opts = { keys_per_shard = "1000" }
[sweep]
protocol = ["2pl-2pc"]
[[plot]]
name = "cdf"
kind = "cdf"
"#,
    );
    let started = std::time::Instant::now();
    let out = run_experiment_ok(file.path(), dir.path());
    // The warm-up runs before the measured second (a lower bound: it cannot be faster).
    assert!(started.elapsed() >= std::time::Duration::from_millis(1750));
    assert!(stdout(&out).contains("on the runtime"), "{}", stdout(&out));
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("results.json")).unwrap())
            .unwrap();
    let all = &results["points"][0]["metrics"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert!(all["committed"].as_u64().unwrap() > 100, "{all}");
    assert!(all["p50_ms"].as_f64().unwrap() > 0.0, "{all}");
    assert!(!results["points"][0]["timeline"]
        .as_array()
        .unwrap()
        .is_empty());
    // The runtime refuses the simulator's parameters (the simulator takes `warmup` too:
    // its steady-state window).
    let file =
        file_with("name = \"rt\"\ntarget = \"runtime\"\n[base]\nfaults = \"crash:coord0@1s\"\n");
    let refused = run_experiment(file.path(), dir.path());
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        stderr(&refused).contains("simulator only"),
        "{}",
        stderr(&refused)
    );
}

/// `--warmup`: the transactions started during the warm-up are in the history but not in
/// the totals, and the rate is over the measured stretch only.
#[test]
fn bench_leaves_the_warmup_out_of_its_figures() {
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("h.jsonl");
    let started = std::time::Instant::now();
    let out = meridian(&[
        "bench",
        "--topology",
        "local",
        "--protocol",
        "2pl-2pc",
        "--wan-scale",
        "0",
        "--rate",
        "200",
        "--warmup",
        "1s",
        "--duration",
        "1s",
        "--report",
        "json",
        "--history",
        history.to_str().unwrap(),
    ]);
    let wall_s = started.elapsed().as_secs_f64();
    assert!(out.status.success(), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(report["warmup_s"].as_f64(), Some(1.0), "{report}");
    // The measured stretch lasts its --duration at least, and leaves out the warm-up:
    // whatever the machine's speed, the command ran the warm-up and the stretch.
    let elapsed = report["elapsed_s"].as_f64().unwrap();
    assert!(elapsed >= 1.0, "{report}");
    assert!(
        elapsed <= wall_s - 1.0,
        "measured stretch only: {elapsed} s of a {wall_s} s run: {report}"
    );
    let committed = report["committed"].as_u64().unwrap();
    let text = std::fs::read_to_string(&history).unwrap();
    let ok = text
        .lines()
        .filter(|l| l.contains(r#""type":"ok""#))
        .count() as u64;
    // The history has the warm-up's commits too; the totals do not.
    assert!(committed > 0, "{report}");
    assert!(ok > committed, "history {ok} vs counted {committed}");
}

/// Must-show 3 of issue 16: TPC-C's standard mix, Payment and Order-Status interactive, on
/// the in-process runtime. Before the runtime registered the workloads' stored procedures
/// every NewOrder/Delivery aborted as an unknown procedure, and interactive plans were
/// refused; now they commit, and the report breaks latency down by TPC-C profile.
#[test]
fn bench_runs_tpcc_with_stored_procedures_and_interactive_sessions() {
    let out = meridian(&[
        "bench",
        "--topology",
        "local",
        "--protocol",
        "tiga",
        "--workload",
        "tpcc",
        "--workload-opts",
        "interactive=true",
        "--max-outstanding",
        "8",
        "--duration",
        "2s",
        "--report",
        "json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert!(report["committed"].as_u64().unwrap() > 0, "{report}");
    let reasons = report["abort_reasons"].as_object().unwrap();
    let unknown = report["unknown_reasons"].as_object().unwrap();
    for reason in reasons.keys().chain(unknown.keys()) {
        assert!(
            !reason.contains("unknown stored procedure") && !reason.contains("one-shot"),
            "{report}"
        );
    }
    let classes = &report["regions"][0]["classes"];
    for profile in ["new-order", "delivery", "stock-level"] {
        assert!(
            classes[profile]["committed"].as_u64().unwrap() > 0,
            "{profile}: {report}"
        );
    }
    // The interactive profiles ran as sessions: each ended one way or the other.
    for profile in ["payment", "order-status"] {
        let ended = classes[profile]["committed"].as_u64().unwrap()
            + classes[profile]["aborted"].as_u64().unwrap();
        assert!(ended > 0, "{profile}: {report}");
    }
}

/// The simulator's report splits latency by transaction class as well as by region.
#[test]
fn sim_reports_latency_per_transaction_class() {
    let tpcc = ["sim", "--protocol", "2pl-2pc", "--topology", "local"];
    let tpcc = [&tpcc[..], &["--workload", "tpcc", "--duration", "2s"]].concat();
    let out = meridian(&[&tpcc[..], &["--report", "json"]].concat());
    assert!(out.status.success(), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let classes = &report["regions"][0]["classes"];
    let new_order = classes["new-order"]["committed"].as_u64().unwrap();
    let read_write = classes["read-write"]["committed"].as_u64().unwrap();
    assert!(new_order > 0 && read_write >= new_order, "{report}");
    assert!(
        classes["stock-level"]["p50_ms"].as_f64().is_some(),
        "{report}"
    );
    let text = stdout(&meridian(&tpcc));
    assert!(
        text.contains("new-order") && text.contains("class"),
        "{text}"
    );
}

/// `--show-faults` prints the drawn schedule (crashes by machine, partitions by side), and
/// the JSON names the faults applied and each shard's leader at the end.
#[test]
fn sim_shows_its_faults_and_where_the_leaders_ended() {
    let out = meridian(&[
        "sim",
        "--protocol",
        "tiga",
        "--faults",
        "random",
        "--seed",
        "3",
        "--duration",
        "8s",
        "--show-faults",
        "--report",
        "json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let schedule = stderr(&out);
    assert!(
        schedule.contains("fault at") && schedule.contains("(machine)"),
        "{schedule}"
    );
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let applied = report["faults_applied"].as_object().unwrap();
    assert!(
        applied.keys().any(|k| k.starts_with("crash ")),
        "{applied:?}"
    );
    let leaders = report["leaders_at_end"].as_object().unwrap();
    assert_eq!(leaders.len(), 3, "{leaders:?}");
}

/// Runs `meridian args` with its stdout on a pipe whose read end is already closed, the
/// way `| head -1` leaves it once head has its line: the command must end as it would
/// have (no panic on EPIPE).
fn with_closed_stdout(args: &[&str]) -> Output {
    let (read, write) = nix::unistd::pipe().unwrap();
    drop(read);
    Command::new(env!("CARGO_BIN_EXE_meridian"))
        .args(args)
        .stdout(std::process::Stdio::from(write))
        .stderr(std::process::Stdio::piped())
        .output()
        .expect("meridian runs")
}

/// Issue 22, item 6: `sim --report json | head -1` panicked on the closed pipe.
#[test]
fn a_reader_that_stops_early_is_not_a_panic() {
    let args = [
        "sim",
        "--protocol",
        "2pl-2pc",
        "--topology",
        "local",
        "--duration",
        "1s",
        "--report",
        "json",
    ];
    for report in [&args[..], &args[..args.len() - 2]] {
        let out = with_closed_stdout(report);
        assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }
    let help = with_closed_stdout(&["sim", "--protocol", "help"]);
    assert_eq!(help.status.code(), Some(0), "{}", stderr(&help));
}

/// `--protocol help` is advertised by every command that takes `--protocol`, and works on
/// each (exit 0, the list), touching nothing: `server` without `--node`, `cluster up`
/// without creating its run-dir.
#[test]
fn protocol_help_works_wherever_it_is_advertised() {
    let dir = tempfile::tempdir().unwrap();
    let run_dir = dir.path().join("run");
    let run_dir = run_dir.to_str().unwrap();
    let commands: Vec<Vec<&str>> = vec![
        vec!["sim"],
        vec!["sim", "swarm", "--seeds", "1"],
        vec!["server"],
        vec!["cluster", "up", "--run-dir", run_dir],
        vec!["bench"],
        vec!["demo"],
    ];
    for command in commands {
        let help = meridian(&[&command[..], &["--help"]].concat());
        assert!(
            stdout(&help).contains("--protocol help"),
            "{command:?} advertises it: {}",
            stdout(&help)
        );
        let out = meridian(&[&command[..], &["--protocol", "help"]].concat());
        assert_eq!(out.status.code(), Some(0), "{command:?}: {}", stderr(&out));
        for name in ["2pl-2pc", "clock-si", "tiga"] {
            assert!(stdout(&out).contains(name), "{command:?}: {}", stdout(&out));
        }
    }
    assert!(!std::path::Path::new(run_dir).exists());
    let about = meridian(&["--help"]);
    assert!(
        !stdout(&about).contains("later") && stdout(&about).contains("cluster"),
        "{}",
        stdout(&about)
    );
}

/// `meridian check` calls bad input bad input (exit 2): a value written twice, two
/// transactions under one index, and an empty file, which proves nothing.
#[test]
fn check_refuses_histories_that_break_their_own_contract() {
    let twice = r#"{"index": 0, "process": 0, "type": "ok", "invoke_ns": 0, "complete_ns": 10, "ops": [["append", "x", 1]]}
{"index": 1, "process": 1, "type": "ok", "invoke_ns": 20, "complete_ns": 30, "ops": [["append", "x", 1]]}
"#;
    let same_index = STALE_READ.replace("\"index\": 1", "\"index\": 0");
    for (text, needle) in [
        (twice, "malformed"),
        (&same_index[..], "index 0"),
        ("", "no transactions"),
        ("\n\n", "no transactions"),
    ] {
        let file = file_with(text);
        let out = meridian(&[
            "check",
            "--model",
            "serializable",
            file.path().to_str().unwrap(),
        ]);
        assert_eq!(out.status.code(), Some(2), "{text:?}: {}", stdout(&out));
        assert!(stderr(&out).contains(needle), "{text:?}: {}", stderr(&out));
    }
}

/// The runtime commands refuse the protocols' test-only options (`unsafe_*`, which break a
/// guarantee on purpose) and Tiga's coordination-free mode (no guaranteed ε on the system
/// clock); the client refuses a `--coordinator` that is not one, before sending anything.
#[test]
fn runtime_commands_refuse_test_only_options_and_wrong_coordinators() {
    let dir = tempfile::tempdir().unwrap();
    let run_dir = dir.path().join("run");
    let unsafe_2pl = [
        "--protocol",
        "2pl-2pc",
        "--protocol-opts",
        "unsafe_early_release=true",
    ];
    let free_tiga = [
        "--protocol",
        "tiga",
        "--protocol-opts",
        "coordination=free,epsilon_ms=1",
    ];
    for opts in [&unsafe_2pl, &free_tiga] {
        let commands: Vec<Vec<&str>> = vec![
            vec!["server", "--topology", "local", "--node", "coord0"],
            vec![
                "cluster",
                "up",
                "--topology",
                "local",
                "--run-dir",
                run_dir.to_str().unwrap(),
            ],
            vec!["bench", "--topology", "local", "--duration", "1s"],
        ];
        for command in commands {
            let out = meridian(&[&command[..], &opts[..]].concat());
            assert_eq!(
                out.status.code(),
                Some(2),
                "{command:?} {opts:?}: {}",
                stderr(&out)
            );
            assert!(stderr(&out).contains("meridian sim"), "{}", stderr(&out));
        }
    }
    assert!(!run_dir.exists());
    // The simulator still takes them (the conformance suite's broken variants need them).
    let sim = meridian(
        &[
            &["sim", "--topology", "local", "--duration", "1s"][..],
            &unsafe_2pl,
        ]
        .concat(),
    );
    assert_ne!(sim.status.code(), Some(2), "{}", stderr(&sim));

    for coordinator in ["shard0/replica0", "coord99"] {
        let out = meridian(&[
            "client",
            "--topology",
            "local",
            "--coordinator",
            coordinator,
            "get",
            "k",
        ]);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{coordinator}: {}",
            stderr(&out)
        );
        assert!(
            stderr(&out).contains("not a coordinator"),
            "{}",
            stderr(&out)
        );
    }
}
