#!/bin/bash
# p4slots: copied from p4-interp-run19/ir.sh (scratch dir /tmp/p4slots/cg); KEEP=FILE keeps the callgrind output
# Instructions per packet (callgrind, inside run_packet) of the interp_loop example: BIN ROUTES
d=$(mktemp -d /tmp/p4slots/cg/cg.XXXX)
out=$(valgrind --tool=callgrind --callgrind-out-file=$d/cg.out --toggle-collect='nicflow_p4::interp::arch::run_packet*' "$1" /work/shared/p4-corpus "$2" 0.3 2>$d/err)
n=$(echo "$out" | sed -E 's/.*\(([0-9]+) of ([0-9]+) forwarded.*/\2/')
w=$([ "$2" = 0 ] && echo 128 || echo 2048)
ir=$(grep -E '^(summary|totals):' $d/cg.out | head -1 | awk '{print $2}')
echo "$(basename $1) routes=$2 packets=$((n + w)) Ir/pkt=$((ir / (n + w)))"
[ -n "$KEEP" ] && cp $d/cg.out $KEEP
rm -rf $d
