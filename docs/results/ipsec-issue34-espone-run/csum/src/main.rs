use nicflow_packet::checksum::{copy_sum_words, sum_words};
use std::hint::black_box;
use std::time::Instant;

#[inline(always)]
fn le_word(c: &[u8]) -> u64 { u64::from(u32::from_le_bytes([c[0], c[1], c[2], c[3]])) }

#[target_feature(enable = "avx2")]
unsafe fn copy_lanes_avx2(dst: &mut [u8], src: &[u8]) -> u64 {
    let mut lanes = [0u64; 8];
    let mut from = src.chunks_exact(32);
    let mut to = dst.chunks_exact_mut(32);
    for (s, d) in (&mut from).zip(&mut to) {
        let b: [u8; 32] = s.try_into().unwrap();
        d.copy_from_slice(&b);
        for (k, lane) in lanes.iter_mut().enumerate() { *lane += le_word(&b[4 * k..4 * k + 4]); }
    }
    lanes.iter().sum()
}

#[target_feature(enable = "avx2")]
unsafe fn copy_intr(dst: &mut [u8], src: &[u8]) -> u64 {
    use std::arch::x86_64::*;
    let n = src.len() / 32;
    let z = _mm256_setzero_si256();
    let mut a0 = _mm256_setzero_si256();
    let mut a1 = _mm256_setzero_si256();
    let sp = src.as_ptr(); let dp = dst.as_mut_ptr();
    for i in 0..n {
        let v = _mm256_loadu_si256(sp.add(32 * i) as *const __m256i);
        _mm256_storeu_si256(dp.add(32 * i) as *mut __m256i, v);
        a0 = _mm256_add_epi64(a0, _mm256_unpacklo_epi32(v, z));
        a1 = _mm256_add_epi64(a1, _mm256_unpackhi_epi32(v, z));
    }
    let s = _mm256_add_epi64(a0, a1);
    let mut o = [0u64; 4];
    _mm256_storeu_si256(o.as_mut_ptr() as *mut __m256i, s);
    o.iter().sum()
}


/// u16 words into u32 lanes (safe, baseline target), 32 bytes per step.
fn copy_w16(dst: &mut [u8], src: &[u8]) -> u64 {
    let mut total = 0u64;
    let mut from = src.chunks_exact(32);
    let mut to = dst.chunks_exact_mut(32);
    let mut lanes = [0u32; 16];
    let mut n = 0u32;
    for (s, d) in (&mut from).zip(&mut to) {
        let b: [u8; 32] = s.try_into().unwrap();
        d.copy_from_slice(&b);
        for k in 0..16 { lanes[k] += u32::from(u16::from_le_bytes([b[2 * k], b[2 * k + 1]])); }
        n += 1;
        if n == 65535 { total += lanes.iter().map(|&l| u64::from(l)).sum::<u64>(); lanes = [0; 16]; n = 0; }
    }
    total + lanes.iter().map(|&l| u64::from(l)).sum::<u64>()
}
fn sum_w16(src: &[u8]) -> u64 {
    let mut total = 0u64;
    let mut from = src.chunks_exact(32);
    let mut lanes = [0u32; 16];
    let mut n = 0u32;
    for s in &mut from {
        for k in 0..16 { lanes[k] += u32::from(u16::from_le_bytes([s[2 * k], s[2 * k + 1]])); }
        n += 1;
        if n == 65535 { total += lanes.iter().map(|&l| u64::from(l)).sum::<u64>(); lanes = [0; 16]; n = 0; }
    }
    total + lanes.iter().map(|&l| u64::from(l)).sum::<u64>()
}
/// u32 words split from u64 loads (safe)
fn copy_w32x(dst: &mut [u8], src: &[u8]) -> u64 {
    let mut from = src.chunks_exact(32);
    let mut to = dst.chunks_exact_mut(32);
    let mut lanes = [0u64; 8];
    for (s, d) in (&mut from).zip(&mut to) {
        let b: [u8; 32] = s.try_into().unwrap();
        d.copy_from_slice(&b);
        for k in 0..4 {
            let w = u64::from_le_bytes(b[8 * k..8 * k + 8].try_into().unwrap());
            lanes[2 * k] += w & 0xffff_ffff;
            lanes[2 * k + 1] += w >> 32;
        }
    }
    lanes.iter().sum()
}



