//! What a rule does to a packet: the OpenFlow-style action list.
//!
//! These are the slow path's actions. The slow path walks the tables, runs
//! these actions against the packet's key, and the result is a flat list of
//! datapath actions (see the `nicflow` crate's `datapath::DpAction`) that the
//! fast path replays on every later packet of the flow. `goto_table` and
//! `resubmit` therefore exist only here, never in the datapath.

use crate::field::Field;

/// Reserved OpenFlow port numbers (OpenFlow 1.0 values widened to 32 bits,
/// as OVS does internally).
pub mod ofp {
    /// Largest number a real port can have.
    pub const MAX: u32 = 0xffff_ff00;
    pub const IN_PORT: u32 = 0xffff_fff8;
    pub const TABLE: u32 = 0xffff_fff9;
    pub const NORMAL: u32 = 0xffff_fffa;
    pub const FLOOD: u32 = 0xffff_fffb;
    pub const ALL: u32 = 0xffff_fffc;
    pub const CONTROLLER: u32 = 0xffff_fffd;
    pub const LOCAL: u32 = 0xffff_fffe;
    pub const NONE: u32 = 0xffff_ffff;
}

/// A port as written in a rule: the parser resolves names to numbers through
/// a port map, so the tables only ever hold numbers.
pub type PortRef = u32;

