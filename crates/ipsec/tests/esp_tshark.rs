//! Wireshark's ESP dissector as a second, independent decryptor.
//!
//! nicflow-sealed packets go into a pcap (IPv4 in Ethernet, ESP between
//! 198.18.0.1 and 198.18.0.2), and tshark is given the SAs through its
//! `esp_sa` UAT. Wireshark 4.0's table has eight columns: protocol, source,
//! destination, SPI, encryption, encryption key (key || salt for GCM),
//! authentication, authentication key; AES-GCM is
//! "AES-GCM with 16 octet ICV [RFC4106]" with authentication "NULL", and it
//! has no ESN column, so this check covers 32-bit sequence numbers only
//! (the scapy test covers ESN). tshark must show the decrypted UDP payload
//! of every packet, in transport and tunnel mode, for both key sizes, and
//! no ICV failure.

mod common;

use common::{ipv4, skipped};
use std::process::{Command, Stdio};

use nicflow_ipsec::esp::{Aead, OutboundSa, SaConfig, IPPROTO_ESP};

const SRC: [u8; 4] = [198, 18, 0, 1];
const DST: [u8; 4] = [198, 18, 0, 2];

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// UDP between ports no dissector claims, so tshark shows the payload as
/// `data.data`; checksum 0 (none, allowed in IPv4).
fn udp(sport: u16, payload: &[u8]) -> Vec<u8> {
    let mut u = Vec::new();
    u.extend_from_slice(&sport.to_be_bytes());
    u.extend_from_slice(&40_999u16.to_be_bytes());
    u.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(payload);
    u
}

/// A classic pcap (microsecond timestamps, Ethernet link type).
fn pcap(frames: &[Vec<u8>]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    f.extend_from_slice(&2u16.to_le_bytes());
    f.extend_from_slice(&4u16.to_le_bytes());
    f.extend_from_slice(&0i32.to_le_bytes());
    f.extend_from_slice(&0u32.to_le_bytes());
    f.extend_from_slice(&65_535u32.to_le_bytes());
    f.extend_from_slice(&1u32.to_le_bytes());
    for (i, ip) in frames.iter().enumerate() {
        let mut eth = vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x08, 0x00];
        eth.extend_from_slice(ip);
        f.extend_from_slice(&(1_700_000_000u32 + i as u32).to_le_bytes());
        f.extend_from_slice(&0u32.to_le_bytes());
        f.extend_from_slice(&(eth.len() as u32).to_le_bytes());
        f.extend_from_slice(&(eth.len() as u32).to_le_bytes());
        f.extend_from_slice(&eth);
    }
    f
}

fn uat(spi: u32, key: &[u8]) -> String {
    format!(
        r#"uat:esp_sa:"IPv4","198.18.0.1","198.18.0.2","{spi:#010x}","AES-GCM with 16 octet ICV [RFC4106]","0x{}","NULL","""#,
        hex(key)
    )
}

#[test]
fn tshark_decrypts_nicflow_esp() {
    let have_tshark = Command::new("tshark")
        .arg("-v")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !have_tshark {
        return skipped("tshark not found");
    }

    // (spi, aead, tunnel mode?)
    let sas = [
        (0x0000_1001u32, Aead::AesGcm128, false),
        (0x0000_1002, Aead::AesGcm128, true),
        (0x0000_1003, Aead::AesGcm256, false),
        (0x0000_1004, Aead::AesGcm256, true),
    ];
    let sizes = [0usize, 1, 2, 3, 64, 1400];
    let mut frames = Vec::new();
    let mut expected = Vec::new();
    let mut opts = Vec::new();
    for (n, &(spi, aead, tunnel)) in sas.iter().enumerate() {
        let key: Vec<u8> = (0..aead.key_material_len())
            .map(|i| (i * 31 + n * 7 + 1) as u8)
            .collect();
        opts.push("-o".to_string());
        opts.push(uat(spi, &key));
        let mut out = OutboundSa::new(SaConfig::new(spi, aead, key)).unwrap();
        let mut esp = Vec::new();
        for (k, &size) in sizes.iter().enumerate() {
            let payload: Vec<u8> = (0..size).map(|i| (i * 3 + k + n) as u8).collect();
            let sport = 40_000 + (n * 16 + k) as u16;
            let dgram = udp(sport, &payload);
            if tunnel {
                let inner = ipv4([10, 0, 0, 1], [10, 0, 0, 2], 17, &dgram);
                out.seal(4, &inner, &mut esp).unwrap();
            } else {
                out.seal(17, &dgram, &mut esp).unwrap();
            }
            frames.push(ipv4(SRC, DST, IPPROTO_ESP, &esp));
            expected.push((spi, out.last_seq(), sport, hex(&payload)));
        }
    }

    // A control: the first packet again with one ICV bit flipped, which
    // tshark must flag, or its "good" verdicts above would mean nothing.
    let mut bad = frames[0].clone();
    *bad.last_mut().unwrap() ^= 1;
    frames.push(bad);

    let dir = std::env::temp_dir().join(format!("nicflow-esp-tshark-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("esp.pcap");
    std::fs::write(&file, pcap(&frames)).unwrap();

    let out = Command::new("tshark")
        .arg("-n")
        .arg("-r")
        .arg(&file)
        .args([
            "-o",
            "esp.enable_encryption_decode:TRUE",
            "-o",
            "esp.enable_authentication_check:TRUE",
        ])
        .args(&opts)
        .args(["-T", "fields", "-E", "separator=|", "-E", "occurrence=l"])
        .args(["-e", "esp.spi", "-e", "esp.sequence", "-e", "udp.srcport"])
        .args(["-e", "data.data", "-e", "esp.icv_good", "-e", "esp.icv_bad"])
        .args(["-e", "_ws.expert.message"])
        // Keep the user's own Wireshark profile (and its SAs) out of it.
        .env("WIRESHARK_CONFIG_DIR", &dir)
        .env("HOME", &dir)
        .output()
        .expect("run tshark");
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "tshark failed: {stderr}");
    eprintln!("tshark says (spi|seq|udp.srcport|data|icv_good|icv_bad|expert):\n{stdout}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines.len(),
        expected.len() + 1,
        "one line per frame:\n{stdout}\n{stderr}"
    );
    let control: Vec<&str> = lines[expected.len()].split('|').collect();
    assert!(
        control[4] == "0" || control[5] == "1",
        "tshark did not flag a corrupted ICV: {}",
        lines[expected.len()]
    );
    for (line, (spi, seq, sport, payload)) in lines.iter().zip(&expected) {
        let f: Vec<&str> = line.split('|').collect();
        assert_eq!(f.len(), 7, "{line}");
        let what = format!("spi {spi:#x} seq {seq}: {line}");
        assert_eq!(
            u32::from_str_radix(f[0].trim_start_matches("0x"), 16),
            Ok(*spi),
            "{what}"
        );
        assert_eq!(f[1], seq.to_string(), "{what}");
        // Only a correct decryption yields the UDP header and payload.
        assert_eq!(f[2], sport.to_string(), "decrypted UDP header, {what}");
        assert_eq!(f[3], payload.as_str(), "decrypted payload, {what}");
        assert_ne!(f[4], "0", "ICV reported bad, {what}");
        assert!(f[5].is_empty() || f[5] == "0", "ICV reported bad, {what}");
        assert!(
            !f[6].to_lowercase().contains("incorrect") && !f[6].to_lowercase().contains("icv"),
            "expert info: {what}"
        );
    }
}