/// u16 words into u32 lanes, in blocks short enough that no lane overflows.
fn copy_b16(dst: &mut [u8], src: &[u8]) -> u64 {
    let mut total = 0u64;
    for (sb, db) in src.chunks(32 * 4096).zip(dst.chunks_mut(32 * 4096)) {
        let mut lanes = [0u32; 16];
        for (s, d) in sb.chunks_exact(32).zip(db.chunks_exact_mut(32)) {
            let b: [u8; 32] = s.try_into().unwrap();
            d.copy_from_slice(&b);
            for k in 0..16 { lanes[k] += u32::from(u16::from_le_bytes([b[2 * k], b[2 * k + 1]])); }
        }
        total += lanes.iter().map(|&l| u64::from(l)).sum::<u64>();
    }
    total
}
fn sum_b16(src: &[u8]) -> u64 {
    let mut total = 0u64;
    for sb in src.chunks(32 * 4096) {
        let mut lanes = [0u32; 16];
        for s in sb.chunks_exact(32) {
            for k in 0..16 { lanes[k] += u32::from(u16::from_le_bytes([s[2 * k], s[2 * k + 1]])); }
        }
        total += lanes.iter().map(|&l| u64::from(l)).sum::<u64>();
    }
    total
}
/// u16 words into u32 lanes, 16-byte steps with 8 lanes
fn copy_b16s(dst: &mut [u8], src: &[u8]) -> u64 {
    let mut total = 0u64;
    for (sb, db) in src.chunks(16 * 4096).zip(dst.chunks_mut(16 * 4096)) {
        let mut lanes = [0u32; 8];
        for (s, d) in sb.chunks_exact(16).zip(db.chunks_exact_mut(16)) {
            let b: [u8; 16] = s.try_into().unwrap();
            d.copy_from_slice(&b);
            for k in 0..8 { lanes[k] += u32::from(u16::from_le_bytes([b[2 * k], b[2 * k + 1]])); }
        }
        total += lanes.iter().map(|&l| u64::from(l)).sum::<u64>();
    }
    total
}

fn time(name: &str, n: usize, len: usize, mut f: impl FnMut()) {
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        for _ in 0..n { f(); }
        best = best.min(t.elapsed().as_secs_f64());
    }
    println!("{name:>22}: {:.1} ns per {len} B ({:.2} B/ns)", best / n as f64 * 1e9, len as f64 / (best / n as f64 * 1e9));
}

fn main() {
    for &len in &[1400usize, 1448] {
        let src: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
        let mut dst = vec![0u8; len];
        let n = 2_000_000;
        time("copy_sum_words", n, len, || { black_box(copy_sum_words(black_box(&mut dst), black_box(&src), 0)); });
        time("sum_words", n, len, || { black_box(sum_words(black_box(&src), 0)); });
        time("memcpy", n, len, || { black_box(&mut dst).copy_from_slice(black_box(&src)); });
        time("lanes8 avx2 (autovec)", n, len, || { black_box(unsafe { copy_lanes_avx2(black_box(&mut dst), black_box(&src)) }); });
        time("w16 safe copy", n, len, || { black_box(copy_w16(black_box(&mut dst), black_box(&src))); });
        time("w16 safe sum", n, len, || { black_box(sum_w16(black_box(&src))); });
        time("w32x safe copy", n, len, || { black_box(copy_w32x(black_box(&mut dst), black_box(&src))); });
        time("b16 copy", n, len, || { black_box(copy_b16(black_box(&mut dst), black_box(&src))); });
        time("b16 sum", n, len, || { black_box(sum_b16(black_box(&src))); });
        time("b16s copy", n, len, || { black_box(copy_b16s(black_box(&mut dst), black_box(&src))); });
        time("intrinsics avx2", n, len, || { black_box(unsafe { copy_intr(black_box(&mut dst), black_box(&src)) }); });
    }
}