/// One action of a rule's action list. An empty list means drop
/// (`actions=drop`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Send to a port number. Sending to the input port is silently skipped,
    /// as in OpenFlow; use [`Action::InPort`] for that.
    Output(u32),
    /// [`Action::Output`] to a port number (`1..=ofp::MAX`) with the
    /// OpenFlow `max_len` the controller wrote (never 0: that is plain
    /// `Output`). `max_len` only limits `PACKET_IN`s, so for a port it means
    /// nothing to forwarding: this runs exactly as `Output(port)`. It is kept
    /// so that flow stats return the action as the controller sent it
    /// (os-ken/Ryu write `OFPCML_MAX` = 65509 by default and compare), as
    /// Open vSwitch keeps it. Printed as `output:PORT` (as `ovs-ofctl` does:
    /// text cannot carry it, and `output:PORT` parses to `max_len` 0).
    OutputMaxLen { port: u32, max_len: u16 },
    /// Send back out of the input port.
    InPort,
    /// The learning switch: learn the source MAC, forward to the known port
    /// of the destination MAC or flood.
    Normal,
    /// Every port except the input port.
    Flood,
    /// Every port except the input port (OVS treats ALL and FLOOD alike when
    /// no port has flooding disabled).
    All,
    /// The host's own port of the bridge.
    Local,
    /// Queue a copy for the controller (counted, bounded), `max_len` bytes.
    Controller { max_len: u16 },
    /// Run the packet through meter N (OpenFlow 1.3's meter instruction,
    /// `meter:N`): it may be dropped or have its DSCP remarked. Always the
    /// first action of a rule, as OpenFlow orders instructions.
    Meter(u32),
    /// Write `value` into the bits of `field` selected by `mask` (both
    /// right-aligned). `mod_dl_src`, `mod_nw_dst`, `mod_tp_src`, `mod_nw_tos`
    /// and `set_field` all become this.
    SetField {
        field: Field,
        value: u128,
        mask: u128,
    },
    /// Push a new outermost 802.1Q tag with this TPID (VID 0, PCP 0; follow
    /// with `mod_vlan_vid` to set it).
    PushVlan(u16),
    /// Remove the outermost tag (`pop_vlan`, `strip_vlan`).
    PopVlan,
    /// Set the VID of the outermost tag, pushing a tag first if untagged
    /// (OpenFlow 1.0 semantics, as in `ovs-ofctl`).
    ModVlanVid(u16),
    /// Set the PCP of the outermost tag, pushing a tag first if untagged.
    ModVlanPcp(u8),
    /// Decrement the IP TTL / hop limit; a packet whose TTL would reach zero
    /// is dropped (and counted) instead of forwarded.
    DecTtl,
    /// `dec_ttl(ID,...)` (OVS's `NXAST_DEC_TTL_CNT_IDS`): as [`Action::DecTtl`],
    /// but a packet whose TTL would reach zero also goes to the controller
    /// as a `PACKET_IN` with reason `OFPR_INVALID_TTL` (2) before it is
    /// dropped (and counted). nicflow sends `PACKET_IN`s to every
    /// controller connection, so the ids are kept and encoded but do not
    /// pick connections. Never empty (`dec_ttl()` is [`Action::DecTtl`]).
    DecTtlIds(Vec<u16>),
    /// Continue in a later table.
    GotoTable(u8),
    /// Look the packet up again (optionally as if from another port, in
    /// another table) and run that rule's actions here, then continue.
    Resubmit {
        port: Option<u32>,
        table: Option<u8>,
    },
    /// Copy `n_bits` bits of `src` starting at `src_ofs` into `dst` at
    /// `dst_ofs` (`move:SRC[a..b]->DST[c..d]`).
    Move {
        src: Field,
        src_ofs: u8,
        dst: Field,
        dst_ofs: u8,
        n_bits: u8,
    },
    /// Send the packet through the connection tracker (`ct(...)`).
    Ct(CtAction),
    /// Forget the packet's connection-tracking state (`ct_clear`).
    CtClear,
    /// Run an OpenFlow group (`group:N`): its type decides which of its
    /// buckets' action lists run, each on its own copy of the packet.
    Group(u32),
    /// Output to the port whose number is held in `nbits` bits of `field`
    /// starting at bit `ofs`, read when the action runs (`output:reg0[0..15]`,
    /// OVS's `NXAST_OUTPUT_REG`). As in OVS, the value is a 16-bit OpenFlow
    /// port: 0xfff8..=0xffff are the reserved ports (`IN_PORT`, `LOCAL`...),
    /// anything above 0xffff outputs nothing. `max_len` only matters when the
    /// value names the controller (`ovs-ofctl` text always gives 65535).
    OutputReg {
        field: Field,
        ofs: u8,
        nbits: u8,
        max_len: u16,
    },
    /// `enqueue:PORT:QUEUE`: output to `port` through egress queue `queue`
    /// (OVS runs it as `set_queue:QUEUE,output:PORT,pop_queue`). nicflow has
    /// no egress queues, so this forwards exactly as `output:PORT`; the queue
    /// is kept so the rule prints and dumps as it was written.
    Enqueue { port: u32, queue: u32 },
    /// `write_metadata:VALUE[/MASK]`, the OpenFlow 1.1+ `WRITE_METADATA`
    /// instruction: the bits of `metadata` under `mask` become `value`. An
    /// instruction runs after the rule's apply-actions and before its
    /// `goto_table`, which is where the rule language requires it to stand,
    /// so running it in list order is the same thing.
    WriteMetadata { value: u64, mask: u64 },
    /// `controller(...)` with more than `max_len` (OVS's
    /// `NXAST_CONTROLLER2`): a reason, a controller id, opaque `userdata`
    /// for the controller, `pause`, a meter for the copies. See
    /// [`ControllerOpts`] for what nicflow does with each.
    Controller2(Box<ControllerOpts>),
    /// `conjunction(ID,K/N)`: this rule is clause `k` (1-based) of the `n`
    /// dimensions of conjunctive match `id`. Never run as an action: the
    /// lookup treats a rule whose actions are all conjunctions as a "soft"
    /// match, and when a packet matches one rule of every dimension of `id`
    /// (at one priority, above any ordinary match) it is looked up again
    /// with `conj_id=id` (OVS's classifier semantics, ovs-fields(7)).
    Conjunction { id: u32, clause: u8, n_clauses: u8 },
    /// `check_pkt_larger(LEN)->DST[ofs]`: bit `ofs` of `dst` becomes 1
    /// when the frame (L2 header included, as the kernel's
    /// `check_pkt_len`) is longer than `len` bytes, 0 otherwise. The
    /// length is in no flow key, so a translation that runs it is not
    /// cached: every such packet goes through the slow path.
    CheckPktLarger { len: u16, dst: Field, ofs: u8 },
    /// `clone(ACTIONS)`: run `ACTIONS` on a copy of the packet; whatever
    /// they change (fields, tags, registers) is undone afterwards.
    Clone(Vec<Action>),
    /// `push:FIELD[ofs..]`: push `n_bits` bits of `field` onto the
    /// translation's stack (OVS's `NXAST_STACK_PUSH`).
    StackPush { field: Field, ofs: u8, n_bits: u8 },
    /// `pop:FIELD[ofs..]`: pop the top of the stack into those bits; popping
    /// an empty stack leaves the field alone (OVS logs and goes on).
    StackPop { field: Field, ofs: u8, n_bits: u8 },
    /// `learn(...)` (OVS's `NXAST_LEARN`): when a packet runs it, a rule
    /// built from the packet's fields is added to (or replaces its twin
    /// in) `spec.table`. See [`LearnSpec`].
    Learn(Box<LearnSpec>),
}

