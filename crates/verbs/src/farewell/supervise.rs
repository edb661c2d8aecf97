//! Running a program and speaking for it when it ends: what `softrdma exec` does, so that a
//! program killed with its connections open has them ended as the kernel ends a dead
//! process's (see the [module](super)).
//!
//! The program runs as a child of the calling process, in its process group (a terminal's
//! job control and signals reach both, as they reach a shell pipeline). The caller passes
//! on what is sent to it alone, and ends as the program ended:
//! - `SIGHUP`, `SIGINT`, `SIGQUIT`, `SIGTERM`, `SIGUSR1`, `SIGUSR2` and `SIGALRM` sent to
//!   the caller (`kill PID`) are sent on to the program; the same signals from the terminal
//!   (Ctrl-C, Ctrl-\\) already reach the program and are not sent twice. A signal sent to
//!   the whole process group with `kill` reaches the program from both.
//! - Ctrl-Z, `SIGTSTP`/`SIGTTIN`/`SIGTTOU` and `SIGCONT` act on both as on any job.
//! - If the caller is killed (`SIGKILL`), the program is killed with it (parent-death
//!   signal), as it would be killed were it the caller itself; nobody speaks for it then.
//! - When the program ends, the farewells of every process that died with some left are
//!   said ([`super::speak_for_the_dead`](super::file::speak_for_the_dead)), then the caller exits with the program's status,
//!   or dies of the signal the program died of (without a core dump of its own).

use std::io;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus};

/// The signals passed on to the program when sent to the caller alone.
const FORWARDED: [libc::c_int; 7] = [
    libc::SIGHUP,
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGTERM,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGALRM,
];

/// The set of the forwarded signals and `SIGCHLD`.
fn waited_set() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset only write the local set, with valid signal numbers.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in FORWARDED.into_iter().chain([libc::SIGCHLD]) {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

/// Runs `cmd` as described in the module docs and returns how it ended. Call it from a
/// process with no other threads yet: the waited signals are blocked in the calling thread
/// only (threads made before would still take them with their default action).
pub fn run_and_speak(cmd: &mut Command) -> io::Result<ExitStatus> {
    let set = waited_set();
    // SAFETY: changes this thread's signal mask; the old mask goes into a local.
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above; both pointers are to live locals.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    let result = spawn_and_wait(cmd, &set);
    // SAFETY: restores the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    let status = result?;
    super::file::speak_for_the_dead(None);
    Ok(status)
}

fn spawn_and_wait(cmd: &mut Command, set: &libc::sigset_t) -> io::Result<ExitStatus> {
    // SAFETY: getpid cannot fail.
    let me = unsafe { libc::getpid() };
    let empty = {
        // SAFETY: sigemptyset only writes the local set.
        let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        unsafe { libc::sigemptyset(&mut set) };
        set
    };
    // SAFETY: the closure runs in the child between fork and exec and only makes
    // async-signal-safe calls (sigprocmask, prctl, getppid, raise) on plain values.
    unsafe {
        cmd.pre_exec(move || {
            // The program starts with no signal blocked, as it would without us (the mask
            // is inherited across fork and exec).
            if libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut()) != 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(io::Error::last_os_error());
            }
            // The caller died before the signal was armed: go as it would have made us go.
            if libc::getppid() != me {
                libc::raise(libc::SIGKILL);
            }
            Ok(())
        });
    }
    let child = cmd.spawn()?;
    let pid = child.id() as libc::pid_t;
    loop {
        // SAFETY: an all-zero siginfo_t is a valid value for the call to overwrite.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waits for one of the signals in `set`, blocked in this thread.
        let sig = unsafe { libc::sigwaitinfo(set, &mut info) };
        if sig < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if sig == libc::SIGCHLD {
            let mut status = 0;
            // SAFETY: reaps our own child if it ended; `status` is a live local.
            let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            if r == pid {
                return Ok(ExitStatus::from_raw(status));
            }
            continue;
        }
        // From the terminal (SI_KERNEL), the signal reached the program too.
        if info.si_code != libc::SI_KERNEL {
            // SAFETY: sends a signal to our own child, which we have not reaped yet (so the
            // pid is still its).
            unsafe { libc::kill(pid, sig) };
        }
    }
}

/// Ends this process as `status` says its program ended: with its exit code, or of its
/// signal (a core-dumping one without dumping this process's core).
pub fn exit_as(status: ExitStatus) -> ! {
    if let Some(code) = status.code() {
        std::process::exit(code);
    }
    let sig = status.signal().unwrap_or(libc::SIGKILL);
    // SAFETY: plain calls on this process: no core file, default action, unblocked, raised.
    unsafe {
        let none = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        libc::setrlimit(libc::RLIMIT_CORE, &none);
        libc::signal(sig, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::raise(sig);
    }
    // A signal whose default is to go on (or that could not be raised): the shell's code.
    std::process::exit(128 + sig)
}
