//! A forked child draws other random bits than its parent: the random part of
//! an id (`uuid6(None)`'s node and clock sequence), of a version and of a
//! message id comes from a per-thread stream that a fork must not duplicate,
//! or a parent and its child would write colliding ids.
//!
//! Unix only (there is no `fork` elsewhere). The child calls nothing that
//! allocates or locks between `fork` and `_exit`.

#![cfg(unix)]

use std::ffi::c_int;

use agentstate::checkpoint::uuid6;

extern "C" {
    fn fork() -> c_int;
    fn pipe(fds: *mut c_int) -> c_int;
    fn read(fd: c_int, buf: *mut u8, n: usize) -> isize;
    fn write(fd: c_int, buf: *const u8, n: usize) -> isize;
    fn close(fd: c_int) -> c_int;
    fn waitpid(pid: c_int, status: *mut c_int, options: c_int) -> c_int;
    fn _exit(code: c_int) -> !;
}

/// The random 62 bits of a `uuid6(None)`: its clock sequence and node.
fn random_part() -> [u8; 8] {
    let bytes = *uuid6(None).as_bytes();
    bytes[8..16].try_into().unwrap()
}

#[test]
fn a_forked_child_does_not_continue_its_parents_random_stream() {
    // Seed this thread's stream in the parent first.
    let _ = random_part();
    let mut fds = [0 as c_int; 2];
    // SAFETY: plain POSIX calls on a two-element array and a stack buffer;
    // the child only computes, writes 8 bytes and exits.
    unsafe {
        assert_eq!(pipe(fds.as_mut_ptr()), 0);
        let pid = fork();
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let part = random_part();
            let ok = write(fds[1], part.as_ptr(), part.len()) == part.len() as isize;
            _exit(if ok { 0 } else { 1 });
        }
        close(fds[1]);
        let mut child = [0u8; 8];
        assert_eq!(read(fds[0], child.as_mut_ptr(), child.len()), 8, "the child wrote no id");
        close(fds[0]);
        let mut status = 0;
        assert_eq!(waitpid(pid, &mut status, 0), pid);
        assert_eq!(status, 0, "the child failed");
        let parent = random_part();
        assert_ne!(parent, child, "parent and child drew the same random bits after a fork");
    }
}
