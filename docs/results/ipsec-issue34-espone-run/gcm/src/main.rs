// AES-128-GCM cost per byte with ring 0.17.14 on this machine (one thread):
// seal and open in place of ESP-sized bodies, as nicflow-ipsec calls them;
// plus a plain memcpy of the same size for scale.
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_128_GCM};
use std::time::Instant;
fn main() {
    let key = LessSafeKey::new(UnboundKey::new(&AES_128_GCM, &[7u8; 16]).unwrap());
    for &len in &[1424usize, 8952] {
        let mut buf = vec![0x5au8; len];
        let n = 400_000usize * 1424 / len;
        let mut tags = Vec::with_capacity(n);
        for rep in 0..3 {
            let t = Instant::now();
            tags.clear();
            for i in 0..n {
                let mut nb = [0u8; 12];
                nb[4..].copy_from_slice(&(i as u64).to_be_bytes());
                let tag = key.seal_in_place_separate_tag(Nonce::assume_unique_for_key(nb), Aad::from(&[1u8; 8]), &mut buf).unwrap();
                tags.push(tag);
            }
            let seal = t.elapsed().as_secs_f64();
            // open: re-seal one packet per i is costly; open the last one repeatedly
            // with its right tag (decrypt + GHASH, same work per byte).
            let mut nb = [0u8; 12];
            nb[4..].copy_from_slice(&((n - 1) as u64).to_be_bytes());
            let last = buf.clone();
            let t = Instant::now();
            let mut work = buf.clone();
            for _ in 0..n {
                work.copy_from_slice(&last); // the copy is timed separately below and subtracted
                key.open_in_place_separate_tag(Nonce::assume_unique_for_key(nb), Aad::from(&[1u8; 8]), tags[n - 1], &mut work, 0..).unwrap();
            }
            let open_plus_copy = t.elapsed().as_secs_f64();
            let t = Instant::now();
            for _ in 0..n {
                work.copy_from_slice(&last);
                std::hint::black_box(&mut work);
            }
            let copy = t.elapsed().as_secs_f64();
            let bytes = (n * len) as f64;
            let per_gbit = |s: f64| s / (bytes * 8.0 / 1e9);
            println!("len {len} rep {rep}: seal {:.1} ns/pkt {:.4} s/Gbit; open {:.1} ns/pkt {:.4} s/Gbit; memcpy {:.1} ns/pkt {:.4} s/Gbit",
                seal / n as f64 * 1e9, per_gbit(seal),
                (open_plus_copy - copy) / n as f64 * 1e9, per_gbit(open_plus_copy - copy),
                copy / n as f64 * 1e9, per_gbit(copy));
            std::hint::black_box(&buf);
        }
    }
}
