#!/usr/bin/env bash
# Installs everything nicflow's build, demo and tests need on Debian 12.
# Idempotent: installs only what is missing.
set -euo pipefail

need_apt=()
command -v tshark >/dev/null 2>&1 || need_apt+=(tshark)
command -v clang >/dev/null 2>&1 || need_apt+=(clang llvm)
[ -f /usr/include/bpf/bpf_helpers.h ] || need_apt+=(libbpf-dev)
[ -d /usr/include/x86_64-linux-gnu/asm ] || need_apt+=(linux-libc-dev)
command -v iperf3 >/dev/null 2>&1 || need_apt+=(iperf3)
command -v ping >/dev/null 2>&1 || need_apt+=(iputils-ping)
command -v ip >/dev/null 2>&1 || need_apt+=(iproute2)
command -v ethtool >/dev/null 2>&1 || need_apt+=(ethtool)
command -v curl >/dev/null 2>&1 || need_apt+=(curl)
# ovs-ofctl (no daemon, no service): the OpenFlow interop tests drive nicflow with it.
command -v ovs-ofctl >/dev/null 2>&1 || need_apt+=(openvswitch-common)
# ovs-vswitchd and ovsdb-server (userspace datapath): tests/conntrack_ovs.rs
# compares nicflow's stateful firewall with Open vSwitch 3.1's. The tests
# start their own daemons; the package's service is kept from starting at
# install (policy-rc.d below).
need_ovs=0
command -v ovs-vswitchd >/dev/null 2>&1 || { need_apt+=(openvswitch-switch); need_ovs=1; }
# OVN (tests/ovn_lab.rs, `nicflow bench ovn`): ovsdb-server, ovn-northd and
# ovn-controller of a two-chassis lab the test starts itself; the packages'
# services are kept from starting at install (policy-rc.d below). dhclient is
# the lab VM's DHCP client.
command -v ovn-northd >/dev/null 2>&1 || { need_apt+=(ovn-central); need_ovs=1; }
command -v ovn-controller >/dev/null 2>&1 || { need_apt+=(ovn-host); need_ovs=1; }
command -v dhclient >/dev/null 2>&1 || need_apt+=(isc-dhcp-client)
# openssl: ovs-pki makes the certificates of the OpenFlow TLS tests with it.
command -v openssl >/dev/null 2>&1 || need_apt+=(openssl)
/usr/bin/python3 -c 'import scapy' >/dev/null 2>&1 || need_apt+=(python3-scapy)
# Measurement (nicflow bench ...): plots, latency, trafgen baseline, CPU
# counters, co-located load.
/usr/bin/python3 -c 'import matplotlib' >/dev/null 2>&1 || need_apt+=(python3-matplotlib)
command -v sockperf >/dev/null 2>&1 || need_apt+=(sockperf)
command -v trafgen >/dev/null 2>&1 || need_apt+=(netsniff-ng)
command -v perf >/dev/null 2>&1 || need_apt+=(linux-perf)
command -v stress-ng >/dev/null 2>&1 || need_apt+=(stress-ng)
# IPsec interop: scapy's ESP needs cryptography; strongSwan 5.9.8 (charon
# with kernel-libipsec, swanctl) is the IKEv2 peer of tests/ike_strongswan.rs
# and tests/ipsec.rs. The tests start charon themselves, in their own
# namespace with a private configuration; the package's service is kept
# from starting at install (policy-rc.d below).
/usr/bin/python3 -c 'import cryptography' >/dev/null 2>&1 || need_apt+=(python3-cryptography)
# CNI: the reference plugins (host-local IPAM for the nicflow CNI plugin's
# tests, and the baseline bridge plugin).
[ -x /usr/lib/cni/host-local ] || need_apt+=(containernetworking-plugins)
# portmap (chained after nicflow in tests/cni/chain.rs) drives iptables.
command -v iptables >/dev/null 2>&1 || need_apt+=(iptables)
# Benches: wrk against nginx in pods/namespaces (bench conntrack,
# microservices), nftables as a baseline (bench firewall, conntrack). The
# nginx service is kept from starting at install (policy-rc.d below).
command -v wrk >/dev/null 2>&1 || need_apt+=(wrk)
command -v nft >/dev/null 2>&1 || need_apt+=(nftables)
need_nginx=0
command -v nginx >/dev/null 2>&1 || { need_apt+=(nginx); need_nginx=1; }
need_swan=0
{ [ -x /usr/lib/ipsec/charon ] && command -v swanctl >/dev/null 2>&1 \
  && [ -f /usr/lib/ipsec/plugins/libstrongswan-kernel-libipsec.so ] \
  && [ -f /usr/lib/ipsec/plugins/libstrongswan-curve25519.so ] \
  && [ -f /usr/lib/ipsec/plugins/libstrongswan-gcm.so ]; } || need_swan=1
[ "$need_swan" = 1 ] && need_apt+=(strongswan-charon strongswan-swanctl libcharon-extra-plugins \
  libstrongswan-extra-plugins libstrongswan-standard-plugins)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections 2>/dev/null || true
    apt-get update -qq
    made_policy=0
    if { [ "$need_swan" = 1 ] || [ "$need_ovs" = 1 ] || [ "$need_nginx" = 1 ]; } && [ ! -e /usr/sbin/policy-rc.d ]; then
      printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && made_policy=1
    fi
    apt_rc=0
    apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null || apt_rc=$?
    if [ "$made_policy" = 1 ]; then rm -f /usr/sbin/policy-rc.d; fi
    [ "$apt_rc" -eq 0 ] || exit "$apt_rc"
  else
    echo "setup: not root, cannot install ${need_apt[*]}; tests needing them will be skipped" >&2
  fi
