//! One-line rendering of a MAD, for `softrdma decode` and traces: class, method, attribute and
//! the fields that identify a CM exchange (communication IDs, QPNs, PSNs, service ID, reject
//! reason, rdma_cm's IP header).

use core::fmt;

use crate::mad::cm::fields::attr;
use crate::mad::cm::message::CmMessage;
use crate::mad::cma::{CmaHeader, PortSpace};
use crate::mad::header::{Mad, MgmtClass, CM_CLASS_VERSION as CLASS_VERSION, MAD_LEN};

/// Renders the GSI datagram payload `mad` (see [`describe`]).
#[derive(Debug, Clone, Copy)]
pub struct MadDisplay<'a>(&'a [u8]);

/// A displayable description of a MAD: `MAD[...]` with the reason if it is not one,
/// `CM Send REQ tid=… lcid=… …` for the CM class, the class, method and attribute otherwise.
pub fn describe(mad: &[u8]) -> MadDisplay<'_> {
    MadDisplay(mad)
}

fn service(f: &mut fmt::Formatter<'_>, sid: u64) -> fmt::Result {
    write!(f, " sid={sid:#x}")?;
    if let Some((ps, port)) = PortSpace::from_service_id(sid) {
        write!(f, "({ps}:{port})")?;
    }
    Ok(())
}

/// The rdma_cm header and the application's bytes after it, if `sid` is an rdma_cm service.
fn ip_private_data(f: &mut fmt::Formatter<'_>, sid: u64, data: &[u8]) -> fmt::Result {
    match (PortSpace::from_service_id(sid), CmaHeader::parse(data)) {
        (Some(_), Ok(h)) if h.src_ip().is_some() => {
            write!(f, " cma[{h}]")?;
            pdata(f, &data[crate::mad::cma::CMA_HEADER_LEN..])
        }
        _ => pdata(f, data),
    }
}

fn pdata(f: &mut fmt::Formatter<'_>, data: &[u8]) -> fmt::Result {
    match data.iter().rposition(|&b| b != 0) {
        Some(last) => write!(f, " pdata={}", last + 1),
        None => Ok(()),
    }
}

fn ids(f: &mut fmt::Formatter<'_>, local: u32, remote: u32) -> fmt::Result {
    write!(f, " lcid={local:#010x} rcid={remote:#010x}")
}

fn mtu_bytes(code: u8) -> u32 {
    match code {
        1..=5 => 128 << code,
        _ => 0,
    }
}

fn cm(f: &mut fmt::Formatter<'_>, msg: &CmMessage) -> fmt::Result {
    match msg {
        CmMessage::ClassPortInfo(c) => write!(
            f,
            " base={} class={} resp_time={}",
            c.base_version, c.class_version, c.resp_time_value
        ),
        CmMessage::Req(r) => {
            write!(f, " lcid={:#010x}", r.local_comm_id)?;
            service(f, r.service_id)?;
            write!(
                f,
                " qpn={:#08x} psn={} {:?} mtu={} rr={} id={} retry={} rnr={} timeout={}/{} cm_retries={}",
                r.local_qpn,
                r.starting_psn,
                r.transport,
                mtu_bytes(r.path_mtu),
                r.responder_resources,
                r.initiator_depth,
                r.retry_count,
                r.rnr_retry_count,
                r.local_cm_response_timeout,
                r.remote_cm_response_timeout,
                r.max_cm_retries
            )?;
            let p = &r.primary_path;
            write!(
                f,
                " path[{} → {} fl={:#07x} tc={} hl={} ack_to={}]",
                p.local_gid,
                p.remote_gid,
                p.flow_label,
                p.traffic_class,
                p.hop_limit,
                p.local_ack_timeout
            )?;
            ip_private_data(f, r.service_id, &r.private_data)
        }
        CmMessage::Rep(r) => {
            ids(f, r.local_comm_id, r.remote_comm_id)?;
            write!(
                f,
                " qpn={:#08x} psn={} rr={} id={} ack_delay={} rnr={}",
                r.local_qpn,
                r.starting_psn,
                r.responder_resources,
                r.initiator_depth,
                r.target_ack_delay,
                r.rnr_retry_count
            )?;
            pdata(f, &r.private_data)
        }
        CmMessage::Rtu(r) => {
            ids(f, r.local_comm_id, r.remote_comm_id)?;
            pdata(f, &r.private_data)
        }
        CmMessage::Mra(m) => {
            ids(f, m.local_comm_id, m.remote_comm_id)?;
            write!(f, " mraed={} timeout={}", m.msg_mraed, m.service_timeout)?;
            pdata(f, &m.private_data)
        }
        CmMessage::Rej(r) => {
            ids(f, r.local_comm_id, r.remote_comm_id)?;
            write!(f, " rejected={} reason={}", r.msg_rejected, r.reason)?;
            if r.ari_len != 0 {
                write!(f, " ari={}", r.ari_len)?;
            }
            pdata(f, &r.private_data)
        }
        CmMessage::Dreq(d) => {
            ids(f, d.local_comm_id, d.remote_comm_id)?;
            write!(f, " qpn={:#08x}", d.remote_qpn)?;
            pdata(f, &d.private_data)
        }
        CmMessage::Drep(d) => {
            ids(f, d.local_comm_id, d.remote_comm_id)?;
            pdata(f, &d.private_data)
        }
        CmMessage::SidrReq(s) => {
            write!(f, " reqid={:#010x}", s.request_id)?;
            service(f, s.service_id)?;
            ip_private_data(f, s.service_id, &s.private_data)
        }
        CmMessage::SidrRep(s) => {
            write!(f, " reqid={:#010x} status={}", s.request_id, s.status)?;
            service(f, s.service_id)?;
            write!(f, " qpn={:#08x} qkey={:#010x}", s.qpn, s.qkey)?;
            pdata(f, &s.private_data)
        }
        CmMessage::Lap(l) => {
            ids(f, l.local_comm_id, l.remote_comm_id)?;
            write!(f, " qpn={:#08x}", l.remote_qpn)
        }
        CmMessage::Apr(a) => {
            ids(f, a.local_comm_id, a.remote_comm_id)?;
            write!(f, " status={}", a.status)
        }
    }
}

