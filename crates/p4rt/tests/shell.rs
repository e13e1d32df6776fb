//! End-to-end test of the P4Runtime server with the real p4runtime-shell
//! client: the server runs here over the `TableStore` test double and
//! tests/shell_client.py drives it through p4runtime-shell's Python API
//! (arbitration, pipeline config, table/default/counter/register writes and
//! reads, per-update errors, primary change, packet-out/in). Skips, saying so,
//! when the venv that scripts/setup.sh installs is missing.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use nicflow_p4rt::testing::TableStore;

const VENV_PYTHON: &str = "/opt/nicflow-tools/p4rt-venv/bin/python";

/// The python with p4runtime-shell, or the one tried without it.
fn python() -> Result<String, String> {
    let py = std::env::var("NICFLOW_P4RT_SHELL_PYTHON").unwrap_or_else(|_| VENV_PYTHON.to_string());
    let ok = Command::new(&py)
        .args(["-c", "import p4runtime_sh.shell"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if ok {
        Ok(py)
    } else {
        Err(py)
    }
}

/// The shared P4 corpus: $NICFLOW_P4_CORPUS, else `shared/p4-corpus` beside
/// the repository or one of its parents (CI puts shared/ next to the clone).
fn corpus() -> Option<PathBuf> {
    nicflow_p4::corpus::find_corpus(&[Path::new(env!("CARGO_MANIFEST_DIR"))])
        .filter(|p| p.join("v1model/ternary2-bmv2.p4.p4info.txtpb").exists())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p4runtime_shell_drives_the_server() {
    let py = match python() {
        Ok(py) => py,
        Err(tried) => {
            println!(
                "SKIP p4runtime_shell_drives_the_server: no p4runtime-shell in {tried} \
                 (run `bash scripts/setup.sh`, or set NICFLOW_P4RT_SHELL_PYTHON)"
            );
            return;
        }
    };
    let Some(corpus) = corpus() else {
        println!("SKIP p4runtime_shell_drives_the_server: shared/p4-corpus not found (set NICFLOW_P4_CORPUS)");
        return;
    };
    let target = Arc::new(TableStore::new());
    let addr: SocketAddr = "127.0.0.1:0".parse().expect("literal address");
    let server = nicflow_p4rt::spawn(addr, 1, target.clone())
        .await
        .expect("server starts");
    let port = server.local_addr.port();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/shell_client.py");
    let out = tokio::time::timeout(
        std::time::Duration::from_secs(120),
        tokio::process::Command::new(&py)
            .arg(&script)
            .arg(format!("127.0.0.1:{port}"))
            .arg(&corpus)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("p4runtime-shell client finishes within 120 s")
    .expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    eprintln!("{stderr}");
    assert!(
        out.status.success(),
        "p4runtime-shell checks failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(
        stdout.contains("shell_client: all checks passed"),
        "client stopped early:\n{stdout}"
    );
    assert_eq!(
        target.packets_out().len(),
        1,
        "the packet-out reached the target"
    );
    server.shutdown().await.expect("server stops cleanly");
}
