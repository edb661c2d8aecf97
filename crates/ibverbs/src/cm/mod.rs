//! `librdmacm.so.1` for softrdma: rdma-core's connection manager API over softrdma's
//! rdma_cm (`softrdma_rdmacm`: the IB CM protocol on the device's QP 1), so unmodified
//! programs that connect through librdmacm (rping, ucmatose, udaddy, cmtime, perftest's
//! `-R`, libfabric's verbs provider) run on a softrdma device.
//!
//! The functions live in this library, beside the verbs, so that `id->verbs` is a context of
//! the one device the process has and one stack owns `<ip>:4791`. `librdmacm.so.1` itself is
//! a forwarder the build makes (`librdmacm/`): each of rdma-core 44's 68 functions, under its
//! `RDMACM_1.x` version, jumps to the `softrdma_`-prefixed function exported here.
//!
//! What differs from librdmacm on the kernel: `rdma_destroy_id` with events not acknowledged
//! and `rdma_destroy_event_channel` with ids on it fail (`EBUSY`) instead of blocking forever
//! or leaving ids on a closed descriptor; rsockets and ECE fail with
//! `ENOSYS`/`EOPNOTSUPP` and a line on stderr.

pub(crate) mod abi;
mod channel;
pub(crate) mod connect;
mod device;
mod dispatch;
pub(crate) mod ep;
pub(crate) mod events;
mod id;
pub(crate) mod multicast;
pub(crate) mod qp;
pub(crate) mod unsupported;
