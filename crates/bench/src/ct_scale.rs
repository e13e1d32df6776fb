//! `nicflow bench ct-scale`: connection-tracking scale through the whole
//! switch pipeline, in one process (issue 13: "1K to 1M tracked
//! connections: lookup cost, memory per connection, insertion rate",
//! target 1M connections in at most 512 MB).
//!
//! For each N, a fresh [`Bridge`] with two in-memory ports (p1 the
//! clients' side, p2 the server's) and Open vSwitch's stateful firewall
//! table ([`FIREWALL`], as in `tests/conntrack.rs`):
//!
//! 1. **Insertion**: N TCP connections are opened through the switch, in
//!    chunks of `batch`: the chunk's SYNs from p1, its SYN-ACKs from p2,
//!    its ACKs from p1, each set injected and then processed by
//!    `run_until_idle`. Distinct 5-tuples from the RFC 2544 range: clients
//!    198.18.0.1 upwards with 1,000 source ports each, the server
//!    198.19.0.1:80. Handshakes/s = N / the time spent inside the bridge
//!    (building and injecting frames is not counted). Before it, [`WARM`]
//!    other connections are opened and flushed, so the datapath flows are
//!    cached and no upcall is timed. Small N are filled on `reps` fresh
//!    bridges (as many as keep the total at 1M connections or below) and
//!    the median is reported; the last bridge goes on to the next steps.
//! 2. **Memory**: the process's resident set (`/proc/self/statm`) and
//!    glibc's heap in use (`mallinfo2`) before the first SYN and after the
//!    last ACK of the first fill; their growth over N is the cost of a
//!    connection (tracker, plus anything else the switch keeps per
//!    connection).
//! 3. **Lookup**: `reps` repetitions of `packets` established data
//!    segments (`payload` bytes, ACK|PSH) on connections picked at random
//!    (seeded), in either direction, in batches of `batch`; the time inside
//!    the bridge over the packets is ns/packet with N connections live. Each
//!    batch acknowledges what the other side sent before the batch, so every
//!    segment stays inside the tracker's TCP window checks. Baseline in the
//!    same run and process: the same frames through the same bridge with a
//!    table without `ct` ([`NO_CT`]); the two tables take turns, which one
//!    goes first alternating per repetition.
//!
//! No `tick` runs during the measurement (no sweeping, no datapath flow
//! aging): the figures are the per-packet path only.

use super::forward;
use super::report::{self, Figure, Series};
use anyhow::{bail, Context};
use nicflow::bridge::Bridge;
use nicflow::datapath::DatapathConfig;
use nicflow::port::mem::{MemHandle, MemPort};
use nicflow_conntrack::FlushFilter;
use nicflow_packet::builder::FrameBuilder;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

/// OVS's stateful firewall (ovs-fields(7), "Connection Tracking"): p1 may
/// open connections to p2, p2 may only answer.
pub const FIREWALL: &str = "\
table=0,priority=1,actions=drop
table=0,priority=10,arp,actions=normal
table=0,priority=100,ip,ct_state=-trk,actions=ct(table=1)
table=1,priority=1,actions=drop
table=1,priority=10,in_port=p1,ip,ct_state=+trk+new,actions=ct(commit),output:p2
table=1,priority=10,in_port=p1,ip,ct_state=+trk+est,actions=output:p2
table=1,priority=10,in_port=p2,ip,ct_state=+trk+est,actions=output:p1
";

/// The baseline: the same ports patched together, no tracking.
pub const NO_CT: &str = "\
in_port=p1,actions=output:p2
in_port=p2,actions=output:p1
";

const SYN: u16 = 0x02;
const ACK: u16 = 0x10;
const PSH: u16 = 0x08;
const WINDOW: u16 = 65535;

const CLIENT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0a];
const SERVER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0b];
const SERVER: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 1);
const SERVER_PORT: u16 = 80;
/// Source ports per client address.
const CLIENT_PORTS: usize = 1000;
const FIRST_CLIENT_PORT: u16 = 20000;
/// Distinct tuples [`client`] can make: 198.18.0.1 - 198.18.255.254, 1,000
/// ports each, less the warm-up's.
pub const MAX_CONNECTIONS: usize = CLIENT_PORTS * 65_534 - WARM;
/// Connections opened (and flushed) before the timed handshakes.
pub const WARM: usize = 32;
/// Fills of small points stop at this many connections in all.
const FILL_BUDGET: usize = 1_000_000;

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Connection counts, comma-separated (each point opens this many TCP
    /// connections on a fresh bridge).
    #[arg(long, default_value = "1000,10000,100000,1000000")]
    pub connections: String,
    /// Established data packets per repetition (each sent once with ct and
    /// once without).
    #[arg(long, default_value_t = 500_000)]
    pub packets: usize,
    /// Repetitions of the data phase (the report shows medians).
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
    /// Frames injected before each `run_until_idle` (handshakes: connections
    /// per chunk).
    #[arg(long, default_value_t = 1024)]
    pub batch: usize,
    /// TCP payload bytes of a data packet.
    #[arg(long, default_value_t = 64)]
    pub payload: usize,
    /// Seed of the random connection picks.
    #[arg(long, default_value_t = 0x5eed_c7)]
    pub seed: u64,
    /// Where the run goes, re-rendering, smoke runs.
    #[command(flatten)]
    pub run: super::RunArgs,
}

