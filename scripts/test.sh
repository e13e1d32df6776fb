#!/usr/bin/env bash
# The test command: setup, format and lint checks, every test of the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
# The benchmark binaries must at least build and run a tiny round.
cargo run --release --locked -q -p nicflow -- bench classifier --rules 10,1000 --reps 1 --quick >/dev/null
echo "all tests passed"
