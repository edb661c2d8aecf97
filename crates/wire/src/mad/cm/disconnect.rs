//! Teardown: DREQ (IBTA 12.6.10, Table 112) and DREP (12.6.11, Table 113).

use crate::bytes::{be24, be32, put24, put32};
use crate::mad::cm::fields::private_data_len;
use crate::mad::header::{MadError, PrivateData, MAD_DATA_LEN};

/// DisconnectRequest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Dreq {
    /// The sender's communication ID (0).
    pub local_comm_id: u32,
    /// The receiver's communication ID (4).
    pub remote_comm_id: u32,
    /// The receiver's QP number (8, 24 bits): Linux drops a DREQ whose QPN is not its own.
    pub remote_qpn: u32,
    /// Private data (12).
    pub private_data: PrivateData<{ private_data_len::DREQ }>,
}

impl Dreq {
    /// Bytes of MAD data the message occupies.
    pub const LEN: usize = MAD_DATA_LEN;

    /// Parses the 232 data bytes of a DREQ.
    pub fn parse(b: &[u8]) -> Result<Dreq, MadError> {
        if b.len() < Self::LEN {
            return Err(MadError::Truncated);
        }
        Ok(Dreq {
            local_comm_id: be32(b, 0),
            remote_comm_id: be32(b, 4),
            remote_qpn: be24(b, 8),
            private_data: PrivateData::read(&b[12..]),
        })
    }

    /// Writes the 232 data bytes.
    ///
    /// # Panics
    /// If `b` is shorter than [`Dreq::LEN`].
    pub fn emit(&self, b: &mut [u8]) {
        put32(b, 0, self.local_comm_id);
        put32(b, 4, self.remote_comm_id);
        put24(b, 8, self.remote_qpn);
        b[11] = 0;
        b[12..Self::LEN].copy_from_slice(self.private_data.as_bytes());
    }
}

crate::mad::cm::fields::ids_and_data_message! {
    /// DisconnectReply (the RTU's layout).
    Drep, "a DREP", private data private_data_len::DREP,
    local: "The sender's communication ID (0).",
    remote: "The receiver's communication ID (4)."
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mad::cm::connect::tests::data;

    // rping's DREQ and rxe's DREP from rdma_cm.pcap.
    const DREQ_HEX: &str = "823b9cb1 5ed99b66 00001100";
    const DREP_HEX: &str = "5ed99b66 823b9cb1";

    #[test]
    fn test_parse() {
        let dreq = Dreq::parse(&data(DREQ_HEX)).unwrap();
        assert_eq!(
            (dreq.local_comm_id, dreq.remote_comm_id, dreq.remote_qpn),
            (0x823b_9cb1, 0x5ed9_9b66, 0x11)
        );
        let drep = Drep::parse(&data(DREP_HEX)).unwrap();
        assert_eq!(
            (drep.local_comm_id, drep.remote_comm_id),
            (0x5ed9_9b66, 0x823b_9cb1)
        );
    }

    #[test]
    fn test_emit() {
        let mut b = [0xffu8; MAD_DATA_LEN];
        Dreq::parse(&data(DREQ_HEX)).unwrap().emit(&mut b);
        assert_eq!(b, data(DREQ_HEX));
        Drep::parse(&data(DREP_HEX)).unwrap().emit(&mut b);
        assert_eq!(b, data(DREP_HEX));
    }

    #[test]
    fn test_private_data() {
        let dreq = Dreq {
            private_data: PrivateData::from_slice(&[7; 220]).unwrap(),
            ..Dreq::parse(&data(DREQ_HEX)).unwrap()
        };
        let mut b = [0u8; MAD_DATA_LEN];
        dreq.emit(&mut b);
        assert_eq!(b[12..], [7; 220]);
        assert_eq!(Dreq::parse(&b).unwrap(), dreq);
        assert_eq!(Drep::parse(&b[..9]), Err(MadError::Truncated));
    }
}