fi

# ovs-testcontroller (the OpenFlow learning-switch test's controller): its
# package installs and starts a service, so only its files are unpacked and
# the binary linked onto PATH (it uses openvswitch-common's libraries).
if ! command -v ovs-testcontroller >/dev/null 2>&1 && [ "$(id -u)" -eq 0 ] \
  && command -v ovs-ofctl >/dev/null 2>&1; then
  tc_dir=/opt/nicflow-tools/ovs-testcontroller
  if [ ! -x "$tc_dir/usr/bin/ovs-testcontroller" ]; then
    tc_tmp=$(mktemp -d)
    ( cd "$tc_tmp" && { apt-get download -qq openvswitch-testcontroller >/dev/null 2>&1 \
        || { apt-get update -qq && apt-get download -qq openvswitch-testcontroller >/dev/null 2>&1; }; } \
      && mkdir -p "$tc_dir" && dpkg -x openvswitch-testcontroller_*.deb "$tc_dir" ) \
      || echo "setup: could not fetch openvswitch-testcontroller; its test will be skipped" >&2
    rm -rf "$tc_tmp"
  fi
  [ -x "$tc_dir/usr/bin/ovs-testcontroller" ] && ln -sf "$tc_dir/usr/bin/ovs-testcontroller" /usr/local/bin/ovs-testcontroller
fi

# os-ken 3.1.0 (osken-manager; 4.x has none) for tests/openflow_osken.rs, in
# a venv (Debian's pip refuses system installs). Failure only skips that test.
osken_venv=/opt/nicflow-tools/osken-venv
if [ "$(id -u)" -eq 0 ] && ! "$osken_venv/bin/osken-manager" --version >/dev/null 2>&1; then
  osken_mkvenv() { rm -rf "$osken_venv" && mkdir -p "${osken_venv%/*}" \
    && /usr/bin/python3 -m venv "$osken_venv" >/dev/null 2>&1; }
  { osken_mkvenv || { export DEBIAN_FRONTEND=noninteractive \
      && { apt-get install -y -qq --no-install-recommends python3-venv >/dev/null 2>&1 \
        || { apt-get update -qq && apt-get install -y -qq --no-install-recommends python3-venv >/dev/null 2>&1; }; } \
      && osken_mkvenv; }; } \
    && "$osken_venv/bin/pip" install -q --disable-pip-version-check os-ken==3.1.0 >/dev/null 2>&1 \
    && "$osken_venv/bin/osken-manager" --version >/dev/null 2>&1 \
    || echo "setup: could not install os-ken 3.1.0 in $osken_venv; its test will be skipped" >&2
fi

# cnitool (the CNI reference runner) for tests/cni.rs: only if Go is here;
# failure only skips that test case.
if ! command -v cnitool >/dev/null 2>&1 && [ ! -x /root/go/bin/cnitool ] && [ ! -x "$HOME/go/bin/cnitool" ]; then
  go_bin=$(command -v go || { [ -x /usr/local/go/bin/go ] && echo /usr/local/go/bin/go; } || true)
  if [ -n "$go_bin" ]; then
    "$go_bin" install github.com/containernetworking/cni/cnitool@v1.3.0 >/dev/null 2>&1 \
      || echo "setup: could not install cnitool; its test case will be skipped" >&2
  fi
fi

if ! command -v cargo >/dev/null 2>&1; then
  if [ -x "$HOME/.cargo/bin/cargo" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
  else
    echo "setup: installing Rust (rustup)" >&2
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" -eq 0 ]; then
      apt-get install -y -qq rustup >/dev/null 2>&1 || apt-get install -y -qq cargo rustc >/dev/null
    fi
    command -v rustup >/dev/null 2>&1 && rustup default stable
  fi
fi
rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy rustfmt 2>/dev/null || true

# p4runtime (its protobuf descriptors generate crates/p4rt's messages at build
# time) and p4runtime-shell (the real controller tests/shell.rs drives) in
# their own venv: Debian's pip refuses system installs. Needed to build
# nicflow-p4rt; its shell test skips without p4runtime-shell.
p4rt_venv=/opt/nicflow-tools/p4rt-venv
if [ "$(id -u)" -eq 0 ] && ! "$p4rt_venv/bin/python" -c 'import p4.v1.p4runtime_pb2, p4runtime_sh.shell' >/dev/null 2>&1; then
  p4rt_mkvenv() { rm -rf "$p4rt_venv" && mkdir -p "${p4rt_venv%/*}" \
    && /usr/bin/python3 -m venv "$p4rt_venv" >/dev/null 2>&1; }
  { p4rt_mkvenv || { export DEBIAN_FRONTEND=noninteractive \
      && { apt-get install -y -qq --no-install-recommends python3-venv >/dev/null 2>&1 \
        || { apt-get update -qq && apt-get install -y -qq --no-install-recommends python3-venv >/dev/null 2>&1; }; } \
      && p4rt_mkvenv; }; } \
    && "$p4rt_venv/bin/pip" install -q --disable-pip-version-check p4runtime==1.4.1 p4runtime-shell==0.0.6 >/dev/null 2>&1 \
    && "$p4rt_venv/bin/python" -c 'import p4.v1.p4runtime_pb2, p4runtime_sh.shell' >/dev/null 2>&1 \
    || echo "setup: could not install p4runtime/p4runtime-shell in $p4rt_venv; nicflow-p4rt will not build" >&2
fi
