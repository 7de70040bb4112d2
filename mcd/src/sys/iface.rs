//! Interface queries: index, hardware address, MTU, names.

use std::ffi::CString;
use std::io;
use std::mem::zeroed;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// Facts about one network interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InterfaceInfo {
    /// Kernel interface index.
    pub index: u32,
    /// Hardware address.
    pub mac: [u8; 6],
    /// MTU in bytes.
    pub mtu: usize,
}

fn ifreq_for(name: &str) -> io::Result<libc::ifreq> {
    // SAFETY: ifreq is plain data; zero is a valid bit pattern.
    let mut req: libc::ifreq = unsafe { zeroed() };
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes.len() >= req.ifr_name.len() || bytes.contains(&0) {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "bad interface name"));
    }
    for (d, &s) in req.ifr_name.iter_mut().zip(bytes) {
        *d = s as libc::c_char;
    }
    Ok(req)
}

/// Looks up an interface of the calling thread's network namespace.
/// `Ok(None)` when there is no such interface.
pub fn interface_info(name: &str) -> io::Result<Option<InterfaceInfo>> {
    let Ok(cname) = CString::new(name) else { return Ok(None) };
    // SAFETY: cname is a valid C string.
    let index = unsafe { libc::if_nametoindex(cname.as_ptr()) };
    if index == 0 {
        return Ok(None);
    }
    // SAFETY: takes no pointers; the descriptor is owned below.
    let fd = syscall!(socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0))?;
    // SAFETY: a fresh descriptor that nothing else owns.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut req = ifreq_for(name)?;
    // SAFETY: req is a live ifreq naming the interface, as SIOCGIFHWADDR expects.
    syscall!(ioctl(sock.as_raw_fd(), libc::SIOCGIFHWADDR, &mut req))?;
    let mut mac = [0u8; 6];
    // SAFETY: SIOCGIFHWADDR filled ifru_hwaddr.
    let sa_data = unsafe { req.ifr_ifru.ifru_hwaddr.sa_data };
    for (m, &b) in mac.iter_mut().zip(sa_data.iter()) {
        *m = b as u8;
    }
    let mut req = ifreq_for(name)?;
    // SAFETY: as above, for SIOCGIFMTU.
    syscall!(ioctl(sock.as_raw_fd(), libc::SIOCGIFMTU, &mut req))?;
    // SAFETY: SIOCGIFMTU filled ifru_mtu.
    let mtu = unsafe { req.ifr_ifru.ifru_mtu } as usize;
    Ok(Some(InterfaceInfo { index, mac, mtu }))
}

/// Names of the interfaces of the calling thread's network namespace.
pub fn interface_names() -> Vec<String> {
    let mut names = Vec::new();
    // SAFETY: if_nameindex returns null or an array terminated by a zero
    // entry, which is read up to that entry and then freed.
    unsafe {
        let list = libc::if_nameindex();
        if list.is_null() {
            return names;
        }
        let mut p = list;
        while (*p).if_index != 0 && !(*p).if_name.is_null() {
            names.push(std::ffi::CStr::from_ptr((*p).if_name).to_string_lossy().into_owned());
            p = p.add(1);
        }
        libc::if_freenameindex(list);
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_interface_is_found_and_nonsense_is_not() {
        let lo = interface_info("lo").unwrap().expect("lo exists");
        assert!(lo.mtu >= 1500);
        assert_eq!(interface_info("no-such-if0").unwrap(), None);
        assert!(interface_names().iter().any(|n| n == "lo"));
        assert_eq!(ifreq_for("").unwrap_err().kind(), io::ErrorKind::InvalidInput);
    }
}
