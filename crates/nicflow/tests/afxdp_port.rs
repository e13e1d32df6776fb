//! AF_XDP ports on veth pairs. Needs root (skipped otherwise) and a kernel
//! that allows AF_XDP and XDP (skipped with a message otherwise).
//!
//! The behaviours every real-interface port type has are one body each in
//! `common::port`, run here on AF_XDP once per attach mode ([`port_tests!`]
//! in the modules `native`, `generic` and `auto`): `bridge_ping_vlan_tcp`
//! (XDP never sees a VLAN tag the sender's stack kept as metadata, so the
//! namespace ends send theirs inline), `jumbo_frames_cross_the_switch`
//! (multi-buffer frames, skipped where the kernel refuses `XDP_USE_SG`),
//! `port_reads_burst_in_order_and_transmits`. Every port of these runs
//! shows its program in `ip link` while open (in the mode asked for) and
//! none once closed. What only AF_XDP does is tested here: zero-copy
//! refused on veth, and `auto` falling back to generic mode.
//!
//! Each test builds its own lab (`common::port::PortLab`, prefix `nfx`),
//! deleted on drop, panics included; the switch thread (which owns the
//! ports, so their XDP programs) is stopped before it.

mod common;
use common::port::{BoxPort, PortLab, PortReport, PortType};
use common::{lab_possible, must, run};
use nicflow::port::afxdp::{AfXdpOptions, AfXdpPort, AttachMode, BindMode, XdpMode};
use std::time::{Duration, Instant};

/// What the XDP state of `ifname` is, from `ip -d link show`: "xdp"
/// (native), "xdpgeneric", or "" (none).
fn xdp_state(ifname: &str) -> String {
    let s = must(&["ip", "-d", "link", "show", "dev", ifname]);
    for w in s.split_whitespace() {
        if w == "xdpgeneric" || w == "xdp" || w == "xdpdrv" {
            return w.to_string();
        }
    }
    String::new()
}