/// What one run measures.
#[derive(Clone, Debug)]
pub struct Options {
    pub connections: Vec<usize>,
    pub packets: usize,
    pub reps: usize,
    pub batch: usize,
    pub payload: usize,
    pub seed: u64,
}

pub fn options(a: &Args) -> anyhow::Result<Options> {
    let mut connections = if a.run.quick {
        vec![1000, 10_000]
    } else {
        super::testbed::parse_counts(&a.connections)?
    };
    connections.sort_unstable();
    connections.dedup();
    if let Some(&n) = connections.iter().find(|&&n| n > MAX_CONNECTIONS) {
        bail!("--connections {n}: at most {MAX_CONNECTIONS} distinct tuples");
    }
    if a.batch == 0 || a.reps == 0 || a.packets == 0 {
        bail!("--batch, --reps and --packets must be positive");
    }
    if a.payload > 1400 {
        bail!("--payload {}: at most 1400 bytes", a.payload);
    }
    let (packets, reps) = if a.run.quick {
        (a.packets.min(50_000), a.reps.min(3))
    } else {
        (a.packets, a.reps)
    };
    Ok(Options {
        connections,
        packets,
        reps,
        batch: a.batch,
        payload: a.payload,
        seed: a.seed,
    })
}

pub fn cli(args: &Args) -> anyhow::Result<()> {
    let measure = || run(&options(args)?, progress);
    report::cli(&args.run, "ct-scale", measure, figures, markdown)
}

fn progress(s: &str) {
    eprintln!("[ct-scale] {s}");
}

// ---------------------------------------------------------------------------
// Results
// ---------------------------------------------------------------------------

/// Memory of the process at one moment.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct MemSample {
    /// Resident set, bytes (`/proc/self/statm`).
    pub rss: Option<u64>,
    /// Heap in use, bytes (glibc `mallinfo2`: `uordblks + hblkhd`).
    pub heap: Option<u64>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Point {
    pub connections: usize,
    /// Time inside the bridge for every handshake packet (3 per
    /// connection), one per fill (fresh bridge).
    pub handshake_s: Vec<f64>,
    /// Handshake packets that did not come out of the other port.
    pub handshake_lost: u64,
    /// The tracker's connection count after the handshakes, and its TCP
    /// count.
    pub tracked: usize,
    pub tracked_tcp: usize,
    /// The tracker's limit (refused commits are counted in `limit_drops`).
    pub limit: usize,
    pub limit_drops: u64,
    pub mem_before: MemSample,
    pub mem_after: MemSample,
    /// ns per data packet, one per repetition.
    pub ct_ns: Vec<f64>,
    pub noct_ns: Vec<f64>,
    /// Data packets that did not come out (must be 0).
    pub ct_lost: u64,
    pub noct_lost: u64,
    /// Invalid packets counted by the tracker over the whole point.
    pub invalid: u64,
    /// Share of datapath lookups (passes) served by the exact-match cache.
    pub ct_emc_share: f64,
    pub noct_emc_share: f64,
    /// Datapath flows after the data phase (ct table).
    pub dp_flows: usize,
    /// Wall time of the whole point, frame building included.
    pub wall_s: f64,
}

fn med(v: &[f64]) -> f64 {
    super::median(&mut v.to_vec())
}

fn growth(before: Option<u64>, after: Option<u64>) -> Option<f64> {
    Some(after? as f64 - before? as f64)
}

