#!/bin/bash
# $1: prefix (e.g. /tmp/ctcost/prof/perf-lb-base)
d=$1.data
n=$(perf report -i $d --stdio --no-children --sort symbol -g none 2>/dev/null | grep -m1 "^# Samples" )
echo "# $n"
perf report -i $d --stdio --no-children --sort symbol -g none 2>/dev/null | grep -v "^#" | grep -v "^$" | head -40
echo
perf report -i $d --stdio --children --sort symbol -g none 2>/dev/null | grep -E "__x64_sys_(sendmmsg|bpf|recvmmsg|poll|ppoll|recvfrom|sendto)|bpf_map_do_batch|generic_map_delete_batch|map_lookup_elem|map_update_elem|CtOffloads::(setup|poll_setup|look|remove)|Datapath::(pass|process_batch|recirculate)|Conntrack::process|encode_engine|offload_ct|commit_ct" | head -30
