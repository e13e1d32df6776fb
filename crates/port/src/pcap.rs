//! Capture-file ports: a pcap file as the receive side, another as the
//! transmit side.
//!
//! This is how a whole pipeline runs without root or interfaces: frames are
//! read from a capture (any tool's, e.g. tshark or scapy's `wrpcap`), pass
//! through the bridge exactly as they would from a NIC, and what the bridge
//! transmits on the port is written to a capture that tshark can decode.

use super::{Port, PortStats};
use nicflow_packet::buf::PacketBuf;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader, PcapWriter};
use pcap_file::DataLink;
use std::fs::File;
use std::io::{self, BufReader, BufWriter};
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub struct PcapPort {
    name: String,
    reader: Option<PcapReader<BufReader<File>>>,
    writer: Option<PcapWriter<BufWriter<File>>>,
    stats: PortStats,
    exhausted: bool,
}

fn to_io(e: pcap_file::PcapError) -> io::Error {
    io::Error::other(e.to_string())
}

impl PcapPort {
    /// `input`: capture to receive from (None: receives nothing).
    /// `output`: capture to write transmitted frames to (None: counted only).
    pub fn open(name: &str, input: Option<&Path>, output: Option<&Path>) -> io::Result<PcapPort> {
        let reader = match input {
            Some(p) => {
                let r = PcapReader::new(BufReader::new(File::open(p)?)).map_err(to_io)?;
                if r.header().datalink != DataLink::ETHERNET {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("{}: not an Ethernet capture", p.display()),
                    ));
                }
                Some(r)
            }
            None => None,
        };
        let writer = match output {
            Some(p) => {
                let header = PcapHeader {
                    datalink: DataLink::ETHERNET,
                    snaplen: 65535,
                    ..Default::default()
                };
                Some(
                    PcapWriter::with_header(BufWriter::new(File::create(p)?), header)
                        .map_err(to_io)?,
                )
            }
            None => None,
        };
        Ok(PcapPort {
            name: name.to_string(),
            exhausted: reader.is_none(),
            reader,
            writer,
            stats: PortStats::default(),
        })
    }

    /// Flush the output capture to disk.
    pub fn flush(&mut self) -> io::Result<()> {
        if let Some(w) = self.writer.take() {
            let mut inner = w.into_writer();
            io::Write::flush(&mut inner)?;
        }
        Ok(())
    }
}

impl Drop for PcapPort {
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

impl Port for PcapPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn recv_batch(
        &mut self,
        out: &mut Vec<PacketBuf>,
        max: usize,
        pool: &mut Vec<PacketBuf>,
    ) -> io::Result<usize> {
        let Some(r) = self.reader.as_mut() else {
            return Ok(0);
        };
        let mut n = 0;
        while n < max {
            match r.next_packet() {
                None => {
                    self.exhausted = true;
                    break;
                }
                Some(Err(e)) => {
                    // A truncated capture ends the input; what was read stays.
                    self.exhausted = true;
                    tracing::warn!(port = %self.name, "pcap read error: {e}");
                    break;
                }
                Some(Ok(pkt)) => {
                    let data = &pkt.data;
                    let buf = match pool.pop() {
                        Some(mut b) => {
                            if b.set_data(data) {
                                b
                            } else {
                                PacketBuf::from_slice(data)
                            }
                        }
                        None => PacketBuf::from_slice(data),
                    };
                    self.stats.rx_packets += 1;
                    self.stats.rx_bytes += data.len() as u64;
                    out.push(buf);
                    n += 1;
                }
            }
        }
        Ok(n)
    }

    fn send_batch(
        &mut self,
        pkts: &mut Vec<PacketBuf>,
        done: &mut Vec<PacketBuf>,
    ) -> io::Result<usize> {
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        let mut sent = 0;
        for p in pkts.drain(..) {
            let ok = match self.writer.as_mut() {
                Some(w) => w
                    .write_packet(&PcapPacket::new(ts, p.len() as u32, p.data()))
                    .is_ok(),
                None => true,
            };
            if ok {
                sent += 1;
                self.stats.tx_packets += 1;
                self.stats.tx_bytes += p.len() as u64;
            } else {
                self.stats.tx_dropped += 1;
            }
            done.push(p);
        }
        Ok(sent)
    }

    fn stats(&self) -> PortStats {
        self.stats.clone()
    }

    fn rx_exhausted(&self) -> bool {
        self.exhausted
    }
}
