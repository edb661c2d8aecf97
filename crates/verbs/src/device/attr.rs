//! What a device and its port report of themselves (ibverbs' query verbs), modeled on rxe.

use softrdma_proto::Mtu;

/// Atomic operation guarantees (ibverbs `ibv_atomic_cap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AtomicCap {
    /// No atomics.
    None,
    /// Atomic with respect to this device only (rxe's `ATOMIC_HCA`); softrdma's atomics are
    /// real CPU atomics, so they are also atomic with respect to the local CPU's atomics.
    Hca,
    /// Atomic with respect to the CPU and all devices.
    Glob,
}

/// Device attributes (ibverbs `ibv_device_attr`), with rxe's values where softrdma has no
/// limit of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceAttr {
    /// Firmware version.
    pub fw_ver: String,
    /// Node GUID (EUI-64 of the interface MAC), host order.
    pub node_guid: u64,
    /// System image GUID.
    pub sys_image_guid: u64,
    /// Largest memory region.
    pub max_mr_size: u64,
    /// Supported page sizes.
    pub page_size_cap: u64,
    /// Vendor ID (rxe's 0xffffff).
    pub vendor_id: u32,
    /// Vendor part ID.
    pub vendor_part_id: u32,
    /// Hardware version.
    pub hw_ver: u32,
    /// Most QPs.
    pub max_qp: u32,
    /// Most outstanding WRs per work queue.
    pub max_qp_wr: u32,
    /// Capability flags (`IBV_DEVICE_*` bits).
    pub device_cap_flags: u64,
    /// Most SGEs per WR.
    pub max_sge: u32,
    /// Most SGEs per READ WR.
    pub max_sge_rd: u32,
    /// Most CQs.
    pub max_cq: u32,
    /// Most entries per CQ.
    pub max_cqe: u32,
    /// Most MRs.
    pub max_mr: u32,
    /// Most PDs.
    pub max_pd: u32,
    /// Most incoming READ/atomic requests outstanding per QP.
    pub max_qp_rd_atom: u32,
    /// Most outgoing READ/atomic requests outstanding per QP.
    pub max_qp_init_rd_atom: u32,
    /// Atomic guarantees.
    pub atomic_cap: AtomicCap,
    /// Most SRQs.
    pub max_srq: u32,
    /// Most work requests per SRQ.
    pub max_srq_wr: u32,
    /// Most SGEs per SRQ work request.
    pub max_srq_sge: u32,
    /// Most address handles.
    pub max_ah: u32,
    /// Most multicast groups.
    pub max_mcast_grp: u32,
    /// Most QPs attached to one multicast group.
    pub max_mcast_qp_attach: u32,
    /// Most attachments in all (groups × QPs).
    pub max_total_mcast_qp_attach: u32,
    /// Most P_Keys.
    pub max_pkeys: u16,
    /// Local CA ACK delay.
    pub local_ca_ack_delay: u8,
    /// Number of ports (1).
    pub phys_port_cnt: u8,
    /// Device memory in all, in bytes ([`DeviceMemory`](crate::DeviceMemory)).
    pub max_dm_size: u64,
}

/// Port state (ibverbs `ibv_port_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PortState {
    /// The port is down.
    Down,
    /// Active: the socket is bound and the progress thread runs.
    Active,
}

/// Link layer (ibverbs `IBV_LINK_LAYER_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkLayer {
    /// Ethernet (RoCE).
    Ethernet,
}

/// Port attributes (ibverbs `ibv_port_attr`), modeled on rxe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortAttr {
    /// State.
    pub state: PortState,
    /// Largest MTU the port supports (4096).
    pub max_mtu: Mtu,
    /// The MTU in use: the path MTU applications should choose.
    pub active_mtu: Mtu,
    /// Entries in the GID table.
    pub gid_tbl_len: u32,
    /// Capability flags (rxe's value).
    pub port_cap_flags: u32,
    /// Largest message.
    pub max_msg_sz: u32,
    /// LID (0 on RoCE).
    pub lid: u16,
    /// Subnet manager LID (0 on RoCE).
    pub sm_lid: u16,
    /// LID mask control.
    pub lmc: u8,
    /// Entries in the P_Key table (1: 0xffff).
    pub pkey_tbl_len: u16,
    /// Link layer.
    pub link_layer: LinkLayer,
    /// Active width (1 = 1X).
    pub active_width: u8,
    /// Active speed (1 = 2.5 Gbps, nominal).
    pub active_speed: u8,
    /// Physical state (5 = LINK_UP).
    pub phys_state: u8,
    /// Virtual lanes.
    pub max_vl_num: u8,
    /// UD datagrams dropped for a wrong Q_Key, at most 0xffff (rxe counts them here too).
    pub qkey_viol_cntr: u32,
}
