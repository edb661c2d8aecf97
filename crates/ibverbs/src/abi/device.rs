//! The device, its attributes and its ports (`ibv_query_device*`, `ibv_query_port`,
//! `ibv_query_gid_ex`), its asynchronous events, and the empty table slot: the layouts that
//! refer to no verbs object, so every other part of the ABI can build on them.

use std::ffi::{c_char, c_int, c_void};

/// A slot of a function table softrdma leaves empty (null).
pub(crate) type Slot = Option<unsafe extern "C" fn()>;

/// `union ibv_gid`: 16 bytes (a GID, on RoCEv2 an IPv6 address), 8-byte aligned because the
/// union's other member is two `__be64`.
#[repr(C, align(8))]
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ibv_gid {
    pub raw: [u8; 16],
}

/// `struct _ibv_device_ops` (obsolete, never used, present for layout).
#[repr(C)]
pub(crate) struct ibv_device_ops_compat {
    pub _dummy1: Slot,
    pub _dummy2: Slot,
}

pub(crate) const IBV_SYSFS_NAME_MAX: usize = 64;
pub(crate) const IBV_SYSFS_PATH_MAX: usize = 256;

/// `struct ibv_device`.
#[repr(C)]
pub(crate) struct ibv_device {
    pub _ops: ibv_device_ops_compat,
    pub node_type: c_int,
    pub transport_type: c_int,
    pub name: [c_char; IBV_SYSFS_NAME_MAX],
    pub dev_name: [c_char; IBV_SYSFS_NAME_MAX],
    pub dev_path: [c_char; IBV_SYSFS_PATH_MAX],
    pub ibdev_path: [c_char; IBV_SYSFS_PATH_MAX],
}

/// `struct ibv_device_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ibv_device_attr {
    pub fw_ver: [c_char; 64],
    pub node_guid: u64,
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: c_int,
    pub max_qp_wr: c_int,
    pub device_cap_flags: u32,
    pub max_sge: c_int,
    pub max_sge_rd: c_int,
    pub max_cq: c_int,
    pub max_cqe: c_int,
    pub max_mr: c_int,
    pub max_pd: c_int,
    pub max_qp_rd_atom: c_int,
    pub max_ee_rd_atom: c_int,
    pub max_res_rd_atom: c_int,
    pub max_qp_init_rd_atom: c_int,
    pub max_ee_init_rd_atom: c_int,
    pub atomic_cap: c_int,
    pub max_ee: c_int,
    pub max_rdd: c_int,
    pub max_mw: c_int,
    pub max_raw_ipv6_qp: c_int,
    pub max_raw_ethy_qp: c_int,
    pub max_mcast_grp: c_int,
    pub max_mcast_qp_attach: c_int,
    pub max_total_mcast_qp_attach: c_int,
    pub max_ah: c_int,
    pub max_fmr: c_int,
    pub max_map_per_fmr: c_int,
    pub max_srq: c_int,
    pub max_srq_wr: c_int,
    pub max_srq_sge: c_int,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
}

/// `struct ibv_query_device_ex_input`.
#[repr(C)]
pub(crate) struct ibv_query_device_ex_input {
    pub comp_mask: u32,
}

/// `struct ibv_odp_caps`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ibv_odp_caps {
    pub general_caps: u64,
    pub rc_odp_caps: u32,
    pub uc_odp_caps: u32,
    pub ud_odp_caps: u32,
}

/// `struct ibv_rss_caps`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ibv_rss_caps {
    pub supported_qpts: u32,
    pub max_rwq_indirection_tables: u32,
    pub max_rwq_indirection_table_size: u32,
    pub rx_hash_fields_mask: u64,
    pub rx_hash_function: u8,
}

