//! The control-plane API: introspection, validation (errors change
//! nothing), entry lifecycle, registers, PNA add_on_miss and idle timeout.

mod interp_support;
use interp_support::{load, run_stf, stf_text};
use nicflow_p4::runtime::{EntrySpec, KeyMatch, MatchKind, RuntimeError};
use num_bigint::BigUint;

fn n(v: u64) -> BigUint {
    BigUint::from(v)
}

fn hex(s: &str) -> Vec<u8> {
    let h: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    (0..h.len() / 2)
        .map(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

#[test]
fn ipip_decap_with_the_upstream_quirk_fixed() {
    let Some(mut p) = load("pna/ipip.p4") else {
        return;
    };
    let text = stf_text("pna/ipip_decap.stf").unwrap();
    // The second `packet` line is the expected frame (README quirk).
    let mut seen = 0;
    let fixed: Vec<String> = text
        .lines()
        .map(|l| {
            if l.starts_with("packet") {
                seen += 1;
                if seen == 2 {
                    return l.replacen("packet", "expect", 1);
                }
            }
            l.to_string()
        })
        .collect();
    let fails = run_stf(&mut p, &fixed.join("\n"));
    assert!(fails.is_empty(), "{}", fails.join("\n"));
}

#[test]
fn introspection_of_routing() {
    let Some(p) = load("pna/routing.p4") else {
        return;
    };
    let t = p.table_info("fib_table").unwrap();
    assert_eq!(t.name, "Main.fib_table");
    assert_eq!(t.id >> 24, 0x02);
    assert_eq!(t.keys.len(), 1);
    assert_eq!(t.keys[0].name, "hdr.ip.dstAddr");
    assert_eq!(t.keys[0].annotated_name.as_deref(), Some("prefix"));
    assert_eq!(t.keys[0].match_kind, MatchKind::Lpm);
    assert_eq!(t.keys[0].width, 32);
    assert_eq!(t.actions.len(), 1);
    assert_eq!(t.actions[0].name, "Main.set_nhid");
    assert_eq!(t.actions[0].params[0].name, "index");
    assert_eq!(t.actions[0].params[0].width, 32);
    assert_eq!(t.default_action, ("Main.set_nhid".to_string(), vec![n(0)]));
    let nh = p.table_info("Main.nh_table").unwrap();
    assert_eq!(
        nh.actions[1]
            .params
            .iter()
            .map(|x| x.width)
            .collect::<Vec<_>>(),
        vec![48, 32]
    );
    assert!(matches!(
        p.table_info("nope"),
        Err(RuntimeError::UnknownTable(_))
    ));
    assert_eq!(p.tables().len(), 2);
}

#[test]
fn invalid_entries_are_refused_and_change_nothing() {
    let Some(mut p) = load("pna/routing.p4") else {
        return;
    };
    let good = EntrySpec {
        keys: vec![KeyMatch::Lpm(n(0x0a000000), 8)],
        action: "set_nhid".into(),
        params: vec![("index".into(), n(1))],
        priority: None,
    };
    let id = p.table_add("fib_table", good.clone()).unwrap();
    // Duplicate key.
    assert!(
        matches!(p.table_add("fib_table", good.clone()), Err(RuntimeError::DuplicateKey(_, x)) if x == id)
    );
    // Too wide a value.
    let mut bad = good.clone();
    bad.keys = vec![KeyMatch::Lpm(n(0x1_0000_0000), 8)];
    assert!(matches!(
        p.table_add("fib_table", bad),
        Err(RuntimeError::BadKey { .. })
    ));
    // Prefix longer than the key.
    let mut bad = good.clone();
    bad.keys = vec![KeyMatch::Lpm(n(1), 33)];
    assert!(p.table_add("fib_table", bad).is_err());
    // Wrong match kind.
    let mut bad = good.clone();
    bad.keys = vec![KeyMatch::Range(n(1), n(2))];
    assert!(matches!(
        p.table_add("fib_table", bad),
        Err(RuntimeError::BadKey { .. })
    ));
    // Unknown action / parameter / width.
    let mut bad = good.clone();
    bad.action = "set_nh".into();
    assert!(matches!(
        p.table_add("fib_table", bad),
        Err(RuntimeError::UnknownAction { .. })
    ));
    let mut bad = good.clone();
    bad.params = vec![("idx".into(), n(1))];
    assert!(matches!(
        p.table_add("fib_table", bad),
        Err(RuntimeError::BadParams { .. })
    ));
    let mut bad = good.clone();
    bad.params = vec![("index".into(), n(1 << 40))];
    assert!(matches!(
        p.table_add("fib_table", bad),
        Err(RuntimeError::BadParams { .. })
    ));
    // Wrong key count.
    let mut bad = good.clone();
    bad.keys.push(KeyMatch::Exact(n(1)));
    assert!(p.table_add("fib_table", bad).is_err());
    assert_eq!(p.table_entries("fib_table").unwrap().len(), 1);
    // Modify and delete.
    p.table_modify(
        "fib_table",
        id,
        "Main.set_nhid",
        vec![("index".into(), n(7))],
    )
    .unwrap();
    let e = p.table_entries("fib_table").unwrap();
    assert_eq!(e[0].spec.params, vec![("index".to_string(), n(7))]);
    assert!(p.table_delete("fib_table", id + 100).is_err());
    p.table_delete("fib_table", id).unwrap();
    assert!(p.table_entries("fib_table").unwrap().is_empty());
    // Default action.
    p.set_default("fib_table", "set_nhid", vec![("index".into(), n(3))])
        .unwrap();
    assert_eq!(
        p.table_info("fib_table").unwrap().default_action.1,
        vec![n(3)]
    );
}

#[test]
fn const_tables_and_defaults_are_refused() {
    let Some(mut p) = load("pna/calc_128.p4") else {
        return;
    };
    let t = p
        .tables()
        .into_iter()
        .find(|t| t.name.ends_with("calculate"))
        .unwrap();
    assert!(t.is_const && t.const_default);
    let spec = EntrySpec {
        keys: vec![KeyMatch::Exact(n(0x2b))],
        action: "operation_add".into(),
        params: vec![],
        priority: None,
    };
    assert!(matches!(
        p.table_add("calculate", spec),
        Err(RuntimeError::ConstTable(_))
    ));
    assert!(matches!(
        p.set_default("calculate", "operation_add", vec![]),
        Err(RuntimeError::ConstDefault(_))
    ));
    assert_eq!(p.table_entries("calculate").unwrap().len(), 6);
}

#[test]
fn registers_read_and_write() {
    let Some(mut p) = load("psa/psa-register-read-write-2-bmv2.p4") else {
        return;
    };
    let ex = p.externs();
    let reg = ex
        .iter()
        .find(|e| e.kind == nicflow_p4::runtime::ExternKind::Register)
        .unwrap();
    assert_eq!(reg.size, 6);
    assert_eq!(reg.width, 16);
    p.register_write("reg", 2, n(0x1234)).unwrap();
    assert_eq!(p.register_read("reg", 2).unwrap(), n(0x1234));
    assert!(p.register_write("reg", 6, n(1)).is_err());
    assert!(p.register_write("reg", 1, n(0x10000)).is_err());
    // Packet reading index 2 (action 2 = read): output word0 = 0x1234.
    let out = p.process(
        4,
        &hex("cafe 0000 01 02 020000000000 ffff deadbeef deadbeef deadbeef deadbeef"),
        1,
    );
    assert_eq!(out.outputs.len(), 1);
    assert_eq!(&out.outputs[0].1[14..18], &[0, 0, 0x12, 0x34]);
}

#[test]
fn pna_add_on_miss_learns_and_times_out() {
    let Some(mut p) = load("pna/pna-dpdk-add_on_miss0.p4") else {
        return;
    };
    assert_eq!(p.arch(), nicflow_p4::Arch::Pna);
    let t = p.table_info("ct_tcp_table").unwrap();
    assert!(t.add_on_miss && t.idle_timeout);
    // @defaultonly action cannot be an entry's.
    let miss = EntrySpec {
        keys: (0..5).map(|_| KeyMatch::Exact(n(1))).collect(),
        action: "ct_tcp_table_miss".into(),
        params: vec![],
        priority: None,
    };
    assert!(matches!(
        p.table_add("ct_tcp_table", miss),
        Err(RuntimeError::BadParams { .. })
    ));
    p.table_add(
        "ipv4_host",
        EntrySpec {
            keys: vec![KeyMatch::Exact(n(0x0a000002))],
            action: "send".into(),
            params: vec![("port".into(), n(3))],
            priority: None,
        },
    )
    .unwrap();
    let pkt = hex(
        "000000000002 000000000001 0800 45000028 00010000 40060000 0a000001 0a000002 \
         04d20050 00000000 00000000 50020000 00000000",
    );
    let now = 1_000_000_000;
    let first = p.process(0, &pkt, now);
    assert_eq!(first.outputs.len(), 1, "{:?}", first.trace);
    assert_eq!(first.outputs[0].0, 3);
    assert_eq!(first.outputs[0].1[11], 0xa5);
    assert_eq!(first.trace.uncacheable.as_deref(), Some("p4-add-entry"));
    let entries = p.table_entries("ct_tcp_table").unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].spec.action, "MainControlImpl.ct_tcp_table_hit");
    let second = p.process(0, &pkt, now + 1000);
    assert_eq!(second.outputs[0].1[11], 0xf1);
    assert_eq!(second.trace.uncacheable, None);
    assert_eq!(second.trace.tables[0].entry, Some(entries[0].id));
    // Idle timeout: not expired after 10 s, expired after 31 s; a credited
    // cache hit refreshes it.
    assert!(p.expired_entries(now + 10_000_000_000).is_empty());
    assert_eq!(p.expired_entries(now + 31_000_000_000).len(), 1);
    p.credit(&second.trace, 1, 60, now + 30_000_000_000);
    assert!(p.expired_entries(now + 31_000_000_000).is_empty());
    assert_eq!(p.table_entries("ct_tcp_table").unwrap()[0].packets, 2);
}

