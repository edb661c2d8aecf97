//! The packet tap: every datagram a device sends and receives, written to a pcap file
//! ([`DeviceConfig::pcap`](crate::DeviceConfig::pcap)).
//!
//! The device never sees IP or UDP headers, so the tap synthesizes them with
//! [`softrdma_wire::pcap`]. For sent datagrams it writes what the kernel writes for this
//! device's sockets (IPv4 identification 0, don't-fragment; see `softrdma_udp`). For received
//! ones the identification is not reported by the kernel, so the tap recovers it from the ICRC
//! ([`IcrcContext::verify_unknown_id`]): the record then carries the sender's real
//! identification and its ICRC verifies in the file (`softrdma decode` reports `icrc=ok`). A
//! datagram whose ICRC matches no identification is written with identification 0 and shows
//! up as `icrc=BAD`, which it is. TTL is written as 64 both ways (the ICRC masks it).

use std::fs::File;
use std::io::BufWriter;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use softrdma_wire::pcap::{PcapWriter, UdpDatagram};
use softrdma_wire::IcrcContext;

/// A pcap file being written, and what the synthesized headers need.
pub(crate) struct Tap {
    writer: PcapWriter<BufWriter<File>>,
    /// The device's bound address (the destination of received datagrams).
    local: SocketAddr,
    pub records: u64,
    pub errors: u64,
}

fn now_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

impl Tap {
    /// Creates (truncates) `path` and writes the file header.
    pub(crate) fn create(path: &Path, local: SocketAddr) -> std::io::Result<Tap> {
        let file = BufWriter::with_capacity(256 * 1024, File::create(path)?);
        Ok(Tap {
            writer: PcapWriter::new(file)?,
            local,
            records: 0,
            errors: 0,
        })
    }

    fn write(&mut self, d: &UdpDatagram<'_>) {
        match self.writer.write_udp(now_nanos(), d) {
            Ok(()) => self.records += 1,
            Err(e) => {
                if self.errors == 0 {
                    tracing::warn!(error = %e, "pcap tap: write failed");
                }
                self.errors += 1;
            }
        }
    }

    /// A datagram sent from UDP port `src_port` of the device to `dst`.
    pub(crate) fn sent(
        &mut self,
        src_port: u16,
        dst: SocketAddr,
        ecn: u8,
        ipv4_id: u16,
        payload: &[u8],
    ) {
        let src = SocketAddr::new(self.local.ip(), src_port);
        let d = UdpDatagram {
            tos: ecn,
            ipv4_id,
            ..UdpDatagram::new(src, dst, payload)
        };
        self.write(&d);
    }

    /// A datagram received from `src` at `dst_ip` (the device's address).
    pub(crate) fn received(&mut self, src: SocketAddr, dst_ip: IpAddr, ecn: u8, payload: &[u8]) {
        let dst = SocketAddr::new(dst_ip, self.local.port());
        let ctx = IcrcContext::new(src.ip(), dst_ip, src.port(), dst.port());
        let (ipv4_id, dont_fragment) = match ctx.verify_unknown_ipv4(payload) {
            Ok(r) => (r.id, r.dont_fragment),
            Err(_) => (0, true),
        };
        let d = UdpDatagram {
            tos: ecn,
            ipv4_id,
            dont_fragment,
            ..UdpDatagram::new(src, dst, payload)
        };
        self.write(&d);
    }

    /// Pushes buffered records to the file.
    pub(crate) fn flush(&mut self) {
        if let Err(e) = self.writer.flush() {
            if self.errors == 0 {
                tracing::warn!(error = %e, "pcap tap: flush failed");
            }
            self.errors += 1;
        }
    }
}

impl Drop for Tap {
    fn drop(&mut self) {
        self.flush();
    }
}
