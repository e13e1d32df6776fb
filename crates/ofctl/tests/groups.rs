//! Groups in `ovs-ofctl add-group` syntax: every type and bucket form
//! parses, prints as `dump-groups` does, and reads back the same; errors
//! name the offending piece.

use nicflow_flow::{Action, Field};
use nicflow_ofctl::group::format_bucket;
use nicflow_ofctl::{
    format_group, parse_flow, parse_group, parse_group_filter, parse_groups, GroupType, NamedPorts,
    SelectionMethod,
};

fn ports() -> NamedPorts {
    let mut p = NamedPorts::new();
    p.insert("p1", 1);
    p.insert("p2", 2);
    p.insert("p3", 3);
    p
}

/// Parse, print, check the print, read back.
fn round(text: &str, printed: &str) {
    let p = ports();
    let g = parse_group(text, &p).unwrap_or_else(|e| panic!("{text}: {e}"));
    let out = format_group(&g, &p);
    assert_eq!(out, printed, "{text}");
    assert_eq!(parse_group(&out, &p).unwrap(), g, "{out}");
    assert_eq!(format_group(&parse_group(&out, &p).unwrap(), &p), out);
}

#[test]
fn every_type_round_trips() {
    round(
        "group_id=1,type=all,bucket=actions=output:p1,bucket=actions=mod_dl_dst:02:00:00:00:00:01,output:2",
        "group_id=1,type=all,bucket=bucket_id:0,actions=output:p1,bucket=bucket_id:1,actions=mod_dl_dst:02:00:00:00:00:01,output:p2",
    );
    round(
        "group_id=2,type=select,bucket=weight:10,actions=output:p1,bucket=weight:20,actions=output:p2,bucket=actions=output:p3",
        "group_id=2,type=select,bucket=bucket_id:0,weight:10,actions=output:p1,bucket=bucket_id:1,weight:20,actions=output:p2,bucket=bucket_id:2,actions=output:p3",
    );
    round(
        "group_id=3,type=indirect,bucket=actions=output:p3",
        "group_id=3,type=indirect,bucket=bucket_id:0,actions=output:p3",
    );
    round(
        "group_id=4,type=fast_failover,bucket=watch_port:p1,actions=output:p1,bucket=watch_port:2,actions=output:p2,bucket=watch_group:3,actions=group:3",
        "group_id=4,type=ff,bucket=bucket_id:0,watch_port:p1,actions=output:p1,bucket=bucket_id:1,watch_port:p2,actions=output:p2,bucket=bucket_id:2,watch_group:3,actions=group:3",
    );
    round(
        "group_id=5,type=ff,bucket=watch_port:p1,output:p1",
        "group_id=5,type=ff,bucket=bucket_id:0,watch_port:p1,actions=output:p1",
    );
}

#[test]
fn bucket_forms() {
    // OVS's shorthand: the bucket is an action list with optional
    // weight:/watch_port: entries anywhere; `action=` too; bucket_id given.
    round(
        "group_id=7,type=select,bucket=output:p1,weight:5,bucket=bucket_id:9,weight=3,action=output:p2,output:p3",
        "group_id=7,type=select,bucket=bucket_id:0,weight:5,actions=output:p1,bucket=bucket_id:9,weight:3,actions=output:p2,output:p3",
    );
    // Spaces and a trailing comma; an empty action list is drop.
    round(
        "group_id=8, type=all, bucket=actions=drop, bucket=actions=output:p1,",
        "group_id=8,type=all,bucket=bucket_id:0,actions=drop,bucket=bucket_id:1,actions=output:p1",
    );
    // Weight 0 in a select group prints; the default 1 does not.
    round(
        "group_id=9,type=select,bucket=weight:0,actions=output:p1,bucket=weight:1,actions=output:p2",
        "group_id=9,type=select,bucket=bucket_id:0,weight:0,actions=output:p1,bucket=bucket_id:1,actions=output:p2",
    );
    // No buckets at all is a valid (empty) group.
    round("group_id=10,type=all", "group_id=10,type=all");
    let g = parse_group("group_id=7,type=select,bucket=output:p1,weight:5", &ports()).unwrap();
    assert_eq!(
        format_bucket(&g.buckets[0], g.kind, &ports()),
        "bucket=bucket_id:0,weight:5,actions=output:p1"
    );
}

