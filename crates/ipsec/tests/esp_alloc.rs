//! The per-packet path must not allocate: `seal` reuses the caller's
//! buffer once it is large enough, `open` works in place, and neither the
//! replay window nor the counters grow. A counting global allocator (this
//! test binary's only) checks it, including the drop paths, where an
//! allocation would be a cheap amplification for an attacker.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use nicflow_ipsec::esp::{Aead, EspDrop, InboundSa, OutboundSa, SaConfig};

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Set on the measuring thread only: the test harness's own threads
    /// may allocate at any time and are not the packet path.
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}

fn counting() -> bool {
    COUNTING.try_with(Cell::get).unwrap_or(false)
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if counting() {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if counting() {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn seal_and_open_do_not_allocate_once_warm() {
    for (aead, esn) in [(Aead::AesGcm128, false), (Aead::AesGcm256, true)] {
        let key = vec![0x42; aead.key_material_len()];
        let cfg = SaConfig {
            esn,
            replay_window: 1024,
            ..SaConfig::new(0x1234, aead, key)
        };
        let mut out = OutboundSa::new(cfg.clone()).unwrap();
        let mut inb = InboundSa::new(cfg).unwrap();
        let payload = vec![7u8; 8900];
        let mut buf = Vec::new();
        // Warm: the buffer grows to the largest packet once.
        out.seal(4, &payload, &mut buf).unwrap();
        inb.open(&mut buf).unwrap();
        let mut stale = Vec::with_capacity(buf.capacity());

        COUNTING.with(|c| c.set(true));
        for i in 0..2000usize {
            let len = [0, 64, 1400, 8900][i % 4];
            out.seal(17, &payload[..len], &mut buf).unwrap();
            if i == 1990 {
                stale.clear();
                stale.extend_from_slice(&buf);
            }
            let o = inb.open(&mut buf).unwrap();
            assert_eq!(o.payload.len(), len);
        }
        // Drops: replay, tampering, truncation.
        let r = inb.open(&mut stale);
        let mut bad = [0u8; 64];
        bad[..4].copy_from_slice(&0x1234u32.to_be_bytes());
        bad[4..8].copy_from_slice(&[0xff; 4]);
        let a = inb.open(&mut bad);
        let t = inb.open(&mut bad[..20]);
        COUNTING.with(|c| c.set(false));

        assert_eq!(r, Err(EspDrop::Replayed));
        assert_eq!(a, Err(EspDrop::AuthFailed));
        assert_eq!(t, Err(EspDrop::Truncated));
        assert_eq!(
            ALLOCS.swap(0, Ordering::SeqCst),
            0,
            "{aead} esn={esn}: allocations on the packet path"
        );
    }
}
