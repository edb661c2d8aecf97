//! `softrdma devinfo`: the device and port attributes of a softrdma device in the format of
//! rdma-core's `ibv_devinfo` (`-v` for the verbose listing with the GID table), and the
//! engine's counters (`--counters`).
//!
//! Field names, order, tabs and value formats follow `ibv_devinfo` of rdma-core 44 (compare
//! the `ibv_devinfo -v -d rxe0` listing in the rxe lab README); the values are softrdma's own,
//! so capabilities softrdma does not have (SRQs, memory windows, multicast, ODP) read 0 or
//! `NO SUPPORT` where rxe shows its limits.
//!
//! The device is opened on `--bind IP` (default: the address the host would send from to the
//! outside, else 127.0.0.1) with an ephemeral UDP port, so it never collides with a device
//! already running on that address. Counters live in the process that owns a device: here
//! they are a fresh device's (all zero), which shows what is counted; `softrdma pingpong
//! --counters` prints the same block for a real run, and [`print_counters`] is there for
//! other subcommands.

use std::io::{self, Write};
use std::net::{IpAddr, Ipv4Addr};
use std::process::ExitCode;

use clap::Args as ClapArgs;
use softrdma::{
    AtomicCap, Device, DeviceAttr, DeviceConfig, DeviceStats, GidEntry, LinkLayer, Mtu, PortAttr,
    PortState,
};

/// Arguments of `softrdma devinfo`.
#[derive(Debug, ClapArgs)]
pub(crate) struct Args {
    /// Local IP address of the device to describe (default: the host's outgoing address, or
    /// 127.0.0.1).
    #[arg(long, value_name = "IP")]
    bind: Option<IpAddr>,
    /// Print all attributes, and the GID table (like `ibv_devinfo -v`).
    #[arg(short = 'v', long)]
    verbose: bool,
    /// Also print the engine's and the socket's counters.
    #[arg(long)]
    counters: bool,
    /// Print the counters as one JSON object (implies --counters; the attributes are not
    /// printed).
    #[arg(long)]
    json: bool,
    /// Device name (accepted for compatibility with ibv_devinfo and ignored).
    #[arg(short = 'd', long = "ib-dev", value_name = "DEV")]
    ib_dev: Option<String>,
}

/// Runs `softrdma devinfo`.
pub(crate) fn run(args: &Args) -> ExitCode {
    let _ = &args.ib_dev;
    let ip = args.bind.unwrap_or_else(|| {
        // TEST-NET-1: nothing is sent, the kernel only picks a source address.
        crate::route::local_ip_towards(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)))
            .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST))
    });
    let device = match Device::open(DeviceConfig::new(ip).port(0)) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("Failed to open a softrdma device on {ip}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let port = match device.query_port(1) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("Failed to query port 1: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut out = io::stdout().lock();
    if args.json {
        let r = writeln!(
            out,
            "{{\"device\":\"{}\",\"counters\":{}}}",
            device.name(),
            counters_json(&device.stats())
        );
        return match r {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("{e}");
                ExitCode::FAILURE
            }
        };
    }
    let r = write_devinfo(
        &mut out,
        device.name(),
        &device.query_device(),
        &port,
        device.gid_table(),
        args.verbose,
    )
    .and_then(|()| {
        if args.counters {
            print_counters(&mut out, &device.stats())
        } else {
            Ok(())
        }
    });
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

/// `IBV_DEVICE_*` capability bits and their `ibv_devinfo` names.
const DEVICE_CAP_NAMES: [(u32, &str); 24] = [
    (0, "RESIZE_MAX_WR"),
    (1, "BAD_PKEY_CNTR"),
    (2, "BAD_QKEY_CNTR"),
    (3, "RAW_MULTI"),
    (4, "AUTO_PATH_MIG"),
    (5, "CHANGE_PHY_PORT"),
    (6, "UD_AV_PORT_ENFORCE"),
    (7, "CURR_QP_STATE_MOD"),
    (8, "SHUTDOWN_PORT"),
    (9, "INIT_TYPE"),
    (10, "PORT_ACTIVE_EVENT"),
    (11, "SYS_IMAGE_GUID"),
    (12, "RC_RNR_NAK_GEN"),
    (13, "SRQ_RESIZE"),
    (14, "N_NOTIFY_CQ"),
    (17, "MEM_WINDOW"),
    (18, "UD_IP_CSUM"),
    (20, "XRC"),
    (21, "MEM_MGT_EXTENSIONS"),
    (23, "MEM_WINDOW_TYPE_2A"),
    (24, "MEM_WINDOW_TYPE_2B"),
    (25, "RC_IP_CSUM"),
    (26, "RAW_IP_CSUM"),
    (29, "MANAGED_FLOW_STEERING"),
];