/// What `learn(...)` adds: a rule in `table` with these timeouts,
/// priority, cookie and flags, whose match and actions come from `parts`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LearnSpec {
    pub table: u8,
    pub idle_timeout: u16,
    pub hard_timeout: u16,
    /// OVS's `fin_idle_timeout`/`fin_hard_timeout` (timeouts that start
    /// after a TCP FIN): kept and encoded; nicflow does not shorten a
    /// learned rule's life on FIN.
    pub fin_idle_timeout: u16,
    pub fin_hard_timeout: u16,
    pub priority: u16,
    pub cookie: u64,
    pub send_flow_rem: bool,
    /// `delete_learned`: kept and encoded; the learned rules are not
    /// deleted with the rule that learned them (they leave by timeout).
    pub delete_learned: bool,
    pub parts: Vec<LearnPart>,
}

/// Where a learned value comes from: bits of the learning packet's field,
/// or a constant (right-aligned).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LearnSrc {
    Field { field: Field, ofs: u8 },
    Imm(u128),
}

/// One element of `learn(...)`: `n_bits` bits of the learned rule's match
/// (`FIELD[..]`, `FIELD[..]=SRC[..]`, `FIELD=VALUE`) or of a `load`
/// action in it (`load:SRC->DST[..]`), or an `output` to the port held in
/// bits of a field (`output:SRC[..]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LearnPart {
    Match {
        dst: Field,
        dst_ofs: u8,
        n_bits: u8,
        src: LearnSrc,
    },
    Load {
        dst: Field,
        dst_ofs: u8,
        n_bits: u8,
        src: LearnSrc,
    },
    Output {
        src: Field,
        ofs: u8,
        n_bits: u8,
    },
}

/// The options of `controller(...)`, as OVS's `ofpact_controller`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ControllerOpts {
    /// Bytes of the packet to send (65535: all).
    pub max_len: u16,
    /// Which controller connection (`id=N`; 0 = all).
    pub controller_id: u16,
    /// The `PACKET_IN` reason (`OFPR_*`: 0 no_match, 1 action,
    /// 2 invalid_ttl, 3 action_set, 4 group, 5 packet_out).
    pub reason: u8,
    /// Opaque bytes for the controller (`NXPINT_USERDATA` of a
    /// `PACKET_IN2`; a standard `PACKET_IN` cannot carry them).
    pub userdata: Vec<u8>,
    /// Stop the pipeline here, to be resumed by the controller
    /// (`NXT_RESUME`): the copy carries the continuation (the remaining
    /// actions) to `NXT_PACKET_IN2` controllers.
    pub pause: bool,
    /// Rate-limit the copies through this meter (copies over its rate are
    /// not sent; the walk goes on).
    pub meter_id: Option<u32>,
}

/// Where a `ct` action's zone comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CtZone {
    /// `zone=N`.
    Imm(u16),
    /// `zone=FIELD[ofs..ofs+nbits-1]`: 16 bits read from a field of the
    /// packet's key (a register, usually) when the action runs.
    Field { field: Field, ofs: u8, nbits: u8 },
}

