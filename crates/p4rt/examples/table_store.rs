//! Runs the P4Runtime server over the `TableStore` test double (stores
//! entries, runs no program), for poking at it with p4runtime-shell:
//! `cargo run -p nicflow-p4rt --example table_store -- 127.0.0.1:9559`.

use std::sync::Arc;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:9559".into())
        .parse()?;
    let target = Arc::new(nicflow_p4rt::testing::TableStore::new());
    eprintln!("P4Runtime (TableStore test double) on {addr}, device 1");
    nicflow_p4rt::serve(addr, 1, target, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await?;
    Ok(())
}