/// `struct ibv_device_attr_ex`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ibv_device_attr_ex {
    pub orig_attr: ibv_device_attr,
    pub comp_mask: u32,
    pub odp_caps: ibv_odp_caps,
    pub completion_timestamp_mask: u64,
    pub hca_core_clock: u64,
    pub device_cap_flags_ex: u64,
    /// `struct ibv_tso_caps { max_tso, supported_qpts }`.
    pub tso_caps: [u32; 2],
    pub rss_caps: ibv_rss_caps,
    pub max_wq_type_rq: u32,
    /// `struct ibv_packet_pacing_caps { qp_rate_limit_min, qp_rate_limit_max, supported_qpts }`.
    pub packet_pacing_caps: [u32; 3],
    pub raw_packet_caps: u32,
    /// `struct ibv_tm_caps { max_rndv_hdr_size, max_num_tags, flags, max_ops, max_sge }`.
    pub tm_caps: [u32; 5],
    /// `struct ibv_cq_moderation_caps { max_cq_count, max_cq_period }`.
    pub cq_mod_caps: [u16; 2],
    pub max_dm_size: u64,
    /// `struct ibv_pci_atomic_caps { fetch_add, swap, compare_swap }`.
    pub pci_atomic_caps: [u16; 3],
    pub xrc_odp_caps: u32,
    pub phys_port_cnt_ex: u32,
}

/// `struct ibv_port_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct ibv_port_attr {
    pub state: c_int,
    pub max_mtu: c_int,
    pub active_mtu: c_int,
    pub gid_tbl_len: c_int,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub flags: u8,
    pub port_cap_flags2: u16,
}

/// Size of `struct _compat_ibv_port_attr`, what the exported `ibv_query_port` symbol fills
/// (the port attributes without `port_cap_flags2`).
pub(crate) const COMPAT_PORT_ATTR_SIZE: usize = 48;

/// `struct ibv_values_ex` (`ibv_query_rt_values_ex`).
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ibv_values_ex {
    pub comp_mask: u32,
    pub raw_clock: libc::timespec,
}

/// `IBV_VALUES_MASK_RAW_CLOCK`: the one value `ibv_values_ex` has.
pub(crate) const IBV_VALUES_MASK_RAW_CLOCK: u32 = 1 << 0;

/// `struct ibv_gid_entry`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ibv_gid_entry {
    pub gid: ibv_gid,
    pub gid_index: u32,
    pub port_num: u32,
    pub gid_type: u32,
    pub ndev_ifindex: u32,
}

// The device's and the port's enumerations and flags (values from the header).
pub(crate) const IBV_NODE_CA: c_int = 1;
pub(crate) const IBV_TRANSPORT_IB: c_int = 0;
pub(crate) const IBV_PORT_ACTIVE: c_int = 4;
pub(crate) const IBV_LINK_LAYER_ETHERNET: u8 = 2;
pub(crate) const IBV_QPF_GRH_REQUIRED: u8 = 1;
pub(crate) const IBV_GID_TYPE_ROCE_V2: u32 = 2;
pub(crate) const IBV_GID_TYPE_SYSFS_IB_ROCE_V1: c_int = 0;
pub(crate) const IBV_GID_TYPE_SYSFS_ROCE_V2: c_int = 1;
pub(crate) const IBV_ATOMIC_NONE: c_int = 0;
pub(crate) const IBV_ATOMIC_HCA: c_int = 1;
pub(crate) const IBV_ATOMIC_GLOB: c_int = 2;

/// `struct ibv_async_event`.
#[repr(C)]
pub(crate) struct ibv_async_event {
    /// The `element` union: a CQ, QP, SRQ or WQ pointer, or a port number.
    pub element: *mut c_void,
    pub event_type: c_int,
}

pub(crate) const IBV_EVENT_CQ_ERR: c_int = 0;
pub(crate) const IBV_EVENT_QP_FATAL: c_int = 1;
pub(crate) const IBV_EVENT_QP_REQ_ERR: c_int = 2;
pub(crate) const IBV_EVENT_QP_ACCESS_ERR: c_int = 3;
pub(crate) const IBV_EVENT_PORT_ACTIVE: c_int = 9;
pub(crate) const IBV_EVENT_PORT_ERR: c_int = 10;
pub(crate) const IBV_EVENT_SRQ_LIMIT_REACHED: c_int = 15;
pub(crate) const IBV_EVENT_QP_LAST_WQE_REACHED: c_int = 16;

pub(crate) const IBV_FORK_UNNEEDED: c_int = 2;
