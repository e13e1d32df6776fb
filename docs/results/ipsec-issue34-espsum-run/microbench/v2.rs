pub fn copy_sum_words2(dst: &mut [u8], src: &[u8], initial: u32) -> u32 {
    assert_eq!(dst.len(), src.len(), "copy_sum_words: lengths differ");
    let mut lanes = [0u64; 8];
    let mut from = src.chunks_exact(32);
    let mut to = dst.chunks_exact_mut(32);
    for (s, d) in (&mut from).zip(&mut to) {
        let b: [u8; 32] = s.try_into().expect("chunks_exact(32)");
        d.copy_from_slice(&b);
        for (k, lane) in lanes.iter_mut().enumerate() {
            *lane += le_word(&b[4 * k..4 * k + 4]);
        }
    }
    let rest = from.remainder();
    to.into_remainder().copy_from_slice(rest);
    let l = [lanes[0]+lanes[4], lanes[1]+lanes[5], lanes[2]+lanes[6], lanes[3]+lanes[7]];
    finish_lanes(l, rest, initial)
}
