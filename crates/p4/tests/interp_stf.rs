//! Corpus programs run against their STF expectations (p4c's own tests).

mod interp_support;
use interp_support::check_stf;

#[test]
fn pna_routing() {
    check_stf("pna/routing.p4", "pna/routing.stf");
}

#[test]
fn pna_routing_default() {
    check_stf("pna/routing.p4", "pna/routing_default.stf");
}

#[test]
fn pna_simple_l3() {
    check_stf("pna/simple_l3.p4", "pna/simple_l3.stf");
}

#[test]
fn pna_arp_respond() {
    check_stf("pna/arp_respond.p4", "pna/arp_respond.stf");
}

#[test]
fn pna_ipip_encap() {
    check_stf("pna/ipip.p4", "pna/ipip_encap.stf");
}

#[test]
fn pna_calc_128() {
    check_stf("pna/calc_128.p4", "pna/calc_128.stf");
}

#[test]
fn v1model_table_entries_lpm() {
    check_stf(
        "v1model/table-entries-lpm-bmv2.p4",
        "v1model/table-entries-lpm-bmv2.stf",
    );
}

#[test]
fn v1model_table_entries_ternary() {
    check_stf(
        "v1model/table-entries-ternary-bmv2.p4",
        "v1model/table-entries-ternary-bmv2.stf",
    );
}

#[test]
fn v1model_ternary2() {
    check_stf("v1model/ternary2-bmv2.p4", "v1model/ternary2-bmv2.stf");
}

#[test]
fn v1model_checksum_l4() {
    check_stf(
        "v1model/checksum-l4-bmv2.p4",
        "v1model/checksum-l4-bmv2.stf",
    );
}

#[test]
fn psa_register_read_write() {
    check_stf(
        "psa/psa-register-read-write-2-bmv2.p4",
        "psa/psa-register-read-write-2-bmv2.stf",
    );
}

#[test]
fn psa_recirculate() {
    check_stf(
        "psa/psa-recirculate-no-meta-bmv2.p4",
        "psa/psa-recirculate-no-meta-bmv2.stf",
    );
}

#[test]
fn psa_basic_counter() {
    check_stf(
        "psa/psa-basic-counter-bmv2.p4",
        "psa/psa-basic-counter-bmv2.stf",
    );
}

#[test]
fn v1model_special_ops() {
    check_stf(
        "v1model/v1model-special-ops-bmv2.p4",
        "v1model/v1model-special-ops-bmv2.stf",
    );
}
