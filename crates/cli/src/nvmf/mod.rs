//! `softrdma nvmf` (a host: discover, identify, read, write, verify, bench) and `softrdma
//! nvmf-target` (a target the kernel's nvme-rdma host connects to), over `softrdma-nvmf`.

pub(crate) mod host;
pub(crate) mod target;