/// Wait (up to 2 s) until `ifname` has no XDP program. Detaching happens
/// when the last reference to the BPF link's file goes; a child process
/// forked meanwhile by another test holds a copy until it execs (the
/// descriptor is close-on-exec), so the detach can lag the drop slightly.
fn wait_detached(ifname: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        if xdp_state(ifname).is_empty() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Open an AF_XDP port on `sw` in `mode`, or say why the test is skipped
/// (the kernel refuses AF_XDP/XDP, or multi-buffer frames for an MTU above
/// a UMEM frame) and return None. Any other failure panics. The port must
/// have attached in `expect` mode, and `ip link` must show it.
fn open_xdp(sw: &str, mtu: usize, mode: XdpMode, expect: AttachMode) -> Option<BoxPort> {
    let p = match AfXdpPort::open(
        sw,
        AfXdpOptions {
            mode,
            ..Default::default()
        },
    ) {
        Ok(p) => p,
        Err(e) if e.is_unsupported() => {
            common::skipped(&format!("the kernel refuses AF_XDP/XDP here: {e}"));
            return None;
        }
        Err(e) => panic!("open {sw}: {e}"),
    };
    eprintln!(
        "{sw}: XDP {} mode, bound {} ({}), multi-buffer {}",
        p.attach_mode(),
        p.bind_flags(),
        if p.zerocopy() { "zero-copy" } else { "copy" },
        p.multi_buffer()
    );
    assert_eq!(p.mtu(), mtu, "{sw}");
    if mtu > 3000 && !p.multi_buffer() {
        common::skipped("the kernel refuses multi-buffer AF_XDP (XDP_USE_SG)");
        return None;
    }
    assert_eq!(p.attach_mode(), expect, "{sw}");
    let want = match expect {
        AttachMode::Native => "xdp",
        AttachMode::Generic => "xdpgeneric",
    };
    assert_eq!(xdp_state(sw), want, "{sw}: ip link must show the program");
    Some(Box::new(p))
}

/// Closed ports leave no program behind.
fn all_detached(sw: &[String]) {
    for s in sw {
        assert!(wait_detached(s), "{s}: XDP program must be detached");
    }
}

/// No invalid descriptor in any run.
fn check_any(r: &PortReport) {
    assert_eq!(
        r.counter("rx_drop_invalid_desc"),
        Some(0),
        "{}: {:?}",
        r.name,
        r.extra
    );
}

/// In native mode the kernel turns the peer's TSO/GSO off while a program
/// is attached: no super-frames reach the port.
fn check_native(r: &PortReport) {
    check_any(r);
    assert_eq!(
        r.counter("rx_gso_frames"),
        Some(0),
        "{}: {:?}",
        r.name,
        r.extra
    );
}

mod native {
    use super::*;
    const AFXDP_NATIVE: PortType = PortType {
        name: "AF_XDP native",
        prefix: "nfx",
        tag: "n",
        open: |sw, mtu| open_xdp(sw, mtu, XdpMode::Native, AttachMode::Native),
        metadata_vlan: false,
        idle_fd_quiet: true,
        after_close: all_detached,
        check: check_native,
    };
    crate::port_tests!(AFXDP_NATIVE);
}

mod generic {
    use super::*;
    /// Generic mode may see GSO super-frames (segmented by the port).
    const AFXDP_GENERIC: PortType = PortType {
        name: "AF_XDP generic",
        prefix: "nfx",
        tag: "g",
        open: |sw, mtu| open_xdp(sw, mtu, XdpMode::Generic, AttachMode::Generic),
        metadata_vlan: false,
        idle_fd_quiet: true,
        after_close: all_detached,
        check: check_any,
    };
    crate::port_tests!(AFXDP_GENERIC);
}

mod auto {
    use super::*;
    /// `auto` (the default) on veth, which has native XDP: native.
    const AFXDP_AUTO: PortType = PortType {
        name: "AF_XDP auto",
        prefix: "nfx",
        tag: "a",
        open: |sw, mtu| open_xdp(sw, mtu, XdpMode::Auto, AttachMode::Native),
        metadata_vlan: false,
        idle_fd_quiet: true,
        after_close: all_detached,
        check: check_native,
    };
    crate::port_tests!(AFXDP_AUTO);
}

/// A network device in the root namespace, deleted on drop.
struct Link(String);

impl Drop for Link {
    fn drop(&mut self) {
        let _ = run(&["ip", "link", "del", &self.0]);
    }
}

/// `auto` on an interface without native XDP (a Linux bridge device: no
/// `ndo_bpf`) falls back to generic mode; `native` fails with an error
/// naming the step, leaving nothing attached.
#[test]
fn auto_mode_falls_back_to_generic() {
    if !lab_possible() {
        return;
    }
    let name = format!("nfx{}f", std::process::id());
    if let Err(e) = run(&["ip", "link", "add", &name, "type", "bridge"]) {
        common::skipped(&format!("cannot create a bridge device: {e}"));
        return;
    }
    let link = Link(name);
    let sw = link.0.clone();
    must(&["ip", "link", "set", &sw, "up"]);
    let e = match AfXdpPort::open(
        &sw,
        AfXdpOptions {
            mode: XdpMode::Native,
            ..Default::default()
        },
    ) {
        Err(e) if e.is_unsupported() => {
            common::skipped(&format!("the kernel refuses AF_XDP/XDP here: {e}"));
            return;
        }
        Err(e) => e,
        Ok(p) => panic!("native attach unexpectedly accepted: {p:?}"),
    };
    eprintln!("native refused as expected: {e}");
    assert!(e.to_string().contains("native"), "{e}");
    assert!(
        wait_detached(&sw),
        "nothing left attached after a failed open"
    );
    let p = AfXdpPort::open(&sw, AfXdpOptions::default()).unwrap();
    assert_eq!(p.attach_mode(), AttachMode::Generic);
    assert_eq!(xdp_state(&sw), "xdpgeneric");
    drop(p);
    assert!(wait_detached(&sw), "detached on drop");
}

/// veth has no zero-copy support: forcing it fails, naming the step, and
/// leaves nothing attached.
#[test]
fn zero_copy_is_refused_on_veth() {
    if !lab_possible() {
        return;
    }
    let lab = PortLab::new("nfx", "z", 1, 33);
    match AfXdpPort::open(
        &lab.sw[0],
        AfXdpOptions {
            bind: BindMode::ZeroCopy,
            ..Default::default()
        },
    ) {
        Ok(p) => eprintln!("note: veth accepted zero-copy: {p:?}"),
        Err(e) if e.is_unsupported() => {
            common::skipped(&format!("the kernel refuses AF_XDP/XDP here: {e}"));
            return;
        }
        Err(e) => {
            eprintln!("zero-copy refused as expected: {e}");
            assert!(e.to_string().contains("XDP_ZEROCOPY"), "{e}");
            assert!(e.raw_os_error().is_some(), "{e}");
        }
    }
    assert!(
        wait_detached(&lab.sw[0]),
        "nothing left attached after a failed open"
    );
}