impl fmt::Display for MadDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mad = match Mad::parse(self.0) {
            Ok(mad) => mad,
            Err(e) => return write!(f, "MAD[malformed: {e}]"),
        };
        let h = mad.header;
        write!(f, "{} {}", h.mgmt_class, h.method)?;
        let name = if h.mgmt_class == MgmtClass::CM {
            attr::name(h.attr_id)
        } else if h.attr_id == crate::mad::class_port_info::ATTR_ID {
            Some("ClassPortInfo")
        } else {
            None
        };
        match name {
            Some(n) => write!(f, " {n}")?,
            None => write!(f, " attr={:#06x}", h.attr_id)?,
        }
        write!(f, " tid={:#x}", h.tid)?;
        if h.status != 0 {
            write!(f, " status={:#06x}", h.status)?;
        }
        if self.0.len() != MAD_LEN {
            write!(f, " len={}", self.0.len())?;
        }
        if h.mgmt_class != MgmtClass::CM {
            return Ok(());
        }
        if h.class_version != CLASS_VERSION {
            return write!(f, " class_version={}", h.class_version);
        }
        match CmMessage::parse(h.attr_id, mad.data) {
            Ok(msg) => cm(f, &msg),
            Err(_) => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mad::cm::connect::tests::{data, REP_HEX, REQ_HEX};
    use crate::mad::cm::{CmMad, Rej, RejectReason};
    use crate::mad::{MadHeader, Method, MAD_HEADER_LEN};

    fn mad(attr_id: u16, hex: &str) -> [u8; MAD_LEN] {
        let mut b = [0u8; MAD_LEN];
        MadHeader::cm(attr_id, 0x2_b19c_3b82).emit(&mut b);
        b[MAD_HEADER_LEN..].copy_from_slice(&data(hex));
        b
    }

    #[test]
    fn test_req_and_rep() {
        assert_eq!(
            describe(&mad(attr::REQ, REQ_HEX)).to_string(),
            "CM Send REQ tid=0x2b19c3b82 lcid=0x823b9cb1 sid=0x1061c06(TCP:7174) qpn=0x000011 \
             psn=0x2b5620 Rc mtu=1024 rr=1 id=1 retry=7 rnr=7 timeout=20/20 cm_retries=15 \
             path[::ffff:10.88.0.12 → ::ffff:10.88.0.11 fl=0x06070 tc=0 hl=64 ack_to=19] \
             cma[10.88.0.12:34390 → 10.88.0.11]"
        );
        assert_eq!(
            describe(&mad(attr::REP, REP_HEX)).to_string(),
            "CM Send REP tid=0x2b19c3b82 lcid=0x5ed99b66 rcid=0x823b9cb1 qpn=0x000011 \
             psn=0xf52293 rr=1 id=1 ack_delay=15 rnr=7"
        );
    }

    #[test]
    fn test_rej_with_private_data() {
        let rej = CmMad::new(
            9,
            CmMessage::Rej(Rej {
                remote_comm_id: 1,
                reason: RejectReason::ConsumerDefined,
                private_data: crate::mad::PrivateData::from_slice(b"busy").unwrap(),
                ..Rej::default()
            }),
        );
        assert_eq!(
            describe(&rej.to_bytes()).to_string(),
            "CM Send REJ tid=0x9 lcid=0x00000000 rcid=0x00000001 rejected=REQ \
             reason=28 (consumer defined) pdata=4"
        );
    }

    #[test]
    fn test_other_classes_and_garbage() {
        let mut b = [0u8; MAD_LEN];
        MadHeader {
            mgmt_class: MgmtClass::SUBN_ADM,
            method: Method::GET_RESP,
            status: 0x000c,
            ..MadHeader::cm(0x0035, 1)
        }
        .emit(&mut b);
        assert_eq!(
            describe(&b).to_string(),
            "SubnAdm GetResp attr=0x0035 tid=0x1 status=0x000c"
        );
        assert_eq!(
            describe(&b[..10]).to_string(),
            "MAD[malformed: MAD shorter than 256 bytes]"
        );
        b[0] = 2;
        assert_eq!(
            describe(&b).to_string(),
            "MAD[malformed: unsupported MAD base version 2]"
        );
    }
}
