#!/bin/bash
# One hold: ring's AES-GCM cost per byte; main's daemons profiled at 1 and 4 streams (the
# budget) and this branch's at 1; then the sitting base new base new.
date -u
/tmp/espone/gcm/target/release/gcm
/tmp/espone/prof.sh base-s1 1 /tmp/espone/base/nicflow /tmp/espone/base-bench
/tmp/espone/prof.sh base-s4 4 /tmp/espone/base/nicflow /tmp/espone/base-bench
date -u
/work/wt/espone/docs/results/ipsec-issue34-espone-run/sit.sh 1 base new base new
date -u