#[test]
fn every_action_in_buckets() {
    // Bucket actions need no protocol in a match: set_field of ports, ct
    // with nat, resubmit, group chaining, registers.
    round(
        "group_id=20,type=select,bucket=actions=ct(commit,nat(dst=198.18.0.10:80)),output:p2,bucket=actions=ct(commit,nat(dst=198.18.0.11:80)),output:p3",
        "group_id=20,type=select,bucket=bucket_id:0,actions=ct(commit,nat(dst=198.18.0.10:80)),output:p2,bucket=bucket_id:1,actions=ct(commit,nat(dst=198.18.0.11:80)),output:p3",
    );
    let p = ports();
    let g = parse_group(
        "group_id=21,type=all,bucket=actions=mod_tp_dst:8080,mod_nw_dst:10.0.0.1,output:p1,bucket=actions=load:5->NXM_NX_REG0[],resubmit(,3),bucket=actions=group:20,ct_clear,dec_ttl",
        &p,
    )
    .unwrap();
    assert_eq!(g.buckets.len(), 3);
    assert!(g.buckets[0].actions.contains(&Action::SetField {
        field: Field::TpDst,
        value: 8080,
        mask: 0xffff
    }));
    assert_eq!(g.buckets[2].actions[0], Action::Group(20));
    let again = parse_group(&format_group(&g, &p), &p).unwrap();
    assert_eq!(again, g);
}

#[test]
fn per_packet_selection_methods_round_trip() {
    round(
        "group_id=40,type=select,selection_method=rr,bucket=output:p1,bucket=output:p2",
        "group_id=40,type=select,selection_method=rr,bucket=bucket_id:0,actions=output:p1,bucket=bucket_id:1,actions=output:p2",
    );
    round(
        "group_id=41,type=select,selection_method=wrr,bucket=weight:3,actions=mod_vlan_vid:10,output:p1,bucket=weight:1,actions=mod_vlan_vid:20,output:p1",
        "group_id=41,type=select,selection_method=wrr,bucket=bucket_id:0,weight:3,actions=mod_vlan_vid:10,output:p1,bucket=bucket_id:1,actions=mod_vlan_vid:20,output:p1",
    );
    round(
        "group_id=42,type=select,selection_method=splb,bucket=output:p1,bucket=output:p2,bucket=output:p3",
        "group_id=42,type=select,selection_method=splb,bucket=bucket_id:0,actions=output:p1,bucket=bucket_id:1,actions=output:p2,bucket=bucket_id:2,actions=output:p3",
    );
    for (text, m) in [
        ("rr", SelectionMethod::RoundRobin),
        ("wrr", SelectionMethod::Weighted),
        ("splb", SelectionMethod::Splb),
    ] {
        let g = parse_group(
            &format!("group_id=1,type=select,selection_method={text},bucket=output:p1"),
            &ports(),
        )
        .unwrap();
        assert_eq!(g.selection_method, Some(m));
        assert!(m.per_packet());
    }
    assert!(!SelectionMethod::Hash.per_packet());
    assert!(!SelectionMethod::DpHash.per_packet());
    // Unknown names list every method; fields only go with hash.
    let e = parse_group(
        "group_id=1,type=select,selection_method=random,bucket=output:p1",
        &ports(),
    )
    .unwrap_err();
    assert!(
        e.reason.contains("hash, dp_hash, rr, wrr, splb"),
        "{}",
        e.reason
    );
    for m in ["rr", "wrr", "splb"] {
        let e = parse_group(
            &format!("group_id=1,type=select,selection_method={m},fields(nw_src),bucket=output:p1"),
            &ports(),
        )
        .unwrap_err();
        assert!(
            e.reason.contains("selection_method=hash"),
            "{m}: {}",
            e.reason
        );
        let e = parse_group(
            &format!("group_id=1,type=all,selection_method={m},bucket=output:p1"),
            &ports(),
        )
        .unwrap_err();
        assert!(e.reason.contains("select groups"), "{m}: {}", e.reason);
    }
}

