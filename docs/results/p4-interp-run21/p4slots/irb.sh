#!/bin/bash
# p4slots: instructions per run_packet call of a nicflow-bench binary's interpreter-only phase
# (callgrind, collection inside run_packet only): BIN OUTFILE
B=$1; O=$2
d=$(mktemp -d /tmp/p4slots/cgb.XXXX)
valgrind --tool=callgrind --callgrind-out-file=$O --toggle-collect='nicflow_p4::interp::arch::run_packet*' "$B" p4 --interp-only --reps 1 --seconds 0.5 --engines none --out $d >/dev/null 2>$d/err
ir=$(grep -E '^(summary|totals):' $O | head -1 | awk '{print $2}')
calls=$(callgrind_annotate --tree=caller $O 2>/dev/null | grep -E '< .*\(([0-9,]+)x\).*$' | grep -B0 -A0 'process_with' | head -1 | sed -E 's/.*\(([0-9,]+)x\).*/\1/' | tr -d ,)
echo "$(basename $B) Ir=$ir run_packet calls=$calls Ir/call=$((ir / calls))"
rm -rf $d
