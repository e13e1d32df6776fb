#!/bin/bash
for i in $(seq 1 40); do
  pid=$(pgrep -x ovs-vswitchd | head -1)
  if [ -n "$pid" ]; then
    ctl=$(find /tmp /run -name vswitchd.ctl -newer /tmp/ctlb/ovsmon.sh 2>/dev/null | head -1)
    cns=$(ip netns list | awk '{print $1}' | grep '^nf-ctk.*c1$' | head -1)
    if [ -n "$ctl" ]; then
      echo "== $(date +%T) ctl=$ctl cns=$cns"
      ovs-appctl -t $ctl dpctl/ct-stats-show 2>&1 | tr '\n' ' '; echo
      ovs-appctl -t $ctl coverage/show 2>&1 | grep -iE 'conntrack|nat|drop|upcall|ct_' | tr -s ' ' | tr '\n' ';'; echo
      d=$(ovs-appctl -t $ctl dpctl/dump-conntrack 2>&1)
      echo "entries=$(echo "$d" | grep -c tcp) even-sport=$(echo "$d" | grep -o 'orig=(src=[0-9.]*,dst=[0-9.]*,sport=[0-9]*' | awk -F'sport=' '$2%2==0' | wc -l)"
      [ -n "$cns" ] && ip netns exec $cns nstat -az TcpExtTCPSynRetrans TcpActiveOpens TcpRetransSegs 2>&1 | tail -3 | tr -s ' ' | tr '\n' ';'; echo
    fi
  fi
  sleep 1.5
done