#[test]
fn ids_match_p4c_p4info() {
    let Some(p) = load("v1model/table-entries-lpm-bmv2.p4") else {
        return;
    };
    let t = p.table_info("t_lpm").unwrap();
    assert_eq!(t.name, "ingress.t_lpm");
    assert_eq!(t.id, 42140569);
    let a = t.actions.iter().find(|a| a.name == "ingress.a").unwrap();
    assert_eq!(a.id, 21186165);
    let Some(p) = load("psa/psa-register-read-write-2-bmv2.p4") else {
        return;
    };
    let r = p
        .externs()
        .into_iter()
        .find(|e| e.name == "MyIC.reg")
        .unwrap();
    assert_eq!(r.id, 369588800);
    let Some(p) = load("psa/psa-basic-counter-bmv2.p4") else {
        return;
    };
    let c = p
        .externs()
        .into_iter()
        .find(|e| e.name == "cIngress.counter")
        .unwrap();
    assert_eq!(c.id, 304351549);
    assert_eq!(p.table_info("tbl").unwrap().id, 34888878);
}

#[test]
fn pipeline_is_send() {
    fn send<T: Send>() {}
    send::<nicflow_p4::Pipeline>();
    send::<nicflow_p4::Outcome>();
}

#[test]
fn netronome_ipv6_forward_names_resolve() {
    let Some(mut p) = load("netronome/ipv6_forward.p4") else {
        return;
    };
    assert_eq!(p.arch(), nicflow_p4::Arch::V1Model);
    // user_config.json spells ingress::ipv6_lpm and ipv6.dst_addr.
    let t = p.table_info("ingress.ipv6_lpm").unwrap();
    let k = t.key_index("ipv6.dst_addr").unwrap();
    assert_eq!(t.keys[k].width, 128);
    let a = t.action("ipv6_forward").unwrap();
    assert_eq!(a.params.len(), 2);
    let mut keys = vec![KeyMatch::Any; t.keys.len()];
    keys[k] = KeyMatch::Exact(BigUint::from(0xfc00u128 << 112 | 1));
    p.table_add(
        "ipv6_lpm",
        EntrySpec {
            keys,
            action: a.name.clone(),
            params: vec![("dstAddr".into(), n(0x00154d000000)), ("port".into(), n(5))],
            priority: None,
        },
    )
    .unwrap();
    // An IPv6 packet to fc00::1.
    let mut pkt = hex("000000000001 000000000002 86dd 60000000 0000 3b 40");
    pkt.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
    pkt.extend_from_slice(&[0; 12]);
    pkt.extend_from_slice(&[0xfc, 0]);
    pkt.extend_from_slice(&[0; 13]);
    pkt.push(1);
    let out = p.process(0, &pkt, 1);
    assert!(out.trace.error.is_none(), "{:?}", out.trace.error);
    assert_eq!(out.outputs.len(), 1, "{:?}", out.trace);
    assert_eq!(out.outputs[0].0, 5);
    assert_eq!(&out.outputs[0].1[..6], &[0, 0x15, 0x4d, 0, 0, 0]);
}