/// A GUID as `ibv_devinfo` prints it: four groups of four hex digits.
fn guid_str(guid: u64) -> String {
    format!(
        "{:04x}:{:04x}:{:04x}:{:04x}",
        guid >> 48,
        (guid >> 32) & 0xffff,
        (guid >> 16) & 0xffff,
        guid & 0xffff
    )
}

fn mtu_str(m: Mtu) -> String {
    format!("{} ({})", m.bytes(), m.ibv_enum())
}

fn port_state_str(s: PortState) -> &'static str {
    match s {
        PortState::Down => "PORT_DOWN (1)",
        PortState::Active => "PORT_ACTIVE (4)",
    }
}

fn atomic_cap_str(a: AtomicCap) -> &'static str {
    match a {
        AtomicCap::None => "ATOMIC_NONE (0)",
        AtomicCap::Hca => "ATOMIC_HCA (1)",
        AtomicCap::Glob => "ATOMIC_GLOB (2)",
    }
}

fn width_str(w: u8) -> String {
    let x = match w {
        1 => "1",
        2 => "4",
        4 => "8",
        8 => "12",
        16 => "2",
        _ => "invalid width",
    };
    format!("{x}X ({w})")
}

fn speed_str(s: u8) -> String {
    let x = match s {
        1 => "2.5 Gbps",
        2 => "5.0 Gbps",
        4 | 8 => "10.0 Gbps",
        16 => "14.0 Gbps",
        32 => "25.0 Gbps",
        64 => "50.0 Gbps",
        128 => "100.0 Gbps",
        _ => "invalid speed",
    };
    format!("{x} ({s})")
}

fn phys_state_str(p: u8) -> String {
    let x = match p {
        1 => "SLEEP",
        2 => "POLLING",
        3 => "DISABLED",
        4 => "PORT_CONFIGURATION_TRAINING",
        5 => "LINK_UP",
        6 => "LINK_ERROR_RECOVERY",
        7 => "PHY TEST",
        _ => "invalid physical state",
    };
    format!("{x} ({p})")
}

