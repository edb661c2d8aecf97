//! Shorthands for building work requests. Each returns a `SIGNALED`, non-inline request;
//! change the public fields of the result for anything else.

use softrdma_proto::{FlushLevel, RecvWr, SendFlags, SendOp, SendWr, Sge};

use crate::AddressHandle;

/// A SEND of the bytes the SGL names.
pub fn send(wr_id: u64, sg_list: Vec<Sge>) -> SendWr {
    SendWr::signaled(wr_id, SendOp::Send, sg_list)
}

/// A SEND with immediate data.
pub fn send_with_imm(wr_id: u64, sg_list: Vec<Sge>, imm: u32) -> SendWr {
    SendWr::signaled(wr_id, SendOp::SendWithImm { imm }, sg_list)
}

/// A SEND that asks the receiver to invalidate `rkey` (`IBV_WR_SEND_WITH_INV`): a type 2
/// memory window the receiver bound through the receiving QP. The receiver's completion
/// names the rkey; anything else there is to invalidate fails the receive (remote invalid
/// request) and the receiver's QP, as on rxe.
pub fn send_with_inv(wr_id: u64, sg_list: Vec<Sge>, rkey: u32) -> SendWr {
    SendWr::signaled(wr_id, SendOp::SendWithInv { rkey }, sg_list)
}

/// A local invalidation (`IBV_WR_LOCAL_INV`) of a type 2 memory window's rkey, in order
/// with the QP's other work; nothing goes on the wire.
pub fn local_inv(wr_id: u64, rkey: u32) -> SendWr {
    SendWr::signaled(wr_id, SendOp::LocalInv { rkey }, Vec::new())
}

/// An 8-byte atomic RDMA WRITE (`ibv_wr_atomic_write`): the 8 bytes the SGE names are
/// stored at `remote_addr` (8-aligned) at once, after every earlier operation of the QP.
pub fn atomic_write(wr_id: u64, sge: Sge, remote_addr: u64, rkey: u32) -> SendWr {
    SendWr::signaled(wr_id, SendOp::AtomicWrite { remote_addr, rkey }, vec![sge])
}

/// A FLUSH (`ibv_wr_flush`) of `len` bytes at `remote_addr` ([`FlushLevel::Range`]) or of
/// the whole region `rkey` names ([`FlushLevel::Region`]), for the placement types in
/// `placement` ([`softrdma_proto::FLUSH_GLOBAL`] and/or
/// [`softrdma_proto::FLUSH_PERSISTENT`]): it completes once what earlier operations placed
/// there is visible (or persistent).
pub fn flush(
    wr_id: u64,
    remote_addr: u64,
    rkey: u32,
    len: u32,
    placement: u8,
    level: FlushLevel,
) -> SendWr {
    let op = SendOp::Flush {
        remote_addr,
        rkey,
        len,
        placement,
        level,
    };
    SendWr::signaled(wr_id, op, Vec::new())
}

/// A SEND whose payload is copied now (`IBV_SEND_INLINE`): the buffer may be reused at once.
pub fn send_inline(wr_id: u64, data: &[u8]) -> SendWr {
    SendWr {
        wr_id,
        op: SendOp::Send,
        sg_list: Vec::new(),
        flags: SendFlags::SIGNALED | SendFlags::INLINE,
        inline_data: Some(data.into()),
        ud: None,
        xrc_srqn: None,
    }
}

/// An RDMA WRITE of the SGL to `remote_addr` of the peer's region `rkey`.
pub fn write(wr_id: u64, sg_list: Vec<Sge>, remote_addr: u64, rkey: u32) -> SendWr {
    SendWr::signaled(wr_id, SendOp::RdmaWrite { remote_addr, rkey }, sg_list)
}

/// An RDMA WRITE with immediate data (consumes a receive at the peer).
pub fn write_with_imm(
    wr_id: u64,
    sg_list: Vec<Sge>,
    remote_addr: u64,
    rkey: u32,
    imm: u32,
) -> SendWr {
    SendWr::signaled(
        wr_id,
        SendOp::RdmaWriteWithImm {
            remote_addr,
            rkey,
            imm,
        },
        sg_list,
    )
}

/// An RDMA READ from `remote_addr` of the peer's region `rkey` into the SGL.
pub fn read(wr_id: u64, sg_list: Vec<Sge>, remote_addr: u64, rkey: u32) -> SendWr {
    SendWr::signaled(wr_id, SendOp::RdmaRead { remote_addr, rkey }, sg_list)
}

/// An atomic compare-and-swap on the 8-byte word at `remote_addr`; the original value lands
/// in `result` (an 8-byte SGE).
pub fn compare_swap(
    wr_id: u64,
    result: Sge,
    remote_addr: u64,
    rkey: u32,
    compare: u64,
    swap: u64,
) -> SendWr {
    SendWr::signaled(
        wr_id,
        SendOp::AtomicCmpSwap {
            remote_addr,
            rkey,
            compare,
            swap,
        },
        vec![result],
    )
}

/// An atomic fetch-and-add on the 8-byte word at `remote_addr`; the original value lands in
/// `result` (an 8-byte SGE).
pub fn fetch_add(wr_id: u64, result: Sge, remote_addr: u64, rkey: u32, add: u64) -> SendWr {
    SendWr::signaled(
        wr_id,
        SendOp::AtomicFetchAdd {
            remote_addr,
            rkey,
            add,
        },
        vec![result],
    )
}

/// A UD SEND of the bytes the SGL names (at most the port MTU) through `ah` to QP
/// `remote_qpn` presenting `remote_qkey` (high bit set: the sending QP's own Q_Key). The
/// address is copied into the request: `ah` may be dropped once it is posted.
pub fn ud_send(
    wr_id: u64,
    sg_list: Vec<Sge>,
    ah: &AddressHandle,
    remote_qpn: u32,
    remote_qkey: u32,
) -> SendWr {
    SendWr {
        ud: Some(ah.dest(remote_qpn, remote_qkey)),
        ..SendWr::signaled(wr_id, SendOp::Send, sg_list)
    }
}

/// A receive into the SGL.
pub fn recv(wr_id: u64, sg_list: Vec<Sge>) -> RecvWr {
    RecvWr { wr_id, sg_list }
}
