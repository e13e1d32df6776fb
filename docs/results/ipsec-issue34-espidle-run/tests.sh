#!/bin/sh
cd /work/wt/espidle
echo "== start $(date -u +%T)"
cargo test --release -p nicflow-port --lib 2>&1 | grep -E "^test result|FAILED|panicked|error" ; echo "== port $(date -u +%T)"
cargo test --release -p nicflow-bench --lib ipsec:: 2>&1 | grep -E "^test result|FAILED|panicked|error" ; echo "== bench $(date -u +%T)"
cargo test --release -p nicflow --test afpacket_port --test ipsec --test overlay 2>&1 | grep -E "^test result|FAILED|panicked|error|Running" ; echo "== nicflow $(date -u +%T)"
cargo test --release -p nicflow-ipsec 2>&1 | grep -E "^test result|FAILED|panicked|error" ; echo "== ipsec $(date -u +%T)"
cargo clippy -p nicflow-port -p nicflow-bench --all-targets -- -D warnings 2>&1 | tail -3; echo "== clippy $(date -u +%T)"
cargo clippy -p nicflow --tests -- -D warnings 2>&1 | tail -3; echo "== clippy nicflow $(date -u +%T)"