#[test]
fn selection_methods_and_fields() {
    round(
        "group_id=30,type=select,selection_method=hash,fields(ip_src,tcp_dst),bucket=output:p1,bucket=output:p2",
        "group_id=30,type=select,selection_method=hash,fields(ip_src,tcp_dst),bucket=bucket_id:0,actions=output:p1,bucket=bucket_id:1,actions=output:p2",
    );
    round(
        "group_id=31,type=select,selection_method=hash,fields=nw_dst,bucket=output:p1",
        "group_id=31,type=select,selection_method=hash,fields=nw_dst,bucket=bucket_id:0,actions=output:p1",
    );
    round(
        "group_id=32,type=select,selection_method=hash,selection_method_param=7,fields(nw_src=255.255.255.0,tp_dst=0xff00,dl_dst),bucket=output:p1",
        "group_id=32,type=select,selection_method=hash,selection_method_param=7,fields(nw_src=255.255.255.0,tp_dst=0xff00,dl_dst),bucket=bucket_id:0,actions=output:p1",
    );
    round(
        "group_id=33,type=select,selection_method=dp_hash,bucket=output:p1",
        "group_id=33,type=select,selection_method=dp_hash,bucket=bucket_id:0,actions=output:p1",
    );
    let g = parse_group(
        "group_id=30,type=select,selection_method=hash,fields(ip_src,tcp_dst),bucket=output:p1",
        &ports(),
    )
    .unwrap();
    assert_eq!(g.selection_method, Some(SelectionMethod::Hash));
    assert_eq!(g.fields[0].field, Field::NwSrc);
    assert_eq!(
        (g.fields[1].field, g.fields[1].proto),
        (Field::TpDst, Some(6))
    );
    assert_eq!(g.kind, GroupType::Select);
}