impl Point {
    pub fn handshakes_per_s(&self) -> f64 {
        self.connections as f64 / med(&self.handshake_s)
    }
    pub fn ct_ns(&self) -> f64 {
        med(&self.ct_ns)
    }
    pub fn noct_ns(&self) -> f64 {
        med(&self.noct_ns)
    }
    /// Median of the per-repetition ratios (each repetition sends the same
    /// frames with and without ct back to back, so load from other
    /// processes mostly cancels out).
    pub fn ratio(&self) -> f64 {
        let r: Vec<f64> = self
            .ct_ns
            .iter()
            .zip(&self.noct_ns)
            .map(|(c, n)| c / n)
            .collect();
        med(&r)
    }
    /// RSS growth over the handshakes, bytes.
    pub fn rss_growth(&self) -> Option<f64> {
        growth(self.mem_before.rss, self.mem_after.rss)
    }
    /// Heap growth over the handshakes, bytes.
    pub fn heap_growth(&self) -> Option<f64> {
        growth(self.mem_before.heap, self.mem_after.heap)
    }
    pub fn rss_per_conn(&self) -> Option<f64> {
        self.rss_growth().map(|g| g / self.connections as f64)
    }
    pub fn heap_per_conn(&self) -> Option<f64> {
        self.heap_growth().map(|g| g / self.connections as f64)
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Results {
    pub machine: String,
    /// Load average (1/5/15 min) at the end of the run.
    pub load: String,
    pub command: String,
    pub seed: u64,
    pub packets: usize,
    pub reps: usize,
    pub batch: usize,
    pub payload: usize,
    pub points: Vec<Point>,
    pub wall_s: f64,
}

// ---------------------------------------------------------------------------
// Connections and frames
// ---------------------------------------------------------------------------

/// Connection `i`'s client address and port (`i < MAX_CONNECTIONS`).
pub fn client(i: usize) -> (Ipv4Addr, u16) {
    let host = (i / CLIENT_PORTS) as u32 + 1;
    let base = u32::from(Ipv4Addr::new(198, 18, 0, 0));
    (
        Ipv4Addr::from(base + host),
        FIRST_CLIENT_PORT + (i % CLIENT_PORTS) as u16,
    )
}

/// Initial sequence number of connection `i`'s client (`server == false`)
/// or server.
pub fn isn(i: usize, server: bool) -> u32 {
    (i as u32).wrapping_mul(0x9e37_79b1) ^ if server { 0x5a5a_0000 } else { 0x0000_a5a5 }
}

/// One TCP segment of connection `i`.
fn segment(i: usize, from_server: bool, flags: u16, seq: u32, ack: u32, payload: &[u8]) -> Vec<u8> {
    let (cip, cport) = client(i);
    let b = if from_server {
        FrameBuilder::new(SERVER_MAC, CLIENT_MAC)
            .ipv4(SERVER, cip)
            .tcp(SERVER_PORT, cport, flags)
    } else {
        FrameBuilder::new(CLIENT_MAC, SERVER_MAC)
            .ipv4(cip, SERVER)
            .tcp(cport, SERVER_PORT, flags)
    };
    b.tcp_seq(seq)
        .tcp_ack(ack)
        .tcp_window(WINDOW)
        .payload(payload)
        .build()
}

/// The three handshake frame sets of connections `ids`: SYNs (p1),
/// SYN-ACKs (p2), ACKs (p1).
fn handshake(ids: std::ops::Range<usize>) -> [Vec<Vec<u8>>; 3] {
    let mut out = [Vec::new(), Vec::new(), Vec::new()];
    for i in ids {
        let (c, s) = (isn(i, false), isn(i, true));
        out[0].push(segment(i, false, SYN, c, 0, &[]));
        out[1].push(segment(i, true, SYN | ACK, s, c.wrapping_add(1), &[]));
        out[2].push(segment(
            i,
            false,
            ACK,
            c.wrapping_add(1),
            s.wrapping_add(1),
            &[],
        ));
    }
    out
}

/// One data segment to send: connection, direction, sequence and
/// acknowledgement numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seg {
    pub conn: usize,
    pub from_server: bool,
    pub seq: u32,
    pub ack: u32,
}

/// Bytes each side of each connection has sent in the data phase.
pub struct Streams {
    sent: Vec<[u32; 2]>,
}

impl Streams {
    pub fn new(n: usize) -> Self {
        Streams {
            sent: vec![[0; 2]; n],
        }
    }

