"""os-ken (3.1.0) app for nicflow's controller test (tests/openflow_osken.rs).

OpenFlow 1.3, two tables:

  table 0  priority=100 udp,udp_dst=DROP_PORT -> (no instructions: drop)
           priority=0                         -> goto_table:1
  table 1  priority=0                         -> output:CONTROLLER (table-miss)
           priority=10 eth_dst=MAC            -> output:PORT, idle_timeout=IDLE
                                                 (learned from PACKET_IN)

On PACKET_IN it learns eth_src -> in_port, installs the table-1 flow for the
destination when it knows where that is, and sends the frame on with a
PACKET_OUT (FLOOD while the destination is unknown). The switch keeps no
buffers, so the frame travels in the messages.

Every flow it installs, every PACKET_IN and every OpenFlow error is written
as one JSON line to $NICFLOW_OSKEN_LOG (the test reads it). The drop port
and idle timeout come from $NICFLOW_OSKEN_DROP_UDP (default 5999) and
$NICFLOW_OSKEN_IDLE (default 60).

    NICFLOW_OSKEN_LOG=/tmp/x.jsonl osken-manager --ofp-listen-host 127.0.0.1 \
        --ofp-tcp-listen-port 16655 nicflow_pipeline.py
"""

import json
import os
import time

from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import (
    CONFIG_DISPATCHER,
    HANDSHAKE_DISPATCHER,
    MAIN_DISPATCHER,
    set_ev_cls,
)
from os_ken.lib.packet import ether_types, ethernet, packet
from os_ken.ofproto import ofproto_v1_3

LOG = os.environ.get("NICFLOW_OSKEN_LOG", "/tmp/nicflow-osken.jsonl")
DROP_UDP = int(os.environ.get("NICFLOW_OSKEN_DROP_UDP", "5999"))
IDLE = int(os.environ.get("NICFLOW_OSKEN_IDLE", "60"))


def record(**entry):
    entry["time"] = time.time()
    with open(LOG, "a") as f:
        f.write(json.dumps(entry, sort_keys=True) + "\n")


class NicflowPipeline(app_manager.OSKenApp):
    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.mac_to_port = {}

    def add_flow(self, dp, table, priority, match, inst, idle=0, what=""):
        ofp, parser = dp.ofproto, dp.ofproto_parser
        mod = parser.OFPFlowMod(
            datapath=dp,
            table_id=table,
            priority=priority,
            match=match,
            instructions=inst,
            idle_timeout=idle,
            buffer_id=ofp.OFP_NO_BUFFER,
        )
        dp.send_msg(mod)
        record(
            event="flow_mod",
            what=what,
            dpid=dp.id,
            table=table,
            priority=priority,
            idle_timeout=idle,
            match=str(match),
            instructions=str(inst),
        )

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def switch_features(self, ev):
        dp = ev.msg.datapath
        ofp, parser = dp.ofproto, dp.ofproto_parser
        record(event="features", dpid=dp.id, n_tables=ev.msg.n_tables)
        # Start from empty tables (nicflow keeps flows across restarts).
        dp.send_msg(
            parser.OFPFlowMod(
                datapath=dp,
                table_id=ofp.OFPTT_ALL,
                command=ofp.OFPFC_DELETE,
                out_port=ofp.OFPP_ANY,
                out_group=ofp.OFPG_ANY,
            )
        )
        self.add_flow(
            dp,
            0,
            100,
            parser.OFPMatch(eth_type=ether_types.ETH_TYPE_IP, ip_proto=17, udp_dst=DROP_UDP),
            [],
            what="drop",
        )
        self.add_flow(
            dp,
            0,
            0,
            parser.OFPMatch(),
            [parser.OFPInstructionGotoTable(1)],
            what="goto",
        )
        self.add_flow(
            dp,
            1,
            0,
            parser.OFPMatch(),
            [
                parser.OFPInstructionActions(
                    ofp.OFPIT_APPLY_ACTIONS,
                    [parser.OFPActionOutput(ofp.OFPP_CONTROLLER, ofp.OFPCML_NO_BUFFER)],
                )
            ],
            what="miss",
        )
        dp.send_msg(parser.OFPBarrierRequest(dp))

    @set_ev_cls(ofp_event.EventOFPBarrierReply, MAIN_DISPATCHER)
    def barrier_reply(self, ev):
        record(event="barrier", dpid=ev.msg.datapath.id)

    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def packet_in(self, ev):
        msg = ev.msg
        dp = msg.datapath
        ofp, parser = dp.ofproto, dp.ofproto_parser
        in_port = msg.match["in_port"]
        eth = packet.Packet(msg.data).get_protocols(ethernet.ethernet)
        if not eth:
            record(event="packet_in", in_port=in_port, len=len(msg.data), parsed=False)
            return
        eth = eth[0]
        if eth.ethertype == ether_types.ETH_TYPE_LLDP:
            return
        src, dst = eth.src, eth.dst
        record(
            event="packet_in",
            in_port=in_port,
            table=msg.table_id,
            reason=msg.reason,
            src=src,
            dst=dst,
            ethertype=eth.ethertype,
            len=len(msg.data),
        )
        if self.mac_to_port.get(src) != in_port:
            self.mac_to_port[src] = in_port
            record(event="learn", mac=src, port=in_port)
        out_port = self.mac_to_port.get(dst, ofp.OFPP_FLOOD)
        actions = [parser.OFPActionOutput(out_port)]
        if out_port != ofp.OFPP_FLOOD:
            self.add_flow(
                dp,
                1,
                10,
                parser.OFPMatch(eth_dst=dst),
                [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)],
                idle=IDLE,
                what="learned",
            )
        dp.send_msg(
            parser.OFPPacketOut(
                datapath=dp,
                buffer_id=ofp.OFP_NO_BUFFER,
                in_port=in_port,
                actions=actions,
                data=msg.data,
            )
        )
        record(event="packet_out", in_port=in_port, out_port=out_port)

    @set_ev_cls(
        ofp_event.EventOFPErrorMsg,
        [HANDSHAKE_DISPATCHER, CONFIG_DISPATCHER, MAIN_DISPATCHER],
    )
    def error(self, ev):
        m = ev.msg
        record(event="error", type=m.type, code=m.code, data=m.data.hex())
