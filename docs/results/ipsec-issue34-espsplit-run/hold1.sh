#!/bin/bash
# One hold: main's daemons (base) and this branch's (new, esp_tx_thread on by default)
# profiled at 1 stream, then the sitting base new base new.
R=/work/wt/espsplit/docs/results/ipsec-issue34-espsplit-run
echo "lock taken $(date -u)"
$R/prof.sh base-s1 1 /tmp/espsplit/base/nicflow /tmp/espsplit/base-nicflow-bench
$R/prof.sh new-s1 1 /tmp/espsplit/new/nicflow /tmp/espsplit/base-nicflow-bench
date -u
$R/sit.sh 1 base new base new
echo "end $(date -u)"