    /// Sequence and acknowledgement numbers for `picks` (connection, from
    /// server), sent as one batch whose frames the switch may process in
    /// any order across the two ports: every segment acknowledges only what
    /// the other side sent *before* the batch (so no ACK runs ahead of data
    /// the tracker has seen), and each side's sequence advances by `len`
    /// per segment.
    pub fn plan(&mut self, picks: &[(usize, bool)], len: u32) -> Vec<Seg> {
        let acks: Vec<u32> = picks
            .iter()
            .map(|&(i, srv)| {
                let other = usize::from(!srv);
                isn(i, !srv)
                    .wrapping_add(1)
                    .wrapping_add(self.sent[i][other])
            })
            .collect();
        picks
            .iter()
            .zip(acks)
            .map(|(&(i, srv), ack)| {
                let me = usize::from(srv);
                let seq = isn(i, srv).wrapping_add(1).wrapping_add(self.sent[i][me]);
                self.sent[i][me] = self.sent[i][me].wrapping_add(len);
                Seg {
                    conn: i,
                    from_server: srv,
                    seq,
                    ack,
                }
            })
            .collect()
    }
}

/// A batch of data frames: those p1 receives (clients') and those p2
/// receives (the server's).
type Batch = (Vec<Vec<u8>>, Vec<Vec<u8>>);

fn data_batches(streams: &mut Streams, rng: &mut StdRng, n: usize, opts: &Options) -> Vec<Batch> {
    let payload = vec![0x5au8; opts.payload];
    let mut out = Vec::new();
    let mut left = opts.packets;
    while left > 0 {
        let k = left.min(opts.batch);
        left -= k;
        let picks: Vec<(usize, bool)> = (0..k)
            .map(|_| (rng.gen_range(0..n), rng.gen::<bool>()))
            .collect();
        let mut b: Batch = (Vec::new(), Vec::new());
        for s in streams.plan(&picks, opts.payload as u32) {
            let f = segment(s.conn, s.from_server, ACK | PSH, s.seq, s.ack, &payload);
            if s.from_server {
                b.1.push(f);
            } else {
                b.0.push(f);
            }
        }
        out.push(b);
    }
    out
}

// ---------------------------------------------------------------------------
// Memory
// ---------------------------------------------------------------------------

/// Resident bytes from the text of `/proc/self/statm` (second field, in
/// pages).
pub fn parse_statm(text: &str, page: u64) -> Option<u64> {
    text.split_whitespace()
        .nth(1)?
        .parse::<u64>()
        .ok()
        .map(|p| p * page)
}

fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as u64
    } else {
        4096
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn heap_in_use() -> Option<u64> {
    // SAFETY: mallinfo2 only reads the allocator's statistics.
    let mi = unsafe { libc::mallinfo2() };
    Some((mi.uordblks + mi.hblkhd) as u64)
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn heap_in_use() -> Option<u64> {
    None
}

/// Give freed memory back to the system, so the next reading starts low.
fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory.
    unsafe {
        libc::malloc_trim(0);
    }
}

fn mem_now() -> MemSample {
    MemSample {
        rss: std::fs::read_to_string("/proc/self/statm")
            .ok()
            .and_then(|t| parse_statm(&t, page_size())),
        heap: heap_in_use(),
    }
}

// ---------------------------------------------------------------------------
// Measurement
// ---------------------------------------------------------------------------

fn tx_total(h: &[MemHandle; 2]) -> u64 {
    h[0].stats().tx_packets + h[1].stats().tx_packets
}

/// Inject each batch and run the bridge until it is idle; returns the time
/// spent inside the bridge, the packets sent and those that did not come
/// out.
fn send(br: &mut Bridge, h: &[MemHandle; 2], batches: &[Batch]) -> (Duration, u64, u64) {
    let before = tx_total(h);
    let mut spent = Duration::ZERO;
    let mut n = 0u64;
    for (to_p1, to_p2) in batches {
        for f in to_p1 {
            h[0].inject(f);
        }
        for f in to_p2 {
            h[1].inject(f);
        }
        n += (to_p1.len() + to_p2.len()) as u64;
        let now = Instant::now();
        br.run_until_idle(now);
        spent += now.elapsed();
    }
    let out = tx_total(h) - before;
    (spent, n, n.saturating_sub(out))
}

/// EMC hits and all lookups (EMC, megaflow, upcalls) so far.
fn lookups(br: &Bridge) -> (u64, u64) {
    let s = br.dp_stats();
    (s.emc_hits, s.emc_hits + s.megaflow_hits + s.upcalls)
}

fn set_table(br: &mut Bridge, table: &str) -> anyhow::Result<()> {
    let now = Instant::now();
    br.del_flows_str("").context("deleting the rules")?;
    br.add_flows_str(table, now).context("adding the rules")?;
    Ok(())
}

fn interrupted() -> anyhow::Result<()> {
    if forward::interrupted() {
        bail!("interrupted");
    }
    Ok(())
}

/// A bridge with two in-memory ports (p1, p2) and the firewall table.
fn fresh_bridge() -> anyhow::Result<(Bridge, [MemHandle; 2])> {
    let mut br = Bridge::new("ct-scale", DatapathConfig::default());
    let (p1, h1) = MemPort::replay("p1", Vec::new());
    let (p2, h2) = MemPort::replay("p2", Vec::new());
    br.add_port(Box::new(p1)).context("adding p1")?;
    br.add_port(Box::new(p2)).context("adding p2")?;
    br.add_flows_str(FIREWALL, Instant::now())
        .context("adding the firewall table")?;
    Ok((br, [h1, h2]))
}

/// Open connections `ids` through the bridge in chunks of `batch`; returns
/// the time inside the bridge and the handshake packets that did not come
/// out of the other port.
fn open(
    br: &mut Bridge,
    h: &[MemHandle; 2],
    ids: std::ops::Range<usize>,
    batch: usize,
) -> anyhow::Result<(Duration, u64)> {
    let mut spent = Duration::ZERO;
    let mut sent = 0u64;
    let tx0 = tx_total(h);
    let mut start = ids.start;
    while start < ids.end {
        let end = ids.end.min(start + batch);
        let [syn, synack, ack] = handshake(start..end);
        for (port, frames) in [(0, &syn), (1, &synack), (0, &ack)] {
            for f in frames.iter() {
                h[port].inject(f);
            }
            sent += frames.len() as u64;
            let now = Instant::now();
            br.run_until_idle(now);
            spent += now.elapsed();
        }
        start = end;
        interrupted()?;
    }
    Ok((spent, sent.saturating_sub(tx_total(h) - tx0)))
}

/// Fills of a point with `n` connections: `reps`, or fewer to keep the
/// connections opened at or below [`FILL_BUDGET`]; at least one.
pub fn fills(n: usize, reps: usize) -> usize {
    (FILL_BUDGET / n.max(1)).clamp(1, reps.max(1))
}

/// One point: N connections on a fresh bridge.
pub fn measure_point(
    n: usize,
    opts: &Options,
    rng: &mut StdRng,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<Point> {
    let wall = Instant::now();
    // 1. Handshakes, on `fills` fresh bridges; the last one is kept.
    let rounds = fills(n, opts.reps);
    progress(&format!("{n} connections: handshakes ({rounds} fill(s))"));
    let mut handshake_s = Vec::new();
    let mut handshake_lost = 0;
    let mut mem = None;
    let mut kept = None;
    for round in 0..rounds {
        drop(kept.take());
        trim();
        let (mut br, h) = fresh_bridge()?;
        open(&mut br, &h, n..n + WARM, opts.batch)?;
        br.flush_conntrack(&FlushFilter::default());
        trim();
        let before = mem_now();
        let (t, lost) = open(&mut br, &h, 0..n, opts.batch)?;
        let after = mem_now();
        if round == 0 {
            mem = Some((before, after));
        }
        handshake_s.push(t.as_secs_f64());
        handshake_lost += lost;
        kept = Some((br, h));
    }
    let (Some((mut br, h)), Some((mem_before, mem_after))) = (kept, mem) else {
        bail!("no fill");
    };
    let limit = br.conntrack().config().limit;
    let ct = br.conntrack().stats();
    progress(&format!(
        "{n} connections: {} tracked ({} tcp), {:.0} handshakes/s, RSS +{:.1} MB",
        ct.connections,
        ct.tcp,
        n as f64 / med(&handshake_s),
        growth(mem_before.rss, mem_after.rss).unwrap_or(f64::NAN) / 1e6
    ));

    // 2. Established data, with and without ct.
    let mut streams = Streams::new(n);
    let (mut ct_ns, mut noct_ns) = (Vec::new(), Vec::new());
    let (mut ct_lost, mut noct_lost) = (0, 0);
    let (mut ct_emc, mut ct_all, mut no_emc, mut no_all) = (0, 0, 0, 0);
    let mut dp_flows = 0;
    for rep in 0..opts.reps {
        let batches = data_batches(&mut streams, rng, n, opts);
        let order = if rep % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        for with_ct in order {
            set_table(&mut br, if with_ct { FIREWALL } else { NO_CT })?;
            let (e0, a0) = lookups(&br);
            let (t, pkts, lost) = send(&mut br, &h, &batches);
            let (e1, a1) = lookups(&br);
            let per = super::ns(t, pkts);
            if with_ct {
                ct_ns.push(per);
                ct_lost += lost;
                ct_emc += e1 - e0;
                ct_all += a1 - a0;
                dp_flows = br.n_dp_flows();
            } else {
                noct_ns.push(per);
                noct_lost += lost;
                no_emc += e1 - e0;
                no_all += a1 - a0;
            }
            interrupted()?;
        }
        progress(&format!(
            "{n} connections: rep {}/{}: {:.0} ns/packet with ct, {:.0} without",
            rep + 1,
            opts.reps,
            ct_ns[rep],
            noct_ns[rep]
        ));
    }
    let end = br.conntrack().stats();
    Ok(Point {
        connections: n,
        handshake_s,
        handshake_lost,
        tracked: ct.connections,
        tracked_tcp: ct.tcp,
        limit,
        limit_drops: end.limit_drops,
        mem_before,
        mem_after,
        ct_ns,
        noct_ns,
        ct_lost,
        noct_lost,
        invalid: end.invalid_total(),
        ct_emc_share: ct_emc as f64 / ct_all.max(1) as f64,
        noct_emc_share: no_emc as f64 / no_all.max(1) as f64,
        dp_flows,
        wall_s: wall.elapsed().as_secs_f64(),
    })
}

pub fn command_line(o: &Options) -> String {
    format!(
        "nicflow bench ct-scale --connections {} --packets {} --reps {} --batch {} --payload {} --seed {:#x}",
        report::join(&o.connections, ","),
        o.packets,
        o.reps,
        o.batch,
        o.payload,
        o.seed
    )
}

pub fn run(opts: &Options, mut progress: impl FnMut(&str)) -> anyhow::Result<Results> {
    let wall = Instant::now();
    progress(&format!("seed {:#x}", opts.seed));
    let mut rng = StdRng::seed_from_u64(opts.seed);
    let mut points = Vec::new();
    for &n in &opts.connections {
        let p = measure_point(n, opts, &mut rng, &mut progress)?;
        progress(&format!("{n} connections: done in {:.1} s", p.wall_s));
        points.push(p);
    }
    let load = std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default();
    Ok(Results {
        machine: super::machine_description(),
        load,
        command: command_line(opts),
        seed: opts.seed,
        packets: opts.packets,
        reps: opts.reps,
        batch: opts.batch,
        payload: opts.payload,
        points,
        wall_s: wall.elapsed().as_secs_f64(),
    })
}

// ---------------------------------------------------------------------------
// Report
// ---------------------------------------------------------------------------

/// The target: 1M connections in at most 512 MB.
pub const TARGET_CONNECTIONS: usize = 1_000_000;
pub const TARGET_BYTES: f64 = 512.0 * 1024.0 * 1024.0;

fn mb(b: Option<f64>) -> Option<f64> {
    b.map(|b| b / (1024.0 * 1024.0))
}

pub fn figures(r: &Results) -> Vec<Figure> {
    let xs = |f: &dyn Fn(&Point) -> Option<f64>| -> Vec<(f64, Option<f64>)> {
        r.points
            .iter()
            .map(|p| (p.connections as f64, f(p)))
            .collect()
    };
    vec![
        Figure {
            id: "ns_per_packet".into(),
            title: "Established packets through the switch".into(),
            x_label: "tracked connections".into(),
            y_label: "ns per packet".into(),
            log_x: true,
            series: vec![
                Series {
                    name: "stateful firewall (ct)".into(),
                    points: xs(&|p| Some(p.ct_ns())),
                },
                Series {
                    name: "no ct".into(),
                    points: xs(&|p| Some(p.noct_ns())),
                },
            ],
        },
        Figure {
            id: "handshakes".into(),
            title: "Connection setup through the switch".into(),
            x_label: "tracked connections".into(),
            y_label: "TCP handshakes per second".into(),
            log_x: true,
            series: vec![Series {
                name: "stateful firewall (ct)".into(),
                points: xs(&|p| Some(p.handshakes_per_s())),
            }],
        },
        Figure {
            id: "bytes_per_connection".into(),
            title: "Memory per tracked connection".into(),
            x_label: "tracked connections".into(),
            y_label: "bytes per connection".into(),
            log_x: true,
            series: vec![
                Series {
                    name: "RSS growth".into(),
                    points: xs(&|p| p.rss_per_conn()),
                },
                Series {
                    name: "heap growth".into(),
                    points: xs(&|p| p.heap_per_conn()),
                },
            ],
        },
    ]
}

/// `1000000` -> `1,000,000`.
pub fn thousands(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (k, c) in s.chars().enumerate() {
        if k > 0 && (s.len() - k).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The sentence on the 512 MB target.
pub fn verdict(r: &Results) -> String {
    let target_mb = TARGET_BYTES / (1024.0 * 1024.0);
    if let Some(p) = r
        .points
        .iter()
        .find(|p| p.connections == TARGET_CONNECTIONS)
    {
        let Some(g) = p.rss_growth() else {
            return "The resident set could not be read: no figure against the target.".into();
        };
        let heap = mb(p.heap_growth())
            .map(|h| format!(", heap in use +{h:.0} MiB"))
            .unwrap_or_default();
        let total = mb(p.mem_after.rss.map(|b| b as f64)).unwrap_or(f64::NAN);
        return format!(
            "1,000,000 connections through the switch: RSS +{:.0} MiB ({:.0} bytes/connection{heap}; \
             the whole process {total:.0} MiB) against the target of {target_mb:.0} MiB: {}.",
            g / (1024.0 * 1024.0),
            g / p.connections as f64,
            if g <= TARGET_BYTES { "met" } else { "NOT met" }
        );
    }
    match r.points.iter().rev().find_map(|p| p.rss_per_conn()) {
        Some(per) => format!(
            "1,000,000 connections were not measured in this run; at the largest point's \
             {per:.0} bytes/connection they would take {:.0} MiB (target {target_mb:.0} MiB).",
            per * TARGET_CONNECTIONS as f64 / (1024.0 * 1024.0)
        ),
        None => "No memory figure against the target.".into(),
    }
}

pub fn markdown(r: &Results, _figs: &[Figure]) -> String {
    let mut m = String::new();
    let _ = writeln!(m, "# nicflow bench ct-scale\n");
    let _ = writeln!(
        m,
        "Machine: {}. Load average (1/5/15 min) at the end: {}. Release build, one thread. \
         Whole run: {:.0} s.\n",
        r.machine, r.load, r.wall_s
    );
    let _ = writeln!(
        m,
        "In-process, through the whole switch: a bridge with two in-memory ports and Open \
         vSwitch's stateful firewall table (`ct_state=-trk` -> `ct(table=1)`, new connections \
         committed from p1 only, established both ways). Per point, a fresh bridge opens N TCP \
         connections (SYN from p1, SYN-ACK from p2, ACK from p1; clients 198.18.0.1 upwards, \
         1,000 source ports each, server 198.19.0.1:80) in chunks of {batch}, after {warm} warm-up \
         connections (opened, then flushed: the datapath flows are cached); handshakes/s = N / \
         the time inside the bridge, median over fresh-bridge fills (up to {reps}, at most 1M \
         connections opened per point; the Checks table gives each). Then {reps} repetitions of {packets} established {payload}-byte \
         segments (ACK|PSH, both directions) on connections picked at random (seed {seed:#x}), \
         injected {batch} at a time: ns/packet is the time inside the bridge per packet (receive, \
         the cache tiers, both passes and the tracker, transmit), median of the repetitions. \
         Baseline: the same frames through the same bridge with `in_port=p1,actions=output:p2` \
         and the reverse (no ct), the two tables taking turns; ct / no ct is the median of the \
         repetitions' ratios. Memory: growth of the resident set \
         (`/proc/self/statm`) and of glibc's heap in use (`mallinfo2`) from before the first SYN \
         to after the last ACK of the first fill, over N; the 1K point carries the bridge's fixed costs. No \
         housekeeping `tick` runs (no sweeps, no flow aging).\n",
        batch = r.batch,
        warm = WARM,
        reps = r.reps,
        packets = thousands(r.packets),
        payload = r.payload,
        seed = r.seed,
    );
    let _ = writeln!(m, "Command: `{}`\n", r.command);
    let rows: Vec<Vec<String>> = r
        .points
        .iter()
        .map(|p| {
            vec![
                thousands(p.connections),
                format!("{:.0}", p.handshakes_per_s()),
                report::cell(Some(p.ct_ns()), 0),
                report::cell(Some(p.noct_ns()), 0),
                format!("{:.2}x", p.ratio()),
                report::cell(p.rss_per_conn(), 0),
                report::cell(mb(p.rss_growth()), 1),
            ]
        })
        .collect();
    m.push_str(&report::table(
        &[
            ("connections", true),
            ("handshakes/s", true),
            ("ns/packet ct", true),
            ("ns/packet no ct", true),
            ("ct / no ct", true),
            ("bytes/connection (RSS)", true),
            ("total MiB (RSS growth)", true),
        ],
        &rows,
    ));
    let _ = writeln!(m, "\n{}\n", verdict(r));

    let _ = writeln!(m, "## Memory\n");
    let rows: Vec<Vec<String>> = r
        .points
        .iter()
        .map(|p| {
            vec![
                thousands(p.connections),
                report::cell(mb(p.rss_growth()), 1),
                report::cell(p.rss_per_conn(), 0),
                report::cell(mb(p.heap_growth()), 1),
                report::cell(p.heap_per_conn(), 0),
                report::cell(mb(p.mem_after.rss.map(|b| b as f64)), 1),
            ]
        })
        .collect();
    m.push_str(&report::table(
        &[
            ("connections", true),
            ("RSS growth MiB", true),
            ("RSS bytes/connection", true),
            ("heap growth MiB", true),
            ("heap bytes/connection", true),
            ("process RSS MiB after", true),
        ],
        &rows,
    ));

    let _ = writeln!(m, "\n## Checks\n");
    let rows: Vec<Vec<String>> = r
        .points
        .iter()
        .map(|p| {
            vec![
                thousands(p.connections),
                format!(
                    "{} ({} tcp)",
                    thousands(p.tracked),
                    thousands(p.tracked_tcp)
                ),
                thousands(p.limit),
                p.limit_drops.to_string(),
                p.handshake_lost.to_string(),
                report::join(
                    &p.handshake_s
                        .iter()
                        .map(|t| format!("{:.0}", p.connections as f64 / t))
                        .collect::<Vec<_>>(),
                    " ",
                ),
                format!("{} / {}", p.ct_lost, p.noct_lost),
                p.invalid.to_string(),
                format!(
                    "{:.0}% / {:.0}%",
                    p.ct_emc_share * 100.0,
                    p.noct_emc_share * 100.0
                ),
                p.dp_flows.to_string(),
                format!(
                    "{} / {}",
                    report::join(
                        &p.ct_ns
                            .iter()
                            .map(|x| format!("{x:.0}"))
                            .collect::<Vec<_>>(),
                        " "
                    ),
                    report::join(
                        &p.noct_ns
                            .iter()
                            .map(|x| format!("{x:.0}"))
                            .collect::<Vec<_>>(),
                        " "
                    )
                ),
                format!("{:.1}", p.wall_s),
            ]
        })
        .collect();
    m.push_str(&report::table(
        &[
            ("connections", true),
            ("tracked (conntrack stats)", true),
            ("limit", true),
            ("limit drops", true),
            ("handshake packets lost", true),
            ("handshakes/s per fill", false),
            ("data packets lost ct / no ct", true),
            ("invalid", true),
            ("EMC share of lookups ct / no ct", true),
            ("datapath flows", true),
            ("ns/packet per rep ct / no ct", false),
            ("point wall s", true),
        ],
        &rows,
    ));
    let _ = writeln!(
        m,
        "\nThe exact-match cache holds 8,192 entries: past that many flows most lookups fall \
         to the megaflow cache, with ct and without. With ct every packet makes two passes \
         (before and after recirculation) and one tracker lookup."
    );
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_are_distinct_and_in_the_benchmark_range() {
        let mut seen = std::collections::HashSet::new();
        for i in (0..5000).chain(MAX_CONNECTIONS - 5000..MAX_CONNECTIONS) {
            let (ip, port) = client(i);
            let o = ip.octets();
            assert_eq!(o[0], 198);
            assert_eq!(o[1], 18, "{ip}");
            assert!(ip != Ipv4Addr::new(198, 18, 0, 0) && o[2..] != [255, 255]);
            assert!((20000..21000).contains(&port));
            assert!(seen.insert((ip, port)), "{i}: {ip}:{port} twice");
        }
        assert_eq!(client(0), (Ipv4Addr::new(198, 18, 0, 1), 20000));
        assert_eq!(
            client(1_000_000 - 1),
            (Ipv4Addr::new(198, 18, 3, 232), 20999)
        );
    }

    #[test]
    fn plan_acknowledges_only_data_sent_before_the_batch() {
        let mut s = Streams::new(2);
        let c0 = isn(0, false).wrapping_add(1);
        let s0 = isn(0, true).wrapping_add(1);
        let b = s.plan(&[(0, false), (0, true), (0, false), (1, true)], 10);
        assert_eq!(b[0].seq, c0);
        assert_eq!(b[0].ack, s0);
        // The server's segment does not acknowledge the client's segment
        // of the same batch (the switch may see them in either order).
        assert_eq!((b[1].seq, b[1].ack), (s0, c0));
        assert_eq!((b[2].seq, b[2].ack), (c0 + 10, s0));
        assert!(b[3].from_server && b[3].conn == 1);
        // The next batch acknowledges everything.
        let b = s.plan(&[(0, true), (0, false)], 10);
        assert_eq!((b[0].seq, b[0].ack), (s0 + 10, c0 + 20));
        assert_eq!((b[1].seq, b[1].ack), (c0 + 20, s0 + 10));
    }

    #[test]
    fn statm_thousands_and_options() {
        assert_eq!(
            parse_statm("12345 678 90 1 0 2 0\n", 4096),
            Some(678 * 4096)
        );
        assert_eq!(parse_statm("12345", 4096), None);
        assert_eq!(thousands(1_000_000), "1,000,000");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(10_000), "10,000");
        assert_eq!(fills(1000, 5), 5);
        assert_eq!(fills(300_000, 5), 3);
        assert_eq!(fills(1_000_000, 5), 1);
        assert_eq!(fills(4_000_000, 5), 1);
        let a = Args {
            connections: "10000,1000,1000".into(),
            packets: 10,
            reps: 2,
            batch: 4,
            payload: 64,
            seed: 1,
            run: crate::RunArgs::default(),
        };
        let o = options(&a).unwrap();
        assert_eq!(o.connections, vec![1000, 10000]);
        assert!(command_line(&o).contains("--connections 1000,10000 "));
        let too_many = Args {
            connections: (MAX_CONNECTIONS + 1).to_string(),
            ..a
        };
        assert!(options(&too_many).is_err());
    }

    /// A small run end to end: every connection tracked, no packet lost or
    /// invalid (the planned sequence numbers stay inside the windows), and
    /// a report that says so.
    #[test]
    fn small_run_tracks_every_connection_and_loses_nothing() {
        let opts = Options {
            connections: vec![300],
            packets: 3000,
            reps: 2,
            batch: 256,
            payload: 64,
            seed: 7,
        };
        let r = run(&opts, |_| {}).unwrap();
        let p = &r.points[0];
        assert_eq!((p.tracked, p.tracked_tcp), (300, 300));
        assert_eq!(p.handshake_lost, 0);
        assert_eq!((p.ct_lost, p.noct_lost), (0, 0));
        assert_eq!(p.invalid, 0);
        assert_eq!((p.ct_ns.len(), p.noct_ns.len()), (2, 2));
        assert_eq!(p.handshake_s.len(), 2);
        assert!(p.ct_ns() > 0.0 && p.noct_ns() > 0.0);
        let paired = Point {
            ct_ns: vec![300.0, 200.0, 900.0],
            noct_ns: vec![100.0, 100.0, 100.0],
            ..p.clone()
        };
        assert_eq!(paired.ratio(), 3.0);
        let md = markdown(&r, &figures(&r));
        assert!(md.contains("| 300 |"), "{md}");
        assert!(md.contains("were not measured"), "{md}");
        let json = serde_json::to_string(&r).unwrap();
        let back: Results = serde_json::from_str(&json).unwrap();
        assert_eq!(back.points[0].connections, 300);
    }
}
