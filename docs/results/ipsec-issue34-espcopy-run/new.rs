fn new(data: &[u8], initial: u32) -> u32 {
    let word = |c: &[u8]| u64::from(u32::from_le_bytes([c[0], c[1], c[2], c[3]]));
    let mut lanes = [0u64; 4];
    let mut blocks = data.chunks_exact(16);
    for b in &mut blocks {
        for (k, lane) in lanes.iter_mut().enumerate() {
            *lane += word(&b[4 * k..4 * k + 4]);
        }
    }
    // Each lane gains less than 2^32 per 16 bytes: no overflow below 2^62
    // bytes of data.
    let mut acc = lanes.iter().fold(0u64, |a, &l| a.wrapping_add(l));
    let rest = blocks.remainder();
    let mut words = rest.chunks_exact(4);
    for c in &mut words {
        acc += word(c);
    }
    let tail = words.remainder();
    let mut i = 0;
    while i + 1 < tail.len() {
        acc += u64::from(u16::from_le_bytes([tail[i], tail[i + 1]]));
        i += 2;
    }
    if i < tail.len() {
        // The high byte of a big-endian word is the low byte here.
        acc += u64::from(tail[i]);
    }
    // Fold to 16 bits (0 only for all-zero data), back to network order.
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    let mut sum = u64::from(initial) + u64::from((acc as u16).swap_bytes());
    while sum > u64::from(u32::MAX) {
        sum = (sum & 0xffff_ffff) + (sum >> 32);
    }
    sum as u32
}