/// (text, offending token, words in the reason)
#[test]
fn errors_name_the_offending_piece() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "type=all,bucket=output:1",
            "type=all,bucket=output:1",
            "group_id",
        ),
        (
            "group_id=1,bucket=output:1",
            "group_id=1,bucket=output:1",
            "type",
        ),
        (
            "group_id=1,type=bogus,bucket=output:1",
            "type=bogus",
            "invalid group type",
        ),
        (
            "group_id=0xffffff01,type=all",
            "group_id=0xffffff01",
            "group id",
        ),
        (
            "group_id=1,type=all,colour=red",
            "colour=red",
            "unknown keyword",
        ),
        (
            "group_id=1,type=indirect,bucket=output:1,bucket=output:2",
            "group_id=1,type=indirect,bucket=output:1,bucket=output:2",
            "exactly one bucket",
        ),
        (
            "group_id=1,type=indirect",
            "group_id=1,type=indirect",
            "exactly one bucket",
        ),
        (
            "group_id=1,type=fast_failover,bucket=output:1",
            "bucket=output:1",
            "watch_port or watch_group",
        ),
        (
            "group_id=1,type=all,bucket=weight:3,output:1",
            "weight:3",
            "Only select groups",
        ),
        (
            "group_id=1,type=all,bucket=watch_port:p9,output:1",
            "watch_port:p9",
            "unknown port",
        ),
        (
            "group_id=1,type=all,bucket=output:p9",
            "output:p9",
            "unknown port",
        ),
        (
            "group_id=1,type=all,bucket=frobnicate",
            "frobnicate",
            "unknown action",
        ),
        (
            "group_id=1,type=all,bucket=weight:2",
            "bucket=weight:2",
            "must specify actions",
        ),
        (
            "group_id=1,type=select,bucket=weight:70000,output:1",
            "weight:70000",
            "out of range",
        ),
        (
            "group_id=1,type=all,bucket=bucket_id:1,output:1,bucket=bucket_id:1,output:2",
            "bucket=bucket_id:1,output:2",
            "duplicate bucket id",
        ),
        (
            "group_id=1,type=all,fields(nw_src),bucket=output:1",
            "fields(nw_src)",
            "selection_method=hash",
        ),
        (
            "group_id=1,type=all,selection_method=hash,bucket=output:1",
            "selection_method=hash",
            "select groups",
        ),
        (
            "group_id=1,type=select,selection_method=best,bucket=output:1",
            "selection_method=best",
            "unknown selection method",
        ),
        (
            "group_id=1,type=select,selection_method=hash,fields(bogus),bucket=output:1",
            "bogus",
            "unknown field",
        ),
        (
            "group_id=1,type=select,selection_method=hash,fields(nw_src=0.0.0.0),bucket=output:1",
            "nw_src=0.0.0.0",
            "all-zeros",
        ),
        (
            "group_id=1,type=select,selection_method_param=3,bucket=output:1",
            "selection_method_param=3",
            "only allowed with",
        ),
        (
            "group_id=1,type=all,bucket=goto_table:3",
            "goto_table:3",
            "use resubmit",
        ),
        (
            "group_id=1,type=all,bucket=actions=mod_tp_dst:80,arp_spa:1.2.3.4",
            "arp_spa:1.2.3.4",
            "unknown action",
        ),
        (
            "group_id=1,type=all,bucket=ct(commit,alg=ftp)",
            "alg=ftp",
            "alg",
        ),
        (
            "group_id=1,type=all,bucket=group:0xffffff01",
            "group:0xffffff01",
            "group id",
        ),
    ];
    for (text, tok, why) in cases {
        let e = parse_group(text, &ports()).expect_err(text);
        assert_eq!(e.token, *tok, "{text}: {e}");
        assert!(e.reason.contains(why), "{text}: {e}");
    }
    // Mixing fields of two protocols in one bucket cannot be satisfied.
    let e = parse_group(
        "group_id=1,type=all,bucket=actions=mod_tp_dst:80,set_field:1.2.3.4->arp_spa",
        &ports(),
    )
    .unwrap_err();
    assert!(e.reason.contains("requires"), "{e}");
}

#[test]
fn group_action_in_rules_and_filters() {
    let p = ports();
    let f = parse_flow("ip,actions=group:5", &p).unwrap();
    assert_eq!(f.actions, vec![Action::Group(5)]);
    assert_eq!(nicflow_ofctl::format_flow(&f, &p), "ip actions=group:5");
    let e = parse_flow("actions=group:x", &p).unwrap_err();
    assert_eq!(e.token, "group:x");
    let e = parse_flow("actions=group", &p).unwrap_err();
    assert_eq!(e.token, "group");
    assert_eq!(parse_group_filter("").unwrap(), None);
    assert_eq!(parse_group_filter("group_id=all").unwrap(), None);
    assert_eq!(parse_group_filter("group_id=7").unwrap(), Some(7));
    assert_eq!(
        parse_group_filter("type=all").unwrap_err().token,
        "type=all"
    );
    let gs = parse_groups(
        "# groups\n\ngroup_id=1,type=all,bucket=output:1\ngroup_id=2,type=indirect,bucket=output:2\n",
        &p,
    )
    .unwrap();
    assert_eq!(gs.len(), 2);
    let e = parse_groups("group_id=1,type=all\ngroup_id=2,type=nope\n", &p).unwrap_err();
    assert_eq!(e.line, 2);
}
