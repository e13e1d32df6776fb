//! IPsec keys and pre-shared keys never leave the daemon in clear: not in
//! its log at any level (`NICFLOW_LOG=trace`), not in any CLI output
//! (text or `--json`: `show`, `stats`, every `dump-*`), not in the error
//! of a bad request that carries a key; the configuration file that keeps
//! them is 0600 (also when it was written 0644 by hand), and the ESP
//! sequence reservations are 0600 files in a 0700 directory.
//!
//! ```text
//!  a1 --pa1-- nicflow br0 -- vx1 (VXLAN, ipsec=manual) over u0 -- u1 (k)
//!                        \-- vx2 (VXLAN, ipsec=ike psk=...) over u2 -- u3 (k)
//! ```
//!
//! a1 pings through vx1, so ESP really seals with the key; vx2's IKE
//! initiates towards a peer that never answers (retries logged). Then a
//! restart from the saved configuration (a config file loaded with keys).
//! Namespaces `nfsc<pid>-*`, removed by the lab's guard even on failure.
//! Needs root and `ip`; skips with a message otherwise.

mod common;

use common::{lab_possible, NsLab};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::process::Command;

/// AES-128 key || 4-byte salt, both directions; and the IKE PSK.
const KEY_OUT: &str = "0x5ec7e75ec7e700112233445566778899a1b2c3d4";
const KEY_IN: &str = "0xfeedfacecafebeef0123456789abcdef0badf00d";
const PSK: &str = "correct-horse-battery-staple-42";

/// Every form a key could be printed in: as given, its hex without `0x`
/// (lower and upper case), the bytes as Rust's `{:?}` prints a `Vec<u8>`,
/// and a long-enough piece of the hex (a key cut at a line end).
fn forms() -> Vec<String> {
    let mut v = vec![PSK.to_string(), PSK.to_uppercase()];
    for k in [KEY_OUT, KEY_IN] {
        let hex = &k[2..];
        v.push(k.to_string());
        v.push(hex.to_string());
        v.push(hex.to_uppercase());
        v.push(hex[..16].to_string());
        v.push(hex[hex.len() - 16..].to_string());
        let bytes: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect();
        v.push(
            format!("{:?}", &bytes[..8])
                .trim_end_matches(']')
                .to_string(),
        );
    }
    v
}

/// Panic, naming the place, if `text` holds any form of a secret.
fn assert_clean(what: &str, text: &str) {
    for f in forms() {
        assert!(
            !text.contains(&f),
            "{what} contains secret material `{f}`:\n{text}"
        );
    }
}

