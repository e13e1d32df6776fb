//! Connection tracking: `dump-conntrack`, `flush-conntrack`,
//! `conntrack-stats`.

use super::{now, Switch, SwitchError};
use crate::control::proto::Response;
use serde_json::json;
use std::fmt::Write as _;

impl Switch {
    /// `dump-conntrack`.
    pub(super) fn dump_conntrack(
        &mut self,
        bridge: String,
        zone: Option<u16>,
        verbose: bool,
        stats: bool,
    ) -> Result<Response, SwitchError> {
        let br = self.bridge(&bridge)?;
        // Connections set up in the kernel learn their TCP states from the
        // entries' flags: read them now rather than at the next tick.
        br.sync_ct_offloads();
        let mut text = String::new();
        let mut data = Vec::new();
        for e in br.conntrack().dump(zone, now()) {
            let line = e.format(verbose, stats);
            let _ = writeln!(text, "{line}");
            data.push(json!(line));
        }
        Ok(Response::ok(text, json!(data)))
    }

    /// `flush-conntrack`: the connections of `zone` matching `filter`.
    pub(super) fn flush_conntrack(
        &mut self,
        bridge: String,
        zone: Option<u16>,
        filter: Option<String>,
    ) -> Result<Response, SwitchError> {
        let mut f = match filter.as_deref() {
            Some(t) => {
                crate::nf::conntrack::parse_flush_tuple(t).map_err(SwitchError::FlushTuple)?
            }
            None => nicflow_conntrack::FlushFilter::default(),
        };
        f.zone = zone;
        let br = self.bridge(&bridge)?;
        let n = br.flush_conntrack(&f);
        Ok(Response::ok(
            format!("flushed {n} connection(s)\n"),
            json!({ "flushed": n }),
        ))
    }

    /// `conntrack-stats`.
    pub(super) fn conntrack_stats(&mut self, bridge: String) -> Result<Response, SwitchError> {
        let br = self.bridge(&bridge)?;
        let ct = br.conntrack();
        let st = ct.stats();
        let mut text = format!(
            "connections: {} (limit {})\n  tcp: {}  udp: {}  sctp: {}  icmp: {}  icmpv6: {}  other: {}\ncreated: {}  expired: {}  removed: {}  limit_drops: {}\n",
            st.connections,
            ct.config().limit,
            st.tcp,
            st.udp,
            st.sctp,
            st.icmp,
            st.icmpv6,
            st.other,
            st.created,
            st.expired,
            st.removed,
            st.limit_drops
        );
        let mut invalid = serde_json::Map::new();
        for r in nicflow_conntrack::InvalidReason::ALL {
            let n = st.invalid_count(r);
            if n > 0 {
                let _ = writeln!(text, "invalid {}: {n}", r.name());
                invalid.insert(r.name().into(), json!(n));
            }
        }
        Ok(Response::ok(
            text,
            json!({
                "connections": st.connections,
                "limit": ct.config().limit,
                "tcp": st.tcp, "udp": st.udp, "sctp": st.sctp,
                "icmp": st.icmp, "icmpv6": st.icmpv6, "other": st.other,
                "created": st.created, "expired": st.expired,
                "removed": st.removed, "limit_drops": st.limit_drops,
                "invalid": invalid,
            }),
        ))
    }
}