/// Writes the `ibv_devinfo` listing of one device with one port.
pub(crate) fn write_devinfo(
    out: &mut dyn Write,
    name: &str,
    a: &DeviceAttr,
    p: &PortAttr,
    gids: &[GidEntry],
    verbose: bool,
) -> io::Result<()> {
    writeln!(out, "hca_id:\t{name}")?;
    writeln!(out, "\ttransport:\t\t\tInfiniBand (0)")?;
    if !a.fw_ver.is_empty() {
        writeln!(out, "\tfw_ver:\t\t\t\t{}", a.fw_ver)?;
    }
    writeln!(out, "\tnode_guid:\t\t\t{}", guid_str(a.node_guid))?;
    writeln!(out, "\tsys_image_guid:\t\t\t{}", guid_str(a.sys_image_guid))?;
    writeln!(out, "\tvendor_id:\t\t\t0x{:04x}", a.vendor_id)?;
    writeln!(out, "\tvendor_part_id:\t\t\t{}", a.vendor_part_id)?;
    writeln!(out, "\thw_ver:\t\t\t\t0x{:X}", a.hw_ver)?;
    writeln!(out, "\tphys_port_cnt:\t\t\t{}", a.phys_port_cnt)?;
    if verbose {
        writeln!(out, "\tmax_mr_size:\t\t\t0x{:x}", a.max_mr_size)?;
        writeln!(out, "\tpage_size_cap:\t\t\t0x{:x}", a.page_size_cap)?;
        writeln!(out, "\tmax_qp:\t\t\t\t{}", a.max_qp)?;
        writeln!(out, "\tmax_qp_wr:\t\t\t{}", a.max_qp_wr)?;
        writeln!(out, "\tdevice_cap_flags:\t\t0x{:08x}", a.device_cap_flags)?;
        for (bit, cap) in DEVICE_CAP_NAMES {
            if a.device_cap_flags & (1 << bit) != 0 {
                writeln!(out, "\t\t\t\t\t{cap}")?;
            }
        }
        writeln!(out, "\tmax_sge:\t\t\t{}", a.max_sge)?;
        writeln!(out, "\tmax_sge_rd:\t\t\t{}", a.max_sge_rd)?;
        writeln!(out, "\tmax_cq:\t\t\t\t{}", a.max_cq)?;
        writeln!(out, "\tmax_cqe:\t\t\t{}", a.max_cqe)?;
        writeln!(out, "\tmax_mr:\t\t\t\t{}", a.max_mr)?;
        writeln!(out, "\tmax_pd:\t\t\t\t{}", a.max_pd)?;
        writeln!(out, "\tmax_qp_rd_atom:\t\t\t{}", a.max_qp_rd_atom)?;
        writeln!(out, "\tmax_ee_rd_atom:\t\t\t0")?;
        writeln!(out, "\tmax_res_rd_atom:\t\t0")?;
        writeln!(out, "\tmax_qp_init_rd_atom:\t\t{}", a.max_qp_init_rd_atom)?;
        writeln!(out, "\tmax_ee_init_rd_atom:\t\t0")?;
        writeln!(out, "\tatomic_cap:\t\t\t{}", atomic_cap_str(a.atomic_cap))?;
        writeln!(out, "\tmax_ee:\t\t\t\t0")?;
        writeln!(out, "\tmax_rdd:\t\t\t0")?;
        writeln!(out, "\tmax_mw:\t\t\t\t0")?;
        writeln!(out, "\tmax_raw_ipv6_qp:\t\t0")?;
        writeln!(out, "\tmax_raw_ethy_qp:\t\t0")?;
        writeln!(out, "\tmax_mcast_grp:\t\t\t{}", a.max_mcast_grp)?;
        writeln!(out, "\tmax_mcast_qp_attach:\t\t{}", a.max_mcast_qp_attach)?;
        writeln!(
            out,
            "\tmax_total_mcast_qp_attach:\t{}",
            a.max_total_mcast_qp_attach
        )?;
        writeln!(out, "\tmax_ah:\t\t\t\t{}", a.max_ah)?;
        writeln!(out, "\tmax_fmr:\t\t\t0")?;
        writeln!(out, "\tmax_srq:\t\t\t{}", a.max_srq)?;
        if a.max_srq != 0 {
            writeln!(out, "\tmax_srq_wr:\t\t\t{}", a.max_srq_wr)?;
            writeln!(out, "\tmax_srq_sge:\t\t\t{}", a.max_srq_sge)?;
        }
        writeln!(out, "\tmax_pkeys:\t\t\t{}", a.max_pkeys)?;
        writeln!(out, "\tlocal_ca_ack_delay:\t\t{}", a.local_ca_ack_delay)?;
        writeln!(out, "\tgeneral_odp_caps:")?;
        for t in ["rc", "uc", "ud", "xrc"] {
            writeln!(out, "\t{t}_odp_caps:")?;
            writeln!(out, "\t\t\t\t\tNO SUPPORT")?;
        }
        writeln!(out, "\tcompletion_timestamp_mask not supported")?;
        writeln!(out, "\tcore clock not supported")?;
        writeln!(out, "\tdevice_cap_flags_ex:\t\t0x{:X}", a.device_cap_flags)?;
        writeln!(out, "\ttso_caps:")?;
        writeln!(out, "\t\tmax_tso:\t\t\t0")?;
        writeln!(out, "\trss_caps:")?;
        writeln!(out, "\t\tmax_rwq_indirection_tables:\t\t\t0")?;
        writeln!(out, "\t\tmax_rwq_indirection_table_size:\t\t\t0")?;
        writeln!(out, "\t\trx_hash_function:\t\t\t\t0x0")?;
        writeln!(out, "\t\trx_hash_fields_mask:\t\t\t\t0x0")?;
        writeln!(out, "\tmax_wq_type_rq:\t\t\t0")?;
        writeln!(out, "\tpacket_pacing_caps:")?;
        writeln!(out, "\t\tqp_rate_limit_min:\t0kbps")?;
        writeln!(out, "\t\tqp_rate_limit_max:\t0kbps")?;
        writeln!(out, "\ttag matching not supported")?;
        writeln!(out, "\tnum_comp_vectors:\t\t1")?;
    }
    writeln!(out, "\t\tport:\t1")?;
    writeln!(out, "\t\t\tstate:\t\t\t{}", port_state_str(p.state))?;
    writeln!(out, "\t\t\tmax_mtu:\t\t{}", mtu_str(p.max_mtu))?;
    writeln!(out, "\t\t\tactive_mtu:\t\t{}", mtu_str(p.active_mtu))?;
    writeln!(out, "\t\t\tsm_lid:\t\t\t{}", p.sm_lid)?;
    writeln!(out, "\t\t\tport_lid:\t\t{}", p.lid)?;
    writeln!(out, "\t\t\tport_lmc:\t\t0x{:02x}", p.lmc)?;
    let link = match p.link_layer {
        LinkLayer::Ethernet => "Ethernet",
    };
    writeln!(out, "\t\t\tlink_layer:\t\t{link}")?;
    if verbose {
        writeln!(out, "\t\t\tmax_msg_sz:\t\t0x{:x}", p.max_msg_sz)?;
        writeln!(out, "\t\t\tport_cap_flags:\t\t0x{:08x}", p.port_cap_flags)?;
        writeln!(out, "\t\t\tport_cap_flags2:\t0x0000")?;
        writeln!(
            out,
            "\t\t\tmax_vl_num:\t\t{} ({})",
            p.max_vl_num, p.max_vl_num
        )?;
        writeln!(out, "\t\t\tbad_pkey_cntr:\t\t0x0")?;
        writeln!(out, "\t\t\tqkey_viol_cntr:\t\t0x{:x}", p.qkey_viol_cntr)?;
        writeln!(out, "\t\t\tsm_sl:\t\t\t0")?;
        writeln!(out, "\t\t\tpkey_tbl_len:\t\t{}", p.pkey_tbl_len)?;
        writeln!(out, "\t\t\tgid_tbl_len:\t\t{}", p.gid_tbl_len)?;
        writeln!(out, "\t\t\tsubnet_timeout:\t\t0")?;
        writeln!(out, "\t\t\tinit_type_reply:\t0")?;
        writeln!(out, "\t\t\tactive_width:\t\t{}", width_str(p.active_width))?;
        writeln!(out, "\t\t\tactive_speed:\t\t{}", speed_str(p.active_speed))?;
        writeln!(out, "\t\t\tphys_state:\t\t{}", phys_state_str(p.phys_state))?;
        for g in gids {
            writeln!(out, "\t\t\tGID[{:>3}]:\t\t{}, RoCE v2", g.index, g.gid)?;
        }
    }
    // Not in ibv_devinfo (whose readers skip unknown lines): what the QPs of the device do.
    writeln!(
        out,
        "\tsoftrdma_transports:\t\tRC, UC (SEND, RDMA WRITE), UD (SEND, address handles, \
         multicast: {} groups)",
        a.max_mcast_grp
    )?;
    writeln!(out)
}