/// `nicflow --socket S args`: (success, stdout + stderr).
fn cli(lab: &NsLab, args: &[&str]) -> (bool, String) {
    let out = Command::new(common::nicflow_bin())
        .arg("--socket")
        .arg(lab.sock())
        .args(args)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// One raw request line on the control socket; the response line.
fn raw_request(lab: &NsLab, line: &str) -> String {
    let mut s = std::os::unix::net::UnixStream::connect(lab.sock()).unwrap();
    s.write_all(line.as_bytes()).unwrap();
    s.write_all(b"\n").unwrap();
    let mut resp = String::new();
    BufReader::new(s).read_line(&mut resp).unwrap();
    resp
}

fn mode(p: &std::path::Path) -> u32 {
    std::fs::metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .permissions()
        .mode()
        & 0o777
}

fn vx1_args() -> Vec<String> {
    [
        "add-port",
        "br0",
        "vx1",
        "--type",
        "vxlan",
        "underlay=u0",
        "local_ip=198.18.41.2",
        "remote_ip=198.18.41.1",
        "key=100",
        "ipsec=manual",
        "esp_spi_out=0x2001",
        &format!("esp_key_out={KEY_OUT}"),
        "esp_spi_in=0x2002",
        &format!("esp_key_in={KEY_IN}"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn vx2_args() -> Vec<String> {
    [
        "add-port",
        "br0",
        "vx2",
        "--type",
        "vxlan",
        "underlay=u2",
        "local_ip=198.18.42.2",
        "remote_ip=198.18.42.1",
        "key=200",
        "ipsec=ike",
        &format!("psk={PSK}"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Every read-only verb, text and `--json`.
fn read_outputs(lab: &NsLab) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for verb in [
        &["show"][..],
        &["stats"],
        &["dump-flows", "br0"],
        &["dump-dp-flows", "br0"],
        &["dump-groups", "br0"],
        &["dump-group-stats", "br0"],
        &["dump-meters", "br0"],
        &["meter-stats", "br0"],
        &["dump-conntrack", "br0"],
        &["conntrack-stats", "br0"],
        &["get-controller", "br0"],
        &["get-fail-mode", "br0"],
    ] {
        for json in [false, true] {
            let mut args = Vec::new();
            if json {
                args.push("--json");
            }
            args.extend_from_slice(verb);
            let (ok, text) = cli(lab, &args);
            assert!(ok, "{args:?} failed: {text}");
            out.push((args.join(" "), text));
        }
    }
    out
}

#[test]
fn keys_and_psks_never_leave_the_daemon_in_clear() {
    if !lab_possible() {
        return;
    }
    // Every level, from the daemon's own code and every library it logs
    // through (the daemon reads NICFLOW_LOG; RUST_LOG for good measure).
    std::env::set_var("NICFLOW_LOG", "trace");
    std::env::set_var("RUST_LOG", "trace");
    let mut lab = NsLab::new("nfsc", "", &["a1", "sw", "k"]);
    lab.veth("eth0", "a1", "pa1", "sw");
    lab.veth("u0", "sw", "u1", "k");
    lab.veth("u2", "sw", "u3", "k");
    lab.must("k", &["ip", "addr", "add", "198.18.41.1/24", "dev", "u1"]);
    lab.must("k", &["ip", "addr", "add", "198.18.42.1/24", "dev", "u3"]);
    lab.must(
        "a1",
        &["ip", "addr", "add", "198.18.40.1/24", "dev", "eth0"],
    );
    lab.restart_daemon();
    let mut outputs: Vec<(String, String)> = Vec::new();
    let mut run = |lab: &NsLab, args: &[String], want_ok: bool| {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let (ok, text) = cli(lab, &a);
        assert_eq!(ok, want_ok, "{a:?}: {text}\n{}", lab.daemon_log());
        outputs.push((
            a.join(" ")
                .replace(KEY_OUT, "K1")
                .replace(KEY_IN, "K2")
                .replace(PSK, "P"),
            text,
        ));
    };
    let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    run(&lab, &s(&["add-br", "br0"]), true);
    run(
        &lab,
        &s(&["add-port", "br0", "pa1", "--type", "afpacket"]),
        true,
    );
    run(&lab, &vx1_args(), true);
    run(&lab, &vx2_args(), true);
    run(
        &lab,
        &s(&["add-flow", "br0", "in_port=pa1,actions=output:vx1"]),
        true,
    );

    // Bad requests that carry the keys: each refused, none quoting them.
    let mut bad = vx1_args();
    bad[2] = "vx3".into();
    bad[11] = format!("esp_key_out={KEY_OUT}ff"); // wrong length
    run(&lab, &bad, false);
    let mut bad = vx1_args();
    bad[2] = "vx3".into();
    bad.push("esp_aead=aes-gcm-256".into()); // keys too short for AES-256
    run(&lab, &bad, false);
    let mut bad = vx1_args();
    bad[1] = "nosuchbr".into();
    run(&lab, &bad, false);
    run(&lab, &vx1_args(), false); // the port exists
    let mut bad = vx2_args();
    bad[2] = "vx4".into();
    bad[10] = format!("psk={}", &PSK[..7]); // too short: 7 characters
    run(&lab, &bad, false);
    let mut bad = vx2_args();
    bad[2] = "vx4".into();
    bad[9] = "ipsec=manual".into(); // psk does not go with manual keys
    run(&lab, &bad, false);
    let mut bad = vx1_args();
    bad[2] = "vx3".into();
    bad[11] = format!("esp_key_out:{KEY_OUT}"); // not KEY=VALUE
    run(&lab, &bad, false);
    run(
        &lab,
        &s(&[
            "add-port",
            "br0",
            "u3x",
            "--type",
            "afxdp",
            &format!("psk={PSK}"),
        ]),
        false,
    );
    // A raw request whose secret has the wrong type, and one that is cut
    // in the middle of the key.
    let raw = format!(
        r#"{{"cmd":"add-port","bridge":"br0","iface":"vx5","type":"vxlan","name":null,"options":{{"psk":{}}}}}"#,
        u64::from_str_radix(&KEY_OUT[2..14], 16).unwrap()
    );
    let resp = raw_request(&lab, &raw);
    assert!(resp.contains("\"ok\":false"), "{resp}");
    let n = u64::from_str_radix(&KEY_OUT[2..14], 16)
        .unwrap()
        .to_string();
    assert!(
        !resp.contains(&n),
        "raw request error quotes the value: {resp}"
    );
    outputs.push(("raw request, psk a number".into(), resp));
    let raw = format!(
        r#"{{"cmd":"add-port","bridge":"br0","iface":"vx5","type":"vxlan","name":null,"options":{{"esp_key_in":"{KEY_IN}"#
    );
    outputs.push(("raw request, cut".into(), raw_request(&lab, &raw)));

    // Traffic that ESP seals with the key (no peer answers: requests only).
    let _ = lab.exec(
        "a1",
        &["ping", "-c", "3", "-i", "0.2", "-W", "1", "198.18.40.2"],
    );
    outputs.extend(read_outputs(&lab));
    let show = cli(&lab, &["show"]).1;
    assert!(
        show.contains("esp_key_out=(secret)") && show.contains("psk=(secret)"),
        "{show}"
    );
    let p: serde_json::Value = serde_json::from_str(&cli(&lab, &["--json", "stats"]).1).unwrap();
    let vx1 = p[0]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "vx1")
        .cloned()
        .unwrap_or_default();
    assert!(
        vx1.to_string().contains("esp_tx_packets"),
        "no ESP counters on vx1: {vx1}"
    );

    // State files: the configuration (keys inside, so owner-only) and the
    // ESP sequence reservations.
    let cfg = lab.config_path();
    let text = std::fs::read_to_string(&cfg).unwrap();
    assert!(text.contains(KEY_OUT) && text.contains(PSK), "{text}");
    assert_eq!(mode(&cfg), 0o600, "config file holding keys");
    let state = lab.dir().join("ipsec-state");
    assert_eq!(mode(&state), 0o700, "{}", state.display());
    let seqs: Vec<_> = std::fs::read_dir(&state)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(
        !seqs.is_empty(),
        "no sequence reservation in {}",
        state.display()
    );
    for f in &seqs {
        assert_eq!(mode(f), 0o600, "{}", f.display());
        assert_clean(
            &f.display().to_string(),
            &std::fs::read_to_string(f).unwrap(),
        );
        assert_clean("state file name", &f.display().to_string());
    }

    // A restart from a configuration file that someone made world-readable:
    // the daemon loads it (keys and all) and makes it owner-only again.
    lab.stop_daemon();
    std::fs::set_permissions(&cfg, std::fs::Permissions::from_mode(0o644)).unwrap();
    lab.restart_daemon();
    assert_eq!(mode(&cfg), 0o600, "config file after a restart");
    let _ = lab.exec(
        "a1",
        &["ping", "-c", "2", "-i", "0.2", "-W", "1", "198.18.40.2"],
    );
    outputs.extend(read_outputs(&lab));
    // A bad configuration file whose error is on the line of a key.
    lab.stop_daemon();
    let good = std::fs::read_to_string(&cfg).unwrap();
    let broken = good.replacen(&format!("\"{PSK}\""), &format!("\"{PSK}\" ,,"), 1);
    assert_ne!(broken, good, "{good}");
    std::fs::write(&cfg, &broken).unwrap();
    let out = Command::new("ip")
        .args(["netns", "exec", &lab.ns("sw")])
        .arg(common::nicflow_bin())
        .arg("--socket")
        .arg(lab.sock())
        .args(["daemon", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("line "), "{text}");
    outputs.push(("daemon with a broken config".into(), text));

    for (what, text) in &outputs {
        assert_clean(&format!("output of `{what}`"), text);
    }
    let log = lab.daemon_log();
    assert!(
        log.contains("TRACE") || log.contains("DEBUG"),
        "the daemon did not log at trace level:\n{log}"
    );
    assert!(log.contains("control request"), "{log}");
    assert_clean("the daemon's log", &log);
    eprintln!(
        "checked {} outputs and {} log lines for {} forms of the keys",
        outputs.len(),
        log.lines().count(),
        forms().len()
    );
}