/// `ct(commit, force, zone=.., table=.., exec(..))`, as in Open vSwitch.
///
/// Without `table` the packet goes on with the next action, its
/// connection-tracking fields cleared; with `table=N` a copy carrying the
/// tracker's verdict (`ct_state`, `ct_zone`, `ct_mark`, `ct_label`, the
/// connection's tuple) continues in table N while this action list goes on
/// with the untracked packet: OVS's "fork" semantics.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CtAction {
    pub commit: bool,
    /// Commit in this packet's direction, replacing a connection that was
    /// committed the other way round.
    pub force: bool,
    pub zone: CtZone,
    pub table: Option<u8>,
    /// `exec(set_field:V/M->ct_mark)` (value, mask); needs `commit`.
    pub set_mark: Option<(u32, u32)>,
    /// `exec(set_field:V/M->ct_label)` (value, mask); needs `commit`.
    pub set_label: Option<(u128, u128)>,
    /// `nat` / `nat(src=..)` / `nat(dst=..)`.
    pub nat: Option<CtNat>,
    /// `exec(move:SRC[..]->ct_mark|ct_label[..])`, after the `set_field`s
    /// (needs `commit`): the bits are read from the packet when the action
    /// runs (OVN stores the reply's Ethernet source in `ct_label` so).
    pub moves: Vec<CtMove>,
}

/// One `move:` inside `ct(exec(...))`: `n_bits` bits of `src` from bit
/// `src_ofs` into `dst` (`ct_mark` or `ct_label`) at bit `dst_ofs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CtMove {
    pub src: Field,
    pub src_ofs: u8,
    pub dst: Field,
    pub dst_ofs: u8,
    pub n_bits: u8,
}

/// Which side a `nat(...)` rewrites.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NatKind {
    Src,
    Dst,
}

/// `nat[(src|dst=ADDR[-ADDR][:PORT[-PORT]][,persistent][,hash|random])]`,
/// OVS's `ofpact_nat`. `kind: None` is plain `nat`: packets of connections
/// that were set up with NAT are translated (and replies un-translated),
/// no new translation is set up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct CtNat {
    pub kind: Option<NatKind>,
    /// Address range, inclusive; `None` keeps the address.
    pub addr: Option<(std::net::IpAddr, std::net::IpAddr)>,
    /// Port range, inclusive; `None` keeps the port (or picks one if the
    /// tuple is taken).
    pub ports: Option<(u16, u16)>,
    pub persistent: bool,
    pub hash: bool,
    pub random: bool,
}

impl Action {
    /// Every action of `list` and of the `clone(...)`s in it, depth first:
    /// for the checks that must see a group, meter or output wherever it
    /// stands (a `group:N` inside a clone needs group N as much as one
    /// outside).
    pub fn flatten(list: &[Action]) -> Vec<&Action> {
        let mut out = Vec::with_capacity(list.len());
        fn walk<'a>(list: &'a [Action], out: &mut Vec<&'a Action>) {
            for a in list {
                out.push(a);
                if let Action::Clone(inner) = a {
                    walk(inner, out);
                }
            }
        }
        walk(list, &mut out);
        out
    }

    /// Is this a `conjunction(...)` action? A rule whose actions are all
    /// conjunctions is a soft match (see [`Action::Conjunction`]).
    pub fn is_conjunction(&self) -> bool {
        matches!(self, Action::Conjunction { .. })
    }

    /// Does this action end processing of the current table's action set in
    /// the sense of OpenFlow instructions? (`goto_table` must be last.)
    pub fn is_goto(&self) -> bool {
        matches!(self, Action::GotoTable(_))
    }

    /// The port number of an output to a fixed port ([`Action::Output`],
    /// [`Action::OutputMaxLen`] or [`Action::Enqueue`]).
    pub fn output_port(&self) -> Option<u32> {
        match self {
            Action::Output(p) | Action::OutputMaxLen { port: p, .. } => Some(*p),
            Action::Enqueue { port, .. } => Some(*port),
            _ => None,
        }
    }
}