/// Every counter of a device, named, in a fixed order (see [`DeviceStats::counters`]).
pub(crate) fn counter_list(s: &DeviceStats) -> Vec<(String, u64)> {
    s.counters()
}

/// Writes `counters` under a `counters:` heading, one per line, values in one column: names
/// are padded to the longest name plus two spaces, so a long name never runs into its value.
pub(crate) fn write_counter_lines(
    out: &mut dyn Write,
    counters: &[(String, u64)],
) -> io::Result<()> {
    let width = counters.iter().map(|(k, _)| k.len()).max().unwrap_or(0) + 2;
    writeln!(out, "counters:")?;
    for (k, n) in counters {
        writeln!(out, "\t{k:<width$}{n}")?;
    }
    Ok(())
}

/// Writes a device's counters (see [`counter_list`]).
pub(crate) fn print_counters(out: &mut dyn Write, s: &DeviceStats) -> io::Result<()> {
    write_counter_lines(out, &counter_list(s))
}

/// The counters that are not zero, for a failure report.
pub(crate) fn nonzero_counters(s: &DeviceStats) -> Vec<(String, u64)> {
    counter_list(s)
        .into_iter()
        .filter(|(_, n)| *n != 0)
        .collect()
}

/// The counters as one JSON object: `{"rx_packets":12,...,"drops.wrong_source":0,...}`.
pub(crate) fn counters_json(s: &DeviceStats) -> String {
    let body: Vec<String> = counter_list(s)
        .iter()
        .map(|(k, n)| format!("\"{k}\":{n}"))
        .collect();
    format!("{{{}}}", body.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;
    use softrdma::{IoCounters, NakKind, Stats};
    use softrdma_wire::Opcode;

    /// Issue 15, item 12: names of 36 characters and more ran into their values
    /// (`rx_opcode.RC_SEND_LAST_WITH_IMMEDIATE16`). Every line now has at least two spaces
    /// between name and value, values in one column; the JSON form carries the same counters,
    /// including the remote access NAKs that show rkey probing.
    #[test]
    fn counters_are_separated_aligned_and_in_json() {
        let mut engine = Stats {
            rx_by_opcode: vec![0; 256],
            tx_by_opcode: vec![0; 256],
            ..Stats::default()
        };
        engine.rx_by_opcode[usize::from(Opcode::RC_SEND_LAST_WITH_IMMEDIATE.0)] = 16;
        engine.tx_by_opcode[usize::from(Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE.0)] = 7;
        engine.nak_sent(NakKind::RemoteAccess);
        engine.nak_sent(NakKind::RemoteAccess);
        let s = DeviceStats {
            engine,
            io: IoCounters::default(),
        };
        let mut out = Vec::new();
        print_counters(&mut out, &s).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().skip(1).collect();
        // (where the value starts, the gap before it) on each line.
        let columns: Vec<(usize, usize)> = lines
            .iter()
            .map(|l| {
                let name = l.trim_start().split(' ').next().unwrap();
                let after = &l[l.find(name).unwrap() + name.len()..];
                let gap = after.len() - after.trim_start().len();
                assert!(after.trim().parse::<u64>().is_ok(), "{l:?}");
                (l.len() - after.trim_start().len(), gap)
            })
            .collect();
        assert!(
            columns
                .iter()
                .all(|&(at, gap)| at == columns[0].0 && gap >= 2),
            "{text}"
        );
        assert!(
            text.contains("\trx_opcode.RC_SEND_LAST_WITH_IMMEDIATE  "),
            "{text}"
        );
        assert!(lines
            .iter()
            .any(|l| l.starts_with("\tnaks_sent.remote_access ") && l.ends_with(" 2")));
        let json = counters_json(&s);
        assert!(json.starts_with('{') && json.ends_with('}'), "{json}");
        for want in [
            "\"naks_sent.remote_access\":2",
            "\"rx_opcode.RC_SEND_LAST_WITH_IMMEDIATE\":16",
            "\"tx_opcode.RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE\":7",
            "\"drops.wrong_source\":0",
            "\"io.rx_denied\":0",
        ] {
            assert!(json.contains(want), "{want} in {json}");
        }
        assert_eq!(
            nonzero_counters(&s)
                .iter()
                .map(|(k, _)| k.as_str())
                .collect::<Vec<_>>(),
            [
                "naks_sent.remote_access",
                "rx_opcode.RC_SEND_LAST_WITH_IMMEDIATE",
                "tx_opcode.RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE"
            ]
        );
    }

    #[test]
    fn guid_like_ibv_devinfo() {
        assert_eq!(guid_str(0x5054_00ff_fe58_000b), "5054:00ff:fe58:000b");
    }

    #[test]
    fn rxe_cap_flags_decode_to_the_rxe_names() {
        let names: Vec<&str> = DEVICE_CAP_NAMES
            .iter()
            .filter(|(b, _)| 0x0122_3c76u64 & (1 << b) != 0)
            .map(|(_, n)| *n)
            .collect();
        assert_eq!(
            names,
            [
                "BAD_PKEY_CNTR",
                "BAD_QKEY_CNTR",
                "AUTO_PATH_MIG",
                "CHANGE_PHY_PORT",
                "UD_AV_PORT_ENFORCE",
                "PORT_ACTIVE_EVENT",
                "SYS_IMAGE_GUID",
                "RC_RNR_NAK_GEN",
                "SRQ_RESIZE",
                "MEM_WINDOW",
                "MEM_MGT_EXTENSIONS",
                "MEM_WINDOW_TYPE_2B"
            ]
        );
    }
}
