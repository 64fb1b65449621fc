//! A TCP connection's retransmission counters, as the kernel keeps them (`getsockopt
//! TCP_INFO`, Linux): what `ss -ti` prints as `retrans:` and `lost:`. A link that drops
//! packets retransmits; reading the counters around a test counts what the test cost.

use std::net::TcpStream;

/// The counters of one connection, from its own end (segments this end sent again).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Retransmits {
    /// Segments retransmitted over the connection's life (`tcpi_total_retrans`).
    pub total: u32,
    /// Segments presumed lost now (`tcpi_lost`).
    pub lost: u32,
}

/// The counters of `s`, or None where the OS has no TCP_INFO (only Linux is read).
pub fn read(s: &TcpStream) -> Option<Retransmits> {
    imp::read(s)
}

/// How many segments with data this end's kernel has received on `s` (`tcpi_data_segs_in`),
/// in order or not: a segment that arrived behind a lost one counts, though the reader sees
/// nothing until the lost one is sent again (`tcpi_last_data_recv` does not move for it).
/// None where the OS has no TCP_INFO.
pub fn data_segments_received(s: &TcpStream) -> Option<u32> {
    imp::data_segments_received(s)
}

#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
mod imp {
    use std::os::fd::AsRawFd;

    pub fn read(s: &std::net::TcpStream) -> Option<super::Retransmits> {
        info(s).map(|i| super::Retransmits {
            total: i.tcpi_total_retrans,
            lost: i.tcpi_lost,
        })
    }

    pub fn data_segments_received(s: &std::net::TcpStream) -> Option<u32> {
        info(s).map(|i| i.tcpi_data_segs_in)
    }

    fn info(s: &std::net::TcpStream) -> Option<libc::tcp_info> {
        let mut info = std::mem::MaybeUninit::<libc::tcp_info>::zeroed();
        let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
        // SAFETY: getsockopt writes at most `len` bytes into the buffer, which is a zeroed
        // tcp_info of exactly that size, and the fd is the stream's own open socket.
        let rc = unsafe {
            libc::getsockopt(
                s.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_INFO,
                info.as_mut_ptr().cast(),
                &mut len,
            )
        };
        if rc != 0 {
            return None;
        }
        // SAFETY: zero-initialised, and a kernel older than the struct fills a prefix only.
        Some(unsafe { info.assume_init() })
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    pub fn read(_: &std::net::TcpStream) -> Option<super::Retransmits> {
        None
    }

    pub fn data_segments_received(_: &std::net::TcpStream) -> Option<u32> {
        None
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_healthy_loopback_connection_retransmits_nothing() {
        use std::io::{Read, Write};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut s, _) = l.accept().unwrap();
        c.write_all(&[7u8; 4096]).unwrap();
        let mut buf = [0u8; 4096];
        s.read_exact(&mut buf).unwrap();
        let r = super::read(&c).expect("Linux has TCP_INFO");
        assert_eq!(r.total, 0);
        assert_eq!(super::read(&s).unwrap().lost, 0);
    }
}
